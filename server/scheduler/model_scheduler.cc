// One model's queue and batcher (see model_scheduler.h).
#include "server/scheduler/model_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/thread_name.h"

namespace odeserve::scheduler {
namespace {

std::string Ms(absl::Duration d) { return absl::StrFormat("%.2fms", absl::ToDoubleMilliseconds(d)); }

CostSample SampleOf(int64_t rows, const ExecStats& stats) {
  CostSample sample;
  sample.shape.rows = rows;
  sample.shape.padded_tokens = stats.padded_tokens;
  sample.shape.token_evaluations = stats.token_evaluations;
  sample.shape.decoder_calls = stats.decoder_calls;
  sample.shape.decoder_row_evaluations = stats.decoder_row_evaluations;
  sample.seconds = stats.seconds;
  return sample;
}

// a += sign * b, over the work counters (not `batches`).
void Accumulate(CostShape& a, const CostShape& b, int sign) {
  a.rows += sign * b.rows;
  a.padded_tokens += sign * b.padded_tokens;
  a.token_evaluations += sign * b.token_evaluations;
  a.decoder_calls += sign * b.decoder_calls;
  a.decoder_row_evaluations += sign * b.decoder_row_evaluations;
}

}  // namespace

std::string BatcherThreadName(std::string_view model_name) {
  return ThreadNameFor(std::string("sched:").append(model_name));
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
  // done() has been called: set by the batcher thread, read under the lock by planners too.
  std::atomic<bool> completed{false};
  std::vector<std::vector<float>> outputs;
  absl::Time first_start = absl::InfinitePast();
  int first_batch_rows = 0;

  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> scores;

  size_t remaining_rows() const { return item->rows.size() - next_row; }
  /// The work of its rows still queued, as the cost model counts it.
  CostShape remaining_work() const {
    return WorkShape(static_cast<int64_t>(remaining_rows()), static_cast<int64_t>(longest), item->steps,
                     item->solver, item->decode.decoder_steps, item->decode.beam_size,
                     item->expected_output_tokens);
  }
};

// Rows [begin, end) of one entry, as they run in one batch.
struct ModelScheduler::Slice {
  std::shared_ptr<Entry> entry;
  size_t begin = 0;
  size_t end = 0;
};

ModelScheduler::ModelScheduler(SchedulerOptions options, std::shared_ptr<BatchExecutor> executor)
    : options_(std::move(options)),
      observer_(options_.observer),
      executor_(std::move(executor)),
      joins_enabled_(options_.continuous_batching && executor_->AcceptsJoins()) {
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

void ModelScheduler::SetObserver(SchedulerObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);  // queue-depth events are sent under the lock
  observer_.store(observer);
  if (observer) observer->OnQueueDepth(static_cast<int>(queued_.rows));
}

int ModelScheduler::queued_rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(queued_.rows);
}

bool ModelScheduler::TakesJoinsAt(int iteration, int steps_left) const {
  return steps_left >= kMinStepsLeftToJoin && iteration < kJoinWindowStepsFactor * options_.max_steps &&
         !(options_.gate && options_.gate->HasWaiters());
}

bool ModelScheduler::JoinsNextBoundaryLocked() const {
  // The join callback's rules at that boundary, one step from now.
  if (!running_.joinable || !TakesJoinsAt(running_.iteration + 1, running_.steps_left - 1)) return false;
  // A queued call that needs another solver closes the batch before a later call could join.
  for (const auto& entry : queue_) {
    if (!entry->completed && entry->item->solver != running_.solver) return false;
  }
  return true;
}

QueueSnapshot ModelScheduler::SnapshotQueue() const {
  std::lock_guard<std::mutex> lock(mutex_);
  QueueSnapshot snapshot;
  if (JoinsNextBoundaryLocked()) {
    snapshot.joinable = QueueSnapshot::JoinableBatch{running_.solver, running_.rows, running_.padded_length,
                                                     running_.step};
  }
  snapshot.running_left = std::max(absl::ZeroDuration(), running_until_ - absl::Now());
  snapshot.queued = queued_;
  if (queued_.decoder_calls > 0) {
    for (const auto& entry : queue_) {
      snapshot.longest_queued_decoder_calls =
          std::max(snapshot.longest_queued_decoder_calls, entry->remaining_work().decoder_calls);
    }
  }
  snapshot.starts_at_once = !waits_for_company_ && queue_.empty() && running_until_ == absl::InfinitePast();
  snapshot.latency_inflation = latency_inflation_;
  return snapshot;
}

