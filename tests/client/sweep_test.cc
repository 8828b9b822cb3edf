#include "client/lib/sweep.h"

#include <cmath>

#include "gtest/gtest.h"
#include "python_check.h"

namespace odeserve::client {
namespace {

// A server that scales linearly up to `capacity` req/s at 5 ms per call, then queues.
SweepPoint ClosedLoopModel(double concurrency, double capacity) {
  SweepPoint p;
  p.throughput_rps = std::min(concurrency / 0.005, capacity);
  p.p50_ms = 1000 * concurrency / p.throughput_rps;
  p.p99_ms = 1.5 * p.p50_ms;
  return p;
}

TEST(SweepControllerTest, ClosedLoopFindsThePlateau) {
  SweepOptions o;
  o.start = 1;
  o.factor = 2;
  SweepController c(o);
  std::vector<double> levels;
  while (!c.done()) {
    levels.push_back(c.next_level());
    c.Observe(ClosedLoopModel(c.next_level(), 1000));
  }
  // 1,2,4 scale (200, 400, 800); 8 reaches 1000 (+25%); 16 and 32 add nothing.
  EXPECT_EQ(levels, (std::vector<double>{1, 2, 4, 8, 16, 32}));
  const SweepResult r = c.Result();
  EXPECT_DOUBLE_EQ(r.saturation_rps, 1000);
  EXPECT_DOUBLE_EQ(r.saturation_level, 8);
  EXPECT_TRUE(r.points[4].plateau);
  EXPECT_NE(r.stop_reason.find("2 levels in a row"), std::string::npos) << r.stop_reason;
  const std::string table = FormatSweepTable(o, r);
  EXPECT_NE(table.find("saturation: 1000.0 req/s (concurrency 8"), std::string::npos) << table;
  EXPECT_NE(table.find("70% of it = 700.0 req/s"), std::string::npos) << table;
  EXPECT_TRUE(r.saturation_reached);
}

TEST(SweepControllerTest, ClosedLoopLevelsAlwaysGrow) {
  SweepOptions o;
  o.start = 1;
  o.factor = 1.2;  // rounding alone would stay at 1
  o.max_level = 4;
  SweepController c(o);
  std::vector<double> levels;
  while (!c.done()) {
    levels.push_back(c.next_level());
    c.Observe(ClosedLoopModel(c.next_level(), 1e9));
  }
  EXPECT_EQ(levels, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_NE(c.Result().stop_reason.find("maximum level"), std::string::npos);
  // Every level scaled: the best one is only a lower bound on saturation, and says so.
  EXPECT_FALSE(c.Result().saturation_reached);
  const std::string table = FormatSweepTable(o, c.Result());
  EXPECT_NE(table.find("saturation: at least 800.0 req/s"), std::string::npos) << table;
  EXPECT_NE(table.find("raise --sweep_max"), std::string::npos) << table;
}

TEST(SweepControllerTest, ErrorsAndP99LimitDegrade) {
  SweepOptions o;
  o.p99_limit_ms = 20;
  SweepController c(o);
  auto point = [](double rps, double p99, double errors) {
    SweepPoint p;
    p.throughput_rps = rps;
    p.p50_ms = 5;
    p.p99_ms = p99;
    p.error_rate = errors;
    return p;
  };
  c.Observe(point(100, 8, 0));     // level 1 healthy
  c.Observe(point(190, 25, 0));    // level 2 over the p99 limit
  c.Observe(point(300, 9, 0.05));  // level 4 errors
  ASSERT_TRUE(c.done());
  const SweepResult r = c.Result();
  EXPECT_TRUE(r.points[1].degraded);
  EXPECT_NE(r.points[1].note.find("p99"), std::string::npos);
  EXPECT_TRUE(r.points[2].degraded);
  EXPECT_NE(r.points[2].note.find("error rate"), std::string::npos);
  EXPECT_DOUBLE_EQ(r.saturation_rps, 100);  // degraded levels never count
}

TEST(SweepControllerTest, OpenLoopStopsWhenItCannotKeepUp) {
  SweepOptions o;
  o.open_loop = true;
  o.start = 100;
  o.factor = 1.5;
  SweepController c(o);
  std::vector<double> levels;
  while (!c.done()) {
    const double rate = c.next_level();
    levels.push_back(rate);
    SweepPoint p;
    p.throughput_rps = std::min(rate, 400.0);
    p.p50_ms = 2;
    p.p99_ms = rate < 400 ? 4 : 400;
    c.Observe(p);
  }
  EXPECT_EQ(levels, (std::vector<double>{100, 150, 225, 337.5, 506.25, 759.375}));
  const SweepResult r = c.Result();
  EXPECT_DOUBLE_EQ(r.saturation_rps, 337.5);
  EXPECT_TRUE(r.points[4].degraded);
}

TEST(SweepControllerTest, JsonParsesBack) {
  SweepOptions o;
  SweepController c(o);
  c.Observe(ClosedLoopModel(1, 100));
  c.Observe(ClosedLoopModel(2, 100));
  c.Observe(ClosedLoopModel(4, 100));
  const std::string json = SweepToJson(o, c.Result(), "{\"ok\": 1}\n");
  if (!testing::HavePython()) GTEST_SKIP() << "python3 not available";
  EXPECT_TRUE(testing::IsValidJson(
      json, "d[\"sweep\"][\"saturation_rps\"] == 100 and len(d[\"sweep\"][\"points\"]) == 3 and "
            "abs(d[\"sweep\"][\"rate_at_fraction\"] - 70) < 1e-9 and d[\"saturation_run\"] == {\"ok\": 1}"));
}

}  // namespace
}  // namespace odeserve::client
