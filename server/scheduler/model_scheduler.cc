#include "server/scheduler/model_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace odeserve::scheduler {
namespace {

int64_t PaddedTokens(const std::vector<tokenizer::EncodedText>& rows) {
  size_t longest = 0;
  for (const auto& row : rows) longest = std::max(longest, row.ids.size());
  return static_cast<int64_t>(longest * rows.size());
}

std::string Ms(absl::Duration d) { return absl::StrFormat("%.2fms", absl::ToDoubleMilliseconds(d)); }

}  // namespace

void ComputeGate::Acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return free_ > 0; });
  --free_;
}

void ComputeGate::Release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++free_;
  }
  cv_.notify_one();
}

struct ModelScheduler::Entry {
  std::unique_ptr<WorkItem> item;
  absl::Time enqueued;
  int64_t padded_tokens = 0;
  int64_t token_evaluations = 0;
};

// Per-request state while its batch runs.
struct ModelScheduler::RunningEntry {
  Entry* entry = nullptr;
  size_t first_row = 0;
  size_t remaining = 0;
  bool completed = false;
  std::vector<std::vector<float>> outputs;
};

ModelScheduler::ModelScheduler(SchedulerOptions options, std::shared_ptr<BatchExecutor> executor)
    : options_(std::move(options)), executor_(std::move(executor)) {
  batcher_ = std::thread([this] { BatcherLoop(); });
}

ModelScheduler::~ModelScheduler() { Stop(); }

void ModelScheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (batcher_.joinable()) batcher_.join();
}

int ModelScheduler::queued_rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_rows_;
}

absl::Duration ModelScheduler::PredictCompute(int64_t rows, int64_t tokens, int steps,
                                              Solver solver) const {
  const int64_t evaluations = int64_t{steps} * EvaluationsPerStep(solver);
  return absl::Seconds(cost_model_.Predict(rows, tokens, tokens * evaluations));
}

absl::Duration ModelScheduler::EstimateQueueDelay() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const absl::Time now = absl::Now();
  absl::Duration wait = std::max(absl::ZeroDuration(), running_until_ - now);
  if (queued_rows_ > 0) {
    const int64_t batches = (queued_rows_ + options_.max_batch_size - 1) / options_.max_batch_size;
    wait += absl::Seconds(cost_model_.PredictBatches(batches, queued_rows_, queued_tokens_,
                                                      queued_token_evaluations_));
  }
  // A batch that does not fill waits this long for company before it starts.
  return wait + options_.max_queue_delay;
}

absl::StatusOr<Plan> ModelScheduler::MakePlan(const PlanRequest& request) const {
  Plan plan;
  plan.predicted_queue = EstimateQueueDelay();
  const Solver default_solver = request.solver.value_or(Solver::kEuler);
  auto finish = [&](int steps, Solver solver, StepChoiceKind choice) {
    plan.steps = steps;
    plan.solver = solver;
    plan.choice = choice;
    plan.predicted_total =
        plan.predicted_queue + PredictCompute(request.rows, request.padded_tokens, steps, solver);
    return plan;
  };
  if (request.steps > 0) return finish(request.steps, default_solver, StepChoiceKind::kRequested);
  if (!request.budget.has_value()) {
    return finish(options_.default_steps, default_solver, StepChoiceKind::kModelDefault);
  }

  const int floor = std::max(options_.min_steps, request.min_steps);
  std::vector<StepCandidate> candidates;
  for (const auto& c : options_.candidates) {
    const bool solver_ok = !request.solver.has_value() || c.solver == *request.solver;
    const bool allowed = std::find(options_.solvers.begin(), options_.solvers.end(), c.solver) !=
                         options_.solvers.end();
    if (solver_ok && allowed && c.steps >= floor && c.steps <= options_.max_steps) {
      candidates.push_back(c);
    }
  }
  if (candidates.empty()) {  // no measured profile in range: assume quality grows with steps
    for (int steps = floor; steps <= options_.max_steps; ++steps) {
      candidates.push_back({default_solver, steps, static_cast<double>(steps)});
    }
  }
  const absl::Duration budget = *request.budget;
  const StepCandidate* best = nullptr;
  const StepCandidate* cheapest = nullptr;
  auto evaluations = [](const StepCandidate& c) { return c.steps * EvaluationsPerStep(c.solver); };
  for (const auto& c : candidates) {
    if (cheapest == nullptr || evaluations(c) < evaluations(*cheapest)) cheapest = &c;
    const absl::Duration total =
        plan.predicted_queue + PredictCompute(request.rows, request.padded_tokens, c.steps, c.solver);
    if (total > budget) continue;
    if (best == nullptr || c.quality > best->quality ||
        (c.quality == best->quality && evaluations(c) < evaluations(*best))) {
      best = &c;
    }
  }
  if (best != nullptr) return finish(best->steps, best->solver, StepChoiceKind::kBudget);

  const Plan floor_plan = finish(cheapest->steps, cheapest->solver, StepChoiceKind::kBudgetFloor);
  if (request.miss_policy == MissPolicy::kRefuse) {
    return absl::DeadlineExceededError(absl::StrCat(
        "latency budget ", Ms(budget), " cannot be met: the cheapest allowed choice (",
        SolverName(cheapest->solver), ", ", cheapest->steps, " steps) is predicted to take ",
        Ms(floor_plan.predicted_total), " including ", Ms(plan.predicted_queue),
        " of queueing; refused without computing (on_budget_miss=REFUSE)"));
  }
  return floor_plan;
}

