// scheduler/: batching, admission, cancellation, deadlines and draining with a fake executor
// (no LibTorch, no timing noise in what is asserted), the step planner, and the cost model.

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/common/thread_name.h"
#include "server/scheduler/cost_model.h"
#include "server/scheduler/model_scheduler.h"
#include "tests/server/scheduler_test_support.h"

namespace odeserve::scheduler {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tokenized row of `length` tokens whose first id is a marker identifying it.
tokenizer::EncodedText Row(int marker, int length) {
  tokenizer::EncodedText row;
  row.ids.assign(static_cast<size_t>(length), 1);
  row.ids[0] = marker;
  return row;
}

// Records every batch; runs rows through `steps` iterations like the real executor (finished
// rows report and leave, abandoned rows leave silently); can be held inside Run by the test.
class FakeExecutor : public BatchExecutor {
 public:
  struct RecordedRow {
    int marker;
    int length;
    int steps;
  };
  struct JoinedRow {
    int marker;
    int length;
    int steps;
    int at_iteration;  // the step boundary it joined at
  };
  struct RecordedBatch {
    Solver solver;
    std::vector<RecordedRow> rows;
    std::vector<int> iterations;  // per row, joined rows after the batch's: iterations it ran
    std::vector<JoinedRow> joined;
    bool others_waiting = false;
    bool arrivals_during_previous_batch = false;
  };

  absl::StatusOr<ExecStats> Run(const ExecBatch& batch, const RowDoneFn& on_done,
                                const RowAbandonedFn& abandoned, const RowJoinFn& join) override {
    const auto started = std::chrono::steady_clock::now();
    RecordedBatch record{batch.solver, {}, {}, {}, batch.others_waiting, batch.arrivals_during_previous_batch};
    for (const auto& row : batch.rows) {
      record.rows.push_back({static_cast<int>(row.input->ids[0]), static_cast<int>(row.input->ids.size()), row.steps});
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      batches_.push_back(record);
      ++runs_started_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !hold_; });
    }
    const size_t record_index = batches_.size() - 1;  // one Run at a time
    std::vector<ExecRow> rows = batch.rows;            // joined rows are appended
    std::vector<int> participation(rows.size(), 0);
    if (concurrent_ != nullptr) {
      const int now = ++*concurrent_;
      int seen = max_concurrent_->load();
      while (now > seen && !max_concurrent_->compare_exchange_weak(seen, now)) {
      }
    }
    ExecStats stats;
    const int evaluations = EvaluationsPerStep(batch.solver);
    std::vector<size_t> active;
    int64_t longest = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      active.push_back(i);
      longest = std::max<int64_t>(longest, rows[i].input->ids.size());
    }
    stats.padded_tokens = longest * static_cast<int64_t>(rows.size());
    int iteration = 0;
    while (!active.empty()) {
      if (per_iteration_ > std::chrono::microseconds(0)) std::this_thread::sleep_for(per_iteration_);
      int64_t active_longest = 0;
      for (size_t i : active) active_longest = std::max<int64_t>(active_longest, rows[i].input->ids.size());
      stats.token_evaluations += active_longest * static_cast<int64_t>(active.size()) * evaluations;
      ++iteration;
      for (size_t i : active) ++participation[i];
      {
        std::lock_guard<std::mutex> lock(mutex_);
        batches_[record_index].iterations = participation;  // before any row reports
      }
      if (on_iteration_) on_iteration_(iteration);
      std::vector<size_t> kept;
      for (size_t i : active) {
        const ExecRow& row = rows[i];
        if (row.steps <= participation[i]) {  // its own steps: joined rows start later
          const float output[3] = {static_cast<float>(row.input->ids[0]), static_cast<float>(row.steps),
                                   static_cast<float>(row.input->ids.size())};
          RowOutput row_output;
          row_output.values = absl::MakeConstSpan(output, 3);
          on_done(i, row_output);
        } else if (!abandoned(i)) {
          kept.push_back(i);
        }
      }
      active.swap(kept);
      // Like the real executors: between two steps the scheduler may lend the gate out.
      if (!active.empty() && batch.yield) {
        if (concurrent_ != nullptr) --*concurrent_;
        stats.paused_seconds += absl::ToDoubleSeconds(batch.yield());
        paused_seconds_ = stats.paused_seconds;  // before a later row reports done
        if (concurrent_ != nullptr) ++*concurrent_;
      }
      if (!accept_joins_ || !join || active.empty()) continue;
      int64_t length = 0;
      for (size_t i : active) length = std::max<int64_t>(length, rows[i].input->ids.size());
      for (const ExecRow& row : join({static_cast<int>(active.size()), length, iteration})) {
        active.push_back(rows.size());
        rows.push_back(row);
        participation.push_back(0);
        stats.padded_tokens += static_cast<int64_t>(row.input->ids.size());
        std::lock_guard<std::mutex> lock(mutex_);
        batches_[record_index].joined.push_back(
            {static_cast<int>(row.input->ids[0]), static_cast<int>(row.input->ids.size()), row.steps, iteration});
      }
    }
    stats.iterations = iteration;
    if (concurrent_ != nullptr) --*concurrent_;
    stats.seconds = synthetic_seconds_
                        ? synthetic_seconds_(static_cast<int64_t>(rows.size()), stats.padded_tokens,
                                             stats.token_evaluations)
                        : std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return stats;
  }
  bool AcceptsJoins() const override { return accept_joins_; }
  // Lent to other models in the latest run that yielded.
  double paused_seconds() const { return paused_seconds_.load(); }

  void Hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    hold_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hold_ = false;
    }
    cv_.notify_all();
  }
  // Waits until `n` runs have started (the last one may be held).
  bool WaitRunsStarted(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return runs_started_ >= n; });
  }
  std::vector<RecordedBatch> batches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }

  std::chrono::microseconds per_iteration_{0};
  bool accept_joins_ = false;  // continuous batching: calls `join` at each step boundary
  std::function<void(int)> on_iteration_;
  std::function<double(int64_t, int64_t, int64_t)> synthetic_seconds_;
  std::atomic<int>* concurrent_ = nullptr;      // runs in progress across executors
  std::atomic<int>* max_concurrent_ = nullptr;  // the most seen at once

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool hold_ = false;
  int runs_started_ = 0;
  std::vector<RecordedBatch> batches_;
  std::atomic<double> paused_seconds_{0};
};

// Collects one item's completion.
struct Completion {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<absl::StatusOr<WorkResult>> result;
  int calls = 0;

  WorkDone Callback() {
    return [this](absl::StatusOr<WorkResult> r) {
      std::lock_guard<std::mutex> lock(mutex);
      ++calls;
      result = std::move(r);
      cv.notify_all();
    };
  }
  const absl::StatusOr<WorkResult>& Wait() {
    std::unique_lock<std::mutex> lock(mutex);
    const bool done = cv.wait_for(lock, std::chrono::seconds(10), [&] { return result.has_value(); });
    EXPECT_TRUE(done) << "item never completed";
    if (!done) result = absl::InternalError("test: timed out waiting for completion");
    return *result;
  }
  bool called() {
    std::lock_guard<std::mutex> lock(mutex);
    return calls > 0;
  }
};

std::unique_ptr<WorkItem> Item(std::vector<tokenizer::EncodedText> rows, int steps, Completion& completion,
                               Solver solver = Solver::kEuler) {
  auto item = std::make_unique<WorkItem>();
  item->rows = std::move(rows);
  item->steps = steps;
  item->solver = solver;
  item->done = completion.Callback();
  return item;
}

// Options() with a queue of `max_queue_size` rows that waits up to `max_queue_delay` for company.
SchedulerOptions QueueOptions(int max_queue_size, absl::Duration max_queue_delay) {
  SchedulerOptions options = Options();
  options.max_queue_size = max_queue_size;
  options.max_queue_delay = max_queue_delay;
  return options;
}

// Starts a "plug" item and waits until the executor holds it, so that what the test submits
// next queues up behind it deterministically.
void Plug(ModelScheduler& scheduler, FakeExecutor& executor, Completion& completion, int runs_before = 0) {
  executor.Hold();
  ASSERT_TRUE(scheduler.Submit(Item({Row(900, 4)}, 1, completion)).ok());
  ASSERT_TRUE(executor.WaitRunsStarted(runs_before + 1));
}

// Queues one-step, one-row calls of these lengths (markers 1, 2, ...) behind a plug, lets them
// run and returns every batch the executor saw (the plug's first).
std::vector<FakeExecutor::RecordedBatch> BatchesBehindPlug(const SchedulerOptions& options,
                                                           const std::vector<int>& lengths) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(options, executor);
  Completion plug;
  Plug(scheduler, *executor, plug);
  std::vector<Completion> done(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_TRUE(scheduler.Submit(Item({Row(static_cast<int>(i) + 1, lengths[i])}, 1, done[i])).ok());
  }
  executor->Release();
  for (auto& d : done) EXPECT_TRUE(d.Wait().ok());
  return executor->batches();
}

CostShape Shape(int64_t rows, int64_t tokens, int64_t token_evaluations, int64_t batches = 1) {
  CostShape shape;
  shape.batches = batches;
  shape.rows = rows;
  shape.padded_tokens = tokens;
  shape.token_evaluations = token_evaluations;
  return shape;
}

CostSample Sample(int64_t rows, int64_t tokens, int64_t token_evaluations, double seconds) {
  return {Shape(rows, tokens, token_evaluations), seconds};
}

// The names of this process's threads, as top -H and perf show them.
std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.push_back(name);
  }
  return names;
}

TEST(ThreadName, LongNamesAreCutToWhatLinuxKeepsAndNeverInsideACharacter) {
  EXPECT_EQ(ThreadNameFor("metrics-http"), "metrics-http");
  EXPECT_EQ(ThreadNameFor("sched:classify-sections"), "sched:classify-");
  EXPECT_EQ(ThreadNameFor("sched:classify-sections").size(), kMaxThreadNameBytes);
  // "sched:modèle-" is 14 bytes; the next character, "é", would take bytes 15 and 16.
  EXPECT_EQ(ThreadNameFor("sched:mod\xC3\xA8le-\xC3\xA9t\xC3\xA9"), "sched:mod\xC3\xA8le-");
}

