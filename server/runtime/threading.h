#pragma once
// CPU threading for LibTorch. OpenBLAS's own thread pool fights LibTorch's intra-op threads
// (a 3x loss at batch 1 on a 2-core machine), so the server pins OpenBLAS to one thread and lets
// LibTorch own the parallelism.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace odeserve::runtime {

// oneDNN caches a compiled kernel per primitive shape and thread count, 1,024 by default. The
// bundled bfloat16 encoders, padded to 16-token lengths, create 3,194 at load (ONEDNN_VERBOSE=2
// cache misses; 2,036 before busy servers ran short rows on one thread, LeaveCoresForRpc) and
// none under overload: at 1,024 the cache evicted and recompiled under mixed traffic, and the
// churn cost memory (measured at load: 596 MB RSS at 1,024 against 482 MB at 4,096, then,
// docs/BENCHMARKS.md).
inline constexpr char kOneDnnCacheCapacity[] = "4096";

// Model calls over fewer padded tokens than this run on one intra-op thread. On a CPU shared
// with RPC threads, a small call gains little from a second thread and loses much when that
// thread's core is busy: every operator ends in an OpenMP barrier that waits for it (served
// full-depth batch-1 latency on 2 cores, p50: 8.65 ms with this default, 15.6 ms with every
// call on both threads; docs/BENCHMARKS.md). Large batches keep every thread, unless their rows
// are small and the server is busy (LeaveCoresForRpc).
inline constexpr int kDefaultParallelMinTokens = 512;

// Float32 CPU calls of at least this many padded tokens split their rows across the intra-op
// threads (RowChunksFor). Lower than kDefaultParallelMinTokens: a split call meets one barrier
// per field evaluation, not one per operator. One Euler step of embed-sharebert over 2 and 4 rows
// of 64 tokens, float32, alone on a 2-core Zen 3: 2.99 -> 2.23 ms and 5.29 -> 3.49 ms
// (docs/BENCHMARKS.md, "Float32 on a CPU without bfloat16").
inline constexpr int64_t kRowParallelMinTokens = 128;
// The same for a translation decoder call (one position per hypothesis): hypotheses at least.
inline constexpr int64_t kRowParallelMinHypotheses = 8;

// Float32 CPU field evaluations that do not split their rows (a single row, or a call under
// kRowParallelMinTokens) of at least this many padded tokens run their matrix products on
// OpenBLAS's threads instead, with LibTorch's operators on one thread (BlasThreadsScope). One
// shared-block evaluation of classify-sections, one row, alone on a 2-core Zen 3: 64 tokens
// 1.59 -> 0.90 ms, 128 tokens 2.89 -> 1.90 ms, 3 rows x 32 tokens 2.53 -> 1.14 ms; 32 tokens
// gains only 11% alone, and served under saturation (32 calls of one 32-token row in flight,
// RPC threads wanting the second core) it lost 9-11% of throughput, so it stays on one thread
// (docs/BENCHMARKS.md, "OpenBLAS threads for calls that cannot split").
inline constexpr int64_t kBlasParallelMinTokens = 64;
// With BlasThreadsScope on, OpenBLAS's idle threads spin 2^20 cycles (about 0.4 ms) before they
// sleep: long enough to bridge the gaps between one call's products, short enough to free the
// core between calls (the default 2^28, about 0.1 s, never sleeps under traffic). Served on the
// 2-core Zen 3, classify-sections at the budget benchmark's load: within budget 87.7% with
// BlasThreadsScope off, 91.5% at 2^4 (waking for every product), 92.7% at 2^20; full-depth
// batch-1 p50 17.6-19.8 / 16.0-25.0 / 14.1-15.7 ms (docs/BENCHMARKS.md). See LetBlasThreadsSleep.
inline constexpr char kOpenBlasThreadTimeout[] = "20";

struct ThreadingReport {
  int intra_op_threads = 0;
  int parallel_min_tokens = 0;
  bool row_parallel = false;
  bool blas_parallel = false;
  int inter_op_threads = 0;
  bool openblas_found = false;
  int openblas_threads = 0;        // after pinning
  std::string openblas_core;       // kernel family OpenBLAS chose (e.g. "Haswell", "SkylakeX")
  std::string openblas_config;
  std::string openblas_thread_timeout;  // OPENBLAS_THREAD_TIMEOUT in effect (blas_parallel only)
  std::string onednn_cache_capacity;  // ONEDNN_PRIMITIVE_CACHE_CAPACITY in effect
  std::string summary() const;
};

/// Sets LibTorch's intra-op threads (0 = one per hardware thread), inter-op threads to 1 and
/// OpenBLAS to one thread (found with dlsym, so any BLAS works), and turns off TorchScript's
/// graph re-optimization on the calling thread only: LibTorch keeps that switch per thread, so
/// batcher threads run the default profiling executor (forcing it off there made served calls
/// 5-7% slower, docs/BENCHMARKS.md) while benchmarks and tests on this thread run the graphs as
/// scripted; sizes oneDNN's kernel cache (kOneDnnCacheCapacity unless
/// ONEDNN_PRIMITIVE_CACHE_CAPACITY is set). Calls under `parallel_min_tokens` padded tokens
/// run on one thread (0: every call uses all intra-op threads). `row_parallel`: see
/// RowChunksFor. `blas_parallel`: see BlasThreadsScope; only for a process that runs one model
/// call at a time (OpenBLAS's thread count is process-wide); it also makes OpenBLAS's idle
/// threads sleep within about 0.4 ms (kOpenBlasThreadTimeout), and stays off without OpenBLAS
/// or where that cannot be done.
/// Call once, before any model runs.
ThreadingReport ConfigureThreading(int intra_op_threads, int parallel_min_tokens = kDefaultParallelMinTokens,
                                   bool row_parallel = true, bool blas_parallel = false);