absl::Status ModelScheduler::Submit(std::unique_ptr<WorkItem> item) {
  const int rows = static_cast<int>(item->rows.size());
  int depth = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return absl::UnavailableError(absl::StrCat("model '", options_.model_name, "' is shutting down"));
    if (queued_rows_ + rows > options_.max_queue_size) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", options_.model_name, "' is overloaded: ", queued_rows_,
          " inputs queued, max_queue_size ", options_.max_queue_size, "; retry with backoff"));
    }
    auto entry = std::make_unique<Entry>();
    entry->enqueued = absl::Now();
    entry->padded_tokens = PaddedTokens(item->rows);
    entry->token_evaluations =
        entry->padded_tokens * item->steps * EvaluationsPerStep(item->solver);
    entry->item = std::move(item);
    queued_rows_ += rows;
    queued_tokens_ += entry->padded_tokens;
    queued_token_evaluations_ += entry->token_evaluations;
    queue_.push_back(std::move(entry));
    depth = queued_rows_;
  }
  cv_.notify_one();
  if (options_.observer) options_.observer->OnQueueDepth(depth);
  return absl::OkStatus();
}

std::vector<std::unique_ptr<ModelScheduler::Entry>> ModelScheduler::TakeBatchLocked(
    std::vector<std::unique_ptr<Entry>>& dropped) {
  std::vector<std::unique_ptr<Entry>> batch;
  const absl::Time now = absl::Now();
  int rows = 0;
  size_t longest = 0;
  std::optional<Solver> solver;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Entry& entry = **it;
    const WorkItem& item = *entry.item;
    const bool gone = (item.cancelled && item.cancelled()) || now >= item.deadline;
    size_t entry_longest = 0;
    for (const auto& row : item.rows) entry_longest = std::max(entry_longest, row.ids.size());
    const int entry_rows = static_cast<int>(item.rows.size());
    const size_t new_longest = std::max(longest, entry_longest);
    const bool fits = batch.empty() ||
                      (item.solver == *solver && rows + entry_rows <= options_.max_batch_size &&
                       static_cast<int64_t>(new_longest) * (rows + entry_rows) <= options_.max_batch_tokens);
    if (!gone && !fits) {
      ++it;
      continue;
    }
    queued_rows_ -= entry_rows;
    queued_tokens_ -= entry.padded_tokens;
    queued_token_evaluations_ -= entry.token_evaluations;
    if (gone) {
      dropped.push_back(std::move(*it));
    } else {
      solver = item.solver;
      rows += entry_rows;
      longest = new_longest;
      batch.push_back(std::move(*it));
    }
    it = queue_.erase(it);
  }
  return batch;
}

void ModelScheduler::BatcherLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    // Wait for company up to max_queue_delay, but never past what a queued budget can afford
    // (recomputed as calls arrive: a tight budget arriving later shortens the wait).
    while (!stopping_ && queued_rows_ < options_.max_batch_size &&
           queued_tokens_ < options_.max_batch_tokens) {
      absl::Time fill_deadline = queue_.front()->enqueued + options_.max_queue_delay;
      for (const auto& entry : queue_) fill_deadline = std::min(fill_deadline, entry->item->latest_start);
      const absl::Time now = absl::Now();
      if (now >= fill_deadline) break;
      cv_.wait_for(lock, absl::ToChronoNanoseconds(fill_deadline - now));
    }
    std::vector<std::unique_ptr<Entry>> dropped;
    std::vector<std::unique_ptr<Entry>> batch = TakeBatchLocked(dropped);
    const int depth = queued_rows_;
    if (!batch.empty()) {
      int64_t rows = 0, tokens = 0, evaluations = 0;
      size_t longest = 0;
      for (const auto& e : batch) {
        rows += static_cast<int64_t>(e->item->rows.size());
        for (const auto& row : e->item->rows) longest = std::max(longest, row.ids.size());
        evaluations = std::max<int64_t>(evaluations, e->item->steps * EvaluationsPerStep(e->item->solver));
      }
      tokens = rows * static_cast<int64_t>(longest);
      running_until_ = absl::Now() + absl::Seconds(cost_model_.Predict(rows, tokens, tokens * evaluations));
    }
    lock.unlock();
    if (options_.observer) options_.observer->OnQueueDepth(depth);
    const absl::Time now = absl::Now();
    for (auto& entry : dropped) {
      const WorkItem& item = *entry->item;
      if (item.cancelled && item.cancelled()) {
        item.done(absl::CancelledError("call cancelled by the client while queued"));
      } else {
        item.done(absl::DeadlineExceededError(absl::StrCat(
            "deadline passed after ", Ms(now - entry->enqueued), " in the queue of model '",
            options_.model_name, "'")));
      }
    }
    if (!batch.empty()) RunBatch(std::move(batch));
    lock.lock();
    running_until_ = absl::InfinitePast();
  }
}