TEST(ModelScheduler, TheBatcherThreadIsNamedAfterItsModel) {
  SchedulerOptions options = Options();
  options.model_name = "embed-sharebert";
  ModelScheduler scheduler(options, std::make_shared<FakeExecutor>());
  Completion done;
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 4)}, 1, done)).ok());
  ASSERT_TRUE(done.Wait().ok());  // the batcher has run, so it has named itself
  EXPECT_EQ(BatcherThreadName("embed-sharebert"), "sched:embed-sha");
  EXPECT_THAT(ThreadNames(), ::testing::Contains("sched:embed-sha"));
}

TEST(ModelScheduler, BatchesSayWhetherCallsWereWaitingWhenTheyStarted) {
  // The executor keeps spare cores for the RPC threads while calls wait (BlasThreadsScope,
  // LeaveCoresForRpc).
  SchedulerOptions options = Options();
  options.max_batch_size = 1;
  const auto batches = BatchesBehindPlug(options, {4, 4});
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_FALSE(batches[0].others_waiting) << "the plug started alone";
  EXPECT_EQ(batches[1].rows[0].marker, 1);
  EXPECT_TRUE(batches[1].others_waiting) << "call 2 was queued behind call 1";
  EXPECT_FALSE(batches[2].others_waiting) << "nothing was left behind call 2";
}

TEST(ModelScheduler, BatchesSayWhetherCallsArrivedWhileThePreviousOneComputed) {
  // Closed-loop load: the batcher takes every queued call, so the queue is empty at each start
  // while replies and the next calls keep the RPC threads running.
  const auto batches = BatchesBehindPlug(Options(), {4, 4});
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].rows.size(), 2u) << "both calls fit one batch, so none is left queued";
  EXPECT_FALSE(batches[1].others_waiting) << "nothing was left queued";
  EXPECT_TRUE(batches[1].arrivals_during_previous_batch) << "both arrived while the plug computed";
  EXPECT_FALSE(batches[0].arrivals_during_previous_batch);

  // Calls that each arrive at an idle model are not busy.
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(Options(), executor);
  for (int marker = 1; marker <= 2; ++marker) {
    Completion done;
    ASSERT_TRUE(scheduler.Submit(Item({Row(marker, 4)}, 1, done)).ok());
    ASSERT_TRUE(done.Wait().ok());
  }
  const auto idle = executor->batches();
  ASSERT_EQ(idle.size(), 2u);
  for (const auto& batch : idle) {
    EXPECT_FALSE(batch.others_waiting);
    EXPECT_FALSE(batch.arrivals_during_previous_batch) << "the first call had finished before the second arrived";
  }
}

TEST(ModelScheduler, ItemsSubmittedTogetherRunInOneBatch) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(Options(), executor);
  Completion plug, a, b, c;
  Plug(scheduler, *executor, plug);
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 5)}, 2, a)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 7), Row(3, 3)}, 2, b)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(4, 6)}, 2, c)).ok());
  EXPECT_EQ(scheduler.queued_rows(), 4);
  executor->Release();

  const auto& ra = a.Wait();
  const auto& rb = b.Wait();
  const auto& rc = c.Wait();
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_TRUE(plug.Wait().ok());
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].rows.size(), 4u);
  std::vector<int> markers;
  for (const auto& row : batches[1].rows) markers.push_back(row.marker);
  EXPECT_THAT(markers, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(ra->batch_rows, 4);
  EXPECT_EQ(rb->batch_rows, 4);
  // Each item gets its own rows back, in submission order.
  ASSERT_EQ(rb->outputs.size(), 2u);
  EXPECT_THAT(rb->outputs[0], ElementsAre(2.0f, 2.0f, 7.0f));
  EXPECT_THAT(rb->outputs[1], ElementsAre(3.0f, 2.0f, 3.0f));
  ASSERT_EQ(ra->outputs.size(), 1u);
  EXPECT_THAT(ra->outputs[0], ElementsAre(1.0f, 2.0f, 5.0f));
  EXPECT_THAT(rc->outputs.at(0), ElementsAre(4.0f, 2.0f, 6.0f));
  EXPECT_GT(ra->queue_time, absl::ZeroDuration());
  EXPECT_EQ(scheduler.queued_rows(), 0);
  EXPECT_EQ(plug.calls, 1);
  EXPECT_EQ(a.calls, 1);
}

// queue_delay_when_idle = false (the server's default): a call that finds the model idle (its
// last batch ran one call, nobody arrived meanwhile) starts at once; after a batch with company
// the batcher waits for company again.
TEST(ModelScheduler, IdleModelStartsACallAtOnceAndWaitsAgainAfterCompany) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_queue_delay = absl::Seconds(1);
  options.queue_delay_when_idle = false;
  ModelScheduler scheduler(options, executor);
  // A fresh model has no history and waits; this first call may not (its budget says start now).
  Completion first;
  auto item = Item({Row(1, 5)}, 1, first);
  item->latest_start = absl::Now();
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  ASSERT_TRUE(first.Wait().ok());

  // Its batch ran alone: the model is idle, so the next call neither waits nor is told it will
  // (once the batcher is back from the batch: the call completes before that).
  PlanRequest request;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (scheduler.ForecastQueue(request, Solver::kEuler).wait > absl::ZeroDuration() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(scheduler.ForecastQueue(request, Solver::kEuler).wait, absl::ZeroDuration());
  Completion alone;
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 5)}, 1, alone)).ok());
  ASSERT_TRUE(alone.Wait().ok());
  EXPECT_LT(alone.Wait()->queue_time, absl::Milliseconds(500));

  // Two calls arrive while a batch runs: company. The next lone call waits the delay again.
  Completion plug, c, d;
  Plug(scheduler, *executor, plug, /*runs_before=*/2);
  ASSERT_TRUE(scheduler.Submit(Item({Row(3, 5)}, 1, c)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(4, 5)}, 1, d)).ok());
  executor->Release();
  ASSERT_TRUE(c.Wait().ok());
  ASSERT_TRUE(d.Wait().ok());
  EXPECT_GE(scheduler.ForecastQueue(request, Solver::kEuler).wait, options.max_queue_delay);
  Completion after_company;
  ASSERT_TRUE(scheduler.Submit(Item({Row(5, 5)}, 1, after_company)).ok());
  ASSERT_TRUE(after_company.Wait().ok());
  EXPECT_GE(after_company.Wait()->queue_time, absl::Milliseconds(950));
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(batches[3].rows.size(), 2u);  // c and d together
}

// The default for direct users of the scheduler (and config queue_delay_when_idle: true): a lone
// call waits for company even right after a batch that ran alone.
TEST(ModelScheduler, QueueDelayWhenIdleKeepsTheWait) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_queue_delay = absl::Milliseconds(200);
  ModelScheduler scheduler(options, executor);
  Completion first, second;
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 5)}, 1, first)).ok());
  ASSERT_TRUE(first.Wait().ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 5)}, 1, second)).ok());
  ASSERT_TRUE(second.Wait().ok());
  EXPECT_GE(second.Wait()->queue_time, absl::Milliseconds(190));
}

TEST(ModelScheduler, AFullBatchStartsWithoutWaitingForTheQueueDelay) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_batch_size = 4;
  options.max_queue_delay = absl::Seconds(3);
  ModelScheduler scheduler(options, executor);
  Completion a, b;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 5), Row(2, 5)}, 1, a)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(3, 5), Row(4, 5)}, 1, b)).ok());
  ASSERT_TRUE(a.Wait().ok());
  ASSERT_TRUE(b.Wait().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), 4u);
}

TEST(ModelScheduler, ALoneItemWaitsAtMostTheQueueDelayAndOnlyIfItCanAffordIt) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_queue_delay = absl::Milliseconds(100);
  ModelScheduler scheduler(options, executor);
  Completion a;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 5)}, 1, a)).ok());
  const auto& result = a.Wait();
  ASSERT_TRUE(result.ok());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(95));
  EXPECT_LT(waited, std::chrono::seconds(2));
  EXPECT_GE(result->queue_time, absl::Milliseconds(95));

  // One whose budget leaves no time to wait (latest_start now: the floor served to a budget
  // that cannot be met) starts its batch at once.
  Completion late;
  auto item = Item({Row(2, 5)}, 1, late);
  item->latest_start = absl::Now();
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  ASSERT_TRUE(late.Wait().ok());
  EXPECT_LT(late.Wait()->queue_time, absl::Milliseconds(50));
}

TEST(ModelScheduler, MaxBatchSizeIsRespected) {
  SchedulerOptions options = Options();
  options.max_batch_size = 2;
  const auto batches = BatchesBehindPlug(options, {4, 4, 4, 4, 4});
  ASSERT_EQ(batches.size(), 4u);  // plug, then 2 + 2 + 1 in FIFO order
  std::vector<std::vector<int>> markers;
  for (size_t b = 1; b < batches.size(); ++b) {
    EXPECT_LE(batches[b].rows.size(), 2u);
    markers.emplace_back();
    for (const auto& row : batches[b].rows) markers.back().push_back(row.marker);
  }
  EXPECT_THAT(markers, ElementsAre(ElementsAre(1, 2), ElementsAre(3, 4), ElementsAre(5)));
}

TEST(ModelScheduler, MaxBatchTokensIsRespected) {
  SchedulerOptions options = Options();
  options.max_batch_tokens = 40;
  const auto batches = BatchesBehindPlug(options, {10, 10, 30, 10});
  ASSERT_GE(batches.size(), 3u);
  int rows_seen = 0;
  for (size_t b = 1; b < batches.size(); ++b) {
    int longest = 0;
    for (const auto& row : batches[b].rows) longest = std::max(longest, row.length);
    EXPECT_LE(longest * static_cast<int>(batches[b].rows.size()), 40) << "batch " << b;
    rows_seen += static_cast<int>(batches[b].rows.size());
  }
  EXPECT_EQ(rows_seen, 4);
  // The three short rows fit together (30 padded tokens); the long one runs alone.
  EXPECT_EQ(batches.size(), 3u);
}

TEST(ModelScheduler, MaxBatchTokensCountsThePaddedLength) {
  // With pad_to_multiple 16, rows of 5 tokens run padded to 16: a 40-token budget holds two of
  // them (32 tokens), not eight (40).
  SchedulerOptions options = Options();
  options.max_batch_tokens = 40;
  options.pad_to_multiple = 16;
  options.max_sequence_length = 64;
  const auto batches = BatchesBehindPlug(options, {5, 5, 5, 5, 5, 5});
  ASSERT_EQ(batches.size(), 4u) << "the plug, then 6 rows two by two";
  for (size_t b = 1; b < batches.size(); ++b) EXPECT_EQ(batches[b].rows.size(), 2u) << "batch " << b;
}

