#pragma once
// The fake model, synthetic machine and quality profile that the scheduler's tests share:
// scheduler_test plans through a calibrated ModelScheduler, step_planner_test calls the pure
// planner directly.

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/scheduler_options.h"

namespace odeserve::scheduler {

// The fake model: batches of at most 8 rows and 1,024 tokens, a 1 ms queue delay, 64 queued
// rows, 1 to 8 steps (4 by default), all three solvers.
inline SchedulerOptions Options() {
  SchedulerOptions options;
  options.model_name = "fake-model";
  options.max_batch_size = 8;
  options.max_batch_tokens = 1024;
  options.max_queue_delay = absl::Milliseconds(1);
  options.max_queue_size = 64;
  options.min_steps = 1;
  options.max_steps = 8;
  options.default_steps = 4;
  options.solvers = {Solver::kEuler, Solver::kHeun, Solver::kRk4};
  return options;
}

// Synthetic machine: 1 ms per batch + 100 us per token evaluation.
inline double SyntheticSeconds(int64_t rows, int64_t tokens, int64_t token_evaluations) {
  return 1e-3 + 1e-4 * static_cast<double>(token_evaluations);
}

// Quality: Heun beats Euler at equal evaluations, RK4 saturates lower (as on the tiny models).
inline std::vector<StepCandidate> Candidates() {
  std::vector<StepCandidate> candidates;
  for (int n = 1; n <= 8; ++n) {
    candidates.push_back({Solver::kEuler, n, 0.50 + 0.05 * n, 0});
    candidates.push_back({Solver::kHeun, n, 0.60 + 0.05 * n, 0});
    candidates.push_back({Solver::kRk4, n, 0.70 + 0.03 * n, 0});
  }
  return candidates;
}

}  // namespace odeserve::scheduler
