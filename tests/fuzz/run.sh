#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz/README.md): configures and builds build-fuzz/ with clang, then
# runs every target for ODESERVE_FUZZ_SECONDS (default 60) over a copy of its committed corpus
# (tests/fuzz/corpus/<target>/ is never written). Fails on any crash, sanitizer finding, failed
# invariant, timeout or out-of-memory; a reproducer is kept under build-fuzz/findings/<target>/.
# Installs nothing: needs clang and libclang-rt-14-dev besides the project's own build packages.
#
#   ODESERVE_FUZZ_SECONDS  seconds per target (default 60)
#   ODESERVE_FUZZ_TARGETS  which targets (default: all three)
#   ODESERVE_FUZZ_JOBS     targets fuzzed at once (default: all of them; each is one process)
#   ODESERVE_FUZZ_BUILD    build folder (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
here=$root/tests/fuzz
build=${ODESERVE_FUZZ_BUILD:-build-fuzz}
seconds=${ODESERVE_FUZZ_SECONDS:-60}
read -r -a targets <<< "${ODESERVE_FUZZ_TARGETS:-fuzz_request fuzz_model_config fuzz_metrics_http}"
parallel=${ODESERVE_FUZZ_JOBS:-${#targets[@]}}
started=$(date +%s)

cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
build=$(cd "$build" && pwd)
built=$(date +%s)
echo "fuzz: build took $((built - started)) s"

# Per target: the longest input the mutator may make (fuzz_metrics_http: past the 16 KiB head
# limit; fuzz_request inflates its texts itself with repeat= and copies=).
declare -A max_len=([fuzz_request]=4096 [fuzz_model_config]=8192 [fuzz_metrics_http]=20480)

work=$(mktemp -d /tmp/odeserve-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
# detect_odr_violation=0: protobuf's and Abseil's headers define inline globals that their
# uninstrumented shared libraries define too. Leaks are checked (libFuzzer's per-input check).
export ASAN_OPTIONS="detect_odr_violation=0:abort_on_error=0:detect_leaks=1:allocator_may_return_null=0:print_summary=1"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

run_target() {
  local target=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp "$here/corpus/$target/"* "$dir/corpus/"
  local dict=()
  [[ -f $here/$target.dict ]] && dict=(-dict="$here/$target.dict")
  # -timeout: one input may take this long (fuzz_request waits up to 20 s for a completion).
  (cd "$dir" && TMPDIR=$dir "$build/$target" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
     -max_len="${max_len[$target]:-4096}" -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
     "${dict[@]}" corpus > "$dir/log" 2>&1)
}

declare -A pid_of
for target in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do wait -n || true; done
  run_target "$target" &
  pid_of[$target]=$!
done
status=0
for target in "${targets[@]}"; do
  rc=0
  wait "${pid_of[$target]}" || rc=$?
  dir=$work/$target
  runs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$dir/log" | grep -oE '[0-9]+$' || echo "?")
  corpus=$(ls "$dir/corpus" | wc -l)
  if (( rc != 0 )) || compgen -G "$dir/artifacts/*" > /dev/null; then
    status=1
    mkdir -p "$build/findings/$target"
    cp "$dir/artifacts/"* "$build/findings/$target/" 2> /dev/null || true
    cp "$dir/log" "$build/findings/$target/log"
    echo "fuzz: $target FAILED (exit $rc) after $runs executions; log and reproducer: $build/findings/$target/" >&2
    grep -E 'ERROR|fuzz_[a-z_]+: |SUMMARY|runtime error|Test unit written' "$dir/log" | head -20 >&2 || true
  else
    echo "fuzz: $target ok: $runs executions in ${seconds} s, corpus ${corpus} inputs (seeds: $(ls "$here/corpus/$target" | wc -l))"
  fi
done
echo "fuzz: total $(( $(date +%s) - started )) s"
exit "$status"
