#include "client/lib/budget_mix.h"

#include <map>

#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

TEST(BudgetMixTest, ParsesDurationsAndNone) {
  auto mix = ParseBudgetMix("5ms, 10ms,20ms,40ms,none");
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 5u);
  EXPECT_EQ((*mix)[0].label, "5ms");
  EXPECT_EQ(*(*mix)[0].budget, absl::Milliseconds(5));
  EXPECT_EQ(*(*mix)[3].budget, absl::Milliseconds(40));
  EXPECT_EQ((*mix)[4].label, "none");
  EXPECT_FALSE((*mix)[4].budget.has_value());
  EXPECT_DOUBLE_EQ((*mix)[1].weight, 1.0);
}

TEST(BudgetMixTest, CanonicalLabelsAndWeights) {
  auto mix = ParseBudgetMix("1500us:3,1s,NONE:0.5");
  ASSERT_TRUE(mix.ok()) << mix.status();
  EXPECT_EQ((*mix)[0].label, "1.5ms");
  EXPECT_DOUBLE_EQ((*mix)[0].weight, 3.0);
  EXPECT_EQ((*mix)[1].label, "1s");
  EXPECT_EQ((*mix)[2].label, "none");
  EXPECT_DOUBLE_EQ((*mix)[2].weight, 0.5);
}

TEST(BudgetMixTest, RejectsBadSpecsWithClearMessages) {
  for (const char* bad : {"", " ", "5ms,,10ms", "fast", "0ms", "-5ms", "5ms,5ms", "5ms:0",
                          "5ms:x", "inf", "5ms,5000us"}) {
    auto mix = ParseBudgetMix(bad);
    EXPECT_FALSE(mix.ok()) << "'" << bad << "' should be rejected";
    if (!mix.ok()) {
      EXPECT_EQ(mix.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_NE(ParseBudgetMix("5ms,fast").status().message().find("'fast'"), absl::string_view::npos);
}

TEST(BudgetSamplerTest, UniformAndWeightedFrequencies) {
  auto uniform = *ParseBudgetMix("5ms,10ms,20ms,40ms");
  BudgetSampler s(uniform, 42);
  std::map<size_t, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[s.Next()];
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [cls, c] : counts) EXPECT_NEAR(c, n / 4, n / 4 * 0.05) << "class " << cls;

  auto weighted = *ParseBudgetMix("5ms:3,40ms:1");
  BudgetSampler w(weighted, 42);
  int first = 0;
  for (int i = 0; i < n; ++i) first += w.Next() == 0;
  EXPECT_NEAR(first / static_cast<double>(n), 0.75, 0.015);
}

TEST(BudgetSamplerTest, DeterministicForASeed) {
  auto mix = *ParseBudgetMix("5ms,10ms,none");
  BudgetSampler a(mix, 9), b(mix, 9), c(mix, 10);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const size_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace odeserve::client