/// Whether a model call should leave the spare cores to the RPC threads: the server is `busy`
/// (ExecBatch::others_waiting or arrivals_during_previous_batch) and each row needs fewer than
/// kRpcBoundRowTokenEvaluations token evaluations (padded length x field evaluations of its
/// longest-running row), so that its RPC work (receiving, tokenizing, replying) weighs as much
/// as its compute. A call spread over both cores then stalls at every operator's barrier while
/// an RPC thread holds one of them; with more compute per row, the second thread pays.
bool LeaveCoresForRpc(bool busy, int64_t row_token_evaluations);
// Served on a 2-core Zen 4 at 32 calls in flight, interleaved against every large call on both
// threads (docs/BENCHMARKS.md, "Intra-op threads of a busy server"): one thread for
// embed-sharebert at 1 step over 32-token rows (32 per row) gave 1.1-1.5x the throughput;
// classify-sections over rows of up to 64 tokens broke even at 2 steps and lost at 8
// (0.78-0.89x), hence the bound.
inline constexpr int64_t kRpcBoundRowTokenEvaluations = 128;

/// The intra-op threads for a model call over `tokens` padded tokens: all of them from
/// `parallel_min_tokens` up, else one; and one whenever `leave_cores_for_rpc`
/// (LeaveCoresForRpc). The count as ConfigureThreading set it up; 0 before it is called.
int IntraOpThreadsFor(int64_t tokens, bool leave_cores_for_rpc = false);

/// Sets the calling thread's intra-op threads for a model call (IntraOpThreadsFor; no effect
/// before ConfigureThreading). OpenMP keeps the count per calling thread, so other models'
/// batcher threads are unaffected. oneDNN's kernel cache keys on the thread count, so the shape
/// warm-up at load runs every shape at each count it can meet; operators inside a call whose
/// shapes lack the token dimension (pooled outputs) may meet both counts too.
void SetIntraOpThreadsFor(int64_t tokens, bool leave_cores_for_rpc = false);

/// How many contiguous row ranges a float32 CPU model call over `rows` rows and `tokens` padded
/// tokens should be split into, each evaluated on one intra-op thread (EvaluateRowChunks): one
/// per intra-op thread for a call of at least `min_tokens` tokens when row parallelism is on,
/// else 1. Why: the server pins OpenBLAS to one thread, so inside one call every float32 matrix
/// product runs on one core whatever the intra-op count (a second thread bought 5% on a
/// 32 x 64-token batch); independent rows on separate threads use every core for them.
/// `min_rows_per_chunk` keeps each range at least that many rows (the decoder's projection takes
/// another code path, and rounds differently, for a single row).
int RowChunksFor(int64_t rows, int64_t tokens, int64_t min_tokens = kRowParallelMinTokens,
                 int64_t min_rows_per_chunk = 1);

/// A model call on row ranges: the inputs' rows in, the outputs' rows out (dim 0 throughout).
using RowChunkFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

/// fn over `chunks` contiguous row ranges of `inputs` (all with the same first dimension) at
/// once, one range per intra-op thread (operators inside run serially); each output is
/// concatenated along dim 0. Each worker runs under InferenceMode with the caller's
/// graph-executor setting; the first exception is rethrown on the caller's thread.
std::vector<at::Tensor> EvaluateRowChunks(int chunks, const std::vector<at::Tensor>& inputs, const RowChunkFn& fn);

/// For one float32 CPU model call over `rows` x padded `tokens` that row ranges cannot take (one
/// row, or under kRowParallelMinTokens: RowChunksFor's rule, whatever --row_parallel says): when
/// `allowed`, ConfigureThreading enabled it and tokens >= kBlasParallelMinTokens,
/// OpenBLAS gets the intra-op threads and the calling thread's LibTorch operators run serially
/// (both threaded at once fight for the cores: up to 3.3x slower); both are restored at scope exit.
/// Why: the server otherwise pins OpenBLAS to one thread, so such a call, which row ranges cannot
/// spread, ran every product on one core.
class BlasThreadsScope {
 public:
  BlasThreadsScope(bool allowed, int64_t rows, int64_t tokens);
  ~BlasThreadsScope();
  BlasThreadsScope(const BlasThreadsScope&) = delete;
  BlasThreadsScope& operator=(const BlasThreadsScope&) = delete;
  bool active() const { return set_blas_threads_ != nullptr; }

 private:
  void (*set_blas_threads_)(int) = nullptr;  // openblas_set_num_threads while active
  int previous_intra_op_ = 0;
};

/// How many BlasThreadsScopes have been active in this process (for tests and diagnostics).
int64_t BlasHandOvers();

/// How many calls EvaluateRowChunks has split across threads in this process (for tests and
/// diagnostics).
int64_t RowChunkSplits();

/// Restores the calling thread's intra-op thread count when it goes out of scope.
class IntraOpThreadsScope {
 public:
  IntraOpThreadsScope();
  ~IntraOpThreadsScope();
  IntraOpThreadsScope(const IntraOpThreadsScope&) = delete;
  IntraOpThreadsScope& operator=(const IntraOpThreadsScope&) = delete;

 private:
  int previous_;
};

}  // namespace odeserve::runtime
