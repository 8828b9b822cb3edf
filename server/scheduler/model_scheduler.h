#pragma once
// One model's queue and dynamic batcher.
//
// Requests are planned first (Plan: which solver and how many steps, by the step planner in
// step_planner.h from a snapshot of this queue), then submitted. The batcher thread waits up to
// max_queue_delay for a batch to fill, drops cancelled and expired work before spending compute
// on it, and runs rows with different step counts in one batch; each request completes the
// moment its own rows are done. With continuous batching, queued rows also join the running
// batch at its next step boundary, so a call that needs one step never waits for another
// call's last step. Batches of all models share a ComputeGate (compute_gate.h).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/compute_gate.h"
#include "server/scheduler/cost_model.h"
#include "server/scheduler/executor.h"
#include "server/scheduler/scheduler_options.h"
#include "server/scheduler/step_planner.h"

namespace odeserve::scheduler {

/// The batcher thread's name: "sched:" and the model's name, cut to what Linux keeps (15 bytes).
std::string BatcherThreadName(std::string_view model_name);

struct BatchObservation {
  int rows = 0;                    // every row the run computed, joined ones included
  int joined_rows = 0;             // rows that joined it at a step boundary
  int64_t padded_tokens = 0;
  double seconds = 0;
  double predicted_seconds = 0;
  double relative_error = 0;
};

/// Receives scheduler events (metrics). Called on the batcher thread or the submitting thread;
/// OnQueueDepth with the scheduler's lock held (in queue order), so it must be quick and must not
/// call back into the scheduler.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  virtual void OnQueueDepth(int queued_rows) {}
  virtual void OnBatch(const BatchObservation& batch) {}
};

/// A running batch takes in joining rows for at most this many times the model's max_steps
/// steps, then finishes its rows: the cost model learns from whole runs, so runs must end.
inline constexpr int kJoinWindowStepsFactor = 4;
/// Rows join only a batch with at least this many steps left to run. One that ends within a
/// step costs a queued call at most that step of waiting, while a join costs every running row
/// the joiner's input stage (measured: joins into 1-2 step batches made calls slower).
inline constexpr int kMinStepsLeftToJoin = 2;

struct WorkResult {
  std::vector<std::vector<float>> outputs;  // one per row, in submission order
  std::vector<std::vector<int32_t>> tokens; // translation: generated tokens per row
  std::vector<float> scores;                // translation: length-normalized log-probability
  absl::Duration queue_time;                // submitted -> its batch started
  absl::Duration compute_time;              // its batch started -> its rows finished
  int batch_rows = 0;                       // rows in the batch it started in
  /// The batcher has more to do: rows of other calls still compute in this batch, or calls wait
  /// in the queue. Answering such a call elsewhere keeps them from waiting on it.
  bool others_wait = false;
};

using WorkDone = std::function<void(absl::StatusOr<WorkResult>)>;

struct WorkItem {
  std::vector<tokenizer::EncodedText> rows;
  int steps = 1;
  Solver solver = Solver::kEuler;
  DecodeSpec decode;               // translation; max_output_tokens 0 = each row's default
  int expected_output_tokens = 0;  // translation: for queue-time predictions
  absl::Time deadline = absl::InfiniteFuture();
  /// Latest time its batch may start and still meet its latency budget (budget minus predicted
  /// compute). The batcher never waits for a batch to fill past the earliest of these.
  absl::Time latest_start = absl::InfiniteFuture();
  std::function<bool()> cancelled;  // optional; polled from the batcher thread
  /// Optional: a greedy translation row's tokens so far, after each position (batcher thread).
  std::function<void(size_t row, absl::Span<const int32_t> tokens)> progress;
  WorkDone done;                    // called exactly once, on the batcher thread
};

class ModelScheduler {
 public:
  ModelScheduler(SchedulerOptions options, std::shared_ptr<BatchExecutor> executor);
  ~ModelScheduler();  // Stop()s

  /// Chooses solver and steps (PlanSteps, over a snapshot of this queue). DeadlineExceeded when
  /// the budget cannot be met and the policy is kRefuse (nothing is queued or computed).
  absl::StatusOr<Plan> MakePlan(const PlanRequest& request) const;

  /// Queues `item`. On OK the scheduler owns it and calls item->done exactly once; on error
  /// (queue full: ResourceExhausted; more rows than max_queue_size: InvalidArgument; stopped:
  /// Unavailable) the caller keeps it and done is not called.
  absl::Status Submit(std::unique_ptr<WorkItem> item);

  /// Runs `warmup` (unmeasured) then `batches` through the executor on the batcher thread
  /// (LibTorch pays one-time per-thread costs of hundreds of milliseconds on a thread's first
  /// calls, which must not land on the first client) and fits the cost model to the latter.
  absl::Status Calibrate(const std::vector<ExecBatch>& warmup, const std::vector<ExecBatch>& batches);

  /// Stops accepting work, finishes what is queued, then joins the batcher.
  void Stop();

  /// Sends queue and batch events to `observer` from now on (nullptr: to nobody). The server's
  /// metrics exist only once the model has loaded, after the scheduler calibrated it.
  void SetObserver(SchedulerObserver* observer);

