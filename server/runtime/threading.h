#pragma once
// CPU threading for LibTorch. OpenBLAS's own thread pool fights LibTorch's intra-op threads
// (a 3x loss at batch 1 on a 2-core machine), so the server pins OpenBLAS to one thread and lets
// LibTorch own the parallelism.

#include <cstdint>
#include <string>

namespace odeserve::runtime {

// oneDNN caches a compiled kernel per primitive shape, 1,024 by default. The bundled bfloat16
// encoders, padded to 16-token lengths, use about 1,300 (all compiled at load): at 1,024 the
// cache evicts and recompiles under mixed traffic, and the churn costs memory (measured at
// load: 596 MB RSS at 1,024 against 482 MB at 4,096, docs/BENCHMARKS.md).
inline constexpr char kOneDnnCacheCapacity[] = "4096";

// Model calls over fewer padded tokens than this run on one intra-op thread. On a CPU shared
// with RPC threads, a small call gains little from a second thread and loses much when that
// thread's core is busy: every operator ends in an OpenMP barrier that waits for it (served
// full-depth batch-1 latency on 2 cores, p50: 8.65 ms with this default, 15.6 ms with every
// call on both threads; docs/BENCHMARKS.md). Large batches keep every thread.
inline constexpr int kDefaultParallelMinTokens = 512;

struct ThreadingReport {
  int intra_op_threads = 0;
  int parallel_min_tokens = 0;
  int inter_op_threads = 0;
  bool openblas_found = false;
  int openblas_threads = 0;        // after pinning
  std::string openblas_core;       // kernel family OpenBLAS chose (e.g. "Haswell", "SkylakeX")
  std::string openblas_config;
  std::string onednn_cache_capacity;  // ONEDNN_PRIMITIVE_CACHE_CAPACITY in effect
  std::string summary() const;
};

/// Sets LibTorch's intra-op threads (0 = one per hardware thread), inter-op threads to 1 and
/// OpenBLAS to one thread (found with dlsym, so any BLAS works), and turns off TorchScript's
/// per-shape graph re-optimization; sizes oneDNN's kernel cache (kOneDnnCacheCapacity unless
/// ONEDNN_PRIMITIVE_CACHE_CAPACITY is set). Calls under `parallel_min_tokens` padded tokens
/// run on one thread (0: every call uses all intra-op threads). Call once, before any model runs.
ThreadingReport ConfigureThreading(int intra_op_threads, int parallel_min_tokens = kDefaultParallelMinTokens);

/// Sets the calling thread's intra-op threads for a model call over `tokens` padded tokens, as
/// ConfigureThreading decided (no effect before it is called). OpenMP keeps the count per
/// calling thread, so other models' batcher threads are unaffected. Each call's count follows
/// from its own padded shape, so oneDNN (whose kernel cache keys on the thread count) compiles
/// a call shape's kernels once; operators inside a call whose shapes lack the token dimension
/// (pooled outputs) may meet both counts, and the shape warm-up at load runs both.
void SetIntraOpThreadsFor(int64_t tokens);

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
