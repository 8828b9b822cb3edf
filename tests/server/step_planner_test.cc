// scheduler/step_planner: the step choice and the queue forecast as pure functions of a request,
// a queue snapshot built by hand, the cost model and the options; no scheduler, no threads.
// The cases follow scheduler_test's end-to-end Planning suite, on the same synthetic machine.

#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/scheduler/cost_model.h"
#include "server/scheduler/scheduler_options.h"
#include "server/scheduler/step_planner.h"
#include "tests/server/scheduler_test_support.h"

namespace odeserve::scheduler {
namespace {

using ::testing::HasSubstr;

// How `plan` chose, as "BUDGET EULER 6", or its error: one comparison per case, and a failure
// shows the whole choice.
std::string Choice(const absl::StatusOr<Plan>& plan) {
  if (!plan.ok()) return plan.status().ToString();
  const char* kind = "";
  switch (plan->choice) {
    case StepChoiceKind::kRequested: kind = "REQUESTED"; break;
    case StepChoiceKind::kModelDefault: kind = "MODEL_DEFAULT"; break;
    case StepChoiceKind::kBudget: kind = "BUDGET"; break;
    case StepChoiceKind::kBudgetFloor: kind = "BUDGET_FLOOR"; break;
  }
  return absl::StrCat(kind, " ", SolverName(plan->solver), " ", plan->steps);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

class StepPlanner : public ::testing::Test {
 protected:
  void SetUp() override {
    // The cost model fitted to the synthetic machine, as a scheduler's calibration would fit it.
    std::vector<CostSample> samples;
    for (int rows : {1, 2, 4}) {
      for (int length : {5, 10, 20}) {
        for (int steps : {1, 3, 8}) {
          const Solver solver = steps == 3 ? Solver::kHeun : Solver::kEuler;
          const CostShape shape = WorkShape(rows, length, steps, solver, 0, 1, 0);
          samples.push_back({shape, SyntheticSeconds(shape.rows, shape.padded_tokens, shape.token_evaluations)});
        }
      }
    }
    cost_model_.Calibrate(samples);
    options_ = Options();
    options_.candidates = Candidates();
  }

  // One 10-token row: compute = 1 ms + 1 ms per field evaluation; an idle queue adds the 1 ms
  // queue delay.
  static PlanRequest Call(std::optional<absl::Duration> budget, int min_steps = 0, int steps = 0) {
    PlanRequest request;
    request.rows = 1;
    request.padded_tokens = 10;
    request.budget = budget;
    request.min_steps = min_steps;
    request.steps = steps;
    return request;
  }
  absl::StatusOr<Plan> PlanFor(const PlanRequest& request, const QueueSnapshot& queue = {}) const {
    return PlanSteps(request, queue, cost_model_, options_);
  }
  // What a call submitted now with `solver` would find ahead of it.
  QueueForecast ForecastFor(Solver solver, const QueueSnapshot& queue) const {
    return ForecastQueue(Call(absl::Milliseconds(6)), solver, queue, cost_model_, options_);
  }

  CostModel cost_model_;
  SchedulerOptions options_;
};

TEST_F(StepPlanner, TheBudgetBuysTheMostQualityThatFits) {
  auto plan = PlanFor(Call(absl::Seconds(1)));
  ASSERT_EQ(Choice(plan), "BUDGET HEUN 8");
  EXPECT_NEAR(Ms(plan->predicted_total), 18.0, 0.1);  // 1 ms queue delay + 1 ms + 16 evaluations
  EXPECT_NEAR(Ms(plan->predicted_queue), 1.0, 0.01);
  EXPECT_NEAR(Ms(plan->start_within), 983.0, 0.1);  // the budget less its 17 ms of compute
  // 8.5 ms leaves 6 evaluations: Euler 6 (0.80) beats Heun 3 (0.75) and RK4 1 (0.73).
  EXPECT_EQ(Choice(PlanFor(Call(absl::Microseconds(8500)))), "BUDGET EULER 6");
  // 4.5 ms leaves 2 evaluations: Heun 1 (0.65) beats Euler 2 (0.60).
  EXPECT_EQ(Choice(PlanFor(Call(absl::Microseconds(4500)))), "BUDGET HEUN 1");
}

TEST_F(StepPlanner, TheLatencyInflationShrinksWhatTheBudgetBuys) {
  QueueSnapshot queue;
  queue.latency_inflation = 2.0;  // 17 ms must hold 2 x 8 ms of prediction: 6 evaluations
  auto plan = PlanFor(Call(absl::Milliseconds(17)), queue);
  ASSERT_EQ(Choice(plan), "BUDGET EULER 6");
  EXPECT_NEAR(Ms(plan->start_within), 17.0 - 2 * 7.0, 0.1);
}

TEST_F(StepPlanner, WhenNothingFitsServeFloorRunsTheCheapestAndRefuseRefuses) {
  PlanRequest request = Call(absl::Microseconds(2500));
  request.miss_policy = MissPolicy::kServeFloor;
  auto plan = PlanFor(request);
  ASSERT_EQ(Choice(plan), "BUDGET_FLOOR EULER 1");
  EXPECT_NEAR(Ms(plan->predicted_total), 3.0, 0.05);
  EXPECT_EQ(plan->start_within, absl::ZeroDuration()) << "a late call must not wait for company";

  request.miss_policy = MissPolicy::kRefuse;
  plan = PlanFor(request);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("latency budget cannot be met: 2.50ms of it remained when the call was planned"));
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("the cheapest allowed choice (EULER, 1 steps)"));
}

TEST_F(StepPlanner, WorkAheadMakesTheChoiceCheaper) {
  // Alone, 12.5 ms leave 10.5 ms of compute: Euler 8 (0.90) beats Heun 5.
  EXPECT_EQ(Choice(PlanFor(Call(absl::Microseconds(12500)))), "BUDGET EULER 8");
  // One queued 8-step row (1 + 8 ms) and the queue delay leave 2.5 ms: one evaluation.
  QueueSnapshot queued;
  queued.queued = WorkShape(1, 10, 8, Solver::kEuler, 0, 1, 0);
  auto plan = PlanFor(Call(absl::Microseconds(12500)), queued);
  ASSERT_EQ(Choice(plan), "BUDGET EULER 1");
  EXPECT_NEAR(Ms(plan->predicted_queue), 10.0, 0.05);
  // A running batch with 5 ms left: 6.5 ms buy Euler 5 (0.75) over Heun 2 (0.70).
  QueueSnapshot running;
  running.running_left = absl::Milliseconds(5);
  plan = PlanFor(Call(absl::Microseconds(12500)), running);
  ASSERT_EQ(Choice(plan), "BUDGET EULER 5");
  EXPECT_NEAR(Ms(plan->predicted_queue), 6.0, 0.01);
}

TEST_F(StepPlanner, AModelThatStartsAtOnceForecastsNoQueueDelay) {
  QueueSnapshot idle;
  idle.starts_at_once = true;
  auto plan = PlanFor(Call(absl::Seconds(1)), idle);
  ASSERT_EQ(Choice(plan), "BUDGET HEUN 8");
  EXPECT_EQ(plan->predicted_queue, absl::ZeroDuration());
}

TEST_F(StepPlanner, AJoinableBatchIsOneStepAwayForItsSolverOnly) {
  // A running 8-step Euler batch of one 10-token row, 1.125 ms a step, 9 ms to its end.
  QueueSnapshot queue;
  queue.joinable = QueueSnapshot::JoinableBatch{Solver::kEuler, 1, 10, absl::Microseconds(1125)};
  queue.running_left = absl::Milliseconds(9);
  const QueueForecast euler = ForecastFor(Solver::kEuler, queue);
  EXPECT_EQ(euler.wait, absl::Microseconds(1125));
  EXPECT_EQ(euler.shared_padded_tokens, 10);
  const QueueForecast heun = ForecastFor(Solver::kHeun, queue);
  EXPECT_EQ(heun.wait, absl::Milliseconds(10)) << "its end, then the queue delay";
  EXPECT_EQ(heun.shared_padded_tokens, 0);
  // 6 ms buys one Euler step beside the running row: 1.125 ms to the boundary, then 1 ms per
  // batch + 1 ms for its own evaluation + 1 ms for the running row's.
  auto plan = PlanFor(Call(absl::Milliseconds(6)), queue);
  ASSERT_EQ(Choice(plan), "BUDGET EULER 1");
  EXPECT_NEAR(Ms(plan->predicted_total), 4.125, 0.05);
  // A full batch (max_batch_size 8) takes no one: the call waits for its end.
  queue.joinable->rows = 8;
  const QueueForecast full = ForecastFor(Solver::kEuler, queue);
  EXPECT_EQ(full.wait, absl::Milliseconds(10));
  EXPECT_EQ(full.shared_padded_tokens, 0);
}

TEST_F(StepPlanner, ExplicitStepsAreKept) {
  // Whatever the budget under the default SERVE_FLOOR: 7 ms against 100 us, late, so at once.
  PlanRequest request = Call(absl::Microseconds(100), 0, /*steps=*/5);
  auto plan = PlanFor(request);
  ASSERT_EQ(Choice(plan), "REQUESTED EULER 5");
  EXPECT_NEAR(Ms(plan->predicted_total), 7.0, 0.05);
  EXPECT_EQ(plan->start_within, absl::ZeroDuration());
  request.solver = Solver::kHeun;
  plan = PlanFor(request);
  ASSERT_EQ(Choice(plan), "REQUESTED HEUN 5");
  EXPECT_NEAR(Ms(plan->predicted_total), 12.0, 0.1);
  // The budget still bounds the wait for company: 100 ms less the 11 ms of compute.
  request.budget = absl::Milliseconds(100);
  EXPECT_NEAR(Ms(PlanFor(request)->start_within), 89.0, 0.1);
  request.budget.reset();
  EXPECT_EQ(PlanFor(request)->start_within, absl::InfiniteDuration());
  // Under REFUSE, exact steps that miss the budget are refused, not shortened.
  request = Call(absl::Milliseconds(2), 0, /*steps=*/5);
  request.miss_policy = MissPolicy::kRefuse;
  plan = PlanFor(request);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("the requested choice (EULER, 5 steps)"));
}

TEST_F(StepPlanner, NoBudgetUsesTheModelDefault) {
  EXPECT_EQ(Choice(PlanFor(Call(std::nullopt))), "MODEL_DEFAULT EULER 4");
}

TEST_F(StepPlanner, MinStepsIsAFloor) {
  // 4.5 ms alone buys Heun 1; with min_steps 2 the best that fits is Euler 2.
  EXPECT_EQ(Choice(PlanFor(Call(absl::Microseconds(4500), /*min_steps=*/2))), "BUDGET EULER 2");
  // Nothing with 7 steps or more fits 8.5 ms: the floor is Euler 7.
  EXPECT_EQ(Choice(PlanFor(Call(absl::Microseconds(8500), /*min_steps=*/7))), "BUDGET_FLOOR EULER 7");
  // The model's own min_steps is a floor too.
  options_.min_steps = 3;
  EXPECT_EQ(Choice(PlanFor(Call(absl::Microseconds(100)))), "BUDGET_FLOOR EULER 3");
  // A floor above the model's step range leaves nothing to choose.
  auto plan = PlanFor(Call(absl::Microseconds(100), /*min_steps=*/9));
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("compute.min_steps 9 is above the model's step range"));
}

}  // namespace
}  // namespace odeserve::scheduler
