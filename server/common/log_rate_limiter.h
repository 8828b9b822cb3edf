#pragma once
// Bounds how often a repeated log line is written: a client that sends the same bad request
// thousands of times must not fill the log. Pure (the caller passes the time and locks).

#include <cstdint>

#include "absl/time/time.h"

namespace odeserve {

class LogRateLimiter {
 public:
  /// At most `burst` lines per `window`.
  LogRateLimiter(int burst, absl::Duration window) : burst_(burst), window_(window) {}

  /// Whether a line may be written at `now`. When it may, `*suppressed_before` is the number of
  /// lines refused since the last one admitted (to say so in the admitted line).
  bool Admit(absl::Time now, int64_t* suppressed_before);

 private:
  const int burst_;
  const absl::Duration window_;
  absl::Time window_start_ = absl::InfinitePast();
  int admitted_in_window_ = 0;
  int64_t suppressed_ = 0;
};

}  // namespace odeserve
