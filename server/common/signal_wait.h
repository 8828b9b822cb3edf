#pragma once
// The main thread's wait for a shutdown signal, doubling as the server's housekeeping clock:
// no extra thread, and the housekeeping stops the moment a signal arrives.

#include <signal.h>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace odeserve {

/// Waits until one of `signals` (which the caller has blocked) is delivered and returns it,
/// running `housekeeping` every `interval` meanwhile. A zero or negative interval never runs it.
int WaitForSignal(const sigset_t& signals, absl::Duration interval, absl::FunctionRef<void()> housekeeping);

}  // namespace odeserve
