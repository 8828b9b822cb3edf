#include "server/scheduler/model_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace odeserve::scheduler {
namespace {

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

// A queued call. A call with more rows than one batch may hold is taken a slice at a time
// (rows [next_row, rows.size()) are still queued); it completes once, when its last row is done.
// Everything but the queue bookkeeping is touched only by the batcher thread.
struct ModelScheduler::Entry {
  std::unique_ptr<WorkItem> item;
  absl::Time enqueued;
  size_t longest = 0;            // longest row, for padded-token estimates
  size_t next_row = 0;           // first row not yet taken into a batch
  size_t finished_rows = 0;
  bool completed = false;        // done() has been called
  std::vector<std::vector<float>> outputs;
  absl::Time first_start = absl::InfinitePast();
  int first_batch_rows = 0;

  size_t remaining_rows() const { return item->rows.size() - next_row; }
  int64_t remaining_tokens() const { return static_cast<int64_t>(longest * remaining_rows()); }
  int64_t remaining_token_evaluations() const {
    return remaining_tokens() * item->steps * EvaluationsPerStep(item->solver);
  }
};

// Rows [begin, end) of one entry, as they run in one batch.
struct ModelScheduler::Slice {
  std::shared_ptr<Entry> entry;
  size_t begin = 0;
  size_t end = 0;
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
  const double inflation = LatencyInflation();
  const StepCandidate* best = nullptr;
  const StepCandidate* cheapest = nullptr;
  auto evaluations = [](const StepCandidate& c) { return c.steps * EvaluationsPerStep(c.solver); };
  for (const auto& c : candidates) {
    if (cheapest == nullptr || evaluations(c) < evaluations(*cheapest)) cheapest = &c;
    const absl::Duration total =
        plan.predicted_queue + PredictCompute(request.rows, request.padded_tokens, c.steps, c.solver);
    if (total * inflation > budget) continue;
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
        " of queueing (x", absl::StrFormat("%.2f", inflation),
        " safety factor from recent calls); refused without computing (on_budget_miss=REFUSE)"));
  }
  return floor_plan;
}

void ModelScheduler::ObserveCallLatency(absl::Duration predicted, absl::Duration measured) {
  if (predicted <= absl::ZeroDuration()) return;
  constexpr size_t kWindow = 512;
  constexpr double kQuantile = 0.98;
  constexpr double kMaxInflation = 4.0;
  std::lock_guard<std::mutex> lock(mutex_);
  latency_ratios_.push_back(absl::FDivDuration(measured, predicted));
  if (latency_ratios_.size() > kWindow) latency_ratios_.pop_front();
  std::vector<double> sorted(latency_ratios_.begin(), latency_ratios_.end());
  const size_t index = static_cast<size_t>(kQuantile * (sorted.size() - 1));
  std::nth_element(sorted.begin(), sorted.begin() + index, sorted.end());
  latency_inflation_ = std::clamp(sorted[index], 1.0, kMaxInflation);
}

double ModelScheduler::LatencyInflation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latency_inflation_;
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
    auto entry = std::make_shared<Entry>();
    entry->enqueued = absl::Now();
    for (const auto& row : item->rows) entry->longest = std::max(entry->longest, row.ids.size());
    entry->outputs.resize(item->rows.size());
    entry->item = std::move(item);
    queued_rows_ += rows;
    queued_tokens_ += entry->remaining_tokens();
    queued_token_evaluations_ += entry->remaining_token_evaluations();
    queue_.push_back(std::move(entry));
    depth = queued_rows_;
  }
  cv_.notify_one();
  if (options_.observer) options_.observer->OnQueueDepth(depth);
  return absl::OkStatus();
}

