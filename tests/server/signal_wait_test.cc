// WaitForSignal blocks signals process-wide in spirit: its own executable.
#include "server/common/signal_wait.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace odeserve {
namespace {

class SignalWait : public ::testing::Test {
 protected:
  void SetUp() override {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGUSR1);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &signals_, nullptr), 0);
  }
  // Sends SIGUSR1 to the calling (waiting) thread after `delay`.
  std::thread SignalAfter(absl::Duration delay) {
    const pthread_t waiter = pthread_self();
    return std::thread([waiter, delay] {
      absl::SleepFor(delay);
      pthread_kill(waiter, SIGUSR1);
    });
  }
  sigset_t signals_;
};

TEST_F(SignalWait, HousekeepingRunsEveryIntervalUntilTheSignal) {
  std::atomic<int> runs{0};
  std::thread sender = SignalAfter(absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  const int signal_number = WaitForSignal(signals_, absl::Milliseconds(20), [&] { runs.fetch_add(1); });
  const absl::Duration waited = absl::Now() - start;
  sender.join();
  EXPECT_EQ(signal_number, SIGUSR1);
  EXPECT_GE(waited, absl::Milliseconds(290));
  // About 15 intervals passed; a loaded machine may run fewer, never more than fit.
  EXPECT_GE(runs.load(), 3);
  EXPECT_LE(runs.load(), waited / absl::Milliseconds(20));
}

TEST_F(SignalWait, AZeroIntervalNeverRunsHousekeeping) {
  std::atomic<int> runs{0};
  std::thread sender = SignalAfter(absl::Milliseconds(100));
  EXPECT_EQ(WaitForSignal(signals_, absl::ZeroDuration(), [&] { runs.fetch_add(1); }), SIGUSR1);
  sender.join();
  EXPECT_EQ(runs.load(), 0);
}

TEST_F(SignalWait, APendingSignalReturnsAtOnce) {
  ASSERT_EQ(pthread_kill(pthread_self(), SIGUSR1), 0);
  std::atomic<int> runs{0};
  EXPECT_EQ(WaitForSignal(signals_, absl::Seconds(60), [&] { runs.fetch_add(1); }), SIGUSR1);
  EXPECT_EQ(runs.load(), 0);
}

}  // namespace
}  // namespace odeserve
