#include "server/common/signal_wait.h"

#include <cerrno>

namespace odeserve {

int WaitForSignal(const sigset_t& signals, absl::Duration interval, absl::FunctionRef<void()> housekeeping) {
  if (interval <= absl::ZeroDuration()) {
    int signal_number = 0;
    while (sigwait(&signals, &signal_number) != 0) {
    }
    return signal_number;
  }
  const timespec timeout = absl::ToTimespec(interval);
  while (true) {
    const int signal_number = sigtimedwait(&signals, nullptr, &timeout);
    if (signal_number > 0) return signal_number;
    // EAGAIN: the interval passed; EINTR: an unrelated handler ran. Either way, not a shutdown.
    if (errno == EAGAIN) housekeeping();
  }
}

}  // namespace odeserve
