// The step planner (see step_planner.h): queue forecasts and the per-call step choice.
#include "server/scheduler/step_planner.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace odeserve::scheduler {
namespace {

std::string Ms(absl::Duration d) { return absl::StrFormat("%.2fms", absl::ToDoubleMilliseconds(d)); }

// A row's token length once padded (SchedulerOptions::pad_to_multiple).
int64_t PaddedRow(const PlanRequest& request, const SchedulerOptions& options) {
  return PaddedLength(request.padded_tokens / std::max(1, request.rows), options.pad_to_multiple,
                      options.max_sequence_length);
}

// Predicted compute of a call: its rows x tokens padded, encoder `steps` of `solver`, and
// (translation) its expected output positions of `decoder_steps` over rows x beams; each step
// also pays for `shared_padded_tokens` of other rows in its batch.
absl::Duration PredictCompute(const PlanRequest& request, int steps, Solver solver, int decoder_steps,
                              int64_t shared_padded_tokens, const CostModel& cost_model,
                              const SchedulerOptions& options) {
  CostShape work = WorkShape(request.rows, PaddedRow(request, options), steps, solver, decoder_steps,
                             request.beam_size, request.expected_output_tokens);
  // Every step also evaluates the field over the rows it shares the batch with.
  work.token_evaluations += shared_padded_tokens * steps * EvaluationsPerStep(solver);
  return absl::Seconds(cost_model.Predict(work));
}

// The (solver, steps) points a budgeted `request` may choose from: the measured profile's points
// in the call's and the model's ranges, or without any, every step count in range with quality
// growing with steps. Translation: an explicit decoder step count is kept.
std::vector<StepCandidate> AllowedCandidates(const PlanRequest& request, const SchedulerOptions& options,
                                             Solver default_solver) {
  const bool decodes = options.max_decoder_steps > 0;
  const int fixed_decoder = decodes ? request.decoder_steps : 0;
  const int floor = std::max(options.min_steps, request.min_steps);
  auto decoder_ok = [&](int decoder_steps) {
    if (!decodes) return true;
    if (fixed_decoder > 0) return decoder_steps == fixed_decoder;
    return decoder_steps >= std::max(options.min_decoder_steps, request.min_steps) &&
           decoder_steps <= options.max_decoder_steps;
  };
  auto encoder_ok = [&](int steps) {
    return request.steps > 0 ? steps == request.steps : steps >= floor && steps <= options.max_steps;
  };
  std::vector<StepCandidate> candidates;
  for (const auto& c : options.candidates) {
    const bool solver_ok = !request.solver.has_value() || c.solver == *request.solver;
    const bool allowed = std::find(options.solvers.begin(), options.solvers.end(), c.solver) !=
                         options.solvers.end();
    if (solver_ok && allowed && encoder_ok(c.steps) && decoder_ok(c.decoder_steps)) candidates.push_back(c);
  }
  if (candidates.empty()) {  // no measured profile in range: assume quality grows with steps
    for (int steps = floor; steps <= options.max_steps; ++steps) {
      if (!encoder_ok(steps)) continue;
      if (!decodes) {
        candidates.push_back({default_solver, steps, static_cast<double>(steps), 0});
        continue;
      }
      for (int d = options.min_decoder_steps; d <= options.max_decoder_steps; ++d) {
        if (decoder_ok(d)) candidates.push_back({default_solver, steps, static_cast<double>(steps + d), d});
      }
    }
  }
  return candidates;
}

}  // namespace

