#include "server/runtime/threading.h"

#include <dlfcn.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "absl/strings/str_cat.h"

namespace odeserve::runtime {
namespace {

// Set once by ConfigureThreading; 0 threads = not configured (tests, tools): calls keep
// whatever count the thread has.
std::atomic<int> g_intra_op_threads{0};
std::atomic<int> g_parallel_min_tokens{0};

}  // namespace

std::string ThreadingReport::summary() const {
  return absl::StrCat("intra_op_threads=", intra_op_threads, " parallel_min_tokens=", parallel_min_tokens,
                      " inter_op_threads=", inter_op_threads,
                      " openblas=", openblas_found ? absl::StrCat("threads:", openblas_threads,
                                                                  " core:", openblas_core)
                                                   : "not loaded",
                      " onednn_cache=", onednn_cache_capacity);
}

ThreadingReport ConfigureThreading(int intra_op_threads, int parallel_min_tokens) {
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
  // The profiling executor re-specializes a method for every new input shape it meets, so the
  // first batch of each (rows, length) pays milliseconds of compilation: latency would depend
  // on history and the cost model could not predict it. Serving runs the graphs as scripted.
  torch::jit::setGraphExecutorOptimize(false);
  report.intra_op_threads = at::get_num_threads();
  report.parallel_min_tokens = parallel_min_tokens;
  g_parallel_min_tokens = parallel_min_tokens;
  g_intra_op_threads = report.intra_op_threads;
  report.inter_op_threads = at::get_num_interop_threads();

  using SetThreads = void (*)(int);
  using GetInt = int (*)();
  using GetString = char* (*)();
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
    report.openblas_found = true;
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

void SetIntraOpThreadsFor(int64_t tokens) {
  const int threads = g_intra_op_threads.load();
  if (threads <= 0) return;
  omp_set_num_threads(tokens < g_parallel_min_tokens.load() ? 1 : threads);
}

IntraOpThreadsScope::IntraOpThreadsScope() {
  // ATen sets a thread's count to the global one on its first parallel call; make that
  // happen now, not in the middle of a batch after SetIntraOpThreadsFor.
  previous_ = at::get_num_threads();
}

IntraOpThreadsScope::~IntraOpThreadsScope() { omp_set_num_threads(previous_); }

}  // namespace odeserve::runtime
