// ConfigureAllocator changes process-wide state: ctest runs each test in its own process.
#include "server/runtime/allocator.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace odeserve::runtime {
namespace {

volatile char g_sink;  // keeps the writes

constexpr size_t kTemporaryBytes = size_t{16} << 20;
constexpr int kCalls = 10;

// Page faults taken by `kCalls` model-call-like cycles: allocate a large temporary, write it,
// free it.
long FaultsOfTemporaries(size_t bytes) {
  auto faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt + usage.ru_majflt;
  };
  const long before = faults();
  for (int call = 0; call < kCalls; ++call) {
    char* block = static_cast<char*>(std::malloc(bytes));
    std::memset(block, call, bytes);
    g_sink = block[bytes / 2];
    std::free(block);
  }
  return faults() - before;
}

TEST(Allocator, LargeTemporariesReuseTheirPages) {
  unsetenv("GLIBC_TUNABLES");
  unsetenv("LD_PRELOAD");
  // glibc's starting thresholds, fixed (its defaults move with what the process freed before):
  // every call maps its temporary anew and faults in each page.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 128 * 1024), 1);
  const long default_faults = FaultsOfTemporaries(kTemporaryBytes);
  ASSERT_GE(default_faults, kCalls) << "each call faults at least once (huge pages: fewer, larger)";

  const AllocatorReport report = ConfigureAllocator(true);
  ASSERT_TRUE(report.retaining) << report.summary;
  EXPECT_NE(report.summary.find("32 MiB"), std::string::npos) << report.summary;
  FaultsOfTemporaries(kTemporaryBytes);  // the first call grows the heap once
  const long retained_faults = FaultsOfTemporaries(kTemporaryBytes);
  RecordProperty("default_faults", std::to_string(default_faults));
  RecordProperty("retained_faults", std::to_string(retained_faults));
  EXPECT_LE(retained_faults * 10, default_faults)
      << "with the heap kept, the pages are reused: " << retained_faults << " faults against " << default_faults;
  EXPECT_GE(FaultsOfTemporaries(static_cast<size_t>(kRetainedAllocationMaxBytes) * 2), kCalls)
      << "beyond the limit blocks still go back to the kernel";
}

long ResidentBytes() {
  long size_pages = 0;
  long resident_pages = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return -1;
  const int read = std::fscanf(statm, "%ld %ld", &size_pages, &resident_pages);
  std::fclose(statm);
  return read == 2 ? resident_pages * sysconf(_SC_PAGESIZE) : -1;
}

TEST(Allocator, ReleasingGivesBackTheFreePagesARetainedHeapKeeps) {
  unsetenv("GLIBC_TUNABLES");
  unsetenv("LD_PRELOAD");
  ASSERT_TRUE(ConfigureAllocator(true).retaining);
  // Large temporaries each followed by a small live block, as a model call's tensors and the
  // metadata that outlives them: once freed, the large ones are holes in the heap's middle.
  constexpr int kBlocks = 48;
  constexpr size_t kBlockBytes = size_t{1} << 20;
  std::vector<char*> large;
  std::vector<void*> pins;
  for (int i = 0; i < kBlocks; ++i) {
    large.push_back(static_cast<char*>(std::malloc(kBlockBytes)));
    std::memset(large.back(), i + 1, kBlockBytes);
    pins.push_back(std::malloc(64));
  }
  const long in_use = ResidentBytes();
  for (char* block : large) std::free(block);
  const long retained = ResidentBytes();
  ReleaseFreeHeapMemory();
  const long released = ResidentBytes();
  for (void* pin : pins) std::free(pin);
  ASSERT_GT(in_use, 0);
  const long total = static_cast<long>(kBlocks * kBlockBytes);
  EXPECT_LT(in_use - retained, total / 4) << "free() alone keeps the pages: the heap retains them";
  EXPECT_GT(retained - released, total * 3 / 4)
      << "released " << (retained - released) << " of " << total << " free bytes";
}

TEST(Allocator, TheEnvironmentsSettingsWin) {
  setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576", 1);
  AllocatorReport report = ConfigureAllocator(true);
  EXPECT_FALSE(report.retaining);
  EXPECT_NE(report.summary.find("GLIBC_TUNABLES"), std::string::npos) << report.summary;
  setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0", 1);  // tunables of other parts do not count
  unsetenv("LD_PRELOAD");
  setenv("MALLOC_ARENA_MAX", "2", 1);
  report = ConfigureAllocator(true);
  EXPECT_FALSE(report.retaining);
  EXPECT_NE(report.summary.find("MALLOC_ARENA_MAX"), std::string::npos) << report.summary;
  unsetenv("MALLOC_ARENA_MAX");
}

TEST(Allocator, OffKeepsTheDefaults) {
  const AllocatorReport report = ConfigureAllocator(false);
  EXPECT_FALSE(report.retaining);
  EXPECT_NE(report.summary.find("--malloc_retain=false"), std::string::npos) << report.summary;
}

}  // namespace
}  // namespace odeserve::runtime