std::vector<ModelScheduler::Slice> ModelScheduler::TakeBatchLocked(
    std::vector<std::shared_ptr<Entry>>& dropped) {
  std::vector<Slice> batch;
  const absl::Time now = absl::Now();
  int rows = 0;
  size_t longest = 0;
  std::optional<Solver> solver;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Entry& entry = **it;
    const WorkItem& item = *entry.item;
    const bool gone = entry.completed || (item.cancelled && item.cancelled()) || now >= item.deadline;
    if (gone) {
      queued_rows_ -= static_cast<int>(entry.remaining_rows());
      queued_tokens_ -= entry.remaining_tokens();
      queued_token_evaluations_ -= entry.remaining_token_evaluations();
      if (!entry.completed) dropped.push_back(*it);
      it = queue_.erase(it);
      continue;
    }
    if (solver.has_value() && item.solver != *solver) {
      ++it;
      continue;
    }
    // Take as many of its remaining rows as the batch limits allow (at least one row when the
    // batch is empty: validation guarantees one full-length row fits max_batch_tokens).
    size_t take = 0;
    size_t take_longest = longest;
    while (entry.next_row + take < item.rows.size()) {
      const size_t length = std::max(take_longest, item.rows[entry.next_row + take].ids.size());
      const int new_rows = rows + static_cast<int>(take) + 1;
      const bool fits = new_rows <= options_.max_batch_size &&
                        static_cast<int64_t>(length) * new_rows <= options_.max_batch_tokens;
      if (!fits && !(batch.empty() && take == 0)) break;
      take_longest = length;
      ++take;
    }
    if (take == 0) {
      ++it;
      continue;
    }
    const int64_t tokens_before = entry.remaining_tokens();
    const int64_t evaluations_before = entry.remaining_token_evaluations();
    batch.push_back({*it, entry.next_row, entry.next_row + take});
    entry.next_row += take;
    queued_rows_ -= static_cast<int>(take);
    queued_tokens_ -= tokens_before - entry.remaining_tokens();
    queued_token_evaluations_ -= evaluations_before - entry.remaining_token_evaluations();
    solver = item.solver;
    rows += static_cast<int>(take);
    longest = take_longest;
    if (entry.remaining_rows() > 0) break;  // the batch is full; the rest waits at the front
    it = queue_.erase(it);
  }
  return batch;
}

void ModelScheduler::BatcherLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || batcher_task_; });
    if (batcher_task_) {
      auto task = std::move(batcher_task_);
      batcher_task_ = nullptr;
      lock.unlock();
      task();
      lock.lock();
      continue;
    }
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
    std::vector<std::shared_ptr<Entry>> dropped;
    std::vector<Slice> batch = TakeBatchLocked(dropped);
    const int depth = queued_rows_;
    const double predicted = batch.empty() ? 0 : PredictBatchSeconds(batch);
    if (!batch.empty()) running_until_ = absl::Now() + absl::Seconds(predicted);
    lock.unlock();
    if (options_.observer) options_.observer->OnQueueDepth(depth);
    const absl::Time now = absl::Now();
    for (auto& entry : dropped) {
      const WorkItem& item = *entry->item;
      if (item.cancelled && item.cancelled()) {
        Complete(*entry, absl::CancelledError("call cancelled by the client while queued"));
      } else {
        Complete(*entry, absl::DeadlineExceededError(absl::StrCat(
            "deadline passed after ", Ms(now - entry->enqueued), " in the queue of model '",
            options_.model_name, "'")));
      }
    }
    if (!batch.empty()) RunBatch(std::move(batch), predicted);
    lock.lock();
    running_until_ = absl::InfinitePast();
  }
}

void ModelScheduler::Complete(Entry& entry, absl::StatusOr<WorkResult> result) {
  if (entry.completed) return;
  entry.completed = true;
  entry.item->done(std::move(result));
}

double ModelScheduler::PredictBatchSeconds(const std::vector<Slice>& slices) const {
  int64_t rows = 0, evaluations = 0;
  size_t longest = 0;
  for (const auto& slice : slices) {
    const WorkItem& item = *slice.entry->item;
    rows += static_cast<int64_t>(slice.end - slice.begin);
    for (size_t r = slice.begin; r < slice.end; ++r) longest = std::max(longest, item.rows[r].ids.size());
    evaluations = std::max<int64_t>(evaluations, item.steps * EvaluationsPerStep(item.solver));
  }
  const int64_t tokens = rows * static_cast<int64_t>(longest);
  return cost_model_.Predict(rows, tokens, tokens * evaluations);
}

