#include "client/lib/random.h"

#include <cmath>
#include <numeric>

#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

TEST(PoissonArrivalsTest, InterArrivalMeanAndVarianceMatchTheRate) {
  // Exponential gaps: mean 1/rate and standard deviation 1/rate.
  const double rate = 250;
  PoissonArrivals arrivals(rate, 1234);
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double g = arrivals.NextGapSeconds();
    ASSERT_GT(g, 0);
    sum += g;
    sum_sq += g * g;
  }
  const double mean = sum / n;
  const double sd = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 1 / rate, 0.01 / rate);
  EXPECT_NEAR(sd, 1 / rate, 0.02 / rate);
}

TEST(PoissonArrivalsTest, CountsPerWindowArePoisson) {
  // Over 1 s windows at 100/s the count has mean 100 and variance 100.
  const auto t = PoissonSchedule(100, 2000, 99);
  std::vector<int> counts(2000, 0);
  for (double x : t) ++counts[static_cast<size_t>(x)];
  const double mean = std::accumulate(counts.begin(), counts.end(), 0.0) / counts.size();
  double var = 0;
  for (int c : counts) var += (c - mean) * (c - mean);
  var /= counts.size();
  EXPECT_NEAR(mean, 100, 1.5);
  EXPECT_NEAR(var, 100, 12);
}

TEST(PoissonScheduleTest, SortedInWindowAndReproducible) {
  const auto a = PoissonSchedule(50, 10, 7);
  const auto b = PoissonSchedule(50, 10, 7);
  const auto c = PoissonSchedule(50, 10, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), 10);
  EXPECT_NEAR(static_cast<double>(a.size()), 500, 4 * std::sqrt(500.0));
}

TEST(UniformIndexTest, CoversRangeEvenly) {
  std::mt19937_64 rng(5);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[UniformIndex(rng, 7)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

}  // namespace
}  // namespace odeserve::client
