#include "server/common/log_rate_limiter.h"

namespace odeserve {

bool LogRateLimiter::Admit(absl::Time now, int64_t* suppressed_before) {
  if (now - window_start_ >= window_) {
    window_start_ = now;
    admitted_in_window_ = 0;
  }
  if (admitted_in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++admitted_in_window_;
  *suppressed_before = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace odeserve
