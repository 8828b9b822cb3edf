// metrics/: every family renders in the Prometheus text format with the right labels and
// values, and the HTTP exposer serves GET /metrics (and only that) over a plain socket.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/metrics/http_exposer.h"
#include "server/metrics/metrics.h"

namespace odeserve::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

BuildInfo TestBuild() { return BuildInfo{"0.1.0", "abc1234", "1.13.1"}; }

// A loopback TCP connection to `port` whose receives time out after `timeout_s`; -1 if refused.
int Connect(int port, int timeout_s = 5) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Sends `request` to 127.0.0.1:port and returns everything the server wrote before closing.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "<connect failed>";
  SendAll(fd, request);
  std::string response;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

struct HttpResponse {
  std::string status_line;
  std::string headers;
  std::string body;
};

HttpResponse Parse(const std::string& raw) {
  HttpResponse r;
  const size_t line_end = raw.find("\r\n");
  const size_t head_end = raw.find("\r\n\r\n");
  if (line_end == std::string::npos || head_end == std::string::npos) return r;
  r.status_line = raw.substr(0, line_end);
  r.headers = raw.substr(line_end + 2, head_end - line_end - 2);
  r.body = raw.substr(head_end + 4);
  return r;
}

TEST(Metrics, RendersEveryFamily) {
  Metrics metrics(TestBuild());
  metrics.AddModel("m", "1", "EMBEDDING", "albert", "cpu", 0.25);
  metrics.RecordRequest("m", "Embed", "OK", 0.004);
  const std::string text = metrics.Render();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"odeserve_requests_total", "counter"},
      {"odeserve_request_duration_seconds", "histogram"},
      {"odeserve_queue_duration_seconds", "histogram"},
      {"odeserve_compute_duration_seconds", "histogram"},
      {"odeserve_solver_steps", "histogram"},
      {"odeserve_budget_requests_total", "counter"},
      {"odeserve_batch_size", "histogram"},
      {"odeserve_batch_tokens", "histogram"},
      {"odeserve_joined_rows_total", "counter"},
      {"odeserve_queue_depth", "gauge"},
      {"odeserve_requests_in_flight", "gauge"},
      {"odeserve_cost_model_relative_error", "histogram"},
      {"odeserve_input_tokens_total", "counter"},
      {"odeserve_model_info", "gauge"},
      {"odeserve_model_load_seconds", "gauge"},
      {"odeserve_build_info", "gauge"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_THAT(text, HasSubstr("# TYPE " + name + " " + type + "\n")) << name;
    EXPECT_THAT(text, HasSubstr("# HELP " + name + " ")) << name;
  }
  EXPECT_THAT(text, HasSubstr("odeserve_requests_total{code=\"OK\",method=\"Embed\",model=\"m\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_build_info{commit=\"abc1234\",libtorch=\"1.13.1\",version=\"0.1.0\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_model_info{device=\"cpu\",family=\"albert\",model=\"m\",task=\"EMBEDDING\","
                              "version=\"1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_model_load_seconds{model=\"m\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_queue_depth{model=\"m\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_requests_in_flight{model=\"m\"} 0\n"));
  for (const char* outcome : {"met", "missed", "refused"}) {
    EXPECT_THAT(text, HasSubstr(std::string("odeserve_budget_requests_total{model=\"m\",outcome=\"") + outcome +
                                "\"} 0\n"));
  }
}

