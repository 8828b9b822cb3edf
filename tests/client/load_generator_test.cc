// odeserve-bench's load generator and report against the in-process fake server.
#include "client/rpc/load_generator.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "client/bench/bench_app.h"
#include "fake_server.h"
#include "gtest/gtest.h"
#include "python_check.h"

namespace odeserve::client {
namespace {

class LoadTest : public ::testing::Test {
 protected:
  LoadConfig Config() {
    LoadConfig c;
    c.connection.address = server_.address();
    c.method = "embed";
    c.model = "emb";
    c.inputs = {"alpha", "beta", "gamma"};
    c.warmup = absl::Milliseconds(100);
    c.duration = absl::Milliseconds(600);
    return c;
  }
  testing::FakeServer server_;
};

TEST_F(LoadTest, ClosedLoopPerClassBudgetsAndSteps) {
  server_.service().delay = std::chrono::milliseconds(3);
  LoadConfig c = Config();
  c.concurrency = 4;
  c.budgets = *ParseBudgetMix("1ms,500ms");
  c.batch = 2;
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->records.size(), 50u);
  EXPECT_EQ(r->totals.sent, static_cast<int64_t>(r->records.size()));
  EXPECT_DOUBLE_EQ(r->totals.window_s, 0.6);
  const BenchSummary s = Summarize(RunInfo{}, c.budgets, r->records, r->totals);
  ASSERT_EQ(s.classes.size(), 2u);
  const ClassSummary& tight = s.classes[0];
  const ClassSummary& loose = s.classes[1];
  EXPECT_EQ(s.overall.ok, s.overall.requests);
  // The server sleeps 3 ms: nothing fits 1 ms, everything fits 500 ms.
  EXPECT_EQ(tight.client_hits, 0);
  EXPECT_DOUBLE_EQ(loose.ClientHitRate(), 1.0);
  EXPECT_GE(tight.latency_ms.Min(), 3.0);
  // The budget reached the server: the fake picks min(12, budget ms) steps.
  EXPECT_DOUBLE_EQ(tight.steps.Mean(), 1);
  EXPECT_DOUBLE_EQ(loose.steps.Mean(), 12);
  EXPECT_DOUBLE_EQ(tight.ServerMetRate(), 0);  // the fake reports 2 ms > 1 ms
  EXPECT_DOUBLE_EQ(loose.ServerMetRate(), 1);
  EXPECT_DOUBLE_EQ(s.overall.MeanBatchSize(), 2);
  EXPECT_DOUBLE_EQ(s.overall.queue_ms.Mean(), 0.5);
  EXPECT_DOUBLE_EQ(s.overall.compute_ms.Mean(), 1.5);
  // 4 in flight at >= 3 ms each: at most ~1333 req/s.
  EXPECT_LT(s.ThroughputRps(), 1400);
  EXPECT_GT(tight.requests, 10);
  EXPECT_GT(loose.requests, 10);
}

TEST_F(LoadTest, OpenLoopSendsAtThePoissonRate) {
  LoadConfig c = Config();
  c.rate = 300;
  c.warmup = absl::Milliseconds(200);
  c.duration = absl::Seconds(1);
  c.method = "classify";
  c.model = "cls";
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  // Poisson with mean 300: +-5 sigma is about +-87.
  EXPECT_NEAR(static_cast<double>(r->totals.sent), 300, 90);
  EXPECT_EQ(r->totals.dropped, 0);
  const BenchSummary s = Summarize(RunInfo{}, c.budgets, r->records, r->totals);
  EXPECT_EQ(s.overall.ok, r->totals.sent);
  EXPECT_NEAR(s.ThroughputRps(), 300, 90);
}

TEST(RemainingBudgetTest, ALateSendLeavesLessOfTheBudget) {
  EXPECT_EQ(RemainingBudget(absl::Milliseconds(10), absl::ZeroDuration()), absl::Milliseconds(10));
  EXPECT_EQ(RemainingBudget(absl::Milliseconds(10), absl::Milliseconds(3)), absl::Milliseconds(7));
  // Spent before it was sent: the server still gets a valid (tiny) budget, and serves its floor.
  EXPECT_EQ(RemainingBudget(absl::Milliseconds(10), absl::Milliseconds(12)), absl::Microseconds(1));
}

// Every open-loop call records how late it was sent; the budget the server saw is at most the
// drawn one (the fake server echoes it in its report as steps = budget ms, at most 12).
TEST_F(LoadTest, OpenLoopRecordsSendLagAndChargesItToTheBudget) {
  LoadConfig c = Config();
  c.rate = 300;
  c.budgets = *ParseBudgetMix("6ms");
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->records.size(), 50u);
  for (const CallRecord& record : r->records) {
    EXPECT_GE(record.send_lag_ms, 0);
    ASSERT_EQ(record.code, 0);
    // steps = floor(budget ms sent): 6 only when sent with no lag at all, fewer when late.
    EXPECT_EQ(record.steps, std::max(1, static_cast<int>(6 - record.send_lag_ms)));
  }
}

