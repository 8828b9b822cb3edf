#include "server/common/log_rate_limiter.h"

#include <gtest/gtest.h>

namespace odeserve {
namespace {

TEST(LogRateLimiter, AdmitsABurstPerWindowAndCountsWhatItRefused) {
  LogRateLimiter limiter(3, absl::Seconds(10));
  const absl::Time start = absl::FromUnixSeconds(1000);
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limiter.Admit(start + absl::Seconds(i), &suppressed)) << i;
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Admit(start + absl::Seconds(5), &suppressed)) << i;
  // The next window admits again and reports the five refused lines once.
  ASSERT_TRUE(limiter.Admit(start + absl::Seconds(10), &suppressed));
  EXPECT_EQ(suppressed, 5);
  ASSERT_TRUE(limiter.Admit(start + absl::Seconds(11), &suppressed));
  EXPECT_EQ(suppressed, 0);
}

TEST(LogRateLimiter, TheWindowStartsAtTheFirstLineAfterAQuietSpell) {
  LogRateLimiter limiter(1, absl::Seconds(10));
  const absl::Time start = absl::FromUnixSeconds(1000);
  int64_t suppressed = 0;
  ASSERT_TRUE(limiter.Admit(start, &suppressed));
  EXPECT_FALSE(limiter.Admit(start + absl::Seconds(9), &suppressed));
  ASSERT_TRUE(limiter.Admit(start + absl::Seconds(100), &suppressed));
  EXPECT_EQ(suppressed, 1);
  EXPECT_FALSE(limiter.Admit(start + absl::Seconds(105), &suppressed));
}

}  // namespace
}  // namespace odeserve