// One request may hold more inputs than max_batch_size (max_inputs_per_request defaults to 64,
// max_batch_size to 32; the tiny models ship 32 and 16) or more padded tokens than
// max_batch_tokens. The limits bound what one executor run holds, so such a request must be
// computed in several runs, and still complete once with every output in order.
TEST(ModelScheduler, OversizedItemNeverExceedsTheBatchLimits) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_batch_size = 4;
  options.max_batch_tokens = 60;
  ModelScheduler scheduler(options, executor);
  Completion done;
  std::vector<tokenizer::EncodedText> rows;
  for (int i = 0; i < 10; ++i) rows.push_back(Row(i + 1, 12));
  ASSERT_TRUE(scheduler.Submit(Item(std::move(rows), 2, done)).ok());
  const auto& result = done.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(result->outputs[i].at(0), static_cast<float>(i + 1)) << i;
  EXPECT_EQ(done.calls, 1);
  for (const auto& batch : executor->batches()) {
    int longest = 0;
    for (const auto& row : batch.rows) longest = std::max(longest, row.length);
    EXPECT_LE(batch.rows.size(), 4u) << "max_batch_size exceeded";
    EXPECT_LE(longest * static_cast<int>(batch.rows.size()), 60) << "max_batch_tokens exceeded";
  }
}

TEST(ModelScheduler, QueueFullIsResourceExhaustedAndRunsNothing) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_queue_size = 3;
  ModelScheduler scheduler(options, executor);
  Completion plug, first, refused;
  Plug(scheduler, *executor, plug);
  // A live call (deadline ahead, not cancelled) is never shed to make room.
  auto live = Item({Row(1, 4), Row(2, 4)}, 1, first);
  live->deadline = absl::Now() + absl::Seconds(30);
  live->cancelled = [] { return false; };
  ASSERT_TRUE(scheduler.Submit(std::move(live)).ok());
  const absl::Status status = scheduler.Submit(Item({Row(3, 4), Row(4, 4)}, 1, refused));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model 'fake-model'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_queue_size 3"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("2 inputs queued"));
  EXPECT_EQ(scheduler.queued_rows(), 2);
  // One row still fits.
  Completion one;
  EXPECT_TRUE(scheduler.Submit(Item({Row(5, 4)}, 1, one)).ok());
  EXPECT_EQ(scheduler.queued_rows(), 3);
  executor->Release();
  ASSERT_TRUE(first.Wait().ok());
  ASSERT_TRUE(one.Wait().ok());
  EXPECT_FALSE(refused.called());
  for (const auto& batch : executor->batches()) {
    for (const auto& row : batch.rows) EXPECT_NE(row.marker, 3);
  }
}

// Under overload, clients that gave up must not hold the queue against live ones: a full queue
// first sheds its cancelled and expired calls (completed by the batcher, with their own codes).
TEST(ModelScheduler, AFullQueueShedsCallsThatAreGoneBeforeRefusing) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_queue_size = 3;
  ModelScheduler scheduler(options, executor);
  Completion plug, cancelled, expired, live;
  Plug(scheduler, *executor, plug);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto cancellable = Item({Row(1, 4), Row(2, 4)}, 1, cancelled);
  cancellable->cancelled = [flag] { return flag->load(); };
  ASSERT_TRUE(scheduler.Submit(std::move(cancellable)).ok());
  auto expiring = Item({Row(3, 4)}, 1, expired);
  expiring->deadline = absl::Now() + absl::Milliseconds(20);
  ASSERT_TRUE(scheduler.Submit(std::move(expiring)).ok());
  EXPECT_EQ(scheduler.queued_rows(), 3);
  flag->store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));

  // The batcher is still inside the plug's batch: without shedding, this was ResourceExhausted.
  ASSERT_TRUE(scheduler.Submit(Item({Row(4, 4), Row(5, 4), Row(6, 4)}, 1, live)).ok());
  EXPECT_EQ(scheduler.queued_rows(), 3);
  executor->Release();
  EXPECT_EQ(cancelled.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(expired.Wait().status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(live.Wait().ok());
  EXPECT_EQ(cancelled.calls, 1);
  EXPECT_EQ(expired.calls, 1);
  for (const auto& batch : executor->batches()) {
    for (const auto& row : batch.rows) EXPECT_TRUE(row.marker == 900 || row.marker >= 4) << row.marker;
  }
  EXPECT_EQ(scheduler.queued_rows(), 0);
}

// The batcher waits (5 s here) for company for the only queued call; the call is cancelled and
// a submit that finds the queue full sheds it. It is answered at once, not when the wait ends.
TEST(ModelScheduler, ACallShedWhileTheBatcherWaitsForCompanyIsAnsweredAtOnce) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(QueueOptions(/*max_queue_size=*/2, /*max_queue_delay=*/absl::Seconds(5)), executor);
  Completion waiting, after;
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto item = Item({Row(1, 4)}, 1, waiting);
  item->cancelled = [flag] { return flag->load(); };
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  flag->store(true);
  const auto shed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 4), Row(3, 4)}, 1, after)).ok());
  EXPECT_EQ(waiting.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - shed_at, std::chrono::seconds(2));
  EXPECT_EQ(scheduler.queued_rows(), 2);
  scheduler.Stop();  // ends the wait for company: what is queued runs
  ASSERT_TRUE(after.Wait().ok());
}

// A call with more rows than the whole queue holds can never be admitted: InvalidArgument (not an
// overload to retry), and nothing queued is shed for it.
TEST(ModelScheduler, ACallLargerThanTheQueueIsInvalidAndShedsNothing) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(QueueOptions(/*max_queue_size=*/2, /*max_queue_delay=*/absl::Seconds(5)), executor);
  Completion cancelled, refused;
  auto item = Item({Row(1, 4)}, 1, cancelled);
  item->cancelled = [] { return true; };
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  const absl::Status status = scheduler.Submit(Item({Row(2, 4), Row(3, 4), Row(4, 4)}, 1, refused));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("3 strings"), HasSubstr("'fake-model'"), HasSubstr("batching.max_queue_size")));
  EXPECT_EQ(scheduler.queued_rows(), 1);
  EXPECT_FALSE(refused.called());
  scheduler.Stop();
  EXPECT_EQ(cancelled.Wait().status().code(), absl::StatusCode::kCancelled);
}

TEST(ModelScheduler, CancelledItemIsDroppedBeforeCompute) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(Options(), executor);
  Completion plug, cancelled, kept;
  Plug(scheduler, *executor, plug);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto item = Item({Row(7, 4)}, 1, cancelled);
  item->cancelled = [flag] { return flag->load(); };
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(8, 4)}, 1, kept)).ok());
  flag->store(true);
  executor->Release();
  const auto& result = cancelled.Wait();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("while queued"));
  ASSERT_TRUE(kept.Wait().ok());
  for (const auto& batch : executor->batches()) {
    for (const auto& row : batch.rows) EXPECT_NE(row.marker, 7) << "a cancelled row reached the executor";
  }
  EXPECT_EQ(scheduler.queued_rows(), 0);
  EXPECT_EQ(cancelled.calls, 1);
}

// What gRPC's ServerContext::IsCancelled says of a call: true once its deadline has passed.
std::function<bool()> CancelledAtDeadline(absl::Time deadline) {
  return [deadline] { return absl::Now() >= deadline; };
}

TEST(ModelScheduler, ExpiredDeadlineIsDeadlineExceededBeforeCompute) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(Options(), executor);
  Completion plug, expired, past;
  Plug(scheduler, *executor, plug);
  auto item = Item({Row(7, 4)}, 1, expired);
  item->deadline = absl::Now() + absl::Milliseconds(20);
  item->cancelled = CancelledAtDeadline(item->deadline);
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  auto already = Item({Row(6, 4)}, 1, past);
  already->deadline = absl::Now() - absl::Milliseconds(1);
  already->cancelled = CancelledAtDeadline(already->deadline);
  ASSERT_TRUE(scheduler.Submit(std::move(already)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  executor->Release();
  for (Completion* c : {&expired, &past}) {
    const auto& result = c->Wait();
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("in the queue of model 'fake-model'"));
  }
  for (const auto& batch : executor->batches()) {
    for (const auto& row : batch.rows) {
      EXPECT_NE(row.marker, 7);
      EXPECT_NE(row.marker, 6);
    }
  }
}

TEST(ModelScheduler, CancelDuringComputeStopsWithinOneStep) {
  auto executor = std::make_shared<FakeExecutor>();
  auto flag = std::make_shared<std::atomic<bool>>(false);
  // Cancel as the batch's second iteration completes: the item's rows must be polled and leave
  // at that step boundary, so they take part in exactly 2 of the 8 iterations.
  executor->on_iteration_ = [flag](int iteration) {
    if (iteration == 2) flag->store(true);
  };
  SchedulerOptions options = Options();
  options.max_batch_size = 3;                   // the batch starts once all 3 rows are queued
  options.max_queue_delay = absl::Seconds(2);
  ModelScheduler scheduler(options, executor);
  Completion cancelled, kept;
  auto item = Item({Row(7, 10), Row(8, 10)}, 8, cancelled);
  item->cancelled = [flag] { return flag->load(); };
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(9, 4)}, 8, kept)).ok());
  const auto& result = cancelled.Wait();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("left the batch"));
  const auto& other = kept.Wait();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_THAT(other->outputs.at(0), ElementsAre(9.0f, 8.0f, 4.0f));
  EXPECT_EQ(cancelled.calls, 1) << "done must be called exactly once";
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].rows.size(), 3u);
  EXPECT_THAT(batches[0].iterations, ElementsAre(2, 2, 8));
}

TEST(ModelScheduler, DeadlinePassingWhileComputingEndsTheItem) {
  auto executor = std::make_shared<FakeExecutor>();
  executor->per_iteration_ = std::chrono::milliseconds(60);
  SchedulerOptions options = Options();
  options.max_batch_size = 2;
  options.max_queue_delay = absl::Seconds(2);
  ModelScheduler scheduler(options, executor);
  Completion expiring, kept;
  auto item = Item({Row(7, 4)}, 8, expiring);
  item->deadline = absl::Now() + absl::Milliseconds(150);  // expires during iteration ~3 of 8
  item->cancelled = CancelledAtDeadline(item->deadline);
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(8, 4)}, 8, kept)).ok());
  const auto& result = expiring.Wait();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("while computing"));
  ASSERT_TRUE(kept.Wait().ok());
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].iterations.size(), 2u);
  EXPECT_LT(batches[0].iterations[0], 8) << "the expired row kept computing";
  EXPECT_EQ(batches[0].iterations[1], 8);
  EXPECT_EQ(expiring.calls, 1);
}

