// server/common/task_pool: tasks run on the pool's own named threads, a full queue refuses, and
// destruction runs every task already accepted.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/common/task_pool.h"

#include <pthread.h>

namespace odeserve {
namespace {

using ::testing::HasSubstr;

// A gate tasks wait at until the test opens it (or 10 s pass, so a broken test ends).
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++waiting_;
    changed_.notify_all();
    changed_.wait_for(lock, std::chrono::seconds(10), [this] { return open_; });
  }
  // Whether `n` tasks were waiting at once within 10 s.
  bool AwaitWaiters(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int waiting_ = 0;
  bool open_ = false;
};

std::string CurrentThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(TaskPool, TasksRunOnThePoolsNamedThreadsNotTheCallers) {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::set<std::string> names;
  {
    TaskPool pool({"pool-test", 2, 64});
    EXPECT_EQ(pool.threads(), 2);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(pool.Post([&] {
                        std::lock_guard<std::mutex> lock(mutex);
                        ids.insert(std::this_thread::get_id());
                        names.insert(CurrentThreadName());
                      }).ok());
    }
  }
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  EXPECT_LE(ids.size(), 2u);
  EXPECT_EQ(names, std::set<std::string>{"pool-test"});
}

TEST(TaskPool, BothThreadsWorkAtOnce) {
  Gate gate;
  std::atomic<int> ran{0};
  {
    TaskPool pool({"pool-test", 2, 64});
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(pool.Post([&] {
                        gate.Wait();
                        ++ran;
                      }).ok());
    }
    EXPECT_TRUE(gate.AwaitWaiters(2));  // both tasks blocked at once: two threads hold them
    EXPECT_EQ(ran.load(), 0);
    gate.Open();
  }
  EXPECT_EQ(ran.load(), 2);
}

TEST(TaskPool, AFullQueueRefusesWithResourceExhaustedAndQueuesNothing) {
  Gate gate;
  std::atomic<int> ran{0};
  {
    TaskPool pool({"pool-test", 1, 2});
    ASSERT_TRUE(pool.Post([&] { gate.Wait(); ++ran; }).ok());
    ASSERT_TRUE(gate.AwaitWaiters(1));  // the one thread is busy: what follows waits
    ASSERT_TRUE(pool.Post([&] { ++ran; }).ok());
    ASSERT_TRUE(pool.Post([&] { ++ran; }).ok());
    EXPECT_EQ(pool.waiting(), 2u);
    const absl::Status refused = pool.Post([&] { ran += 100; });
    EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("2 tasks already wait for one of 1 threads"));
    gate.Open();
  }
  EXPECT_EQ(ran.load(), 3);  // the refused task never ran
}

TEST(TaskPool, DestructionRunsEveryAcceptedTaskFirst) {
  Gate gate;
  std::atomic<int> ran{0};
  std::thread opener;
  {
    TaskPool pool({"pool-test", 1, 100});
    ASSERT_TRUE(pool.Post([&] { gate.Wait(); ++ran; }).ok());
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.Post([&] { ++ran; }).ok());
    ASSERT_TRUE(gate.AwaitWaiters(1));
    opener = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate.Open();
    });
  }  // the destructor waits for all 51, queued ones included
  EXPECT_EQ(ran.load(), 51);
  opener.join();
}

TEST(TaskPool, ZeroThreadsMeansOne) {
  std::atomic<int> ran{0};
  {
    TaskPool pool({"pool-test", 0, 4});
    EXPECT_EQ(pool.threads(), 1);
    ASSERT_TRUE(pool.Post([&] { ++ran; }).ok());
  }
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace odeserve
