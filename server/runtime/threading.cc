#include "server/runtime/threading.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "absl/strings/str_cat.h"

namespace odeserve::runtime {
namespace {

// Set once by ConfigureThreading; 0 threads = not configured (tests, tools): calls keep
// whatever count the thread has.
std::atomic<int> g_intra_op_threads{0};
std::atomic<int> g_parallel_min_tokens{0};
std::atomic<bool> g_row_parallel{false};
// OpenBLAS's openblas_set_num_threads when ConfigureThreading enabled BlasThreadsScope.
using SetBlasThreads = void (*)(int);
std::atomic<SetBlasThreads> g_blas_parallel_set{nullptr};
std::atomic<int64_t> g_blas_hand_overs{0};
std::atomic<int64_t> g_row_chunk_splits{0};

// OpenBLAS's idle threads spin (sched_yield) for 2^OPENBLAS_THREAD_TIMEOUT cycles after each
// threaded call, 2^28 by default: about 0.1 s of a core, so under steady traffic they never
// sleep and take the core from the RPC threads (served within-budget rate measured 86-87%
// against 89-92% without the hand-over, docs/BENCHMARKS.md). OpenBLAS reads the variable when
// its library loads and sizes the spin when it starts its threads, so: set it (the caller's
// value wins), re-read OpenBLAS's environment, and stop the threads it started at load; the
// next threaded call restarts them with the short spin. False (BlasThreadsScope stays off)
// where this OpenBLAS lacks a call used here or runs its threads through OpenMP.
// The shape rule of RowChunksFor, whatever --row_parallel says: whether row ranges can take a
// call at all. BlasThreadsScope hands over exactly the calls it rejects.
bool RowsSplittable(int64_t rows, int64_t tokens, int64_t min_tokens, int64_t min_rows_per_chunk) {
  return tokens >= min_tokens && rows >= 2 * std::max<int64_t>(1, min_rows_per_chunk);
}

bool LetBlasThreadsSleep(ThreadingReport& report) {
  using VoidFn = void (*)();
  using IntFn = int (*)();
  const auto read_env = reinterpret_cast<VoidFn>(dlsym(RTLD_DEFAULT, "openblas_read_env"));
  const auto shutdown = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"));
  const auto parallel = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  // 1 = OpenBLAS's own pthreads. An OpenMP build would set the caller's OpenMP count itself
  // (undoing LibTorch's serial operators) and ignores the spin setting.
  constexpr int kOpenBlasPthreads = 1;
  if (read_env == nullptr || shutdown == nullptr || parallel == nullptr || parallel() != kOpenBlasPthreads) return false;
  setenv("OPENBLAS_THREAD_TIMEOUT", kOpenBlasThreadTimeout, /*overwrite=*/0);
  report.openblas_thread_timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  read_env();
  shutdown();
  return true;
}

}  // namespace

std::string ThreadingReport::summary() const {
  return absl::StrCat("intra_op_threads=", intra_op_threads, " parallel_min_tokens=", parallel_min_tokens,
                      " row_parallel=", row_parallel ? "true" : "false",
                      " blas_parallel=", blas_parallel ? absl::StrCat("true (OPENBLAS_THREAD_TIMEOUT=", openblas_thread_timeout, ")") : "false",
                      " inter_op_threads=", inter_op_threads,
                      " openblas=", openblas_found ? absl::StrCat("threads:", openblas_threads,
                                                                  " core:", openblas_core)
                                                   : "not loaded",
                      " onednn_cache=", onednn_cache_capacity);
}

ThreadingReport ConfigureThreading(int intra_op_threads, int parallel_min_tokens, bool row_parallel, bool blas_parallel) {
  ThreadingReport report;
  // Read by oneDNN once, at its first primitive: before any model loads. The caller's wins.
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", kOneDnnCacheCapacity, /*overwrite=*/0);
  report.onednn_cache_capacity = std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY");
  if (intra_op_threads <= 0) intra_op_threads = std::max(1u, std::thread::hardware_concurrency());
  // The inter-op pool can only be sized before its first use; a second call must not throw.
  try {
    at::set_num_interop_threads(1);
  } catch (const std::exception&) {
  }
  at::set_num_threads(intra_op_threads);
  // For this thread only (LibTorch's switch is thread-local): the runtime benchmark and the
  // tests run the graphs as scripted. Batcher threads keep the profiling executor, measured
  // faster in serving (docs/BENCHMARKS.md, "graph executor"); their warm-up runs at load.
  torch::jit::setGraphExecutorOptimize(false);
  report.intra_op_threads = at::get_num_threads();
  report.parallel_min_tokens = parallel_min_tokens;
  g_parallel_min_tokens = parallel_min_tokens;
  report.row_parallel = row_parallel;
  g_row_parallel = row_parallel;
  g_intra_op_threads = report.intra_op_threads;
  report.inter_op_threads = at::get_num_interop_threads();

  using GetInt = int (*)();
  using GetString = char* (*)();
  g_blas_parallel_set = nullptr;
  if (auto set = reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
    report.openblas_found = true;
    if (blas_parallel && report.intra_op_threads > 1) report.blas_parallel = LetBlasThreadsSleep(report);
    if (report.blas_parallel) g_blas_parallel_set = set;
    if (auto get = reinterpret_cast<GetInt>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) {
      report.openblas_threads = get();
    }
    if (auto core = reinterpret_cast<GetString>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
      report.openblas_core = core();
    }
    if (auto config = reinterpret_cast<GetString>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
      report.openblas_config = config();
    }
  }
  return report;
}

bool LeaveCoresForRpc(bool busy, int64_t row_token_evaluations) {
  return busy && row_token_evaluations < kRpcBoundRowTokenEvaluations;
}

int IntraOpThreadsFor(int64_t tokens, bool leave_cores_for_rpc) {
  const int threads = g_intra_op_threads.load();
  if (threads <= 0) return 0;
  return leave_cores_for_rpc || tokens < g_parallel_min_tokens.load() ? 1 : threads;
}

void SetIntraOpThreadsFor(int64_t tokens, bool leave_cores_for_rpc) {
  const int threads = IntraOpThreadsFor(tokens, leave_cores_for_rpc);
  if (threads > 0) omp_set_num_threads(threads);
}

int RowChunksFor(int64_t rows, int64_t tokens, int64_t min_tokens, int64_t min_rows_per_chunk) {
  const int threads = g_intra_op_threads.load();
  if (!g_row_parallel.load() || threads <= 1 || !RowsSplittable(rows, tokens, min_tokens, min_rows_per_chunk)) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows / std::max<int64_t>(1, min_rows_per_chunk))));
}