TEST(ModelScheduler, WaitingForTheComputeGateCountsAsQueueTime) {
  auto gate = std::make_shared<ComputeGate>(1);
  SchedulerOptions options = Options();
  options.gate = gate;
  ModelScheduler scheduler(options, std::make_shared<FakeExecutor>());
  gate->Acquire();  // another model's batch holds the only slot
  Completion done;
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 4)}, 1, done)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  gate->Release();
  const auto& result = done.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->queue_time, absl::Milliseconds(80));
  EXPECT_LT(result->compute_time, absl::Milliseconds(80)) << "the wait for the gate was counted as compute";
}

// The batcher takes a batch from the queue, then waits for the compute gate (another model's
// batch may hold it for seconds). A call cancelled or expired meanwhile must not cost its rows an
// input stage and a step: it leaves before the executor runs.
TEST(ModelScheduler, ACallGoneWhileItsBatchWaitsForTheComputeGateIsNeverComputed) {
  auto gate = std::make_shared<ComputeGate>(1);
  SchedulerOptions options = Options();
  options.gate = gate;
  // The batch fills with the 4 rows submitted below, so the batcher takes all of them at once
  // however slowly this thread submits (a 1 ms wait for company let a loaded machine, or
  // ThreadSanitizer, split them and leave a call queued behind the gate this test holds).
  options.max_batch_size = 4;
  options.max_queue_delay = absl::Milliseconds(500);
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(options, executor);
  gate->Acquire();  // another model's batch holds the only slot
  auto flag = std::make_shared<std::atomic<bool>>(false);
  Completion cancelled, expired, kept;
  auto item = Item({Row(7, 4), Row(8, 4)}, 4, cancelled);
  item->cancelled = [flag] { return flag->load(); };
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  auto expiring = Item({Row(6, 4)}, 4, expired);
  expiring->deadline = absl::Now() + absl::Milliseconds(30);
  ASSERT_TRUE(scheduler.Submit(std::move(expiring)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(9, 4)}, 4, kept)).ok());
  // Taken from the queue into a batch, which now waits for the gate.
  for (int i = 0; i < 500 && scheduler.queued_rows() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(scheduler.queued_rows(), 0);
  flag->store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));  // past the deadline
  gate->Release();
  EXPECT_EQ(cancelled.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(expired.Wait().status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(kept.Wait().ok());
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].rows.size(), 1u) << "a gone call's rows reached the executor";
  EXPECT_EQ(batches[0].rows[0].marker, 9);
  EXPECT_EQ(cancelled.calls, 1);
  EXPECT_EQ(expired.calls, 1);
}

// When every call of a batch went while it waited for the gate, nothing runs at all.
TEST(ModelScheduler, ABatchWhoseCallsAllWentRunsNothingAndFreesTheGate) {
  auto gate = std::make_shared<ComputeGate>(1);
  SchedulerOptions options = Options();
  options.gate = gate;
  options.max_batch_size = 4;  // one batch of the 4 calls below, as in the test above
  options.max_queue_delay = absl::Milliseconds(500);
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(options, executor);
  gate->Acquire();
  auto flag = std::make_shared<std::atomic<bool>>(false);
  std::vector<Completion> done(4);
  for (int i = 0; i < 4; ++i) {
    auto item = Item({Row(i + 1, 4)}, 8, done[i], Solver::kRk4);
    item->cancelled = [flag] { return flag->load(); };
    ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  }
  for (int i = 0; i < 500 && scheduler.queued_rows() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(scheduler.queued_rows(), 0);
  flag->store(true);
  gate->Release();
  for (auto& d : done) EXPECT_EQ(d.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(executor->batches().empty()) << "a batch of cancelled calls ran";
  Completion later;
  ASSERT_TRUE(scheduler.Submit(Item({Row(5, 4)}, 1, later)).ok());
  EXPECT_TRUE(later.Wait().ok()) << "the gate was not given back";
}

// A client that cancels while its call's last step computes never receives the result, so the
// call counts as cancelled, not as served.
TEST(ModelScheduler, ACallCancelledDuringItsLastStepIsCancelledNotServed) {
  auto executor = std::make_shared<FakeExecutor>();
  auto flag = std::make_shared<std::atomic<bool>>(false);
  executor->on_iteration_ = [flag](int iteration) {
    if (iteration == 2) flag->store(true);
  };
  ModelScheduler scheduler(Options(), executor);
  Completion cancelled;
  auto item = Item({Row(7, 4)}, 2, cancelled);
  item->cancelled = [flag] { return flag->load(); };
  ASSERT_TRUE(scheduler.Submit(std::move(item)).ok());
  const auto& result = cancelled.Wait();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("result was dropped"));
  EXPECT_EQ(cancelled.calls, 1);
}

TEST(ModelScheduler, ComputeGateSerializesBatchesAcrossModels) {
  std::atomic<int> concurrent{0}, max_concurrent{0};
  auto gate = std::make_shared<ComputeGate>(1);
  std::vector<std::shared_ptr<FakeExecutor>> executors;
  std::vector<std::unique_ptr<ModelScheduler>> schedulers;
  for (int m = 0; m < 3; ++m) {
    auto executor = std::make_shared<FakeExecutor>();
    executor->per_iteration_ = std::chrono::milliseconds(5);
    executor->concurrent_ = &concurrent;
    executor->max_concurrent_ = &max_concurrent;
    SchedulerOptions options = Options();
    options.gate = gate;
    executors.push_back(executor);
    schedulers.push_back(std::make_unique<ModelScheduler>(options, executor));
  }
  std::vector<Completion> done(6);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(schedulers[i % 3]->Submit(Item({Row(i + 1, 4)}, 4, done[i])).ok());
  for (auto& d : done) ASSERT_TRUE(d.Wait().ok());
  EXPECT_EQ(max_concurrent.load(), 1);
}

// A holder that releases the slot and at once asks again queues behind the model already
// waiting (first come, first served), instead of taking the slot straight back.
TEST(ComputeGate, SlotsGoToWaitersInArrivalOrder) {
  ComputeGate gate(1);
  gate.Acquire();
  std::mutex mutex;
  std::vector<std::string> order;
  std::thread waiter([&] {
    gate.Acquire();
    {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back("waiter");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.Release();
  });
  while (!gate.HasWaiters()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  gate.Release();
  gate.Acquire();
  {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back("holder again");
  }
  gate.Release();
  waiter.join();
  EXPECT_EQ(order, (std::vector<std::string>{"waiter", "holder again"}));
}

TEST(ModelScheduler, RowsWithDifferentStepsShareABatch) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(Options(), executor);
  Completion plug, one, four, eight;
  Plug(scheduler, *executor, plug);
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 4)}, 1, one)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 4)}, 4, four)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(3, 4)}, 8, eight)).ok());
  executor->Release();
  EXPECT_THAT(one.Wait()->outputs.at(0), ElementsAre(1.0f, 1.0f, 4.0f));
  EXPECT_THAT(four.Wait()->outputs.at(0), ElementsAre(2.0f, 4.0f, 4.0f));
  EXPECT_THAT(eight.Wait()->outputs.at(0), ElementsAre(3.0f, 8.0f, 4.0f));
  // Each says whether the batcher had more to do when it finished (for the core to answer it off
  // the batcher thread): rows still computing, or calls queued behind the plug.
  EXPECT_TRUE(plug.Wait()->others_wait);
  EXPECT_TRUE(one.Wait()->others_wait);
  EXPECT_TRUE(four.Wait()->others_wait);
  EXPECT_FALSE(eight.Wait()->others_wait);
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 2u);
  std::vector<int> steps;
  for (const auto& row : batches[1].rows) steps.push_back(row.steps);
  EXPECT_THAT(steps, ElementsAre(1, 4, 8));
}

TEST(ModelScheduler, DifferentSolversDoNotShareABatch) {
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(Options(), executor);
  Completion plug, euler, heun, euler2;
  Plug(scheduler, *executor, plug);
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 4)}, 2, euler, Solver::kEuler)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 4)}, 2, heun, Solver::kHeun)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(3, 4)}, 2, euler2, Solver::kEuler)).ok());
  executor->Release();
  ASSERT_TRUE(euler.Wait().ok());
  ASSERT_TRUE(heun.Wait().ok());
  ASSERT_TRUE(euler2.Wait().ok());
  const auto batches = executor->batches();
  ASSERT_EQ(batches.size(), 3u);
  for (size_t b = 1; b < batches.size(); ++b) {
    for (const auto& row : batches[b].rows) {
      EXPECT_EQ(batches[b].solver, row.marker == 2 ? Solver::kHeun : Solver::kEuler);
    }
  }
}

// Records the queue depths the scheduler publishes (the odeserve_queue_depth gauge). A nonzero
// depth is held for a moment before it is recorded, as a submitting thread that loses its core
// right after queueing would: a later, smaller depth must not be overwritten by it.
class SlowDepthRecorder : public SchedulerObserver {
 public:
  void OnQueueDepth(int queued_rows) override {
    if (queued_rows > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mutex_);
    last_ = queued_rows;
  }
  int last() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

 private:
  std::mutex mutex_;
  int last_ = -1;
};

TEST(ModelScheduler, PublishedQueueDepthEndsAtZeroOnceTheQueueDrains) {
  SlowDepthRecorder depths;  // outlives the scheduler
  SchedulerOptions options = Options();
  options.max_queue_delay = absl::ZeroDuration();  // each call runs as soon as the batcher sees it
  options.observer = &depths;
  auto executor = std::make_shared<FakeExecutor>();
  ModelScheduler scheduler(options, executor);
  for (int i = 0; i < 10; ++i) {
    Completion done;
    ASSERT_TRUE(scheduler.Submit(Item({Row(i + 1, 4)}, 1, done)).ok());
    ASSERT_TRUE(done.Wait().ok());
    EXPECT_EQ(scheduler.queued_rows(), 0);
    EXPECT_EQ(depths.last(), 0) << "call " << i << ": the gauge still counts a row that already ran";
  }
}

// ---- Continuous batching ---------------------------------------------------------------------

std::vector<std::unique_ptr<WorkItem>> Items(std::unique_ptr<WorkItem> a, std::unique_ptr<WorkItem> b = nullptr) {
  std::vector<std::unique_ptr<WorkItem>> items;
  items.push_back(std::move(a));
  if (b) items.push_back(std::move(b));
  return items;
}

