#include "server/runtime/allocator.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"

namespace odeserve::runtime {
namespace {

bool EnvironmentConfiguresMalloc(std::string* why) {
  if (const char* tunables = std::getenv("GLIBC_TUNABLES"); tunables != nullptr && std::strstr(tunables, "glibc.malloc.")) {
    *why = "GLIBC_TUNABLES";
    return true;
  }
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX"}) {
    if (std::getenv(name) != nullptr) {
      *why = name;
      return true;
    }
  }
  if (const char* preload = std::getenv("LD_PRELOAD"); preload != nullptr && *preload != '\0') {
    *why = "LD_PRELOAD";
    return true;
  }
  return false;
}

// gperftools' tcmalloc when it is the process's malloc (linked with ODESERVE_TCMALLOC, or
// preloaded): its C entry point that hands free spans back to the kernel, else null.
using ReleaseFn = void (*)();
ReleaseFn TcmallocRelease() {
  static const ReleaseFn release = [] {
    if (dlsym(RTLD_DEFAULT, "tc_malloc") == nullptr) return ReleaseFn{nullptr};
    return reinterpret_cast<ReleaseFn>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
  }();
  return release;
}

}  // namespace

AllocatorReport ConfigureAllocator(bool retain_freed_memory) {
  AllocatorReport report;
  if (TcmallocRelease() != nullptr) {
    // tcmalloc keeps freed memory in its caches by design; --malloc_retain's glibc thresholds
    // do not apply. Freed spans go back to the kernel at ReleaseFreeHeapMemory.
    report.retaining = true;
    report.summary = "malloc: tcmalloc (freed memory kept in its caches)";
    return report;
  }
  if (!retain_freed_memory) {
    report.summary = "malloc: glibc defaults (--malloc_retain=false)";
    return report;
  }
  std::string why;
  if (EnvironmentConfiguresMalloc(&why)) {
    report.summary = absl::StrCat("malloc: left as ", why, " configures it");
    return report;
  }
#if defined(__GLIBC__)
  // mallopt returns 1 on success; setting either also stops glibc's dynamic threshold updates.
  report.retaining = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kRetainedAllocationMaxBytes)) == 1 &&
                     mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThresholdBytes)) == 1;
  report.summary = report.retaining
                       ? absl::StrCat("malloc: freed memory kept for reuse (mmap threshold ",
                                      kRetainedAllocationMaxBytes >> 20, " MiB, trim threshold ",
                                      kHeapTrimThresholdBytes >> 20, " MiB)")
                       : "malloc: mallopt refused the thresholds; glibc defaults";
#else
  report.summary = "malloc: not glibc; left as is";
#endif
  return report;
}

void ReleaseFreeHeapMemory() {
  if (ReleaseFn release = TcmallocRelease(); release != nullptr) {
    release();
    return;
  }
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace odeserve::runtime