TEST_F(LoadTest, OpenLoopDropsBeyondMaxInflight) {
  server_.service().delay = std::chrono::milliseconds(100);
  LoadConfig c = Config();
  c.rate = 200;
  c.warmup = absl::ZeroDuration();
  c.duration = absl::Milliseconds(500);
  c.max_inflight = 5;
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->totals.dropped, 20);
  EXPECT_LE(r->totals.sent, 30);
  // The users who got nothing count: as misses of their class and as errors of the run.
  c.budgets = *ParseBudgetMix("500ms");
  const BenchSummary s = Summarize(RunInfo{}, c.budgets, r->records, r->totals);
  EXPECT_EQ(s.overall.requests, r->totals.sent + r->totals.dropped);
  EXPECT_EQ(s.overall.errors.at("DROPPED"), r->totals.dropped);
  EXPECT_LT(s.classes[0].ClientHitRate(), 0.5);
  EXPECT_GT(s.ErrorRate(), 0.5);
}

// One call that takes 2 s does not shrink the reported throughput: it is the OK completions
// inside the window over the window (the old figure divided by the time until the last measured
// call was done: about half the real rate here).
TEST_F(LoadTest, OneSlowCallDoesNotShrinkTheThroughput) {
  server_.service().slow_call = 50;
  server_.service().slow_delay = std::chrono::seconds(2);
  LoadConfig c = Config();
  c.rate = 300;
  c.warmup = absl::Milliseconds(100);
  c.duration = absl::Seconds(1);
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  const BenchSummary s = Summarize(RunInfo{}, c.budgets, r->records, r->totals);
  EXPECT_GT(r->totals.drain_s, 0.5);
  EXPECT_NEAR(s.ThroughputRps(), static_cast<double>(r->totals.sent), 0.25 * r->totals.sent);
}

TEST_F(LoadTest, SetDeadlineTurnsSlowCallsIntoDeadlineExceeded) {
  server_.service().delay = std::chrono::milliseconds(30);
  LoadConfig c = Config();
  c.concurrency = 2;
  c.budgets = *ParseBudgetMix("5ms");
  c.set_deadline = true;
  c.duration = absl::Milliseconds(300);
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  const BenchSummary s = Summarize(RunInfo{}, c.budgets, r->records, r->totals);
  ASSERT_GT(s.overall.requests, 0);
  EXPECT_EQ(s.overall.ok, 0);
  EXPECT_EQ(s.classes[0].errors.at("DEADLINE_EXCEEDED"), s.overall.requests);
  EXPECT_DOUBLE_EQ(s.classes[0].ClientHitRate(), 0);
}

TEST_F(LoadTest, ErrorsAreCountedByCode) {
  LoadConfig c = Config();
  c.model = "missing";
  c.duration = absl::Milliseconds(200);
  auto r = RunLoad(c);
  ASSERT_TRUE(r.ok()) << r.status();
  const BenchSummary s = Summarize(RunInfo{}, c.budgets, r->records, r->totals);
  ASSERT_GT(s.overall.requests, 0);
  EXPECT_EQ(s.overall.errors.at("NOT_FOUND"), s.overall.requests);
}

