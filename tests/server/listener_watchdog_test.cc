// rpc/listener_watchdog: the descriptor limit, and the check that a listener still accepts,
// against plain sockets (no gRPC).

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/rpc/listener_watchdog.h"

namespace odeserve::rpc {
namespace {

using ::testing::HasSubstr;

// A TCP socket listening on 127.0.0.1 at a free port; it accepts only while `accepting` is set.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(fd_, 16);
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() {
    StopAccepting();
    close(fd_);
  }
  void StartAccepting() {
    accepting_ = true;
    thread_ = std::thread([this] {
      while (accepting_) {
        const int client = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK);
        if (client >= 0) close(client);
      }
    });
  }
  void StopAccepting() {
    if (!accepting_) return;
    accepting_ = false;
    const int wake = socket(AF_INET, SOCK_STREAM, 0);  // unblocks accept
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port_));
    connect(wake, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    thread_.join();
    close(wake);
  }
  int fd() const { return fd_; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> accepting_{false};
  std::thread thread_;
};

ListenerCheckOptions CheckOf(const Listener& listener) {
  ListenerCheckOptions options;
  options.port = listener.port();
  options.listeners = {listener.fd()};
  options.accept_timeout = absl::Milliseconds(200);
  return options;
}

TEST(RaiseOpenFileLimit, RaisesTheSoftLimitToTheHardLimit) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlimit original = limit;
  limit.rlim_cur = std::min<rlim_t>(256, limit.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  const std::string said = RaiseOpenFileLimit();
  rlimit raised{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &raised), 0);
  if (original.rlim_max != RLIM_INFINITY && original.rlim_max > 256) {
    EXPECT_EQ(raised.rlim_cur, original.rlim_max) << said;
    EXPECT_THAT(said, HasSubstr("soft limit raised from 256"));
  }
  setrlimit(RLIMIT_NOFILE, &original);
}

TEST(FindListeningSockets, FindsThisProcesssListenerByPort) {
  Listener listener;
  EXPECT_THAT(FindListeningSockets(listener.port()), ::testing::ElementsAre(listener.fd()));
  EXPECT_TRUE(FindListeningSockets(1).empty());
}

TEST(CheckListenerAccepts, PassesWhileTheListenerAccepts) {
  Listener listener;
  listener.StartAccepting();
  EXPECT_TRUE(CheckListenerAccepts(CheckOf(listener)).ok());
  ListenerCheckOptions rescanned = CheckOf(listener);
  rescanned.listeners = {};  // found in /proc/self/fd
  EXPECT_TRUE(CheckListenerAccepts(rescanned).ok());
}

// What gRPC 1.51 leaves after a failed accept: a socket that still listens (the kernel
// completes handshakes into its queue) but that nobody accepts from.
TEST(CheckListenerAccepts, FailsWhenNobodyAccepts) {
  Listener listener;
  const absl::Status status = CheckListenerAccepts(CheckOf(listener));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("unaccepted"));
  EXPECT_GE(PendingAccepts(listener.fd()).value_or(0), 1) << "the probe waits in the accept queue";
}

TEST(CheckListenerAccepts, FailsWhenNothingListens) {
  ListenerCheckOptions options;
  {
    Listener gone;
    options.port = gone.port();
  }
  const absl::Status status = CheckListenerAccepts(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no socket of this process listens"));
}

TEST(ProbeHostFor, ProbesWildcardBindsOnLoopback) {
  EXPECT_EQ(ProbeHostFor("0.0.0.0"), "127.0.0.1");
  EXPECT_EQ(ProbeHostFor("[::]"), "::1");
  EXPECT_EQ(ProbeHostFor("[::1]"), "::1");
  EXPECT_EQ(ProbeHostFor("10.1.2.3"), "10.1.2.3");
}

TEST(ListenerWatchdog, GivesUpOnceAfterTheFailuresInARow) {
  Listener listener;  // never accepts
  std::promise<std::string> reason;
  std::atomic<int> calls{0};
  {
    ListenerWatchdog watchdog(CheckOf(listener), absl::Milliseconds(10), 2, [&](const std::string& why) {
      if (calls++ == 0) reason.set_value(why);
    });
    auto future = reason.get_future();
    ASSERT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_THAT(future.get(), HasSubstr("unaccepted"));
  }
  EXPECT_EQ(calls.load(), 1);
}

TEST(ListenerWatchdog, LeavesALiveListenerAlone) {
  Listener listener;
  listener.StartAccepting();
  std::atomic<int> calls{0};
  {
    ListenerWatchdog watchdog(CheckOf(listener), absl::Milliseconds(10), 1, [&](const std::string&) { ++calls; });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace odeserve::rpc
