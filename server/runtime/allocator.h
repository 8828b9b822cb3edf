#pragma once
// Process-wide heap settings for serving. glibc malloc hands memory above its mmap threshold
// back to the kernel at free(), and trims the top of a heap past its trim threshold, so a model
// call's large temporaries (a [16, 8000] logit block is 512 KB) are faulted in page by page on
// every call: on a 2-vCPU VM that made adding a bias to those logits cost 20x its arithmetic
// (docs/BENCHMARKS.md, "Heap pages"). Keeping freed memory for reuse removes the faults.

#include <cstdint>
#include <string>

namespace odeserve::runtime {

/// Below this size an allocation comes from the heap and its pages are reused (glibc's largest
/// allowed mmap threshold on 64-bit: half its 64 MiB heap size).
inline constexpr int64_t kRetainedAllocationMaxBytes = int64_t{32} << 20;
/// Free memory at the top of a heap beyond this is returned to the kernel.
inline constexpr int64_t kHeapTrimThresholdBytes = int64_t{256} << 20;

struct AllocatorReport {
  bool retaining = false;  // the thresholds above are in effect
  std::string summary;     // one line for the start-up log
};

/// Under tcmalloc (linked by default, ODESERVE_TCMALLOC) there is nothing to set: it reports
/// tcmalloc, retaining. Otherwise, with `retain_freed_memory`, sets the thresholds above (mallopt) unless the environment already
/// configures the allocator (GLIBC_TUNABLES with glibc.malloc.*, MALLOC_*_ variables, or an
/// LD_PRELOAD allocator): an operator's explicit settings win. Call once, before threads start.
AllocatorReport ConfigureAllocator(bool retain_freed_memory);

/// Returns the heap's free pages to the kernel (malloc_trim; tcmalloc's ReleaseFreeMemory): once after loading, whose
/// temporaries (weights read and prepared, calibration batches) the retained heap would keep,
/// then every --heap_release_interval. Free memory in the middle of a heap is never trimmed
/// otherwise: under overload the retained heap grew 11-17% in a minute, nearly all free pages
/// (docs/BENCHMARKS.md, "Releasing retained memory").
void ReleaseFreeHeapMemory();

}  // namespace odeserve::runtime
