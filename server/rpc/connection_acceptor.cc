#include "server/rpc/connection_acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/common/log.h"
#include "server/common/log_rate_limiter.h"
#include "server/common/thread_name.h"

namespace odeserve::rpc {
namespace {

bool IsWildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::" || host == "*"; }

// A bound, listening socket for `host`:`port`, or an error naming them.
absl::StatusOr<int> BindAndListen(const std::string& host, int port, int backlog) {
  const std::string where = absl::StrCat(host, ":", port);
  auto listen_on = [&](int family, const sockaddr* address, socklen_t length) -> absl::StatusOr<int> {
    const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("socket for ", where, ": ", std::strerror(errno)));
    const int one = 1, zero = 0;
    // Quick restarts reuse the port; SO_REUSEPORT stays off, so a busy port is refused.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6 && IsWildcard(host)) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, address, length) != 0 || listen(fd, backlog) != 0) {
      const int error = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", std::strerror(error)));
    }
    return fd;
  };
  if (IsWildcard(host)) {
    // Both families on one socket where the host has IPv6 (as gRPC binds a wildcard), else IPv4.
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(static_cast<uint16_t>(port));
    auto fd = listen_on(AF_INET6, reinterpret_cast<const sockaddr*>(&any6), sizeof(any6));
    if (fd.ok() || absl::StrContains(fd.status().message(), "in use")) return fd;
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons(static_cast<uint16_t>(port));
    return listen_on(AF_INET, reinterpret_cast<const sockaddr*>(&any4), sizeof(any4));
  }
  std::string name(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int error = getaddrinfo(name.c_str(), service.c_str(), &hints, &resolved); error != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", where, ": ", gai_strerror(error)));
  }
  absl::StatusOr<int> fd = absl::UnavailableError(absl::StrCat("no address for ", where));
  for (const addrinfo* a = resolved; a != nullptr; a = a->ai_next) {
    fd = listen_on(a->ai_family, a->ai_addr, a->ai_addrlen);
    if (fd.ok()) break;
  }
  freeaddrinfo(resolved);
  return fd;
}

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// At most 5 lines per 10 s: a flood of connections must not flood the log.
void WarnRateLimited(const std::string& line) {
  static std::mutex mutex;
  static LogRateLimiter limiter(5, absl::Seconds(10));
  std::lock_guard<std::mutex> lock(mutex);
  int64_t suppressed = 0;
  if (!limiter.Admit(absl::Now(), &suppressed)) return;
  LogWarning(suppressed > 0 ? absl::StrCat(line, " (", suppressed, " similar lines dropped)") : line);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> ConnectionAcceptor::Listen(AcceptorOptions options) {
  auto fd = BindAndListen(options.host, options.port, options.backlog);
  if (!fd.ok()) return fd.status();
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int error = errno;
    close(*fd);
    return absl::InternalError(absl::StrCat("pipe for the gRPC acceptor: ", std::strerror(error)));
  }
  return std::unique_ptr<ConnectionAcceptor>(
      new ConnectionAcceptor(std::move(options), *fd, port, wake[0], wake[1], OpenSpare()));
}

ConnectionAcceptor::ConnectionAcceptor(AcceptorOptions options, int listen_fd, int port, int wake_read,
                                       int wake_write, int spare)
    : options_(std::move(options)),
      listen_fd_(listen_fd),
      port_(port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      spare_(spare) {}

ConnectionAcceptor::~ConnectionAcceptor() {
  if (thread_.joinable()) {
    const char stop = 1;
    (void)!write(wake_write_, &stop, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_read_, wake_write_, spare_}) {
    if (fd >= 0) close(fd);
  }
}

void ConnectionAcceptor::Start(std::function<void(int fd)> hand_off) {
  hand_off_ = std::move(hand_off);
  thread_ = std::thread([this] { Loop(); });
}

bool ConnectionAcceptor::WaitStopped(int timeout_ms) {
  pollfd wake{wake_read_, POLLIN, 0};
  return poll(&wake, 1, timeout_ms) > 0;
}

void ConnectionAcceptor::Loop() {
  NameCurrentThread("grpc-acceptor");
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      if (WaitStopped(10)) return;  // should not happen; never spin
      continue;
    }
    if (fds[1].revents != 0) return;
    AcceptPending();
  }
}

void ConnectionAcceptor::AcceptPending() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      // Descriptors are handed out lowest first, so every one below `fd` is in use.
      rlimit limit{};
      if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
          static_cast<rlim_t>(fd) + static_cast<rlim_t>(options_.reserved_descriptors) >= limit.rlim_cur) {
        Shed(fd, "it would leave fewer than the reserved descriptors free");
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      hand_off_(fd);
      continue;
    }
    const int error = errno;
    if (error == EINTR || error == ECONNABORTED) continue;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EMFILE || error == ENFILE) {
      // Out of descriptors: take the one kept spare, accept into it and close, so the client
      // hears at once and the queue does not fill with connections nobody will serve.
      if (spare_ >= 0) close(spare_);
      const int dropped = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (dropped >= 0) Shed(dropped, "the process has no file descriptor left");
      spare_ = OpenSpare();  // after the shed connection's descriptor is free again
      if (dropped >= 0 && spare_ >= 0) continue;
    } else {
      WarnRateLimited(absl::StrCat("gRPC accept failed: ", std::strerror(error), "; retrying"));
    }
    // Nothing to shed with (or an unexpected error): wait a little instead of spinning.
    WaitStopped(10);
    return;
  }
}

void ConnectionAcceptor::Shed(int fd, const char* why) {
  close(fd);
  const int64_t shed = shed_.fetch_add(1) + 1;
  WarnRateLimited(absl::StrCat("closed an incoming gRPC connection: ", why, " (", shed,
                               " closed so far; raise the open-file limit to serve more connections)"));
}

}  // namespace odeserve::rpc