QueueForecast ModelScheduler::ForecastQueue(const PlanRequest& request, Solver solver) const {
  return scheduler::ForecastQueue(request, solver, SnapshotQueue(), cost_model_, options_);
}

absl::StatusOr<Plan> ModelScheduler::MakePlan(const PlanRequest& request) const {
  // Planned outside the lock: the planner calls the cost model once per candidate.
  return PlanSteps(request, SnapshotQueue(), cost_model_, options_);
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

void ModelScheduler::PublishQueueDepthLocked() {
  // Under the lock, so the gauge sees depths in the order the queue took them: published after
  // unlocking, a submitter that lost its core could overwrite the batcher's later, smaller depth
  // (the gauge then counted rows that had already run).
  if (SchedulerObserver* observer = observer_.load()) observer->OnQueueDepth(static_cast<int>(queued_.rows));
}

absl::Status ModelScheduler::Submit(std::unique_ptr<WorkItem> item) {
  const int rows = static_cast<int>(item->rows.size());
  bool purged = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return absl::UnavailableError(absl::StrCat("model '", options_.model_name, "' is shutting down"));
    if (rows > options_.max_queue_size) {  // never fits, even in an empty queue: not an overload
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs has ", rows, " strings; model '", options_.model_name, "' queues at most ",
          options_.max_queue_size, " inputs (batching.max_queue_size)"));
    }
    if (queued_.rows + rows > options_.max_queue_size && PurgeGoneLocked()) {
      purged = true;
      PublishQueueDepthLocked();
    }
    if (queued_.rows + rows > options_.max_queue_size) {
      if (purged) cv_.notify_one();
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", options_.model_name, "' is overloaded: ", queued_.rows,
          " inputs queued, max_queue_size ", options_.max_queue_size, "; retry with backoff"));
    }
    auto entry = std::make_shared<Entry>();
    entry->enqueued = absl::Now();
    for (const auto& row : item->rows) entry->longest = std::max(entry->longest, row.ids.size());
    entry->longest = static_cast<size_t>(Padded(static_cast<int64_t>(entry->longest)));
    entry->outputs.resize(item->rows.size());
    if (item->decode.decoder_steps > 0) {
      entry->tokens.resize(item->rows.size());
      entry->scores.resize(item->rows.size());
    }
    entry->item = std::move(item);
    // Counted only while the running batch still owes a call its answer: a call that follows
    // the last answer (closed loop at concurrency 1) is no sign of load.
    for (size_t i = 0; i < computing_.size() && !arrived_while_running_; ++i) {
      arrived_while_running_ = !computing_[i]->completed;
    }
    Accumulate(queued_, entry->remaining_work(), +1);
    queue_.push_back(std::move(entry));
    PublishQueueDepthLocked();
  }
  cv_.notify_one();
  return absl::OkStatus();
}

bool ModelScheduler::Gone(const WorkItem& item, absl::Time now) {
  return (item.cancelled && item.cancelled()) || now >= item.deadline;
}