TEST(Metrics, HistogramsExposeBucketsSumAndCount) {
  Metrics metrics(TestBuild());
  metrics.AddModel("m", "1", "EMBEDDING", "albert", "cpu", 0.25);
  metrics.RecordRequest("m", "Embed", "OK", 0.004);
  metrics.RecordRequest("m", "Embed", "OK", 0.5);
  metrics.RecordRequest("m", "Embed", "INVALID_ARGUMENT", 0.0001);
  const std::string text = metrics.Render();
  const std::string series = "odeserve_request_duration_seconds";
  const std::string labels = "method=\"Embed\",model=\"m\"";
  EXPECT_THAT(text, HasSubstr(series + "_count{" + labels + "} 3\n"));
  EXPECT_THAT(text, HasSubstr(series + "_sum{" + labels + "} 0.5041\n"));
  EXPECT_THAT(text, HasSubstr(series + "_bucket{" + labels + ",le=\"0.0005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(series + "_bucket{" + labels + ",le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(series + "_bucket{" + labels + ",le=\"0.3\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(series + "_bucket{" + labels + ",le=\"0.5\"} 3\n"));
  EXPECT_THAT(text, HasSubstr(series + "_bucket{" + labels + ",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_requests_total{code=\"OK\",method=\"Embed\",model=\"m\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_requests_total{code=\"INVALID_ARGUMENT\",method=\"Embed\",model=\"m\"} 1\n"));
}

TEST(Metrics, ModelChildrenRecordSchedulerEvents) {
  Metrics metrics(TestBuild());
  ModelMetrics* m = metrics.AddModel("m", "1", "EMBEDDING", "albert", "cpu", 0.25);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(metrics.AddModel("m", "1", "EMBEDDING", "albert", "cpu", 0.25), m) << "children are created once";
  m->OnQueueDepth(3);
  scheduler::BatchObservation batch;
  batch.rows = 5;
  batch.joined_rows = 2;
  batch.padded_tokens = 100;
  batch.relative_error = 0.04;
  m->OnBatch(batch);
  m->ObserveCall(0.002, 0.010, 4, 17);
  m->ObserveBudget("met");
  m->ObserveBudget("met");
  m->ObserveBudget("missed");
  m->ObserveBudget("refused");
  m->in_flight().Increment();
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("odeserve_queue_depth{model=\"m\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_requests_in_flight{model=\"m\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_batch_size_count{model=\"m\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_batch_size_sum{model=\"m\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_batch_size_bucket{model=\"m\",le=\"4\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_batch_size_bucket{model=\"m\",le=\"8\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_batch_tokens_sum{model=\"m\"} 100\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_joined_rows_total{model=\"m\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_cost_model_relative_error_bucket{model=\"m\",le=\"0.05\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_cost_model_relative_error_bucket{model=\"m\",le=\"0.02\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_queue_duration_seconds_sum{model=\"m\"} 0.002\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_compute_duration_seconds_sum{model=\"m\"} 0.01\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_solver_steps_bucket{model=\"m\",le=\"3\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_solver_steps_bucket{model=\"m\",le=\"4\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_input_tokens_total{model=\"m\"} 17\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_budget_requests_total{model=\"m\",outcome=\"met\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_budget_requests_total{model=\"m\",outcome=\"missed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("odeserve_budget_requests_total{model=\"m\",outcome=\"refused\"} 1\n"));
}

TEST(Metrics, ExposerServesMetricsOnPortZero) {
  Metrics metrics(TestBuild());
  metrics.AddModel("m", "1", "EMBEDDING", "albert", "cpu", 0.25);
  metrics.RecordRequest("m", "Embed", "OK", 0.004);
  EXPECT_EQ(metrics.exposer_port(), 0);
  ASSERT_TRUE(metrics.StartExposer("127.0.0.1", 0).ok());
  const int port = metrics.exposer_port();
  ASSERT_GT(port, 0);

  const HttpResponse ok = Parse(Exchange(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  EXPECT_EQ(ok.status_line, "HTTP/1.1 200 OK");
  EXPECT_THAT(ok.headers, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(ok.headers, HasSubstr("Content-Length: " + std::to_string(ok.body.size()) + "\r\n"));
  EXPECT_THAT(ok.body, HasSubstr("odeserve_requests_total{code=\"OK\",method=\"Embed\",model=\"m\"} 1\n"));
  EXPECT_THAT(ok.body, HasSubstr("# TYPE odeserve_build_info gauge\n"));

  // The body is rendered per scrape.
  metrics.RecordRequest("m", "Embed", "OK", 0.004);
  const HttpResponse again = Parse(Exchange(port, "GET /metrics?format=text HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(again.status_line, "HTTP/1.1 200 OK");
  EXPECT_THAT(again.body, HasSubstr("odeserve_requests_total{code=\"OK\",method=\"Embed\",model=\"m\"} 2\n"));

  const HttpResponse not_found = Parse(Exchange(port, "GET /other HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(not_found.status_line, "HTTP/1.1 404 Not Found");
  EXPECT_THAT(not_found.body, Not(HasSubstr("odeserve_")));
  EXPECT_EQ(Parse(Exchange(port, "GET /metricsx HTTP/1.1\r\n\r\n")).status_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(Parse(Exchange(port, "GET / HTTP/1.1\r\n\r\n")).status_line, "HTTP/1.1 404 Not Found");

  EXPECT_EQ(Parse(Exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")).status_line,
            "HTTP/1.1 405 Method Not Allowed");

  const HttpResponse head = Parse(Exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(head.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(head.body, "");
  EXPECT_THAT(head.headers, HasSubstr("Content-Length: "));
}

TEST(HttpExposer, ServesTheRenderedBodyAndStops) {
  std::atomic<int> renders{0};
  HttpExposer exposer([&] {
    ++renders;
    return std::string("hello 1\n");
  });
  ASSERT_TRUE(exposer.Start("127.0.0.1", 0).ok());
  const int port = exposer.port();
  ASSERT_GT(port, 0);
  const std::string raw = Exchange(port, "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(raw, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(raw, HasSubstr("Content-Length: 8\r\n"));
  EXPECT_EQ(Parse(raw).body, "hello 1\n");
  EXPECT_EQ(renders, 1);
  // A 404 does not render.
  Exchange(port, "GET /nothing HTTP/1.0\r\n\r\n");
  EXPECT_EQ(renders, 1);

  // The port is taken while it serves.
  HttpExposer second([] { return std::string(); });
  const absl::Status taken = second.Start("127.0.0.1", port);
  EXPECT_EQ(taken.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(taken.message()), HasSubstr(std::to_string(port)));

  exposer.Stop();
  EXPECT_EQ(Exchange(port, "GET /metrics HTTP/1.0\r\n\r\n"), "<connect failed>");
}

// Scrapers are served side by side: a client that opened a connection and sent half a request
// must not hold up a Prometheus scrape behind it (served one at a time, the scrape waited for
// the stalled client's receive timeout).
TEST(HttpExposer, AStalledClientDoesNotHoldUpAScrape) {
  HttpExposer exposer([] { return std::string("up 1\n"); });
  ASSERT_TRUE(exposer.Start("127.0.0.1", 0).ok());
  const int stalled = Connect(exposer.port());
  ASSERT_GE(stalled, 0);
  ASSERT_TRUE(SendAll(stalled, "GET /metr"));

  EXPECT_EQ(Parse(Exchange(exposer.port(), "GET /metrics HTTP/1.1\r\n\r\n")).body, "up 1\n");
  // The scrape was answered while the stalled connection was still open.
  char byte;
  EXPECT_EQ(::recv(stalled, &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
  ::close(stalled);
}

// The request head has one deadline (2 s) however slowly it trickles in: a client sending a
// byte every 100 ms is cut off, where per-receive timeouts would let it hold its connection for
// as long as it kept sending.
TEST(HttpExposer, ATricklingRequestIsCutOffAtItsDeadline) {
  HttpExposer exposer([] { return std::string("up 1\n"); });
  ASSERT_TRUE(exposer.Start("127.0.0.1", 0).ok());
  const int fd = Connect(exposer.port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /metrics?" + std::string(200, 'a');
  const auto started = std::chrono::steady_clock::now();
  bool closed_by_server = false;
  for (size_t i = 0; i < request.size() && !closed_by_server; ++i) {
    if (!SendAll(fd, request.substr(i, 1))) closed_by_server = true;
    char byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed_by_server = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // 200 bytes at 100 ms each take 20 s: the 2 s deadline ends the connection long before, and
  // not before it (the upper bound leaves a loaded machine room).
  EXPECT_TRUE(closed_by_server);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GE(seconds, 1.5);
  EXPECT_LT(seconds, 8.0);
  ::close(fd);
  // And the exposer still serves.
  EXPECT_EQ(Parse(Exchange(exposer.port(), "GET /metrics HTTP/1.1\r\n\r\n")).body, "up 1\n");
}

// A head over the 16 KiB limit is answered 431; the rest of it, unread, must not reset the
// connection under the response (the server reads until the client closes).
TEST(HttpExposer, AnOversizedRequestHeadGets431) {
  HttpExposer exposer([] { return std::string("up 1\n"); });
  ASSERT_TRUE(exposer.Start("127.0.0.1", 0).ok());
  const std::string huge = "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(64 * 1024, 'x');
  EXPECT_EQ(Parse(Exchange(exposer.port(), huge)).status_line, "HTTP/1.1 431 Request Header Fields Too Large");
}

// A client that sends a second request before reading the first response (pipelining) gets the
// whole first response: closing with that request unread would reset the connection and drop
// the part of a large body still in flight.
TEST(HttpExposer, APipelinedRequestDoesNotCutTheResponseShort) {
  const std::string body(4 << 20, 'x');
  HttpExposer exposer([&] { return body; });
  ASSERT_TRUE(exposer.Start("127.0.0.1", 0).ok());
  const int fd = Connect(exposer.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "GET /metrics HTTP/1.1\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(SendAll(fd, "GET /metrics HTTP/1.1\r\n\r\n"));
  std::string raw;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) raw.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  const HttpResponse response = Parse(raw);
  EXPECT_EQ(response.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(response.body.size(), body.size());
}

// Slowloris: many clients that connect and send nothing, or half a request, and reconnect as soon
// as they are cut off. A scrape sends its whole request at once, so it must be answered at once
// however many of them there are: with the connections served 64 at a time, each held to its
// 2 s deadline and the rest queued in a 64-deep backlog, every scrape waited behind them (1.8-2 s
// with 100 such clients; timeouts and refused connects with 1,000).

// A non-blocking loopback connect to `port` that does not wait for the handshake; -1 on failure.
int ConnectNoWait(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One scrape with every step bounded by `limit`: the seconds it took, or a negative value if it
// failed or ran past `limit` (`*body` gets the body it received).
double TimedScrape(int port, std::chrono::milliseconds limit, std::string* body) {
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + limit;
  auto left_ms = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()));
  };
  const int fd = ConnectNoWait(port);
  if (fd < 0) return -1;
  pollfd p{fd, POLLOUT, 0};
  int error = 0;
  socklen_t length = sizeof(error);
  if (::poll(&p, 1, left_ms()) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0 ||
      !SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")) {
    ::close(fd);
    return -1;
  }
  std::string raw;
  char buffer[4096];
  bool closed = false;
  while (!closed) {
    p = {fd, POLLIN, 0};
    if (::poll(&p, 1, left_ms()) != 1) break;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) closed = true;
    if (n > 0) raw.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  *body = Parse(raw).body;
  if (!closed) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

// `stalled` slowloris clients (a third send half a request head, the rest nothing) that
// reconnect whenever the server cuts them off and, every few milliseconds, also drop and reopen
// one of their own; while they run, `scrapes` normal scrapes must each finish within `bound`.
void ExpectScrapesUnderSlowloris(int stalled, int scrapes, std::chrono::milliseconds bound) {
  // Both ends of every connection live in this process; the server keeps up to 1,024 of them.
  const rlim_t needed = static_cast<rlim_t>(stalled) + 1024 + 256;
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < needed) {
    limit.rlim_cur = std::min(limit.rlim_max, std::max(needed, limit.rlim_cur));
    ::setrlimit(RLIMIT_NOFILE, &limit);
    ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < needed) {
    GTEST_SKIP() << "needs " << needed << " open files for " << stalled << " stalled connections; RLIMIT_NOFILE is "
                 << limit.rlim_cur << " (hard " << limit.rlim_max << ")";
  }

  HttpExposer exposer([] { return std::string("up 1\n"); });
  ASSERT_TRUE(exposer.Start("127.0.0.1", 0).ok());
  const int port = exposer.port();

  std::atomic<bool> done{false};
  std::atomic<int> reconnects{0};
  std::thread attacker([&] {
    std::vector<int> fds;
    std::vector<bool> sent_part;
    auto open = [&](size_t i) {
      fds[i] = ConnectNoWait(port);
      sent_part[i] = i % 3 != 0;  // these send their part once connected
    };
    fds.resize(static_cast<size_t>(stalled), -1);
    sent_part.resize(fds.size(), true);
    for (size_t i = 0; i < fds.size(); ++i) open(i);
    std::vector<pollfd> polled(fds.size());
    size_t rotate = 0;
    while (!done.load()) {
      for (size_t i = 0; i < fds.size(); ++i) {
        polled[i] = {fds[i], static_cast<short>(sent_part[i] ? POLLIN : POLLIN | POLLOUT), 0};
      }
      ::poll(polled.data(), polled.size(), 5);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] < 0) {
          open(i);
          continue;
        }
        if ((polled[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {  // cut off: reconnect
          ::close(fds[i]);
          open(i);
          ++reconnects;
        } else if ((polled[i].revents & POLLOUT) != 0 && !sent_part[i]) {
          ::send(fds[i], "GET /metrics HTTP/1.1\r\nHo", 25, MSG_NOSIGNAL | MSG_DONTWAIT);
          sent_part[i] = true;
        }
      }
      for (int k = 0; k < 4; ++k, rotate = (rotate + 1) % fds.size()) {  // and churn on their own
        ::close(fds[rotate]);
        open(rotate);
        ++reconnects;
      }
    }
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  });

  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // let them fill the server
  std::vector<double> seconds;
  for (int i = 0; i < scrapes; ++i) {
    std::string body;
    const double s = TimedScrape(port, bound, &body);
    seconds.push_back(s);
    EXPECT_GE(s, 0.0) << "scrape " << i << " failed or took over " << bound.count() << " ms";
    if (s >= 0) {
      EXPECT_EQ(body, "up 1\n") << "scrape " << i;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  done.store(true);
  attacker.join();
  std::string report;
  for (const double s : seconds) report += (s < 0 ? std::string("timeout") : absl::StrCat(s * 1000, "ms")) + " ";
  std::cout << "[ slowloris ] " << stalled << " stalled clients (" << reconnects.load()
            << " reconnects); scrapes: " << report << "\n";
  // And it still serves once they are gone.
  std::string body;
  EXPECT_GE(TimedScrape(port, std::chrono::seconds(5), &body), 0.0);
  EXPECT_EQ(body, "up 1\n");
}

// The bound is 500 ms rather than the 100 ms target so that a loaded 2-core CI machine, which
// also runs the 1,000 clients, does not fail it; the measured times are printed.
TEST(HttpExposer, AThousandStalledClientsDoNotStarveAScrape) {
  ExpectScrapesUnderSlowloris(1000, 7, std::chrono::milliseconds(500));
}

// More stalled clients than the connection table holds: new connections evict the oldest
// connection that has not sent a whole request, so a scrape is still accepted at once.
TEST(HttpExposer, MoreStalledClientsThanTheServerKeepsDoNotStarveAScrape) {
  ExpectScrapesUnderSlowloris(1500, 7, std::chrono::milliseconds(500));
}

}  // namespace
}  // namespace odeserve::metrics