TEST_F(LoadTest, ValidatesConfig) {
  LoadConfig c = Config();
  c.method = "rerank";
  EXPECT_EQ(RunLoad(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Config();
  c.batch = 0;
  EXPECT_NE(RunLoad(c).status().message().find("--batch"), absl::string_view::npos);
  // Rates and durations that would hang the generator or overflow its clock.
  for (double rate : {std::numeric_limits<double>::infinity(), std::nan(""), 1e12, -1.0}) {
    c = Config();
    c.rate = rate;
    EXPECT_NE(ValidateLoadConfig(c).message().find("--rate"), absl::string_view::npos) << rate;
  }
  c = Config();
  c.duration = absl::InfiniteDuration();
  EXPECT_NE(ValidateLoadConfig(c).message().find("--duration"), absl::string_view::npos);
  c = Config();
  c.warmup = absl::InfiniteDuration();
  EXPECT_NE(ValidateLoadConfig(c).message().find("--warmup"), absl::string_view::npos);
  c = Config();
  c.connection.address = "127.0.0.1:1";
  c.connect_timeout = absl::Milliseconds(300);
  EXPECT_EQ(RunLoad(c).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(LoadTest, BenchWritesTableJsonAndSvg) {
  server_.service().delay = std::chrono::milliseconds(1);
  BenchOptions o;
  o.load = Config();
  o.load.model.clear();  // resolved from ListModels
  o.load.concurrency = 2;
  o.load.connections = 2;
  o.budgets = "2ms,20ms,none";
  o.json_out = ::testing::TempDir() + "bench_report.json";
  o.svg_out = ::testing::TempDir() + "bench_report.svg";
  o.progress = false;
  std::ostringstream out, err;
  ASSERT_EQ(RunBench(o, out, err), 0) << err.str();
  EXPECT_NE(err.str().find("model: emb"), std::string::npos) << err.str();
  EXPECT_NE(out.str().find("closed loop, concurrency 2"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("20ms"), std::string::npos);
  std::stringstream json, svg;
  json << std::ifstream(o.json_out).rdbuf();
  svg << std::ifstream(o.svg_out).rdbuf();
  if (!testing::HavePython()) GTEST_SKIP();
  EXPECT_TRUE(testing::IsValidJson(
      json.str(), "len(d[\"classes\"]) == 3 and d[\"ok\"] > 0 and d[\"run\"][\"model\"] == \"emb\" "
                  "and d[\"classes\"][1][\"steps\"][\"mean\"] == 12"))
      << json.str();
  EXPECT_TRUE(testing::IsWellFormedXml(svg.str()));
}

TEST_F(LoadTest, BenchJsonToStdout) {
  BenchOptions o;
  o.load = Config();
  o.load.duration = absl::Milliseconds(200);
  o.budgets = "50ms";
  o.json_out = "-";
  o.progress = false;
  std::ostringstream out, err;
  ASSERT_EQ(RunBench(o, out, err), 0) << err.str();
  EXPECT_EQ(out.str().find("odeserve-bench:"), std::string::npos) << "no table with --json_out -";
  if (!testing::HavePython()) GTEST_SKIP();
  EXPECT_TRUE(testing::IsValidJson(
      out.str(), "d[\"classes\"][0][\"label\"] == \"50ms\" and d[\"classes\"][0][\"client_hit_rate\"] == 1"))
      << out.str();
}

TEST_F(LoadTest, BenchRejectsBadBudgets) {
  BenchOptions o;
  o.load = Config();
  o.budgets = "5ms,soon";
  std::ostringstream out, err;
  EXPECT_EQ(RunBench(o, out, err), 2);
  EXPECT_NE(err.str().find("error: INVALID_ARGUMENT: budget mix item 'soon'"), std::string::npos)
      << err.str();
}

TEST_F(LoadTest, SweepFindsSaturation) {
  server_.service().delay = std::chrono::milliseconds(2);
  BenchOptions o;
  o.load = Config();
  o.sweep = true;
  o.sweep_options.max_level = 4;
  o.sweep_step = absl::Milliseconds(300);
  o.sweep_warmup = absl::Milliseconds(50);
  o.json_out = ::testing::TempDir() + "sweep.json";
  o.progress = false;
  std::ostringstream out, err;
  ASSERT_EQ(RunBench(o, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("saturation: "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("70% of it = "), std::string::npos) << out.str();
  std::stringstream json;
  json << std::ifstream(o.json_out).rdbuf();
  if (!testing::HavePython()) GTEST_SKIP();
  EXPECT_TRUE(testing::IsValidJson(
      json.str(), "d[\"sweep\"][\"saturation_rps\"] > 0 and len(d[\"sweep\"][\"points\"]) >= 2 "
                  "and d[\"saturation_run\"][\"ok\"] > 0"))
      << json.str();
}

}  // namespace
}  // namespace odeserve::client
