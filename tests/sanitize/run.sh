#!/usr/bin/env bash
# The unit and end-to-end C++ suites under AddressSanitizer + UndefinedBehaviorSanitizer
# (-DODESERVE_SANITIZE=ON), in build-sanitize/. Run from anywhere; CI runs it at the end of .ci/run.
# Only third-party findings are suppressed (lsan.supp, ubsan.supp: LibTorch, gRPC and protobuf
# are not instrumented); any finding in odeserve code fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$PWD/tests/sanitize
build=${ODESERVE_SANITIZE_BUILD:-build-sanitize}
jobs=${ODESERVE_SANITIZE_JOBS:-2}

# Set before building too: gtest_discover_tests runs each test binary at build time.
# Reports also go to files under $logs: the e2e suites start the server binary as a child whose
# exit status not every test checks, so a finding there must fail the run by itself.
mkdir -p "$build"
logs=$(cd "$build" && pwd)/sanitizer-reports
rm -rf "$logs" && mkdir -p "$logs"
# detect_odr_violation=0: gRPC's and protobuf's headers define the same inline globals in their
# uninstrumented shared libraries and in our instrumented objects.
export ASAN_OPTIONS="log_path=$logs/asan:halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_odr_violation=0:print_stacktrace=1:check_initialization_order=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:halt_on_error=1:print_stacktrace=1:suppressions=$here/ubsan.supp"

cmake -S . -B "$build" -G Ninja -DODESERVE_ENABLE_TESTS=ON -DODESERVE_ENABLE_BENCH=OFF \
  -DODESERVE_SANITIZE=ON
# Only what the suites need: the server and e2e test executables (which depend on the server
# binary, the shim, the test repository and the reference outputs).
mapfile -t targets < <(ninja -C "$build" -t targets all |
  grep -oE '^tests/(server|e2e)/[A-Za-z0-9_]+: CXX_EXECUTABLE' | cut -d: -f1 | xargs -n1 basename | sort -u)
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
# The Python-driven tests (models.*, e2e.profile_tool, e2e.albert_import, python_client.*) and
# the ONNX export test exercise Python, not odeserve's C++: the plain build runs them.
# Allocator.* tune and measure glibc malloc (mallopt, malloc_trim), which ASan replaces.
status=0
ctest --test-dir "$build" -L "unit|e2e" -E "python|models\.|profile_tool|albert_import|onnx|^Allocator\." \
  --output-on-failure --no-tests=error || status=$?
if compgen -G "$logs/*" > /dev/null; then
  echo "sanitizer reports:" >&2
  tail -n +1 "$logs"/* >&2
  status=1
fi
exit "$status"
