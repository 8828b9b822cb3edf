// rpc/connection_acceptor: the plaintext gRPC port's accept loop, against plain sockets (no
// gRPC): it hands connections off, refuses a busy port, and when descriptors run out it closes
// what it cannot hold and serves again once they free up. Lowers RLIMIT_NOFILE: its own
// executable.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/rpc/connection_acceptor.h"

namespace odeserve::rpc {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// What the acceptor handed off: the descriptors, held open as gRPC would hold them.
class HandedOff {
 public:
  std::function<void(int)> Receiver() {
    return [this](int fd) {
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(fd);
      changed_.notify_all();
    };
  }
  // Whether `n` connections were handed off within `timeout`.
  bool AwaitCount(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return fds_.size() >= n; });
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fds_.size();
  }
  std::vector<int> fds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fds_;
  }
  void CloseAll() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : fds_) close(fd);
    closed_ += fds_.size();
    fds_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> fds_;
  size_t closed_ = 0;
};

// A blocking TCP connection to 127.0.0.1:port, or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int OpenDescriptors() {
  int open_count = 0;
  for (int fd = 0; fd < 4096; ++fd) open_count += fcntl(fd, F_GETFD) != -1 ? 1 : 0;
  return open_count;
}

TEST(ConnectionAcceptor, HandsEveryConnectionOffNonBlocking) {
  auto acceptor = ConnectionAcceptor::Listen({"127.0.0.1", 0});
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  ASSERT_GT((*acceptor)->port(), 0);
  HandedOff handed;
  (*acceptor)->Start(handed.Receiver());
  std::vector<int> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(Connect((*acceptor)->port()));
  ASSERT_TRUE(handed.AwaitCount(5, std::chrono::seconds(5))) << handed.count() << " handed off";
  for (int fd : handed.fds()) EXPECT_TRUE(fcntl(fd, F_GETFL) & O_NONBLOCK);
  EXPECT_EQ((*acceptor)->shed(), 0);
  handed.CloseAll();
  for (int fd : clients) close(fd);
}

TEST(ConnectionAcceptor, AWildcardAddressAcceptsOnLoopback) {
  auto acceptor = ConnectionAcceptor::Listen({"0.0.0.0", 0});
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  HandedOff handed;
  (*acceptor)->Start(handed.Receiver());
  const int client = Connect((*acceptor)->port());
  EXPECT_GE(client, 0);
  EXPECT_TRUE(handed.AwaitCount(1, std::chrono::seconds(5)));
  handed.CloseAll();
  close(client);
}

TEST(ConnectionAcceptor, ABusyPortIsRefusedNamingIt) {
  auto first = ConnectionAcceptor::Listen({"127.0.0.1", 0});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string port = std::to_string((*first)->port());
  auto second = ConnectionAcceptor::Listen({"127.0.0.1", (*first)->port()});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()),
              AllOf(HasSubstr("cannot listen on 127.0.0.1:" + port), HasSubstr("in use")));
  auto wildcard = ConnectionAcceptor::Listen({"0.0.0.0", (*first)->port()});
  EXPECT_FALSE(wildcard.ok()) << "a wildcard bind beside a bound port";
}

// Descriptors run out: with a reserve, connections past it are closed at once; without one,
// accept itself fails (EMFILE) and the spare descriptor sheds the connection. Either way, once
// the held connections close, a new one is handed off within a second.
class RunningOutOfDescriptors : public ::testing::TestWithParam<int> {};

TEST_P(RunningOutOfDescriptors, ShedsWhatItCannotHoldThenServesAgain) {
  AcceptorOptions options{"127.0.0.1", 0};
  options.reserved_descriptors = GetParam();
  auto acceptor = ConnectionAcceptor::Listen(options);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  const int port = (*acceptor)->port();
  HandedOff handed;
  (*acceptor)->Start(handed.Receiver());

  // 20 descriptors to spare here. The clients live in a child process (with the usual limit),
  // so that only the accepted ends count against it.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const rlimit low{static_cast<rlim_t>(OpenDescriptors() + 20), saved.rlim_max};
  int go[2], ready[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setrlimit(RLIMIT_NOFILE, &saved);
    char connected = 0;
    for (int i = 0; i < 40; ++i) connected += Connect(port) >= 0 ? 1 : 0;
    (void)!write(ready[1], &connected, 1);
    (void)!read(go[0], &connected, 1);  // until the parent has seen the shedding
    _exit(0);
  }
  char connected = 0;
  ASSERT_EQ(read(ready[0], &connected, 1), 1);
  ASSERT_EQ(connected, 40);
  // 40 connections, fewer than 20 descriptors: some are held, the rest shed.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((*acceptor)->shed() + static_cast<int64_t>(handed.count()) < 40 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT((*acceptor)->shed(), 0);
  EXPECT_LE(handed.count(), 20u);
  EXPECT_EQ((*acceptor)->shed() + static_cast<int64_t>(handed.count()), 40);

  (void)!write(go[1], &connected, 1);
  int status = 0;
  waitpid(child, &status, 0);
  handed.CloseAll();  // gRPC closes a connection whose client went away
  const int client = Connect(port);
  EXPECT_GE(client, 0);
  EXPECT_TRUE(handed.AwaitCount(1, std::chrono::seconds(1))) << "no connection handed off after the descriptors freed up";
  handed.CloseAll();
  if (client >= 0) close(client);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (int fd : {go[0], go[1], ready[0], ready[1]}) close(fd);
}

INSTANTIATE_TEST_SUITE_P(ReservedOrNot, RunningOutOfDescriptors, ::testing::Values(8, 0),
                         [](const auto& info) { return info.param == 0 ? "NoReserve" : "Reserve8"; });

}  // namespace
}  // namespace odeserve::rpc
