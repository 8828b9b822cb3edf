#include "server/rpc/listener_watchdog.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/log.h"

namespace odeserve::rpc {
namespace {

std::string LimitText(rlim_t value) {
  return value == RLIM_INFINITY ? std::string("unlimited") : absl::StrCat(value);
}

// The TCP port `fd` is bound to, or -1 when it is no TCP socket.
int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return -1;
}

bool ListensOn(int fd, int port) {
  int accepting = 0;
  socklen_t length = sizeof(accepting);
  return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0 && accepting == 1 &&
         BoundPort(fd) == port;
}

// Closes a descriptor when it goes out of scope.
struct ScopedFd {
  int fd = -1;
  ~ScopedFd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::string RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return absl::StrCat("open files: getrlimit failed: ", std::strerror(errno));
  if (limit.rlim_cur >= limit.rlim_max) {
    return absl::StrCat("open files: at most ", LimitText(limit.rlim_cur), " (the hard limit)");
  }
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0 && limit.rlim_max == RLIM_INFINITY) {
    // An unlimited hard limit: the kernel still caps descriptors at fs.nr_open.
    std::ifstream nr_open("/proc/sys/fs/nr_open");
    rlim_t most = 0;
    if (nr_open >> most && most > before) {
      limit.rlim_cur = most;
      setrlimit(RLIMIT_NOFILE, &limit);
    }
  }
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur == before) {
    return absl::StrCat("open files: at most ", LimitText(before), "; raising it to the hard limit ",
                        LimitText(limit.rlim_max), " failed: ", std::strerror(errno));
  }
  return absl::StrCat("open files: soft limit raised from ", LimitText(before), " to ", LimitText(limit.rlim_cur),
                      " (hard limit ", LimitText(limit.rlim_max), ")");
}

std::vector<int> FindListeningSockets(int port) {
  std::vector<int> found;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  const int own = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == own) continue;
    struct stat info {};
    if (fstat(fd, &info) == 0 && S_ISSOCK(info.st_mode) && ListensOn(fd, port)) found.push_back(fd);
  }
  closedir(dir);
  return found;
}

absl::StatusOr<int> PendingAccepts(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("TCP_INFO of descriptor ", fd, ": ", std::strerror(errno)));
  }
  if (info.tcpi_state != TCP_LISTEN) {
    return absl::FailedPreconditionError(absl::StrCat("descriptor ", fd, " is not a listening socket"));
  }
  return static_cast<int>(info.tcpi_unacked);  // a listener's TCP_INFO: its accept queue length
}

std::string ProbeHostFor(const std::string& bind_host) {
  if (bind_host.empty() || bind_host == "0.0.0.0") return "127.0.0.1";
  if (bind_host == "::" || bind_host == "[::]") return "::1";
  if (bind_host.size() > 2 && bind_host.front() == '[' && bind_host.back() == ']') {
    return bind_host.substr(1, bind_host.size() - 2);
  }
  return bind_host;
}

absl::Status CheckListenerAccepts(const ListenerCheckOptions& options) {
  std::vector<int> listeners;
  for (int fd : options.listeners) {
    if (ListensOn(fd, options.port)) listeners.push_back(fd);
  }
  if (listeners.empty()) listeners = FindListeningSockets(options.port);
  if (listeners.empty()) {
    return absl::UnavailableError(absl::StrCat("no socket of this process listens on port ", options.port));
  }

  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string port = absl::StrCat(options.port);
  if (const int error = getaddrinfo(options.probe_host.c_str(), port.c_str(), &hints, &resolved); error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", options.probe_host, ": ", gai_strerror(error)));
  }
  ScopedFd probe;
  probe.fd = socket(resolved->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int socket_errno = errno;
  int connected = probe.fd < 0 ? -1 : connect(probe.fd, resolved->ai_addr, resolved->ai_addrlen);
  const int connect_errno = errno;
  freeaddrinfo(resolved);
  const std::string target = absl::StrCat(options.probe_host, ":", options.port);
  if (probe.fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open a probe socket: ", std::strerror(socket_errno)));
  }
  const absl::Time give_up = absl::Now() + options.accept_timeout;
  if (connected != 0) {
    if (connect_errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("probe connection to ", target, " failed: ", std::strerror(connect_errno)));
    }
    pollfd writable{probe.fd, POLLOUT, 0};
    const int ready = poll(&writable, 1, static_cast<int>(absl::ToInt64Milliseconds(options.accept_timeout)));
    int error = 0;
    socklen_t length = sizeof(error);
    if (ready != 1 || getsockopt(probe.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      return absl::UnavailableError(absl::StrCat("probe connection to ", target, " failed: ",
                                                 ready == 1 ? std::strerror(error) : "timed out"));
    }
  }
  // The kernel completes the handshake whether or not anyone accepts: only an empty accept
  // queue shows that the server took the probe.
  int pending = 0;
  while (true) {
    pending = 0;
    for (int fd : listeners) pending += PendingAccepts(fd).value_or(0);
    if (pending == 0) return absl::OkStatus();
    if (absl::Now() >= give_up) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::UnavailableError(absl::StrCat(
      "the gRPC listener on port ", options.port, " left ", pending, " connection(s) unaccepted for ",
      absl::FormatDuration(options.accept_timeout),
      " (gRPC 1.51 stops accepting after a failed accept, e.g. when file descriptors ran out)"));
}

ListenerWatchdog::ListenerWatchdog(ListenerCheckOptions options, absl::Duration interval, int failures_to_give_up,
                                   std::function<void(const std::string&)> on_dead)
    : options_(std::move(options)),
      interval_(interval),
      failures_to_give_up_(std::max(1, failures_to_give_up)),
      on_dead_(std::move(on_dead)),
      thread_([this] { Loop(); }) {}

ListenerWatchdog::~ListenerWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ListenerWatchdog::Loop() {
  int failures = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, absl::ToChronoNanoseconds(interval_), [&] { return stopping_; })) {
    lock.unlock();
    const absl::Status status = CheckListenerAccepts(options_);
    lock.lock();
    if (status.ok()) {
      failures = 0;
      continue;
    }
    ++failures;
    LogWarning(absl::StrCat("gRPC listener check failed (", failures, " of ", failures_to_give_up_,
                            " in a row): ", status.message()));
    if (failures >= failures_to_give_up_) {
      lock.unlock();
      on_dead_(std::string(status.message()));
      return;
    }
  }
}

}  // namespace odeserve::rpc