void ModelScheduler::RunBatch(std::vector<std::unique_ptr<Entry>> entries) {
  ExecBatch exec;
  exec.solver = entries.front()->item->solver;
  std::vector<RunningEntry> running(entries.size());
  std::vector<size_t> owner;  // exec row -> index in `running`
  for (size_t i = 0; i < entries.size(); ++i) {
    WorkItem& item = *entries[i]->item;
    running[i].entry = entries[i].get();
    running[i].first_row = exec.rows.size();
    running[i].remaining = item.rows.size();
    running[i].outputs.resize(item.rows.size());
    for (const auto& row : item.rows) {
      exec.rows.push_back({&row, item.steps});
      owner.push_back(i);
    }
  }
  const int batch_rows = static_cast<int>(exec.rows.size());
  int64_t longest = 0;
  for (const auto& row : exec.rows) longest = std::max<int64_t>(longest, row.input->ids.size());
  int max_evaluations = 0;
  for (const auto& row : exec.rows) max_evaluations = std::max(max_evaluations, row.steps * EvaluationsPerStep(exec.solver));
  const double predicted = cost_model_.Predict(batch_rows, batch_rows * longest,
                                               batch_rows * longest * max_evaluations);

  const absl::Time started = absl::Now();
  auto on_done = [&](size_t row, absl::Span<const float> output) {
    RunningEntry& r = running[owner[row]];
    if (r.completed) return;
    r.outputs[row - r.first_row].assign(output.begin(), output.end());
    if (--r.remaining > 0) return;
    r.completed = true;
    WorkResult result;
    result.outputs = std::move(r.outputs);
    result.queue_time = started - r.entry->enqueued;
    result.compute_time = absl::Now() - started;
    result.batch_rows = batch_rows;
    r.entry->item->done(std::move(result));
  };
  auto abandoned = [&](size_t row) {
    RunningEntry& r = running[owner[row]];
    if (r.completed) return true;
    const WorkItem& item = *r.entry->item;
    if (item.cancelled && item.cancelled()) {
      r.completed = true;
      item.done(absl::CancelledError("call cancelled by the client; its rows left the batch"));
      return true;
    }
    if (absl::Now() >= item.deadline) {
      r.completed = true;
      item.done(absl::DeadlineExceededError(absl::StrCat(
          "deadline passed while computing (", Ms(absl::Now() - r.entry->enqueued),
          " after it was queued); its rows left the batch")));
      return true;
    }
    return false;
  };

  if (options_.gate) options_.gate->Acquire();
  absl::StatusOr<ExecStats> stats = executor_->Run(exec, on_done, abandoned);
  if (options_.gate) options_.gate->Release();

  for (auto& r : running) {
    if (r.completed) continue;
    r.completed = true;
    r.entry->item->done(stats.ok() ? absl::InternalError("executor returned without finishing a row")
                                   : stats.status());
  }
  if (!stats.ok()) return;
  CostSample sample{batch_rows, stats->padded_tokens, stats->token_evaluations, stats->seconds};
  BatchObservation observation;
  observation.rows = batch_rows;
  observation.padded_tokens = stats->padded_tokens;
  observation.seconds = stats->seconds;
  observation.predicted_seconds = predicted;
  observation.relative_error = cost_model_.Observe(sample);
  if (options_.observer) options_.observer->OnBatch(observation);
}

absl::Status ModelScheduler::Calibrate(const std::vector<ExecBatch>& batches) {
  std::vector<CostSample> samples;
  for (const auto& batch : batches) {
    const auto stats = executor_->Run(
        batch, [](size_t, absl::Span<const float>) {}, [](size_t) { return false; });
    if (!stats.ok()) return stats.status();
    samples.push_back({static_cast<int64_t>(batch.rows.size()), stats->padded_tokens,
                       stats->token_evaluations, stats->seconds});
  }
  cost_model_.Calibrate(samples);
  return absl::OkStatus();
}

}  // namespace odeserve::scheduler