void ModelScheduler::RunBatch(std::vector<Slice> slices, double predicted) {
  ExecBatch exec;
  exec.solver = slices.front().entry->item->solver;
  std::vector<std::pair<size_t, size_t>> owner;  // exec row -> (slice, row in its entry)
  for (size_t i = 0; i < slices.size(); ++i) {
    const WorkItem& item = *slices[i].entry->item;
    for (size_t r = slices[i].begin; r < slices[i].end; ++r) {
      exec.rows.push_back({&item.rows[r], item.steps});
      owner.emplace_back(i, r);
    }
  }
  const int batch_rows = static_cast<int>(exec.rows.size());

  const absl::Time started = absl::Now();
  for (auto& slice : slices) {
    if (slice.begin == 0) {
      slice.entry->first_start = started;
      slice.entry->first_batch_rows = batch_rows;
    }
  }
  auto on_done = [&](size_t row, absl::Span<const float> output) {
    Entry& entry = *slices[owner[row].first].entry;
    if (entry.completed) return;
    entry.outputs[owner[row].second].assign(output.begin(), output.end());
    if (++entry.finished_rows < entry.item->rows.size()) return;
    WorkResult result;
    result.outputs = std::move(entry.outputs);
    result.queue_time = entry.first_start - entry.enqueued;
    result.compute_time = absl::Now() - entry.first_start;
    result.batch_rows = entry.first_batch_rows;
    Complete(entry, std::move(result));
  };
  auto abandoned = [&](size_t row) {
    Entry& entry = *slices[owner[row].first].entry;
    if (entry.completed) return true;
    const WorkItem& item = *entry.item;
    if (item.cancelled && item.cancelled()) {
      Complete(entry, absl::CancelledError("call cancelled by the client; its rows left the batch"));
      return true;
    }
    if (absl::Now() >= item.deadline) {
      Complete(entry, absl::DeadlineExceededError(absl::StrCat(
          "deadline passed while computing (", Ms(absl::Now() - entry.enqueued),
          " after it was queued); its rows left the batch")));
      return true;
    }
    return false;
  };

  if (options_.gate) options_.gate->Acquire();
  absl::StatusOr<ExecStats> stats = executor_->Run(exec, on_done, abandoned);
  if (options_.gate) options_.gate->Release();

  for (auto& slice : slices) {
    Entry& entry = *slice.entry;
    if (!stats.ok()) {
      Complete(entry, stats.status());
    } else if (!entry.completed && entry.remaining_rows() == 0 && entry.finished_rows < entry.item->rows.size()) {
      Complete(entry, absl::InternalError("executor returned without finishing a row"));
    }
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

absl::Status ModelScheduler::Calibrate(const std::vector<ExecBatch>& warmup,
                                       const std::vector<ExecBatch>& batches) {
  std::promise<absl::Status> finished;
  auto task = [&] {
    auto run = [&](const ExecBatch& batch) {
      return executor_->Run(batch, [](size_t, absl::Span<const float>) {}, [](size_t) { return false; });
    };
    for (const auto& batch : warmup) {
      if (auto stats = run(batch); !stats.ok()) return finished.set_value(stats.status());
    }
    std::vector<CostSample> samples;
    for (const auto& batch : batches) {
      const auto stats = run(batch);
      if (!stats.ok()) return finished.set_value(stats.status());
      samples.push_back({static_cast<int64_t>(batch.rows.size()), stats->padded_tokens,
                         stats->token_evaluations, stats->seconds});
    }
    cost_model_.Calibrate(samples);
    finished.set_value(absl::OkStatus());
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return absl::UnavailableError("scheduler stopped before calibration");
    batcher_task_ = task;
  }
  cv_.notify_all();
  return finished.get_future().get();
}

}  // namespace odeserve::scheduler