// Records the batches the scheduler reports (what the metrics see).
class BatchRecorder : public SchedulerObserver {
 public:
  void OnBatch(const BatchObservation& batch) override {
    std::lock_guard<std::mutex> lock(mutex_);
    batches_.push_back(batch);
  }
  std::vector<BatchObservation> batches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }

 private:
  std::mutex mutex_;
  std::vector<BatchObservation> batches_;
};

// One long call must not hold every model up: a batch that another model's batch waits for
// lends it the gate at the next step boundary, and the short call finishes long before the
// long one. The executor is told how long it waited, to leave out of its measured seconds.
TEST(ModelScheduler, ALongBatchLendsTheComputeGateToAnotherModelBetweenSteps) {
  auto gate = std::make_shared<ComputeGate>(1);
  auto long_executor = std::make_shared<FakeExecutor>();
  long_executor->per_iteration_ = std::chrono::milliseconds(10);
  auto short_executor = std::make_shared<FakeExecutor>();
  short_executor->per_iteration_ = std::chrono::milliseconds(200);  // the lent time to leave out
  SchedulerOptions long_options = Options();
  long_options.max_steps = 100;
  long_options.gate = gate;
  SchedulerOptions short_options = Options();
  short_options.gate = gate;
  ModelScheduler long_model(long_options, long_executor);
  ModelScheduler short_model(short_options, short_executor);

  Completion long_call, short_call;
  ASSERT_TRUE(long_model.Submit(Item({Row(1, 4)}, 100, long_call)).ok());  // ~1 s of steps
  ASSERT_TRUE(long_executor->WaitRunsStarted(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(short_model.Submit(Item({Row(2, 4)}, 1, short_call)).ok());
  ASSERT_TRUE(short_call.Wait().ok());
  EXPECT_FALSE(long_call.called()) << "the short call waited for the whole long batch";
  ASSERT_TRUE(long_call.Wait().ok());
  // The wait reaches the executor, which leaves it out of the run's seconds.
  EXPECT_GE(long_executor->paused_seconds(), 0.15);
}

TEST(ModelScheduler, WithNobodyWaitingABatchKeepsTheGateThroughout) {
  auto gate = std::make_shared<ComputeGate>(1);
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.gate = gate;
  ModelScheduler scheduler(options, executor);
  Completion done;
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 4)}, 8, done)).ok());
  const auto& result = done.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(executor->paused_seconds(), 0.0);
}

// A scheduler whose rows join running batches (the fake executor calls `join` at each step).
struct Joining {
  explicit Joining(SchedulerOptions options = Options(), bool continuous = true) {
    executor->accept_joins_ = true;
    options.continuous_batching = continuous;
    options.observer = &recorder;
    scheduler = std::make_unique<ModelScheduler>(options, executor);
  }
  // Submits `items` from inside the running batch, as its step `iteration` completes (once).
  void SubmitDuring(int iteration, std::vector<std::unique_ptr<WorkItem>> items) {
    auto pending = std::make_shared<std::vector<std::unique_ptr<WorkItem>>>(std::move(items));
    executor->on_iteration_ = [this, iteration, pending](int now) {
      if (now != iteration || pending->empty()) return;
      for (auto& item : *pending) EXPECT_TRUE(scheduler->Submit(std::move(item)).ok());
      pending->clear();
    };
  }
  // Runs a `steps`-step call (marker 1) and a one-step call (marker 2) submitted as its step
  // `submit_at` completes, then checks the late call waited: it ran in a second batch.
  void ExpectTheLateCallWaitsForTheBatch(int steps, int submit_at) {
    Completion running, late;
    SubmitDuring(submit_at, Items(Item({Row(2, 6)}, 1, late)));
    ASSERT_TRUE(scheduler->Submit(Item({Row(1, 10)}, steps, running)).ok());
    ASSERT_TRUE(late.Wait().ok());
    ASSERT_TRUE(running.Wait().ok());
    const auto batches = executor->batches();
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_TRUE(batches[0].joined.empty());
    EXPECT_EQ(batches[1].rows.at(0).marker, 2);
  }
  BatchRecorder recorder;  // outlives the scheduler (declared first)
  std::shared_ptr<FakeExecutor> executor = std::make_shared<FakeExecutor>();
  std::unique_ptr<ModelScheduler> scheduler;
};

TEST(ContinuousBatching, AQueuedCallJoinsTheRunningBatchAtTheNextStep) {
  Joining j;
  Completion long_call, short_call;
  j.SubmitDuring(2, Items(Item({Row(2, 6)}, 1, short_call)));
  ASSERT_TRUE(j.scheduler->Submit(Item({Row(1, 10)}, 8, long_call)).ok());
  const auto& quick = short_call.Wait();
  ASSERT_TRUE(quick.ok()) << quick.status();
  EXPECT_THAT(quick->outputs.at(0), ElementsAre(2.0f, 1.0f, 6.0f));
  EXPECT_EQ(quick->batch_rows, 2) << "it joined a batch of one running row";
  ASSERT_TRUE(long_call.Wait().ok());
  const auto batches = j.executor->batches();
  ASSERT_EQ(batches.size(), 1u) << "one run: the short call did not wait for the long one's last step";
  ASSERT_EQ(batches[0].joined.size(), 1u);
  EXPECT_EQ(batches[0].joined[0].marker, 2);
  EXPECT_EQ(batches[0].joined[0].at_iteration, 2);
  EXPECT_THAT(batches[0].iterations, ElementsAre(8, 1));
  EXPECT_EQ(j.scheduler->queued_rows(), 0);
  // The run is reported once it ends, after its calls completed: wait for it.
  for (int i = 0; i < 500 && j.recorder.batches().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto observed = j.recorder.batches();
  ASSERT_EQ(observed.size(), 1u);
  EXPECT_EQ(observed[0].rows, 2);
  EXPECT_EQ(observed[0].joined_rows, 1);
}

TEST(ContinuousBatching, WhenTurnedOffACallWaitsForTheRunningBatch) {
  Joining j(Options(), /*continuous=*/false);
  EXPECT_FALSE(j.scheduler->continuous_batching());
  j.ExpectTheLateCallWaitsForTheBatch(/*steps=*/8, /*submit_at=*/2);
}

TEST(ContinuousBatching, RowsJoinOnlyWhenTheBatchLimitsLeaveRoom) {
  SchedulerOptions options = Options();
  options.max_batch_size = 2;
  Joining j(options);
  Completion plug, two_steps, six_steps, joiner;
  Plug(*j.scheduler, *j.executor, plug);  // the next two calls queue and start together
  ASSERT_TRUE(j.scheduler->Submit(Item({Row(1, 10)}, 2, two_steps)).ok());
  ASSERT_TRUE(j.scheduler->Submit(Item({Row(2, 10)}, 6, six_steps)).ok());
  // Submitted as step 1 of the second batch completes (the plug's one-step batch takes no
  // joins: a batch whose rows are all done ends): it cannot join a batch of 2 until a row
  // leaves, after step 2.
  j.executor->on_iteration_ = [&, submitted = false](int iteration) mutable {
    if (submitted || iteration != 1 || j.executor->batches().size() != 2) return;
    submitted = true;
    EXPECT_TRUE(j.scheduler->Submit(Item({Row(3, 4)}, 3, joiner)).ok());
  };
  j.executor->Release();
  ASSERT_TRUE(plug.Wait().ok());
  ASSERT_TRUE(joiner.Wait().ok());
  ASSERT_TRUE(two_steps.Wait().ok());
  ASSERT_TRUE(six_steps.Wait().ok());
  const auto batches = j.executor->batches();
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[1].joined.size(), 1u);
  EXPECT_EQ(batches[1].joined[0].marker, 3);
  EXPECT_EQ(batches[1].joined[0].at_iteration, 2);
  EXPECT_THAT(batches[1].iterations, ElementsAre(2, 6, 3)) << "the joined row runs its own 3 steps";
}

TEST(ContinuousBatching, ABatchWithOneStepLeftTakesNoJoins) {
  // Waiting costs the queued call at most that step; a join would cost the running rows.
  Joining j;
  j.ExpectTheLateCallWaitsForTheBatch(/*steps=*/2, /*submit_at=*/1);
}

TEST(ContinuousBatching, ACallNeedingAnotherSolverClosesTheBatchToJoins) {
  // FIFO holds: an Euler call queued behind a Heun call does not jump ahead by joining.
  Joining j;
  Completion running, heun, euler;
  j.SubmitDuring(1, Items(Item({Row(2, 4)}, 1, heun, Solver::kHeun), Item({Row(3, 4)}, 1, euler)));
  ASSERT_TRUE(j.scheduler->Submit(Item({Row(1, 10)}, 6, running)).ok());
  ASSERT_TRUE(running.Wait().ok());
  ASSERT_TRUE(heun.Wait().ok());
  ASSERT_TRUE(euler.Wait().ok());
  const auto batches = j.executor->batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_TRUE(batches[0].joined.empty());
  EXPECT_EQ(batches[1].solver, Solver::kHeun);
  EXPECT_EQ(batches[2].rows.at(0).marker, 3);
}