QueueForecast ForecastQueue(const PlanRequest& request, Solver solver, const QueueSnapshot& queue,
                            const CostModel& cost_model, const SchedulerOptions& options) {
  if (queue.joinable.has_value() && queue.joinable->solver == solver) {
    // Joins at the next step boundary if it fits beside the running rows and the rows queued
    // ahead of it (all of which join there too).
    const QueueSnapshot::JoinableBatch& running = *queue.joinable;
    const int64_t rows = running.rows + queue.queued.rows + request.rows;
    const int64_t length = std::max(running.padded_length, PaddedRow(request, options));
    if (rows <= options.max_batch_size && rows * length <= options.max_batch_tokens) {
      QueueForecast forecast;
      forecast.wait = running.step;
      forecast.shared_padded_tokens = (running.rows + queue.queued.rows) * length;
      return forecast;
    }
  }
  absl::Duration wait = queue.running_left;
  if (queue.queued.rows > 0) {
    CostShape queued = queue.queued;
    queued.batches = (queued.rows + options.max_batch_size - 1) / options.max_batch_size;
    if (queued.decoder_calls > 0) {
      // Calls that share a batch share its decoder calls: each batch runs about as many as its
      // longest call.
      queued.decoder_calls = queued.batches * queue.longest_queued_decoder_calls;
    }
    wait += absl::Seconds(cost_model.Predict(queued));
  }
  // A batch that does not fill waits this long for company before it starts, unless the call
  // finds the model idle and it starts at once (SchedulerOptions::queue_delay_when_idle).
  return {wait + (queue.starts_at_once ? absl::ZeroDuration() : options.max_queue_delay), 0};
}

