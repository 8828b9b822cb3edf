#include "server/metrics/http_exposer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/thread_name.h"

namespace odeserve::metrics {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxRequestBytes = 16 * 1024;
constexpr size_t kMaxConnections = 64;  // more wait in the listen backlog
// Deadlines for a whole request head and a whole response: per-recv timeouts would let a client
// that sends a byte a second hold its connection (and, served in turn, every scrape) for hours.
constexpr auto kRequestDeadline = std::chrono::seconds(2);
constexpr auto kResponseDeadline = std::chrono::seconds(5);
// After its response a connection is shut for writing and read until the client closes, at most
// this long: closing with unread input (a pipelined request, an oversized head) would reset the
// connection and could discard the response still in flight.
constexpr auto kLingerDeadline = std::chrono::seconds(1);
// accept() failing for want of descriptors leaves the connection queued and the socket readable:
// pause accepting rather than spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
constexpr int kStopPollMs = 200;  // the loop wakes this often to notice Stop()

std::string Response(const std::string& status, const std::string& content_type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

HttpExposer::HttpExposer(std::function<std::string()> render) : render_(std::move(render)) {}

HttpExposer::~HttpExposer() { Stop(); }

absl::Status HttpExposer::Start(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", host, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    // Non-blocking: a connection poll() reported may be gone by the time accept() runs.
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", host, ":", port, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  thread_ = std::thread([this] {
    NameCurrentThread("metrics-http");
    Serve();
  });
  return absl::OkStatus();
}

void HttpExposer::Stop() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

struct HttpExposer::Connection {
  enum class Phase { kReading, kWriting, kLingering };
  int fd = -1;
  Clock::time_point deadline;
  Phase phase = Phase::kReading;
  std::string request;
  std::string response;  // set once the request head is complete
  size_t sent = 0;
};

namespace {

// Sends what the socket takes now: true while some is left for later (the socket is full), false
// once all is sent or the send failed.
bool SendSome(int fd, const std::string& data, size_t& sent) {
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return false;
}

}  // namespace

void HttpExposer::Serve() {
  std::vector<Connection> connections;
  std::vector<pollfd> polled;
  using Phase = Connection::Phase;
  // Reads what has arrived, answers a complete head, writes what the socket takes, then reads
  // and drops input until the client closes; false once the connection should close.
  auto advance = [this](Connection& c) {
    char buffer[4096];
    if (c.phase != Phase::kWriting) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
      if (n <= 0) return false;
      if (c.phase == Phase::kLingering) return true;
      c.request.append(buffer, static_cast<size_t>(n));
      if (c.request.find("\r\n\r\n") == std::string::npos && c.request.size() < kMaxRequestBytes) return true;
      c.response = Respond(c.request);
      c.phase = Phase::kWriting;
      c.deadline = Clock::now() + kResponseDeadline;
    }
    if (SendSome(c.fd, c.response, c.sent)) return true;
    if (c.sent < c.response.size()) return false;  // the send failed
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Phase::kLingering;
    c.deadline = Clock::now() + kLingerDeadline;
    return true;
  };
  Clock::time_point accept_paused_until;
  while (!stopping_.load()) {
    const auto now = Clock::now();
    int timeout_ms = kStopPollMs;
    // Wake by `t` (rounded up, so an expired deadline is seen on the next pass, not spun on).
    auto wake_by = [&](Clock::time_point t) {
      const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, timeout_ms));
    };
    polled.clear();
    const bool accepting = connections.size() < kMaxConnections && now >= accept_paused_until;
    polled.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    if (now < accept_paused_until) wake_by(accept_paused_until);
    for (const Connection& c : connections) {
      polled.push_back({c.fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
      wake_by(c.deadline);
    }
    const int ready = ::poll(polled.data(), polled.size(), timeout_ms);
    const auto after = Clock::now();
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const bool open = ready > 0 && polled[i + 1].revents != 0 ? advance(c) : after < c.deadline;
      if (!open || after >= c.deadline) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    connections.erase(std::remove_if(connections.begin(), connections.end(),
                                     [](const Connection& c) { return c.fd < 0; }),
                      connections.end());
    if (ready > 0 && (polled[0].revents & POLLIN) != 0) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        Connection c;
        c.fd = fd;
        c.deadline = after + kRequestDeadline;
        connections.push_back(std::move(c));
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        accept_paused_until = after + kAcceptBackoff;  // out of descriptors (EMFILE, ENFILE, ...)
      }
    }
  }
  for (const Connection& c : connections) ::close(c.fd);
}

std::string HttpExposer::Respond(const std::string& request) {
  if (request.find("\r\n\r\n") == std::string::npos) {
    return Response("431 Request Header Fields Too Large", "text/plain",
                    absl::StrCat("request head over ", kMaxRequestBytes, " bytes\n"));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  if (!absl::StartsWith(line, "GET ") && !absl::StartsWith(line, "HEAD ")) {
    return Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n");
  }
  const size_t path_start = line.find(' ') + 1;
  const std::string path = line.substr(path_start, line.find(' ', path_start) - path_start);
  if (path != "/metrics" && !absl::StartsWith(path, "/metrics?")) {
    return Response("404 Not Found", "text/plain", "see /metrics\n");
  }
  std::string response = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_());
  if (absl::StartsWith(line, "HEAD ")) response.resize(response.find("\r\n\r\n") + 4);
  return response;
}

}  // namespace odeserve::metrics