TEST(ContinuousBatching, ACancelledQueuedCallIsDroppedAtTheStepBoundary) {
  Joining j;
  Completion running, cancelled;
  auto item = Item({Row(2, 4)}, 1, cancelled);
  item->cancelled = [] { return true; };
  auto pending = std::make_shared<std::unique_ptr<WorkItem>>(std::move(item));
  bool done_by_step_2 = false;
  j.executor->on_iteration_ = [&, pending](int iteration) {
    if (iteration == 1) {
      EXPECT_TRUE(j.scheduler->Submit(std::move(*pending)).ok());
    }
    if (iteration == 2) done_by_step_2 = cancelled.called();  // dropped at boundary 1, mid-batch
  };
  ASSERT_TRUE(j.scheduler->Submit(Item({Row(1, 10)}, 4, running)).ok());
  EXPECT_EQ(cancelled.Wait().status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(running.Wait().ok());
  EXPECT_TRUE(done_by_step_2);
  const auto batches = j.executor->batches();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_TRUE(batches[0].joined.empty());
}

TEST(ModelScheduler, StopDrainsQueuedWorkThenRefuses) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = Options();
  options.max_batch_size = 1;
  ModelScheduler scheduler(options, executor);
  Completion plug;
  Plug(scheduler, *executor, plug);
  std::vector<Completion> done(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler.Submit(Item({Row(i + 1, 4)}, 2, done[i])).ok());
  std::thread stopper([&] { scheduler.Stop(); });
  // Release the plug only once Stop() has begun (it refuses new work first), so the queue is
  // drained by Stop() and not before it. Probes accepted before that are queued work too.
  std::list<Completion> probes;
  while (true) {
    Completion& probe = probes.emplace_back();
    const absl::Status accepted = scheduler.Submit(Item({Row(5, 4)}, 1, probe));
    if (accepted.ok()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    probes.pop_back();
    if (accepted.code() == absl::StatusCode::kUnavailable) break;
    ASSERT_EQ(accepted.code(), absl::StatusCode::kResourceExhausted) << accepted;  // queue full: retry
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  executor->Release();
  stopper.join();
  for (auto& d : done) {
    ASSERT_TRUE(d.called()) << "Stop() returned before queued work finished";
    EXPECT_TRUE(d.Wait().ok());
  }
  for (auto& probe : probes) {
    ASSERT_TRUE(probe.called()) << "Stop() returned before a queued probe finished";
    EXPECT_TRUE(probe.Wait().ok());
  }
  Completion late;
  const absl::Status refused = scheduler.Submit(Item({Row(9, 4)}, 1, late));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("'fake-model' is shutting down"));
  EXPECT_FALSE(late.called());
  EXPECT_EQ(executor->batches().size(), 4u + probes.size());
  scheduler.Stop();  // idempotent
}

TEST(ModelScheduler, ExecutorErrorReachesEveryItemOfTheBatch) {
  class FailingExecutor : public BatchExecutor {
   public:
    absl::StatusOr<ExecStats> Run(const ExecBatch&, const RowDoneFn&, const RowAbandonedFn&,
                                  const RowJoinFn&) override {
      return absl::InternalError("model execution failed: boom");
    }
  };
  ModelScheduler scheduler(Options(), std::make_shared<FailingExecutor>());
  Completion a, b;
  ASSERT_TRUE(scheduler.Submit(Item({Row(1, 4)}, 1, a)).ok());
  ASSERT_TRUE(scheduler.Submit(Item({Row(2, 4)}, 1, b)).ok());
  for (Completion* c : {&a, &b}) {
    const auto& result = c->Wait();
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("boom"));
  }
}

// ---- Planning --------------------------------------------------------------------------------

class Planning : public ::testing::Test {
 protected:
  void SetUp() override {
    executor_ = std::make_shared<FakeExecutor>();
    executor_->synthetic_seconds_ = SyntheticSeconds;
    options_ = Options();
    options_.candidates = Candidates();
    for (int length : {5, 10, 20}) {
      for (int i = 0; i < 4; ++i) rows_.push_back(Row(100 + i, length));
    }
    scheduler_ = Calibrated(options_, executor_);
  }

  // A scheduler whose cost model has been calibrated on the synthetic machine (27 runs).
  std::unique_ptr<ModelScheduler> Calibrated(const SchedulerOptions& options,
                                             std::shared_ptr<FakeExecutor> executor) {
    auto scheduler = std::make_unique<ModelScheduler>(options, executor);
    std::vector<ExecBatch> batches;
    for (int r = 0; r < 3; ++r) {
      for (int rows : {1, 2, 4}) {
        for (int steps : {1, 3, 8}) {
          ExecBatch batch;
          batch.solver = (steps == 3) ? Solver::kHeun : Solver::kEuler;
          for (int i = 0; i < rows; ++i) batch.rows.push_back({&rows_[r * 4 + i], steps, {}});
          batches.push_back(batch);
        }
      }
    }
    EXPECT_TRUE(scheduler->Calibrate({}, batches).ok());
    return scheduler;
  }
  // The same, with continuous batching on `executor` (which gets the synthetic costs).
  std::unique_ptr<ModelScheduler> CalibratedJoining(const std::shared_ptr<FakeExecutor>& executor,
                                                    SchedulerOptions options) {
    executor->synthetic_seconds_ = SyntheticSeconds;
    executor->accept_joins_ = true;
    options.continuous_batching = true;
    return Calibrated(options, executor);
  }

  // One 10-token row: compute = 1 ms + 1 ms per field evaluation; queue = max_queue_delay 1 ms.
  PlanRequest Budgeted(absl::Duration budget) {
    PlanRequest request;
    request.rows = 1;
    request.padded_tokens = 10;
    request.budget = budget;
    return request;
  }

  std::shared_ptr<FakeExecutor> executor_;
  SchedulerOptions options_;
  std::unique_ptr<ModelScheduler> scheduler_;
  std::vector<tokenizer::EncodedText> rows_;
};

TEST_F(Planning, CalibrationRecoversTheSyntheticCosts) {
  const auto snapshot = scheduler_->cost_model().Snapshot();
  EXPECT_EQ(snapshot.calibration_samples, 27);
  EXPECT_NEAR(snapshot.coefficients.fixed, 1e-3, 1e-5);
  EXPECT_NEAR(snapshot.coefficients.per_token_evaluation, 1e-4, 1e-6);
  EXPECT_NEAR(scheduler_->cost_model().Predict(Shape(1, 10, 50)), 6e-3, 6e-5);
}

TEST_F(Planning, LargeBudgetPicksTheHighestQuality) {
  auto plan = scheduler_->MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->solver, Solver::kHeun);
  EXPECT_EQ(plan->steps, 8);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
  // 1 ms queue delay + 1 ms + 16 evaluations x 1 ms.
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_total), 18.0, 0.1);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_queue), 1.0, 0.01);
  // It may start as late as the budget less its 17 ms of compute (no inflation observed yet).
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->start_within), 983.0, 0.1);
}

TEST_F(Planning, TighterBudgetPicksACheaperCandidate) {
  // 8.5 ms leaves 6 evaluations: Euler 6 (0.80) beats Heun 3 (0.75) and RK4 1 (0.73).
  auto plan = scheduler_->MakePlan(Budgeted(absl::Microseconds(8500)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 6);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
  EXPECT_LE(plan->predicted_total, absl::Microseconds(8500));
  // 4.5 ms leaves 2 evaluations: Heun 1 (0.65) beats Euler 2 (0.60).
  plan = scheduler_->MakePlan(Budgeted(absl::Microseconds(4500)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kHeun);
  EXPECT_EQ(plan->steps, 1);
}

TEST_F(Planning, WhenTheFitSeesNoCostInStepsTheToleranceStillBuysTheFewest) {
  // A model so small that its steps vanish in the call's fixed cost: the fit puts zero on a
  // field evaluation, so every choice is predicted equally cheap. Within the tolerance the
  // fewest evaluations win (Euler 1, 0.55, is within 0.5 of Heun 8's 1.00), not the best.
  SchedulerOptions options = options_;
  options.quality_tolerance = 0.5;
  auto executor = std::make_shared<FakeExecutor>();
  executor->synthetic_seconds_ = [](int64_t, int64_t, int64_t) { return 2e-3; };
  auto tolerant = Calibrated(options, executor);
  ASSERT_EQ(tolerant->cost_model().Snapshot().coefficients.per_token_evaluation, 0.0);
  auto plan = tolerant->MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 1);
  // Without a tolerance only the best counts, however cheap the rest look.
  auto exact = Calibrated(options_, executor);
  plan = exact->MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->solver, Solver::kHeun);
  EXPECT_EQ(plan->steps, 8);
}

TEST_F(Planning, QualityWithinTheToleranceOfTheBestBuysTheCheapestChoice) {
  // Everything fits 1 s; the best is Heun 8 (1.00, 16 evaluations). Within 0.20 of it the
  // cheapest is Euler 6 (0.80, 6 evaluations); Heun 4 and RK4 4-8 are as good but dearer.
  SchedulerOptions options = options_;
  options.quality_tolerance = 0.20 + 1e-9;
  auto executor = std::make_shared<FakeExecutor>();
  executor->synthetic_seconds_ = SyntheticSeconds;
  auto tolerant = Calibrated(options, executor);
  auto plan = tolerant->MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 6);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
  // The tolerance counts from the best choice that fits: 4.5 ms affords 2 evaluations, the best
  // of which is Heun 1 (0.65); Euler 1 (0.55, 1 evaluation) is within 0.20 of it.
  plan = tolerant->MakePlan(Budgeted(absl::Microseconds(4500)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 1);
  // Without a tolerance (the default) the same budget buys the highest quality.
  plan = scheduler_->MakePlan(Budgeted(absl::Microseconds(4500)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kHeun);
  EXPECT_EQ(plan->steps, 1);
}

TEST_F(Planning, RequestedSolverRestrictsTheChoice) {
  PlanRequest request = Budgeted(absl::Seconds(1));
  request.solver = Solver::kRk4;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kRk4);
  EXPECT_EQ(plan->steps, 8);
}

TEST_F(Planning, MinStepsIsRespected) {
  // 4.5 ms alone picks Heun 1; with min_steps 2 the best that fits is Euler 2.
  PlanRequest request = Budgeted(absl::Microseconds(4500));
  request.min_steps = 2;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 2);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);

  request = Budgeted(absl::Microseconds(8500));
  request.min_steps = 7;  // nothing with >= 7 steps fits 8.5 ms: the floor is Euler 7
  plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->steps, 7);
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudgetFloor);

  // The model's own min_steps is a floor too (uncalibrated: only the 1 ms queue delay counts,
  // so a 0.1 ms budget fits nothing and the floor is served).
  SchedulerOptions options = options_;
  options.min_steps = 3;
  ModelScheduler floored(options, executor_);
  plan = floored.MakePlan(Budgeted(absl::Microseconds(100)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->steps, 3);
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudgetFloor);
}

TEST_F(Planning, NothingFitsWithRefuseIsDeadlineExceeded) {
  PlanRequest request = Budgeted(absl::Microseconds(2500));
  request.miss_policy = MissPolicy::kRefuse;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("latency budget cannot be met: 2.50ms of it remained when the call was planned"));
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("the cheapest allowed choice (EULER, 1 steps)"));
  // A budget already spent (time in the server before planning) is said so, not shown negative.
  request.budget = absl::Microseconds(-70);
  plan = scheduler_->MakePlan(request);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("none of it remained"));
}

TEST_F(Planning, NothingFitsWithServeFloorServesTheCheapest) {
  PlanRequest request = Budgeted(absl::Microseconds(2500));
  request.miss_policy = MissPolicy::kServeFloor;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudgetFloor);
  EXPECT_EQ(plan->steps, 1);
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_total), 3.0, 0.05);
  EXPECT_EQ(plan->start_within, absl::ZeroDuration()) << "a late call must not wait for company";
}