  int queued_rows() const;
  const CostModel& cost_model() const { return cost_model_; }
  const SchedulerOptions& options() const { return options_; }
  /// Predicted wait before `request`'s rows would start computing if it were submitted now
  /// with `solver`, and whether it would join the running batch.
  QueueForecast ForecastQueue(const PlanRequest& request, Solver solver) const;
  /// Whether rows join running batches (options and executor both allow it).
  bool continuous_batching() const { return joins_enabled_; }

  /// Records a finished call's predicted and measured time inside the server. Budgeted plans
  /// are inflated by a high quantile of measured/predicted over recent calls, so the step
  /// choice keeps its promise even where the cost model is optimistic (noisy neighbours,
  /// batching it did not foresee).
  void ObserveCallLatency(absl::Duration predicted, absl::Duration measured);
  /// The current inflation factor (>= 1).
  double LatencyInflation() const;

 private:
  struct Entry;

  void BatcherLoop();
  struct Slice;
  /// A batch being filled: empty (a new batch) or a running one that rows may join.
  struct BatchRoom {
    int rows = 0;
    int64_t padded_length = 0;
    std::optional<Solver> solver;
    bool joining = false;
  };
  /// Takes queued rows that fit `room`, in queue order; drops cancelled and expired entries
  /// into `dropped`. Joining, it stops at the first entry that cannot join and, when that
  /// entry needs another solver, closes the running batch to joins (it must not wait behind
  /// later arrivals).
  std::vector<Slice> TakeBatchLocked(const BatchRoom& room, std::vector<std::shared_ptr<Entry>>& dropped);
  void PublishQueueDepthLocked();
  /// Whether a queued call is no longer wanted (cancelled, or past its deadline).
  static bool Gone(const WorkItem& item, absl::Time now);
  /// A full queue first sheds calls that are gone (none of their rows started), so clients
  /// that gave up do not hold places live ones are refused for; the batcher completes them
  /// (done runs on its thread, never under the lock). True if it removed any.
  bool PurgeGoneLocked();
  /// Moves the calls PurgeGoneLocked removed into `dropped`, for FailDropped.
  void TakePurgedLocked(std::vector<std::shared_ptr<Entry>>& dropped);
  /// Completes the calls PurgeGoneLocked removed, with `lock` (held) released meanwhile.
  void FailPurged(std::unique_lock<std::mutex>& lock);
  /// Whether a running batch takes joins at the boundary after step `iteration`, with
  /// `steps_left` steps to go (the join window, kMinStepsLeftToJoin, the compute gate).
  bool TakesJoinsAt(int iteration, int steps_left) const;
  /// Whether a call queued now with the running batch's solver would join it at its next step
  /// boundary (room aside): TakesJoinsAt one step ahead, and no other solver queued.
  bool JoinsNextBoundaryLocked() const;
  /// What the step planner needs of the queue and the running batch, as of now (takes the lock).
  QueueSnapshot SnapshotQueue() const;
  /// Completes entries dropped from the queue (cancelled or past their deadline).
  void FailDropped(const std::vector<std::shared_ptr<Entry>>& dropped);
  /// The cost model's prediction for a batch of these slices (the longest row pads all).
  double PredictBatchSeconds(const std::vector<Slice>& slices) const;
  /// A batch's token length once padded (SchedulerOptions::pad_to_multiple).
  int64_t Padded(int64_t longest) const {
    return PaddedLength(longest, options_.pad_to_multiple, options_.max_sequence_length);
  }
  /// Completes the calls of `slices` that are gone (cancelled or past their deadline) and
  /// returns the others.
  std::vector<Slice> WithoutGoneCalls(std::vector<Slice> slices);
  /// Acquires the compute gate, drops calls that went meanwhile, and runs the rest.
  void RunBatch(std::vector<Slice> slices);
  void Complete(Entry& entry, absl::StatusOr<WorkResult> result);

  const SchedulerOptions options_;
  std::atomic<SchedulerObserver*> observer_;
  const std::shared_ptr<BatchExecutor> executor_;
  const bool joins_enabled_;
  CostModel cost_model_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Entry>> queue_;
  std::vector<std::shared_ptr<Entry>> purged_;  // removed by Submit, to be failed by the batcher
  CostShape queued_;  // work of everything queued (batches unset)
  bool stopping_ = false;
  std::function<void()> batcher_task_;  // run once by the batcher thread (calibration)
  absl::Time running_until_ = absl::InfinitePast();  // predicted end of the running batch
  // The calls of the running batch, and whether a call was submitted while one of them was
  // still unanswered (ExecBatch::arrivals_during_previous_batch of the next batch).
  std::vector<std::shared_ptr<Entry>> computing_;
  bool arrived_while_running_ = false;
  // Whether a call that finds nothing queued or running waits max_queue_delay for company:
  // always with SchedulerOptions::queue_delay_when_idle, else only when the last batch had
  // company (more than one call, or calls arriving while it ran). True until a batch has run.
  bool waits_for_company_ = true;
  // The running batch, as of its last step boundary (continuous batching).
  struct RunningBatch {
    bool joinable = false;     // still takes rows at its step boundaries
    Solver solver = Solver::kEuler;
    int rows = 0;
    int64_t padded_length = 0;
    int steps_left = 0;        // until its last row finishes
    int iteration = 0;         // steps run so far
    absl::Duration step;       // its last step's wall time: the wait for the next boundary
  } running_;
  std::deque<double> latency_ratios_;                 // measured / predicted, recent calls
  double latency_inflation_ = 1.0;
  std::thread batcher_;
};

}  // namespace odeserve::scheduler
