#pragma once
// The step planner: chooses a call's solver and step counts from its latency budget, the cost
// model, the model's quality profile and a snapshot of the queue ahead. Pure: it reads only its
// arguments, so ModelScheduler copies its queue state under its lock and plans outside it, and
// tests plan without threads.

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/cost_model.h"
#include "server/scheduler/executor.h"
#include "server/scheduler/scheduler_options.h"

namespace odeserve::scheduler {

enum class MissPolicy { kServeFloor, kRefuse };
enum class StepChoiceKind { kRequested, kModelDefault, kBudget, kBudgetFloor };

struct PlanRequest {
  int rows = 1;
  int64_t padded_tokens = 1;               // rows x longest row
  int steps = 0;                           // > 0: exact (already validated)
  std::optional<Solver> solver;
  std::optional<absl::Duration> budget;    // remaining time the call may take
  int min_steps = 0;
  MissPolicy miss_policy = MissPolicy::kServeFloor;
  // Translation: requested decoder steps (> 0: exact), beams, and the output length the cost
  // model should expect for the longest input (0 for encoder-only models).
  int decoder_steps = 0;
  int beam_size = 1;
  int expected_output_tokens = 0;
};

/// What a request submitted now should expect before its rows compute.
struct QueueForecast {
  absl::Duration wait;             // until its rows start computing
  // Joining the running batch: the padded tokens of the rows it will step beside (each of its
  // steps then costs their share too); 0 when it starts a batch of its own.
  int64_t shared_padded_tokens = 0;
};

struct Plan {
  int steps = 1;
  int decoder_steps = 0;
  Solver solver = Solver::kEuler;
  StepChoiceKind choice = StepChoiceKind::kModelDefault;
  absl::Duration predicted_queue;
  absl::Duration predicted_total;          // queue + compute
  /// Calls with a budget (explicit steps included): how long after planning its batch may start
  /// and still meet the budget, the compute inflated by the safety factor; zero when the plan
  /// does not fit the budget (a call that will be late never waits for company). Infinite
  /// without a budget.
  absl::Duration start_within = absl::InfiniteDuration();
};

/// What the planner needs of one model's queue and running batch, as a call submitted now would
/// find them. ModelScheduler fills it under its lock; a default one is an idle model whose
/// batches wait max_queue_delay for company.
struct QueueSnapshot {
  /// The running batch, when a call queued now with its solver would join it at its next step
  /// boundary (room aside): the batcher's join rules one step ahead, and no other solver queued.
  struct JoinableBatch {
    Solver solver = Solver::kEuler;
    int64_t rows = 0;           // rows running now
    int64_t padded_length = 0;  // its longest row, padded
    absl::Duration step;        // its last step's wall time: the wait for its next boundary
  };
  std::optional<JoinableBatch> joinable;
  /// Until the running batch's predicted end; zero when none runs (or it overran).
  absl::Duration running_left;
  /// The work of every queued row (`batches` unset: the planner counts them).
  CostShape queued;
  /// The most decoder calls of one queued call (translation): calls sharing a batch share its
  /// decoder calls.
  int64_t longest_queued_decoder_calls = 0;
  /// The model is idle and does not wait for company (SchedulerOptions::queue_delay_when_idle
  /// off, its last batch alone): a call submitted now starts without max_queue_delay.
  bool starts_at_once = false;
  /// Budgeted plans must fit with their prediction times this (ModelScheduler::LatencyInflation).
  double latency_inflation = 1.0;
};

/// Predicted wait before `request`'s rows would start computing if it were submitted now with
/// `solver`, and whether it would join the running batch.
QueueForecast ForecastQueue(const PlanRequest& request, Solver solver, const QueueSnapshot& queue,
                            const CostModel& cost_model, const SchedulerOptions& options);

/// Chooses solver and steps for `request` (see ModelScheduler::MakePlan). DeadlineExceeded when
/// the budget cannot be met and the policy is kRefuse; InvalidArgument when no step count is
/// allowed.
absl::StatusOr<Plan> PlanSteps(const PlanRequest& request, const QueueSnapshot& queue,
                               const CostModel& cost_model, const SchedulerOptions& options);

}  // namespace odeserve::scheduler