TEST_F(Planning, ExplicitStepsAreRequested) {
  PlanRequest request;
  request.rows = 1;
  request.padded_tokens = 10;
  request.steps = 5;
  request.budget = absl::Microseconds(100);  // exact steps win (under the default SERVE_FLOOR)
  auto plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->choice, StepChoiceKind::kRequested);
  EXPECT_EQ(plan->steps, 5);
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_total), 7.0, 0.05);
  request.solver = Solver::kHeun;
  plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kHeun);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_total), 12.0, 0.1);
  EXPECT_EQ(plan->start_within, absl::ZeroDuration()) << "12 ms against 100 us: late, so start at once";
  // The budget still bounds the wait for company: 100 ms less the 11 ms of compute.
  request.budget = absl::Milliseconds(100);
  plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->choice, StepChoiceKind::kRequested);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->start_within), 89.0, 0.1);
  request.budget.reset();
  plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->start_within, absl::InfiniteDuration());
}

TEST_F(Planning, ExplicitStepsThatMissTheBudgetAreRefusedWhenAskedTo) {
  PlanRequest request;
  request.rows = 1;
  request.padded_tokens = 10;
  request.steps = 5;  // 7 ms predicted
  request.budget = absl::Milliseconds(2);
  request.miss_policy = MissPolicy::kRefuse;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("the requested choice (EULER, 5 steps)"));
  request.budget = absl::Milliseconds(100);  // fits: the exact steps run
  plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, StepChoiceKind::kRequested);
  EXPECT_EQ(plan->steps, 5);
}

TEST_F(Planning, NoBudgetUsesTheDefaultSteps) {
  PlanRequest request;
  request.rows = 1;
  request.padded_tokens = 10;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->choice, StepChoiceKind::kModelDefault);
  EXPECT_EQ(plan->steps, 4);
  EXPECT_EQ(plan->solver, Solver::kEuler);
}

TEST_F(Planning, QueuedWorkMakesTheChoiceCheaper) {
  auto alone = scheduler_->MakePlan(Budgeted(absl::Microseconds(12500)));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->solver, Solver::kEuler);  // 10.5 ms of compute: Euler 8 (0.90) beats Heun 5
  EXPECT_EQ(alone->steps, 8);
  // Hold a batch and queue 10 more evaluations of work ahead of the request.
  Completion plug, queued;
  Plug(*scheduler_, *executor_, plug);
  ASSERT_TRUE(scheduler_->Submit(Item({Row(5, 10)}, 8, queued)).ok());
  const absl::Duration queue = scheduler_->ForecastQueue(Budgeted(absl::Microseconds(12500)), Solver::kEuler).wait;
  EXPECT_GT(queue, absl::Milliseconds(9));  // 1 + 8 ms of queued work + 1 ms delay
  auto behind = scheduler_->MakePlan(Budgeted(absl::Microseconds(12500)));
  ASSERT_TRUE(behind.ok());
  EXPECT_LT(behind->steps * EvaluationsPerStep(behind->solver), 8);
  EXPECT_GE(behind->predicted_queue, queue - absl::Milliseconds(1));
  executor_->Release();
  ASSERT_TRUE(queued.Wait().ok());
}

TEST_F(Planning, ARunningBatchWithItsSolverIsJoinedAfterOneStep) {
  auto executor = std::make_shared<FakeExecutor>();
  auto scheduler = CalibratedJoining(executor, options_);
  ASSERT_TRUE(scheduler->continuous_batching());
  // A running 8-step Euler batch of one 10-token row: predicted 1 + 8 x 1 = 9 ms, 1.125 ms a step.
  Completion running;
  executor->Hold();
  ASSERT_TRUE(scheduler->Submit(Item({Row(900, 10)}, 8, running)).ok());
  ASSERT_TRUE(executor->WaitRunsStarted(28));  // 27 calibration runs, then this one
  const QueueForecast euler = scheduler->ForecastQueue(Budgeted(absl::Milliseconds(6)), Solver::kEuler);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(euler.wait), 1.125, 0.01);
  EXPECT_EQ(euler.shared_padded_tokens, 10);
  // Heun rows cannot join it: they wait for its end and the queue delay.
  const QueueForecast heun = scheduler->ForecastQueue(Budgeted(absl::Milliseconds(6)), Solver::kHeun);
  EXPECT_GT(heun.wait, absl::Milliseconds(5));
  EXPECT_EQ(heun.shared_padded_tokens, 0);
  // 6 ms buys one Euler step beside the running row: 1.125 ms to the boundary, then 1 ms per
  // batch + 1 ms for its own evaluation + 1 ms for the running row's.
  auto plan = scheduler->MakePlan(Budgeted(absl::Milliseconds(6)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 1);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_queue), 1.125, 0.01);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_total), 4.125, 0.05);
  executor->Release();
  ASSERT_TRUE(running.Wait().ok());
}

TEST_F(Planning, NoJoinIsForecastWhileTheBatchWaitsForTheGateOrAnotherSolverIsQueued) {
  auto executor = std::make_shared<FakeExecutor>();
  SchedulerOptions options = options_;
  options.gate = std::make_shared<ComputeGate>(1);
  auto scheduler = CalibratedJoining(executor, options);
  // Another model holds the only compute slot: the taken batch waits for it, and so would a
  // call that means to join it.
  options.gate->Acquire();
  Completion running, heun;
  ASSERT_TRUE(scheduler->Submit(Item({Row(900, 10)}, 8, running)).ok());
  for (int i = 0; i < 500 && scheduler->queued_rows() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(scheduler->queued_rows(), 0) << "the batcher took the call";
  EXPECT_EQ(scheduler->ForecastQueue(Budgeted(absl::Milliseconds(6)), Solver::kEuler).shared_padded_tokens, 0);
  // Running (held inside the executor) it is joinable, until a Heun call queues behind it.
  executor->Hold();
  options.gate->Release();
  ASSERT_TRUE(executor->WaitRunsStarted(28));
  EXPECT_EQ(scheduler->ForecastQueue(Budgeted(absl::Milliseconds(6)), Solver::kEuler).shared_padded_tokens, 10);
  ASSERT_TRUE(scheduler->Submit(Item({Row(901, 10)}, 1, heun, Solver::kHeun)).ok());
  const QueueForecast euler = scheduler->ForecastQueue(Budgeted(absl::Milliseconds(6)), Solver::kEuler);
  EXPECT_EQ(euler.shared_padded_tokens, 0);
  EXPECT_GT(euler.wait, absl::Milliseconds(5)) << "the batch's end, then the Heun call's batch";
  executor->Release();
  ASSERT_TRUE(running.Wait().ok());
  ASSERT_TRUE(heun.Wait().ok());
}

TEST_F(Planning, SolversNotAllowedByTheModelAreNeverChosen) {
  SchedulerOptions options = Options();
  options.solvers = {Solver::kEuler};
  options.candidates = Candidates();
  ModelScheduler euler_only(options, executor_);
  ASSERT_TRUE(euler_only.Calibrate({}, {}).ok());
  // Uncalibrated (zero) costs: everything fits; the best allowed candidate is Euler 8.
  auto plan = euler_only.MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 8);
}

// A model that allows only Heun runs Heun when the call names no solver: without a budget, and
// with a budget but no measured profile.
TEST_F(Planning, AModelWithoutEulerDefaultsToItsFirstSolver) {
  SchedulerOptions options = Options();
  options.solvers = {Solver::kHeun};
  options.candidates.clear();
  ModelScheduler heun_only(options, executor_);
  ASSERT_TRUE(heun_only.Calibrate({}, {}).ok());
  PlanRequest unbudgeted;
  unbudgeted.rows = 1;
  unbudgeted.padded_tokens = 10;
  auto plan = heun_only.MakePlan(unbudgeted);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kHeun);
  EXPECT_EQ(plan->steps, options.default_steps);
  plan = heun_only.MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kHeun);
}

TEST_F(Planning, WithoutAProfileQualityGrowsWithSteps) {
  SchedulerOptions options = Options();
  options.candidates.clear();
  ModelScheduler plain(options, executor_);
  auto plan = plain.MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->solver, Solver::kEuler);
  EXPECT_EQ(plan->steps, 8);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
}

// ---- Cost model ------------------------------------------------------------------------------

// ---- Translation planning --------------------------------------------------------------------

// A decoder-aware synthetic machine: 1 ms per batch, 10 us per token evaluation, 1 ms per
// decoder call and 0.1 ms per hypothesis row of a call; decoding runs max_output_tokens.
class FakeDecoderExecutor : public BatchExecutor {
 public:
  absl::StatusOr<ExecStats> Run(const ExecBatch& batch, const RowDoneFn& on_done, const RowAbandonedFn&,
                                const RowJoinFn&) override {
    ExecStats stats;
    int64_t longest = 0;
    int steps = 0;
    for (const auto& row : batch.rows) {
      longest = std::max<int64_t>(longest, row.input->ids.size());
      steps = std::max(steps, row.steps);
    }
    stats.padded_tokens = longest * static_cast<int64_t>(batch.rows.size());
    stats.token_evaluations = stats.padded_tokens * steps;
    std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> groups;  // (steps, beam) -> (calls, rows)
    for (const auto& row : batch.rows) {
      auto& group = groups[{row.decode.decoder_steps, row.decode.beam_size}];
      group.first = std::max<int64_t>(group.first, int64_t{row.decode.max_output_tokens} * row.decode.decoder_steps);
      group.second += row.decode.beam_size;
    }
    for (const auto& [key, group] : groups) {
      stats.decoder_calls += group.first;
      stats.decoder_row_evaluations += group.first * group.second;
    }
    stats.seconds = 1e-3 + 1e-5 * double(stats.token_evaluations) + 1e-3 * double(stats.decoder_calls) +
                    1e-4 * double(stats.decoder_row_evaluations);
    const std::vector<int32_t> tokens = {7, 8, 9};
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      RowOutput output;
      output.tokens = absl::MakeConstSpan(tokens);
      on_done(r, output);
    }
    return stats;
  }
};