std::vector<at::Tensor> EvaluateRowChunks(int chunks, const std::vector<at::Tensor>& inputs, const RowChunkFn& fn) {
  const int64_t rows = inputs.front().size(0);
  if (chunks <= 1 || rows <= 1) return fn(inputs);
  chunks = static_cast<int>(std::min<int64_t>(chunks, rows));
  g_row_chunk_splits.fetch_add(1, std::memory_order_relaxed);
  // InferenceMode and the graph-executor switch are thread-local: the OpenMP workers start
  // without the caller's.
  const bool optimize = torch::jit::getGraphExecutorOptimize();
  std::vector<std::vector<at::Tensor>> parts(chunks);
  // The team is sized here, not by the call's token count (SetIntraOpThreadsFor).
  const int previous_threads = at::get_num_threads();  // after ATen's per-thread first-use set-up
  omp_set_num_threads(chunks);
  struct RestoreThreads {
    int count;
    ~RestoreThreads() { omp_set_num_threads(count); }
  } restore{previous_threads};
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    c10::InferenceMode inference;
    torch::jit::GraphOptimizerEnabledGuard graph(optimize);
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = rows * c / chunks;
      const int64_t count = rows * (c + 1) / chunks - first;
      std::vector<at::Tensor> slice;
      for (const at::Tensor& input : inputs) slice.push_back(input.narrow(0, first, count));
      parts[c] = fn(slice);
    }
  });
  std::vector<at::Tensor> outputs;
  for (size_t k = 0; k < parts.front().size(); ++k) {
    std::vector<at::Tensor> pieces;
    for (const auto& part : parts) pieces.push_back(part[k]);
    outputs.push_back(at::cat(pieces));
  }
  return outputs;
}

BlasThreadsScope::BlasThreadsScope(bool allowed, int64_t rows, int64_t tokens) {
  const SetBlasThreads set = g_blas_parallel_set.load();
  if (!allowed || set == nullptr || tokens < kBlasParallelMinTokens) return;
  if (RowsSplittable(rows, tokens, kRowParallelMinTokens, /*min_rows_per_chunk=*/1)) return;
  set_blas_threads_ = set;
  previous_intra_op_ = at::get_num_threads();
  set(g_intra_op_threads.load());
  omp_set_num_threads(1);
  g_blas_hand_overs.fetch_add(1, std::memory_order_relaxed);
}

BlasThreadsScope::~BlasThreadsScope() {
  if (set_blas_threads_ == nullptr) return;
  set_blas_threads_(1);
  omp_set_num_threads(previous_intra_op_);
}

int64_t BlasHandOvers() { return g_blas_hand_overs.load(std::memory_order_relaxed); }

int64_t RowChunkSplits() { return g_row_chunk_splits.load(std::memory_order_relaxed); }

IntraOpThreadsScope::IntraOpThreadsScope() {
  // ATen sets a thread's count to the global one on its first parallel call; make that
  // happen now, not in the middle of a batch after SetIntraOpThreadsFor.
  previous_ = at::get_num_threads();
}

IntraOpThreadsScope::~IntraOpThreadsScope() { omp_set_num_threads(previous_); }

}  // namespace odeserve::runtime
