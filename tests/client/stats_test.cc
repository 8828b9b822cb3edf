#include "client/lib/stats.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

TEST(SamplesTest, NearestRankPercentilesOfOneToHundred) {
  Samples s;
  for (int i = 100; i >= 1; --i) s.Add(i);  // unsorted on purpose
  EXPECT_EQ(s.count(), 100u);
  EXPECT_DOUBLE_EQ(s.Percentile(50), 50);
  EXPECT_DOUBLE_EQ(s.Percentile(90), 90);
  EXPECT_DOUBLE_EQ(s.Percentile(99), 99);
  EXPECT_DOUBLE_EQ(s.Percentile(99.9), 100);
  EXPECT_DOUBLE_EQ(s.Percentile(0), 1);
  EXPECT_DOUBLE_EQ(s.Percentile(100), 100);
  EXPECT_DOUBLE_EQ(s.Mean(), 50.5);
  EXPECT_DOUBLE_EQ(s.Min(), 1);
  EXPECT_DOUBLE_EQ(s.Max(), 100);
  EXPECT_DOUBLE_EQ(s.Sum(), 5050);
}

TEST(SamplesTest, SmallSetsUseNearestRank) {
  Samples s;
  for (double v : {15.0, 20.0, 35.0, 40.0, 50.0}) s.Add(v);
  // The classic nearest-rank example: P30 = 20, P40 = 20, P50 = 35, P100 = 50.
  EXPECT_DOUBLE_EQ(s.Percentile(5), 15);
  EXPECT_DOUBLE_EQ(s.Percentile(30), 20);
  EXPECT_DOUBLE_EQ(s.Percentile(40), 20);
  EXPECT_DOUBLE_EQ(s.Percentile(50), 35);
  EXPECT_DOUBLE_EQ(s.Percentile(100), 50);
}

TEST(SamplesTest, EmptyGivesNaN) {
  Samples s;
  EXPECT_TRUE(std::isnan(s.Percentile(50)));
  EXPECT_TRUE(std::isnan(s.Mean()));
  EXPECT_TRUE(std::isnan(s.Max()));
}

TEST(SamplesTest, AddAfterPercentileKeepsOrder) {
  Samples s;
  s.Add(3);
  s.Add(1);
  EXPECT_DOUBLE_EQ(s.Percentile(100), 3);
  s.Add(2);
  EXPECT_EQ(s.Sorted(), (std::vector<double>{1, 2, 3}));
}

TEST(LogHistogramTest, PercentilesWithinRelativePrecision) {
  LogHistogram h(1e-3, 1e6, 0.01);
  Samples exact;
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(1.0, 0.8);
  for (int i = 0; i < 20000; ++i) {
    const double v = dist(rng);
    h.Record(v);
    exact.Add(v);
  }
  EXPECT_EQ(h.count(), 20000);
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    const double want = exact.Percentile(p);
    EXPECT_NEAR(h.Percentile(p), want, 0.0101 * want) << "p" << p;
    EXPECT_GE(h.Percentile(p), want) << "bucket upper edges never under-report";
  }
  EXPECT_DOUBLE_EQ(h.Max(), exact.Max());
  EXPECT_DOUBLE_EQ(h.Min(), exact.Min());
  EXPECT_DOUBLE_EQ(h.Percentile(100), exact.Max());
  EXPECT_NEAR(h.Mean(), exact.Mean(), 1e-9 * exact.Mean());
}

TEST(LogHistogramTest, ClampsOutOfRangeAndMerges) {
  LogHistogram a(1, 100, 0.05), b(1, 100, 0.05);
  a.Record(0.5);   // below range: first bucket, min stays exact
  a.Record(500);   // above range: last bucket, max stays exact
  b.Record(10);
  a.Merge(b);
  EXPECT_EQ(a.count(), 3);
  EXPECT_DOUBLE_EQ(a.Min(), 0.5);
  EXPECT_DOUBLE_EQ(a.Max(), 500);
  EXPECT_DOUBLE_EQ(a.Percentile(0), 0.5);
  EXPECT_NEAR(a.Percentile(50), 10, 0.5);
  EXPECT_DOUBLE_EQ(a.Percentile(100), 500);
  int64_t total = 0;
  for (const auto& [edge, n] : a.Buckets()) total += n;
  EXPECT_EQ(total, 3);
}

TEST(LogHistogramTest, EmptyAndNaN) {
  LogHistogram h;
  h.Record(std::nan(""));
  EXPECT_EQ(h.count(), 0);
  EXPECT_TRUE(std::isnan(h.Percentile(99)));
}

}  // namespace
}  // namespace odeserve::client
