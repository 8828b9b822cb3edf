#include "server/common/log.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace odeserve {

void Log(LogLevel level, std::string_view message) {
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   tag, " ", absl::string_view(message.data(), message.size()), "\n");
  // One write(2) per line so lines from concurrent threads never interleave.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace odeserve
