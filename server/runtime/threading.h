#pragma once
// CPU threading for LibTorch. OpenBLAS's own thread pool fights LibTorch's intra-op threads
// (a 3x loss at batch 1 on a 2-core machine), so the server pins OpenBLAS to one thread and lets
// LibTorch own the parallelism.

#include <string>

namespace odeserve::runtime {

// oneDNN caches a compiled kernel per primitive shape, 1,024 by default. The bundled bfloat16
// encoders, padded to 16-token lengths, use about 1,300 (all compiled at load): at 1,024 the
// cache evicts and recompiles under mixed traffic, and the churn costs memory (measured at
// load: 596 MB RSS at 1,024 against 482 MB at 4,096, docs/BENCHMARKS.md).
inline constexpr char kOneDnnCacheCapacity[] = "4096";

struct ThreadingReport {
  int intra_op_threads = 0;
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
/// ONEDNN_PRIMITIVE_CACHE_CAPACITY is set). Call once, before any model runs.
ThreadingReport ConfigureThreading(int intra_op_threads);

}  // namespace odeserve::runtime
