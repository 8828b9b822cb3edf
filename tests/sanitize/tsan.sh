#!/usr/bin/env bash
# The threaded unit suites under ThreadSanitizer (-fsanitize=thread), in build-tsan/: the
# scheduler (model queue, batcher, compute gate, continuous batching, cost model), the runtime
# (torch and translation executors, solvers, threading), the tokenization pool and the core's
# hand-off to it, the metrics HTTP exposer, the signal wait and the listener watchdog. Run from anywhere; CI runs it after tests/sanitize/run.sh.
# LibTorch, OpenMP, OpenBLAS, oneDNN, gRPC, protobuf and Abseil are not instrumented: tsan.supp
# suppresses only reports whose every frame outside odeserve is in one of them, each entry with
# its reason; any other report fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$PWD/tests/sanitize
build=${ODESERVE_TSAN_BUILD:-build-tsan}
jobs=${ODESERVE_TSAN_JOBS:-2}

# Set before building too: gtest_discover_tests runs each test binary at build time.
# Reports also go to files under $logs, so that one printed by a test whose exit status is lost
# (or by a discovery run) still fails the run.
mkdir -p "$build"
logs=$(cd "$build" && pwd)/sanitizer-reports
rm -rf "$logs" && mkdir -p "$logs"
export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$here/tsan.supp:print_suppressions=0"
# One intra-op thread (OMP_NUM_THREADS=1, the server's --intra_op_threads=1): LibTorch's intra-op
# pool is GCC's libgomp, which is not instrumented. A team's fork and join (a pooled worker woken
# through a futex, the closing barrier) are invisible to TSan, so every parallel region would
# read as a race between the caller's writes and the workers' reads of the region's shared data.
# One OpenBLAS thread for the same reason. Tests that ask for 2 threads themselves are below.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# No option in the top-level CMakeLists.txt: the flags go to every target, as ODESERVE_SANITIZE
# does for ASan (the default build type, RelWithDebInfo: -O2 -g).
cmake -S . -B "$build" -G Ninja -DODESERVE_ENABLE_TESTS=ON -DODESERVE_ENABLE_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread
targets=(server_scheduler_test server_runtime_test server_task_pool_test server_inference_core_test
         server_metrics_test server_signal_wait_test server_listener_watchdog_test)
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

# Only the suites built above (the other server suites are single-threaded parsing and
# tokenization, covered by run.sh; their placeholders are *_NOT_BUILT). Left to the plain and
# ASan runs:
# - Allocator.*: they tune and measure glibc malloc (mallopt, malloc_trim), which TSan replaces;
#   allocator.cc starts no threads.
# - *.RowParallel*, Threading.RowChunksRunAtOnce*: they split a call's rows over a 2-thread
#   OpenMP team on purpose (EvaluateRowChunks, ConfigureThreading(2)); see OMP_NUM_THREADS above.
#   Their reports sit in server/runtime/threading.cc's parallel_for body, so no suppression may
#   take them, and TSan cannot order libgomp's fork and join.
# --timeout: a test that deadlocks fails in minutes, not at ctest's default 1500 s.
status=0
ctest --test-dir "$build/tests/server" -E '_NOT_BUILT$|^Allocator\.|\.RowParallel|\.RowChunksRunAtOnce' \
  --timeout 180 --output-on-failure --no-tests=error || status=$?
if compgen -G "$logs/*" > /dev/null; then
  echo "ThreadSanitizer reports:" >&2
  tail -n +1 "$logs"/* >&2
  status=1
fi
exit "$status"