bool ModelScheduler::PurgeGoneLocked() {
  const absl::Time now = absl::Now();
  const size_t before = purged_.size();
  for (auto it = queue_.begin(); it != queue_.end();) {
    Entry& entry = **it;
    // Only calls none of whose rows has started: a running batch may complete the others at
    // any moment, and the batcher drops them at its next step boundary anyway.
    if (entry.next_row == 0 && Gone(*entry.item, now)) {
      Accumulate(queued_, entry.remaining_work(), -1);
      purged_.push_back(*it);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return purged_.size() > before;
}

void ModelScheduler::TakePurgedLocked(std::vector<std::shared_ptr<Entry>>& dropped) {
  dropped.insert(dropped.end(), purged_.begin(), purged_.end());
  purged_.clear();
}

void ModelScheduler::FailPurged(std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<Entry>> dropped;
  TakePurgedLocked(dropped);
  lock.unlock();
  FailDropped(dropped);
  lock.lock();
}

std::vector<ModelScheduler::Slice> ModelScheduler::TakeBatchLocked(
    const BatchRoom& room, std::vector<std::shared_ptr<Entry>>& dropped) {
  std::vector<Slice> batch;
  const absl::Time now = absl::Now();
  TakePurgedLocked(dropped);
  int rows = room.rows;
  size_t longest = static_cast<size_t>(room.padded_length);
  std::optional<Solver> solver = room.solver;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Entry& entry = **it;
    const WorkItem& item = *entry.item;
    if (entry.completed || Gone(item, now)) {
      Accumulate(queued_, entry.remaining_work(), -1);
      if (!entry.completed) dropped.push_back(*it);
      it = queue_.erase(it);
      continue;
    }
    if (solver.has_value() && item.solver != *solver) {
      if (room.joining) {
        running_.joinable = false;
        break;
      }
      ++it;
      continue;
    }
    // Take as many of its remaining rows as the batch limits allow (at least one row when the
    // batch is empty: validation guarantees one full-length row fits max_batch_tokens).
    size_t take = 0;
    size_t take_longest = longest;
    while (entry.next_row + take < item.rows.size()) {
      const size_t length = std::max(
          take_longest, static_cast<size_t>(Padded(static_cast<int64_t>(item.rows[entry.next_row + take].ids.size()))));
      const int new_rows = rows + static_cast<int>(take) + 1;
      const bool fits = new_rows <= options_.max_batch_size &&
                        static_cast<int64_t>(length) * new_rows <= options_.max_batch_tokens;
      if (!fits && !(rows == 0 && take == 0)) break;
      take_longest = length;
      ++take;
    }
    if (take == 0) {
      if (room.joining) break;  // it joins at a later boundary, once rows have left
      ++it;
      continue;
    }
    Accumulate(queued_, entry.remaining_work(), -1);
    batch.push_back({*it, entry.next_row, entry.next_row + take});
    entry.next_row += take;
    Accumulate(queued_, entry.remaining_work(), +1);
    solver = item.solver;
    rows += static_cast<int>(take);
    longest = take_longest;
    if (entry.remaining_rows() > 0) break;  // the batch is full; the rest waits at the front
    it = queue_.erase(it);
  }
  return batch;
}

void ModelScheduler::BatcherLoop() {
  NameCurrentThread(BatcherThreadName(options_.model_name));
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || batcher_task_ || !purged_.empty(); });
    if (!purged_.empty()) {
      FailPurged(lock);
      continue;
    }
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
    while (!stopping_ && queued_.rows < options_.max_batch_size &&
           queued_.padded_tokens < options_.max_batch_tokens) {
      if (!purged_.empty()) {  // calls a full queue shed meanwhile: answer them now
        FailPurged(lock);
        continue;
      }
      if (queue_.empty()) break;
      if (!waits_for_company_ && queue_.size() == 1) break;
      absl::Time fill_deadline = queue_.front()->enqueued + options_.max_queue_delay;
      for (const auto& entry : queue_) fill_deadline = std::min(fill_deadline, entry->item->latest_start);
      const absl::Time now = absl::Now();
      if (now >= fill_deadline) break;
      cv_.wait_for(lock, absl::ToChronoNanoseconds(fill_deadline - now));
    }
    std::vector<std::shared_ptr<Entry>> dropped;
    std::vector<Slice> batch = TakeBatchLocked(BatchRoom{}, dropped);
    PublishQueueDepthLocked();
    if (!batch.empty()) {
      const double predicted = PredictBatchSeconds(batch);
      running_until_ = absl::Now() + absl::Seconds(predicted);
      int rows = 0, steps = 1;
      int64_t longest = 0;
      for (const auto& slice : batch) {
        computing_.push_back(slice.entry);
        rows += static_cast<int>(slice.end - slice.begin);
        steps = std::max(steps, slice.entry->item->steps);
        for (size_t r = slice.begin; r < slice.end; ++r) {
          longest = std::max<int64_t>(longest, slice.entry->item->rows[r].ids.size());
        }
      }
      // Until its first step is measured, a step is predicted as an even share of the batch.
      // Joinable once the batch holds the compute gate (RunBatch): until then, a call waits for
      // the gate like the batch does.
      running_ = {false, batch.front().entry->item->solver, rows, Padded(longest), steps, 0,
                  absl::Seconds(predicted / steps)};
    }
    lock.unlock();
    FailDropped(dropped);
    const size_t batch_calls = batch.size();
    if (!batch.empty()) RunBatch(std::move(batch));
    lock.lock();
    // Joined calls arrived while it ran, so they count as company too.
    if (batch_calls > 0) {
      waits_for_company_ = options_.queue_delay_when_idle || batch_calls > 1 || arrived_while_running_;
    }
    running_until_ = absl::InfinitePast();
    running_.joinable = false;
    computing_.clear();
  }
}