absl::StatusOr<Plan> PlanSteps(const PlanRequest& request, const QueueSnapshot& queue,
                               const CostModel& cost_model, const SchedulerOptions& options) {
  Plan plan;
  // Euler unless the model does not allow it (validation only asks for some solver).
  const bool euler_allowed =
      std::find(options.solvers.begin(), options.solvers.end(), Solver::kEuler) != options.solvers.end();
  const Solver default_solver =
      request.solver.value_or(euler_allowed || options.solvers.empty() ? Solver::kEuler : options.solvers.front());
  const bool decodes = options.max_decoder_steps > 0;
  // The queue ahead depends on the solver: rows join a running batch only with its solver.
  std::map<Solver, QueueForecast> forecasts;
  auto forecast = [&](Solver solver) -> const QueueForecast& {
    auto it = forecasts.find(solver);
    if (it == forecasts.end()) {
      it = forecasts.emplace(solver, ForecastQueue(request, solver, queue, cost_model, options)).first;
    }
    return it->second;
  };
  auto compute = [&](int steps, Solver solver, int decoder_steps) {
    return PredictCompute(request, steps, solver, decoder_steps, forecast(solver).shared_padded_tokens, cost_model,
                          options);
  };
  const double inflation = request.budget.has_value() ? queue.latency_inflation : 1.0;
  auto finish = [&](int steps, Solver solver, int decoder_steps, StepChoiceKind choice) {
    plan.steps = steps;
    plan.solver = solver;
    plan.decoder_steps = decoder_steps;
    plan.choice = choice;
    plan.predicted_queue = forecast(solver).wait;
    const absl::Duration predicted_compute = compute(steps, solver, decoder_steps);
    plan.predicted_total = plan.predicted_queue + predicted_compute;
    if (request.budget.has_value()) {
      // A call that fits may wait for company while its slack lasts; one that will be late
      // anyway starts at once.
      const bool fits = plan.predicted_total * inflation <= *request.budget;
      plan.start_within = fits ? *request.budget - predicted_compute * inflation : absl::ZeroDuration();
    }
    return plan;
  };
  // Translation: an explicit decoder step count is kept; the encoder's follows the same rules.
  const int fixed_decoder = decodes ? request.decoder_steps : 0;
  const bool fully_requested = request.steps > 0 && (!decodes || fixed_decoder > 0);
  // The refusal of a plan predicted to miss the budget (on_budget_miss=REFUSE).
  auto refuse = [&](const Plan& late, const char* what) {
    const absl::Duration left = *request.budget;
    return absl::DeadlineExceededError(absl::StrCat(
        "latency budget cannot be met: ",
        left > absl::ZeroDuration() ? absl::StrCat(Ms(left), " of it remained") : std::string("none of it remained"),
        " when the call was planned, and ", what, " (", SolverName(late.solver), ", ", late.steps, " steps",
        decodes ? absl::StrCat(", ", late.decoder_steps, " decoder steps") : std::string(),
        ") is predicted to take ", Ms(late.predicted_total), " including ", Ms(late.predicted_queue),
        " of queueing (x", absl::StrFormat("%.2f", inflation),
        " safety factor from recent calls); refused without computing (on_budget_miss=REFUSE)"));
  };
  if (fully_requested || (request.steps > 0 && !request.budget.has_value())) {
    const Plan requested = finish(request.steps, default_solver,
                                  fixed_decoder > 0 ? fixed_decoder : options.default_decoder_steps,
                                  StepChoiceKind::kRequested);
    // Exact steps are kept whatever the budget, unless the caller would rather be refused.
    if (request.budget.has_value() && request.miss_policy == MissPolicy::kRefuse &&
        requested.predicted_total * inflation > *request.budget) {
      return refuse(requested, "the requested choice");
    }
    return requested;
  }
  if (!request.budget.has_value()) {
    return finish(options.default_steps, default_solver,
                  fixed_decoder > 0 ? fixed_decoder : options.default_decoder_steps,
                  fixed_decoder > 0 ? StepChoiceKind::kRequested : StepChoiceKind::kModelDefault);
  }

  const std::vector<StepCandidate> candidates = AllowedCandidates(request, options, default_solver);
  if (candidates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no allowed step choice for model '", options.model_name, "': compute.min_steps ",
        request.min_steps, " is above the model's step range"));
  }
  const absl::Duration budget = *request.budget;
  // Predicted queue + compute of each candidate, computed once (each is a cost-model call).
  std::vector<absl::Duration> totals;
  for (const auto& c : candidates) totals.push_back(forecast(c.solver).wait + compute(c.steps, c.solver, c.decoder_steps));
  size_t cheapest_index = 0;
  std::optional<double> best_quality;  // the best quality that fits the budget
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (totals[i] < totals[cheapest_index]) cheapest_index = i;
    if (totals[i] * inflation > budget) continue;
    best_quality = std::max(best_quality.value_or(candidates[i].quality), candidates[i].quality);
  }
  // Of the fitting candidates as good as the best (within the tolerance), the cheapest. Between
  // equally cheap predictions, fewer field evaluations first: every evaluation costs something,
  // and a tie only means the fit put a zero on it (a tiny model on a noisy machine); then the
  // better.
  auto evaluations = [](const StepCandidate& c) { return c.steps * EvaluationsPerStep(c.solver) + c.decoder_steps; };
  std::optional<size_t> best_index;
  for (size_t i = 0; best_quality && i < candidates.size(); ++i) {
    if (totals[i] * inflation > budget) continue;
    if (candidates[i].quality < *best_quality - options.quality_tolerance) continue;
    if (!best_index) {
      best_index = i;
      continue;
    }
    const StepCandidate& c = candidates[i];
    const StepCandidate& b = candidates[*best_index];
    if (std::make_tuple(totals[i], evaluations(c), -c.quality) < std::make_tuple(totals[*best_index], evaluations(b), -b.quality)) {
      best_index = i;
    }
  }
  const StepCandidate* best = best_index ? &candidates[*best_index] : nullptr;
  const StepCandidate* cheapest = &candidates[cheapest_index];
  if (best != nullptr) return finish(best->steps, best->solver, best->decoder_steps, StepChoiceKind::kBudget);

  const Plan floor_plan =
      finish(cheapest->steps, cheapest->solver, cheapest->decoder_steps, StepChoiceKind::kBudgetFloor);
  if (request.miss_policy == MissPolicy::kRefuse) return refuse(floor_plan, "the cheapest allowed choice");
  return floor_plan;
}

}  // namespace odeserve::scheduler
