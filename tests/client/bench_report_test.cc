#include "client/lib/bench_report.h"

#include <cmath>

#include "gtest/gtest.h"
#include "python_check.h"

namespace odeserve::client {
namespace {

CallRecord Ok(size_t cls, double latency, int steps, bool met, double queue = 1,
              double compute = 2) {
  CallRecord r;
  r.budget_class = cls;
  r.latency_ms = latency;
  r.has_report = true;
  r.steps = steps;
  r.solver = 1;  // EULER: one evaluation per step
  r.field_evaluations = steps;
  r.budget_met = met;
  r.queue_ms = queue;
  r.compute_ms = compute;
  r.server_total_ms = queue + compute;
  r.predicted_ms = (queue + compute) * 1.1;
  r.batch_size = 4;
  return r;
}

CallRecord Err(size_t cls, int code) {
  CallRecord r;
  r.budget_class = cls;
  r.latency_ms = 0.5;
  r.code = code;
  return r;
}

BenchSummary Example() {
  auto classes = *ParseBudgetMix("5ms,none");
  std::vector<CallRecord> records = {
      Ok(0, 3, 4, true),  Ok(0, 4, 6, true),  Ok(0, 7, 4, false),  // one over 5 ms
      Err(0, 4),                                                  // DEADLINE_EXCEEDED
      Ok(1, 10, 12, true), Ok(1, 20, 12, true), Err(1, 8),        // RESOURCE_EXHAUSTED
  };
  records[2].step_choice = 4;  // served the floor
  records[1].solver = 2;        // HEUN: two evaluations per step
  records[1].field_evaluations = 12;
  records[3].send_lag_ms = 0.8;  // the generator sent these late (errors count too)
  records[2].send_lag_ms = 0.2;
  RunInfo info;
  info.method = "classify";
  info.model = "sections";
  info.mode = "closed";
  info.concurrency = 2;
  info.batch = 2;
  info.budgets = "5ms,none";
  LoadTotals totals;
  totals.window_s = 2.0;
  totals.sent = 7;
  totals.ok_in_window = 5;
  return Summarize(info, classes, records, totals);
}

TEST(BenchReportTest, AggregatesPerClass) {
  const BenchSummary s = Example();
  ASSERT_EQ(s.classes.size(), 2u);
  const ClassSummary& c5 = s.classes[0];
  EXPECT_EQ(c5.label, "5ms");
  EXPECT_DOUBLE_EQ(*c5.budget_ms, 5);
  EXPECT_EQ(c5.requests, 4);
  EXPECT_EQ(c5.ok, 3);
  EXPECT_EQ(c5.client_hits, 2);
  EXPECT_DOUBLE_EQ(c5.ClientHitRate(), 0.5);  // errors count as misses
  EXPECT_EQ(c5.server_met, 2);
  EXPECT_DOUBLE_EQ(c5.ServerMetRate(), 2.0 / 3);
  EXPECT_EQ(c5.floor_served, 1);
  EXPECT_DOUBLE_EQ(c5.steps.Mean(), 14.0 / 3);
  EXPECT_EQ(c5.steps_histogram.at(4), 2);
  EXPECT_EQ(c5.steps_histogram.at(6), 1);
  EXPECT_DOUBLE_EQ(c5.field_evaluations.Mean(), 20.0 / 3);  // Euler-4 twice, Heun-6 once
  EXPECT_EQ(c5.choice_histogram, (std::map<std::string, int64_t>{{"euler-4", 2}, {"heun-6", 1}}));
  EXPECT_EQ(s.classes[1].choice_histogram, (std::map<std::string, int64_t>{{"euler-12", 2}}));
  EXPECT_DOUBLE_EQ(c5.latency_ms.Percentile(50), 4);
  EXPECT_DOUBLE_EQ(c5.latency_ms.Max(), 7);
  EXPECT_EQ(c5.errors.at("DEADLINE_EXCEEDED"), 1);
  EXPECT_NEAR(c5.prediction_error.Mean(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(c5.MeanBatchSize(), 4);
  EXPECT_EQ(c5.send_lag_ms.count(), 4u);
  EXPECT_DOUBLE_EQ(c5.send_lag_ms.Max(), 0.8);
  EXPECT_DOUBLE_EQ(c5.send_lag_ms.Mean(), 0.25);

  const ClassSummary& none = s.classes[1];
  EXPECT_FALSE(none.budget_ms.has_value());
  EXPECT_EQ(none.client_hits, 2);  // no budget: every OK call is a hit
  EXPECT_DOUBLE_EQ(none.ClientHitRate(), 2.0 / 3);
  EXPECT_EQ(none.errors.at("RESOURCE_EXHAUSTED"), 1);

  EXPECT_EQ(s.overall.requests, 7);
  EXPECT_EQ(s.overall.ok, 5);
  EXPECT_EQ(s.overall.client_hits, 4);
  EXPECT_DOUBLE_EQ(s.ThroughputRps(), 2.5);
  EXPECT_DOUBLE_EQ(s.InputsPerSecond(), 5.0);
  EXPECT_DOUBLE_EQ(s.ErrorRate(), 2.0 / 7);
  EXPECT_DOUBLE_EQ(s.overall.latency_ms.Percentile(100), 20);
}

// An arrival the generator dropped (max in-flight reached) is a user who got nothing: a miss of
// its class and an error of the run, with no latency or send lag of its own.
TEST(BenchReportTest, DroppedArrivalsAreMissesAndErrors) {
  auto classes = *ParseBudgetMix("5ms");
  CallRecord dropped;
  dropped.code = kDroppedCode;
  const std::vector<CallRecord> records = {Ok(0, 3, 4, true), dropped, dropped, Ok(0, 4, 4, true)};
  LoadTotals totals;
  totals.window_s = 1;
  totals.sent = 2;
  totals.dropped = 2;
  totals.ok_in_window = 2;
  const BenchSummary s = Summarize(RunInfo{}, classes, records, totals);
  EXPECT_EQ(s.classes[0].requests, 4);
  EXPECT_DOUBLE_EQ(s.classes[0].ClientHitRate(), 0.5);
  EXPECT_EQ(s.classes[0].errors.at("DROPPED"), 2);
  EXPECT_DOUBLE_EQ(s.ErrorRate(), 0.5);
  EXPECT_EQ(s.classes[0].send_lag_ms.count(), 2u);
  EXPECT_EQ(s.classes[0].latency_ms.count(), 2u);
  EXPECT_NE(FormatSummaryTable(s).find("(dropped 2)"), std::string::npos) << FormatSummaryTable(s);
}

// Throughput is the completions inside the window over the window, whatever the measured calls'
// own latencies: a straggler that finished long after the window does not stretch it.
TEST(BenchReportTest, ThroughputIsCompletionsInsideTheWindow) {
  auto classes = *ParseBudgetMix("none");
  std::vector<CallRecord> records(10, Ok(0, 2, 1, true));
  records[9].latency_ms = 4000;
  LoadTotals totals;
  totals.window_s = 1;
  totals.sent = 10;
  totals.ok_in_window = 12;  // warm-up calls that finished inside the window count too
  totals.drain_s = 3.9;
  const BenchSummary s = Summarize(RunInfo{}, classes, records, totals);
  EXPECT_DOUBLE_EQ(s.ThroughputRps(), 12);
  EXPECT_NE(FormatSummaryTable(s).find("3.90 s after the window"), std::string::npos)
      << FormatSummaryTable(s);
}

TEST(BenchReportTest, StatusCodeNames) {
  EXPECT_EQ(StatusCodeName(0), "OK");
  EXPECT_EQ(StatusCodeName(4), "DEADLINE_EXCEEDED");
  EXPECT_EQ(StatusCodeName(14), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(99), "CODE_99");
  EXPECT_EQ(StatusCodeName(kDroppedCode), "DROPPED");
}

TEST(BenchReportTest, TableShowsEveryClass) {
  const std::string t = FormatSummaryTable(Example());
  EXPECT_NE(t.find("closed loop, concurrency 2"), std::string::npos) << t;
  EXPECT_NE(t.find("throughput 2.5 req/s (5.0 inputs/s;"), std::string::npos) << t;
  EXPECT_NE(t.find("5ms"), std::string::npos);
  EXPECT_NE(t.find("50.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("DEADLINE_EXCEEDED=1"), std::string::npos) << t;
  EXPECT_NE(t.find("4.67 (4-6)"), std::string::npos) << t;
  EXPECT_NE(t.find("4.67 (4-6)   6.67"), std::string::npos) << t;  // the 5ms class's steps, then evals
  EXPECT_NE(t.find("5ms      euler-4=2,heun-6=1"), std::string::npos) << t;
}

TEST(BenchReportTest, JsonParsesBackWithTheNumbers) {
  const std::string json = SummaryToJson(Example());
  EXPECT_NE(json.find("\"client_hit_rate\": 0.5"), std::string::npos) << json;
  if (!testing::HavePython()) GTEST_SKIP() << "python3 not available";
  EXPECT_TRUE(testing::IsValidJson(
      json,
      "d[\"requests\"] == 7 and d[\"ok\"] == 5 and d[\"throughput_rps\"] == 2.5 and "
      "d[\"classes\"][0][\"label\"] == \"5ms\" and d[\"classes\"][0][\"budget_ms\"] == 5 and "
      "d[\"classes\"][1][\"budget_ms\"] is None and "
      "d[\"classes\"][0][\"steps_histogram\"] == {\"4\": 2, \"6\": 1} and "
      "d[\"classes\"][0][\"choice_histogram\"] == {\"euler-4\": 2, \"heun-6\": 1} and "
      "d[\"classes\"][1][\"field_evaluations\"][\"mean\"] == 12 and "
      "d[\"classes\"][0][\"errors\"] == {\"DEADLINE_EXCEEDED\": 1} and "
      "d[\"overall\"][\"latency_ms\"][\"max\"] == 20 and d[\"run\"][\"mode\"] == \"closed\" and "
      "d[\"classes\"][0][\"send_lag_ms\"][\"max\"] == 0.8"));
}

TEST(BenchReportTest, SvgIsWellFormed) {
  const std::string svg = SummaryToSvg(Example());
  EXPECT_NE(svg.find("Mean chosen steps"), std::string::npos);
  if (!testing::HavePython()) GTEST_SKIP() << "python3 not available";
  EXPECT_TRUE(testing::IsWellFormedXml(svg));
}

}  // namespace
}  // namespace odeserve::client