void ModelScheduler::FailDropped(const std::vector<std::shared_ptr<Entry>>& dropped) {
  const absl::Time now = absl::Now();
  for (const auto& entry : dropped) {
    const WorkItem& item = *entry->item;
    // The deadline first: gRPC marks a call whose deadline passed as cancelled too, and such a
    // call must count as expired (DEADLINE_EXCEEDED, a missed budget), not as a client's cancel.
    if (now < item.deadline && item.cancelled && item.cancelled()) {
      Complete(*entry, absl::CancelledError("call cancelled by the client while queued"));
    } else {
      Complete(*entry, absl::DeadlineExceededError(absl::StrCat(
          "deadline passed after ", Ms(now - entry->enqueued), " in the queue of model '",
          options_.model_name, "'")));
    }
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
  // The decoder runs one group per (decoder steps, beam size); a group's calls follow its
  // longest expected output.
  std::map<std::pair<int, int>, CostShape> decoder_groups;
  for (const auto& slice : slices) {
    const WorkItem& item = *slice.entry->item;
    const int64_t slice_rows = static_cast<int64_t>(slice.end - slice.begin);
    rows += slice_rows;
    for (size_t r = slice.begin; r < slice.end; ++r) longest = std::max(longest, item.rows[r].ids.size());
    evaluations = std::max<int64_t>(evaluations, item.steps * EvaluationsPerStep(item.solver));
    if (item.decode.decoder_steps > 0) {
      const CostShape w = WorkShape(slice_rows, 0, 0, item.solver, item.decode.decoder_steps,
                                    item.decode.beam_size, item.expected_output_tokens);
      CostShape& group = decoder_groups[{item.decode.decoder_steps, item.decode.beam_size}];
      group.decoder_calls = std::max(group.decoder_calls, w.decoder_calls);
      group.decoder_row_evaluations += w.decoder_row_evaluations;
    }
  }
  CostShape shape;
  shape.rows = rows;
  shape.padded_tokens = rows * Padded(static_cast<int64_t>(longest));
  shape.token_evaluations = shape.padded_tokens * evaluations;
  for (const auto& [key, group] : decoder_groups) {
    shape.decoder_calls += group.decoder_calls;
    shape.decoder_row_evaluations += group.decoder_row_evaluations;
  }
  return cost_model_.Predict(shape);
}

std::vector<ModelScheduler::Slice> ModelScheduler::WithoutGoneCalls(std::vector<Slice> slices) {
  const absl::Time now = absl::Now();
  std::vector<std::shared_ptr<Entry>> gone;
  std::vector<Slice> wanted;
  for (auto& slice : slices) {
    if (Gone(*slice.entry->item, now)) {
      gone.push_back(slice.entry);
    } else {
      wanted.push_back(std::move(slice));
    }
  }
  // Rows of a gone call still queued (a split call) are removed by the next TakeBatchLocked,
  // which skips completed entries.
  FailDropped(gone);
  return wanted;
}

void ModelScheduler::RunBatch(std::vector<Slice> slices) {
  if (options_.gate) options_.gate->Acquire();
  // Other models' batches may run first (several may be queued for the gate): calls cancelled
  // or expired meanwhile leave before their rows cost an input stage and a step.
  slices = WithoutGoneCalls(std::move(slices));
  if (slices.empty()) {
    if (options_.gate) options_.gate->Release();
    return;
  }
  ExecBatch exec;
  exec.solver = slices.front().entry->item->solver;
  std::vector<std::pair<size_t, size_t>> owner;  // exec row -> (slice, row in its entry)
  int max_end_iteration = 0;                      // the step at which its last row finishes
  auto add_rows = [&](Slice& slice, int iteration, int batch_rows, absl::Time now,
                      std::vector<ExecRow>& rows) {
    const WorkItem& item = *slice.entry->item;
    if (slice.begin == 0) {
      slice.entry->first_start = now;
      slice.entry->first_batch_rows = batch_rows;
    }
    for (size_t r = slice.begin; r < slice.end; ++r) {
      rows.push_back({&item.rows[r], item.steps, item.decode});
      owner.emplace_back(slices.size(), r);
    }
    max_end_iteration = std::max(max_end_iteration, iteration + item.steps);
    slices.push_back(std::move(slice));
  };
  {
    std::vector<Slice> first = std::move(slices);
    slices.clear();
    int batch_rows = 0;
    for (const auto& slice : first) batch_rows += static_cast<int>(slice.end - slice.begin);
    // Taken once the gate is held: waiting for another model's batch is queueing, not compute.
    const absl::Time started = absl::Now();
    for (auto& slice : first) add_rows(slice, 0, batch_rows, started, exec.rows);
  }

  // Continuous batching: at each step boundary, queued rows that fit join the batch.
  absl::Time last_boundary;  // set once the gate lets the batch run
  auto join = [&](const JoinRoom& room) -> std::vector<ExecRow> {
    const absl::Time now = absl::Now();
    std::vector<std::shared_ptr<Entry>> dropped;
    std::vector<Slice> joining;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_.rows = room.rows;
      running_.padded_length = room.padded_length;
      running_.iteration = room.iteration;
      running_.step = now - last_boundary;
      running_.steps_left = max_end_iteration - room.iteration;
      if (!TakesJoinsAt(room.iteration, running_.steps_left)) running_.joinable = false;
      if (running_.joinable && !queue_.empty()) {
        joining = TakeBatchLocked(BatchRoom{room.rows, room.padded_length, exec.solver, true}, dropped);
      } else {
        TakePurgedLocked(dropped);
      }
      int joined_rows = 0;
      for (const auto& slice : joining) {
        joined_rows += static_cast<int>(slice.end - slice.begin);
        max_end_iteration = std::max(max_end_iteration, room.iteration + slice.entry->item->steps);
        for (size_t r = slice.begin; r < slice.end; ++r) {
          running_.padded_length = std::max(
              running_.padded_length, Padded(static_cast<int64_t>(slice.entry->item->rows[r].ids.size())));
        }
      }
      running_.rows += joined_rows;
      running_.steps_left = max_end_iteration - room.iteration;
      running_until_ = now + running_.step * std::max(0, max_end_iteration - room.iteration);
      if (!(joining.empty() && dropped.empty())) PublishQueueDepthLocked();
    }
    last_boundary = now;
    FailDropped(dropped);
    std::vector<ExecRow> rows;
    if (joining.empty()) return rows;
    int batch_rows = room.rows;
    for (const auto& slice : joining) batch_rows += static_cast<int>(slice.end - slice.begin);
    for (auto& slice : joining) add_rows(slice, room.iteration, batch_rows, now, rows);
    return rows;
  };

  size_t rows_finished = 0;  // of every row in the batch, joined ones included
  auto on_done = [&](size_t row, const RowOutput& output) {
    if (!output.partial) ++rows_finished;
    Entry& entry = *slices[owner[row].first].entry;
    if (entry.completed) return;
    const size_t index = owner[row].second;
    if (output.partial) {
      if (entry.item->progress) entry.item->progress(index, output.tokens);
      return;
    }
    entry.outputs[index].assign(output.values.begin(), output.values.end());
    if (!entry.tokens.empty()) {
      entry.tokens[index].assign(output.tokens.begin(), output.tokens.end());
      entry.scores[index] = output.score;
    }
    if (++entry.finished_rows < entry.item->rows.size()) return;
    // A client that cancelled while the last step computed never receives the result: it counts
    // as cancelled, not served. (A passed deadline marks a call cancelled too; that one is late,
    // and its caller decides how to count it.)
    const WorkItem& item = *entry.item;
    if (absl::Now() < item.deadline && item.cancelled && item.cancelled()) {
      Complete(entry, absl::CancelledError("call cancelled by the client while computing; its result was dropped"));
      return;
    }
    WorkResult result;
    result.outputs = std::move(entry.outputs);
    result.tokens = std::move(entry.tokens);
    result.scores = std::move(entry.scores);
    result.queue_time = entry.first_start - entry.enqueued;
    result.compute_time = absl::Now() - entry.first_start;
    result.batch_rows = entry.first_batch_rows;
    result.others_wait = rows_finished < owner.size() || queued_rows() > 0;
    Complete(entry, std::move(result));
  };
  auto abandoned = [&](size_t row) {
    Entry& entry = *slices[owner[row].first].entry;
    if (entry.completed) return true;
    const WorkItem& item = *entry.item;
    const absl::Time now = absl::Now();
    if (now >= item.deadline) {  // before the cancel check, as in FailDropped
      Complete(entry, absl::DeadlineExceededError(absl::StrCat(
          "deadline passed while computing (", Ms(now - entry.enqueued),
          " after it was queued); its rows left the batch")));
      return true;
    }
    if (item.cancelled && item.cancelled()) {
      Complete(entry, absl::CancelledError("call cancelled by the client; its rows left the batch"));
      return true;
    }
    return false;
  };

  // Another model's batch waiting for the gate gets it at the next step boundary: this batch
  // queues behind it (arrival order) and goes on when the slot is free again.
  if (options_.gate) {
    exec.yield = [gate = options_.gate.get()] {
      if (!gate->HasWaiters()) return absl::ZeroDuration();
      const absl::Time lent = absl::Now();
      gate->Release();
      gate->Acquire();
      return absl::Now() - lent;
    };
  }
  last_boundary = absl::Now();
  const bool gate_waiters = options_.gate && options_.gate->HasWaiters();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exec.others_waiting = gate_waiters || !queue_.empty();
    exec.arrivals_during_previous_batch = arrived_while_running_;
    arrived_while_running_ = false;
    if (joins_enabled_) running_.joinable = true;
  }
  absl::StatusOr<ExecStats> stats = executor_->Run(exec, on_done, abandoned, joins_enabled_ ? join : RowJoinFn());
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
  const CostSample sample = SampleOf(static_cast<int64_t>(owner.size()), *stats);  // joined rows too
  BatchObservation observation;
  observation.rows = static_cast<int>(owner.size());
  observation.joined_rows = static_cast<int>(owner.size() - exec.rows.size());
  observation.padded_tokens = stats->padded_tokens;
  observation.seconds = stats->seconds;
  observation.predicted_seconds = cost_model_.Predict(sample.shape);
  observation.relative_error = cost_model_.Observe(sample);
  if (SchedulerObserver* observer = observer_.load()) observer->OnBatch(observation);
}

absl::Status ModelScheduler::Calibrate(const std::vector<ExecBatch>& warmup,
                                       const std::vector<ExecBatch>& batches) {
  std::promise<absl::Status> finished;
  auto task = [&] {
    auto run = [&](const ExecBatch& batch) {
      return executor_->Run(batch, [](size_t, const RowOutput&) {}, [](size_t) { return false; }, nullptr);
    };
    for (const auto& batch : warmup) {
      if (auto stats = run(batch); !stats.ok()) return finished.set_value(stats.status());
    }
    std::vector<CostSample> samples;
    for (const auto& batch : batches) {
      const auto stats = run(batch);
      if (!stats.ok()) return finished.set_value(stats.status());
      samples.push_back(SampleOf(static_cast<int64_t>(batch.rows.size()), *stats));
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
