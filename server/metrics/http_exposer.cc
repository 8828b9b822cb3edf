#include "server/metrics/http_exposer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/thread_name.h"
#include "server/metrics/http_request.h"

namespace odeserve::metrics {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxRequestBytes = kMaxRequestHeadBytes;
// Connections held at once: at most this, and at most a quarter of the soft RLIMIT_NOFILE (the
// rest is gRPC's, whose listener dies on an accept that finds no descriptor), at least
// kMinConnections. When the table is full a new connection takes the place of the oldest one
// that has been answered, else of the oldest that has not sent a whole request (a stalled client),
// else of the oldest being written to: a scrape sends its whole request at once and is answered
// in the wake-up that accepts it, so stalled clients cannot keep it waiting however many they are.
constexpr size_t kMaxConnections = 1024;
constexpr size_t kMinConnections = 16;
// Responses being written at once (each holds a rendered body): a request completed when this
// many are being written cuts the oldest of them off.
constexpr size_t kMaxWriting = 64;
// The kernel caps it at net.core.somaxconn; the loop drains it on every wake-up.
constexpr int kListenBacklog = 4096;
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
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
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
  max_connections_ = kMaxConnections;
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    max_connections_ = std::clamp<size_t>(static_cast<size_t>(files.rlim_cur / 4), kMinConnections, kMaxConnections);
  }
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
  enum class Phase { kFree, kReading, kWriting, kLingering };
  int fd = -1;
  Clock::time_point deadline;
  Phase phase = Phase::kFree;
  std::string request;
  std::string response;  // set once the request head is complete
  size_t sent = 0;
  int prev = -1;  // neighbours in its phase's queue (slot indexes, -1: none)
  int next = -1;
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
  using Phase = Connection::Phase;
  // A fixed table of slots, and per phase a queue of its connections, oldest first. Everyone in a
  // phase got the same deadline on entering it, so the oldest is also the first to expire: expiry
  // and eviction look only at the fronts (O(1) per connection).
  std::vector<Connection> slots(max_connections_);
  std::vector<int> free_slots;
  for (size_t i = slots.size(); i-- > 0;) free_slots.push_back(static_cast<int>(i));
  struct Queue {
    int head = -1;
    int tail = -1;
    size_t size = 0;
  };
  Queue queues[4];  // by Phase; kFree's is unused
  auto queue_of = [&](Phase phase) -> Queue& { return queues[static_cast<int>(phase)]; };
  auto unlink = [&](int i) {
    Connection& c = slots[i];
    if (c.phase == Phase::kFree) return;
    Queue& q = queue_of(c.phase);
    (c.prev >= 0 ? slots[c.prev].next : q.head) = c.next;
    (c.next >= 0 ? slots[c.next].prev : q.tail) = c.prev;
    c.prev = c.next = -1;
    --q.size;
  };
  // Moves slot `i` to the back of `phase`'s queue with a deadline `budget` from `now`.
  auto enter = [&](int i, Phase phase, Clock::duration budget, Clock::time_point now) {
    unlink(i);
    Connection& c = slots[i];
    Queue& q = queue_of(phase);
    c.phase = phase;
    c.deadline = now + budget;
    c.prev = q.tail;
    c.next = -1;
    (q.tail >= 0 ? slots[q.tail].next : q.head) = i;
    q.tail = i;
    ++q.size;
  };
  auto release = [&](int i) {
    Connection& c = slots[i];
    unlink(i);
    ::close(c.fd);
    c.fd = -1;
    c.phase = Phase::kFree;
    std::string().swap(c.request);  // give the memory back, not just the length
    std::string().swap(c.response);
    c.sent = 0;
    free_slots.push_back(i);
  };
  // Reads what has arrived, answers a complete head, writes what the socket takes, then reads
  // and drops input until the client closes; false once the connection should close.
  auto advance = [&](int i, Clock::time_point now) {
    Connection& c = slots[i];
    char buffer[4096];
    if (c.phase != Phase::kWriting) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
      if (n <= 0) return false;
      if (c.phase == Phase::kLingering) return true;
      c.request.append(buffer, static_cast<size_t>(n));
      if (!RequestHeadReady(c.request)) return true;
      if (queue_of(Phase::kWriting).size >= kMaxWriting) release(queue_of(Phase::kWriting).head);
      c.response = Respond(c.request);
      std::string().swap(c.request);
      enter(i, Phase::kWriting, kResponseDeadline, now);
    }
    if (SendSome(c.fd, c.response, c.sent)) return true;
    if (c.sent < c.response.size()) return false;  // the send failed
    std::string().swap(c.response);
    ::shutdown(c.fd, SHUT_WR);
    enter(i, Phase::kLingering, kLingerDeadline, now);
    return true;
  };
  std::vector<pollfd> polled;
  std::vector<int> polled_slots;  // polled[k + 1] is slots[polled_slots[k]]
  Clock::time_point accept_paused_until;
  constexpr Phase kActive[] = {Phase::kReading, Phase::kWriting, Phase::kLingering};
  while (!stopping_.load()) {
    const auto now = Clock::now();
    int timeout_ms = kStopPollMs;
    // Wake by `t` (rounded up, so an expired deadline is seen on the next pass, not spun on).
    auto wake_by = [&](Clock::time_point t) {
      const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, timeout_ms));
    };
    polled.clear();
    polled_slots.clear();
    // A full table does not stop accepting: a new connection evicts an old one.
    const bool accepting = now >= accept_paused_until;
    polled.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    if (!accepting) wake_by(accept_paused_until);
    for (const Phase phase : kActive) {
      const Queue& q = queue_of(phase);
      if (q.head >= 0) wake_by(slots[q.head].deadline);
      for (int i = q.head; i >= 0; i = slots[i].next) {
        polled.push_back({slots[i].fd, static_cast<short>(phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
        polled_slots.push_back(i);
      }
    }
    const int ready = ::poll(polled.data(), polled.size(), timeout_ms);
    const auto after = Clock::now();
    if (ready > 0) {
      for (size_t k = 0; k < polled_slots.size(); ++k) {
        const int i = polled_slots[k];
        // A slot closed earlier in this pass (a writer cut off by kMaxWriting) is skipped.
        if (polled[k + 1].revents == 0 || slots[i].fd != polled[k + 1].fd) continue;
        if (!advance(i, after)) release(i);
      }
    }
    for (const Phase phase : kActive) {
      for (Queue& q = queue_of(phase); q.head >= 0 && after >= slots[q.head].deadline;) release(q.head);
    }
    if (ready > 0 && (polled[0].revents & POLLIN) != 0) {
      // Everything pending, not one per wake-up: behind a flood of stalled connections a scrape
      // would wait its turn in the backlog. Bounded, so a flood cannot starve the others.
      for (size_t accepted = 0; accepted < max_connections_;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK) {
            accept_paused_until = after + kAcceptBackoff;  // out of descriptors (EMFILE, ENFILE, ...)
          }
          break;
        }
        ++accepted;
        if (free_slots.empty()) {
          const Queue& answered = queue_of(Phase::kLingering);
          const Queue& stalled = queue_of(Phase::kReading);
          release(answered.head >= 0 ? answered.head
                                     : stalled.head >= 0 ? stalled.head : queue_of(Phase::kWriting).head);
        }
        const int i = free_slots.back();
        free_slots.pop_back();
        slots[i].fd = fd;
        enter(i, Phase::kReading, kRequestDeadline, after);
        // A scrape's request has usually arrived by now: answer it in this pass.
        if (!advance(i, after)) release(i);
      }
    }
  }
  for (const Connection& c : slots) {
    if (c.fd >= 0) ::close(c.fd);
  }
}

std::string HttpExposer::Respond(const std::string& request) {
  const MetricsRequest kind = ParseRequestHead(request);
  switch (kind) {
    case MetricsRequest::kHeadTooLarge:
      return Response("431 Request Header Fields Too Large", "text/plain",
                      absl::StrCat("request head over ", kMaxRequestBytes, " bytes\n"));
    case MetricsRequest::kMethodNotAllowed:
      return Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n");
    case MetricsRequest::kNotFound:
      return Response("404 Not Found", "text/plain", "see /metrics\n");
    case MetricsRequest::kGet:
    case MetricsRequest::kHead:
      break;
  }
  std::string response = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_());
  if (kind == MetricsRequest::kHead) response.resize(response.find("\r\n\r\n") + 4);
  return response;
}

}  // namespace odeserve::metrics
