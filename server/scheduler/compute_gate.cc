// The compute gate: a ticket lock with a number of slots (see compute_gate.h).
#include "server/scheduler/compute_gate.h"

namespace odeserve::scheduler {

void ComputeGate::Acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t ticket = next_ticket_++;
  cv_.wait(lock, [&] { return free_ > 0 && ticket == serving_ticket_; });
  --free_;
  ++serving_ticket_;
  lock.unlock();
  cv_.notify_all();  // the next ticket may take a slot that is still free
}

bool ComputeGate::HasWaiters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_ticket_ != serving_ticket_;  // tickets handed out and not yet granted
}

void ComputeGate::Release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++free_;
  }
  cv_.notify_all();  // only the oldest ticket proceeds; the others wait again
}

}  // namespace odeserve::scheduler
