#pragma once
// The compute gate: bounds the batches computing at once across all models, in arrival order.

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace odeserve::scheduler {

/// Bounds the number of batches computing at once across all models (the CPU has few cores and
/// LibTorch already uses all of them inside one batch). Slots go to waiters in arrival order: a
/// batcher that releases and at once acquires again queues behind models already waiting, so a
/// busy model cannot keep the slot from the others.
class ComputeGate {
 public:
  explicit ComputeGate(int slots) : free_(slots) {}
  void Acquire();
  void Release();
  /// Whether a batch (of another model) is waiting for a slot: a running batch stops taking
  /// in new rows then, so that models take turns.
  bool HasWaiters() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int free_;
  uint64_t next_ticket_ = 0;    // handed to the next Acquire
  uint64_t serving_ticket_ = 0;  // the oldest ticket not yet granted a slot
};

}  // namespace odeserve::scheduler