class TranslationPlanning : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions options = Options();
    options.min_decoder_steps = 1;
    options.max_decoder_steps = 6;
    options.default_decoder_steps = 6;
    options.max_steps = 6;
    options.solvers = {Solver::kEuler};
    for (int e : {1, 3, 6}) {
      for (int d : {1, 3, 6}) options.candidates.push_back({Solver::kEuler, e, 10.0 + e + 2.0 * d, d});
    }
    scheduler_ = std::make_unique<ModelScheduler>(options, std::make_shared<FakeDecoderExecutor>());
    for (int length : {5, 10, 20}) rows_.push_back(Row(100 + length, length));
    std::vector<ExecBatch> batches;
    for (const auto& row : rows_) {
      for (int rows : {1, 3}) {
        for (int beam : {1, 4}) {
          for (int decoder_steps : {1, 6}) {
            ExecBatch batch;
            for (int i = 0; i < rows; ++i) {
              batch.rows.push_back({&row, 1 + decoder_steps % 5, DecodeSpec{decoder_steps, beam, 4 * rows + 4, 1}});
            }
            batches.push_back(batch);
          }
        }
      }
    }
    ASSERT_TRUE(scheduler_->Calibrate({}, batches).ok());
  }
  // One 10-token input expecting 20 output tokens: about 1 ms + 22 ms per decoder step, plus
  // the 1 ms queue delay.
  PlanRequest Budgeted(absl::Duration budget, int expected_output = 20) {
    PlanRequest request;
    request.rows = 1;
    request.padded_tokens = 10;
    request.expected_output_tokens = expected_output;
    request.budget = budget;
    return request;
  }
  std::unique_ptr<ModelScheduler> scheduler_;
  std::vector<tokenizer::EncodedText> rows_;
};

TEST_F(TranslationPlanning, CalibrationRecoversTheDecoderCosts) {
  const auto c = scheduler_->cost_model().Snapshot().coefficients;
  EXPECT_NEAR(c.per_decoder_call, 1e-3, 1e-5);
  EXPECT_NEAR(c.per_decoder_row_evaluation, 1e-4, 1e-6);
}

TEST_F(TranslationPlanning, TheBudgetBuysEncoderAndDecoderStepsByTheirMeasuredQuality) {
  auto plan = scheduler_->MakePlan(Budgeted(absl::Seconds(1)));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->steps, 6);
  EXPECT_EQ(plan->decoder_steps, 6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(plan->predicted_total), 1 + 1 + 0.6 + 6 * 22, 0.5);
  // 100 ms: the decoder at 6 steps (134 ms) does not fit; 3 decoder steps with the full encoder
  // (quality 22) beats every cheaper pair.
  plan = scheduler_->MakePlan(Budgeted(absl::Milliseconds(100)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->steps, 6);
  EXPECT_EQ(plan->decoder_steps, 3);
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
  // A longer expected output costs more decoder calls: the same budget buys fewer steps.
  plan = scheduler_->MakePlan(Budgeted(absl::Milliseconds(100), /*expected_output=*/60));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->decoder_steps, 1);
  // Nothing fits: the floor is the cheapest pair.
  plan = scheduler_->MakePlan(Budgeted(absl::Milliseconds(5)));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudgetFloor);
  EXPECT_EQ(plan->steps, 1);
  EXPECT_EQ(plan->decoder_steps, 1);
}

TEST_F(TranslationPlanning, AnExplicitDecoderStepCountIsKept) {
  PlanRequest request = Budgeted(absl::Milliseconds(100));
  request.decoder_steps = 1;
  auto plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->decoder_steps, 1);
  EXPECT_EQ(plan->steps, 6);  // the budget still chooses the encoder's
  EXPECT_EQ(plan->choice, StepChoiceKind::kBudget);
  request.budget.reset();
  request.steps = 3;
  plan = scheduler_->MakePlan(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->steps, 3);
  EXPECT_EQ(plan->decoder_steps, 1);
  EXPECT_EQ(plan->choice, StepChoiceKind::kRequested);
}

constexpr double kFixed = 2e-4, kPerRow = 1e-5, kPerToken = 2e-7, kPerTokenEvaluation = 3e-8;

double Formula(int64_t rows, int64_t tokens, int64_t token_evaluations) {
  return kFixed + kPerRow * rows + kPerToken * tokens + kPerTokenEvaluation * token_evaluations;
}

std::vector<CostSample> SyntheticSamples(double scale = 1.0) {
  std::vector<CostSample> samples;
  for (int64_t rows : {1, 2, 4, 8, 16}) {
    for (int64_t length : {8, 16, 32}) {
      for (int64_t evaluations : {1, 2, 4, 8}) {
        const int64_t tokens = rows * length;
        const int64_t te = tokens * evaluations;
        samples.push_back(Sample(rows, tokens, te, scale * Formula(rows, tokens, te)));
      }
    }
  }
  return samples;
}

TEST(CostModel, RecoversKnownCoefficients) {
  CostModel model;
  EXPECT_EQ(model.Predict(Shape(4, 64, 256)), 0.0) << "uncalibrated";
  model.Calibrate(SyntheticSamples());
  const auto c = model.Snapshot().coefficients;
  EXPECT_NEAR(c.fixed, kFixed, 0.01 * kFixed);
  EXPECT_NEAR(c.per_row, kPerRow, 0.01 * kPerRow);
  EXPECT_NEAR(c.per_token, kPerToken, 0.01 * kPerToken);
  EXPECT_NEAR(c.per_token_evaluation, kPerTokenEvaluation, 0.01 * kPerTokenEvaluation);
  EXPECT_NEAR(model.Predict(Shape(3, 60, 300)), Formula(3, 60, 300), 1e-3 * Formula(3, 60, 300));
  EXPECT_NEAR(model.Predict(Shape(6, 120, 600, /*batches=*/2)), 2 * kFixed + Formula(6, 120, 600) - kFixed,
              1e-3 * Formula(6, 120, 600));
  EXPECT_EQ(model.Snapshot().calibration_samples, 60);
  EXPECT_EQ(model.Snapshot().online_samples, 0);
}

TEST(CostModel, ObserveReturnsTheRelativeError) {
  CostModel model;
  model.Calibrate(SyntheticSamples());
  // Measured twice the prediction: |p - 2p| / 2p = 0.5.
  const double error = model.Observe(Sample(4, 64, 256, 2 * Formula(4, 64, 256)));
  EXPECT_NEAR(error, 0.5, 1e-3);
  EXPECT_EQ(model.Snapshot().online_samples, 1);
  EXPECT_NEAR(model.Snapshot().mean_abs_relative_error, 0.5, 1e-3);
  // Half the prediction: |p - p/2| / (p/2) = 1.
  CostModel other;
  other.Calibrate(SyntheticSamples());
  EXPECT_NEAR(other.Observe(Sample(2, 32, 64, 0.5 * Formula(2, 32, 64))), 1.0, 1e-3);
  // An exact measurement.
  CostModel exact;
  exact.Calibrate(SyntheticSamples());
  EXPECT_NEAR(exact.Observe(Sample(8, 128, 512, Formula(8, 128, 512))), 0.0, 1e-3);
  // A zero-time sample is not a division by zero.
  EXPECT_EQ(exact.Observe(Sample(1, 8, 8, 0.0)), 0.0);
}

TEST(CostModel, FollowsAMachineThatSlowsDown) {
  CostModel model;
  std::vector<CostSample> warmup;  // a short warm-up, as at load
  const auto all = SyntheticSamples();
  for (size_t i = 0; i < all.size(); i += 7) warmup.push_back(all[i]);
  model.Calibrate(warmup);
  const double before = model.Predict(Shape(4, 64, 256));
  for (const auto& s : SyntheticSamples(2.0)) model.Observe(s);
  const double after = model.Predict(Shape(4, 64, 256));
  EXPECT_GT(after, 1.5 * before);
  EXPECT_LT(after, 2.05 * before);
  EXPECT_EQ(model.Snapshot().online_samples, 60);
}

TEST(CostModel, FitNonNegativeRecoversExactPositiveCoefficients) {
  std::vector<CostFeatures> features;
  std::vector<double> targets, weights;
  for (double a : {1.0, 2.0, 5.0}) {
    for (double b : {10.0, 40.0}) {
      for (double c : {100.0, 700.0}) {
        features.push_back({1.0, a, b, c, 0.0, 0.0});
        targets.push_back(3.0 + 0.5 * a + 0.25 * b + 0.01 * c);
        weights.push_back(1.0);
      }
    }
  }
  const auto x = FitNonNegative(features, targets, weights);
  EXPECT_NEAR(x[0], 3.0, 1e-6);
  EXPECT_NEAR(x[1], 0.5, 1e-6);
  EXPECT_NEAR(x[2], 0.25, 1e-6);
  EXPECT_NEAR(x[3], 0.01, 1e-8);
}

TEST(CostModel, FitNonNegativeClampsNegativeCoefficients) {
  std::vector<CostFeatures> features;
  std::vector<double> targets, weights;
  for (double a : {1.0, 2.0, 5.0, 9.0}) {
    for (double b : {10.0, 40.0, 70.0}) {
      for (double c : {100.0, 700.0}) {
        features.push_back({1.0, a, b, c, 0.0, 0.0});
        targets.push_back(30.0 - 2.0 * a + 0.25 * b + 0.01 * c);  // the true per-row is negative
        weights.push_back(1.0);
      }
    }
  }
  const auto x = FitNonNegative(features, targets, weights);
  for (int j = 0; j < kCostFeatures; ++j) EXPECT_GE(x[j], 0.0) << j;
  EXPECT_EQ(x[1], 0.0) << "the negative column is dropped";
  // With `a` dropped, the rest is the least-squares fit of the remaining columns: the mean of
  // -2a (-8.5) moves into the intercept, the b and c slopes are untouched (a is orthogonal).
  EXPECT_NEAR(x[0], 30.0 - 2.0 * 4.25, 1e-6);
  EXPECT_NEAR(x[2], 0.25, 1e-7);
  EXPECT_NEAR(x[3], 0.01, 1e-8);

  CostModel model;  // the model built on it never predicts negative time
  model.Calibrate({Sample(1, 10, 10, 1.0), Sample(2, 10, 10, 0.5), Sample(4, 10, 10, 0.25)});
  const auto c = model.Snapshot().coefficients;
  EXPECT_GE(c.fixed, 0.0);
  EXPECT_GE(c.per_row, 0.0);
  EXPECT_GE(c.per_token, 0.0);
  EXPECT_GE(c.per_token_evaluation, 0.0);
  EXPECT_GE(model.Predict(Shape(64, 10, 10)), 0.0);
}

}  // namespace
}  // namespace odeserve::scheduler
