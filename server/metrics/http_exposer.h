#pragma once
// A small HTTP/1.1 server for GET /metrics. prometheus-cpp's own exposer (CivetWeb) cannot start
// its threads in a process that has loaded LibTorch: CivetWeb asks for a small fixed thread
// stack that LibTorch's large static TLS no longer fits ("Cannot create threads"). Scrapes are
// rare and tiny, so one thread multiplexes every connection with poll(): each has one deadline
// for its whole request and one for its whole response, so a client that trickles bytes or
// stops reading is cut off without delaying anyone else's scrape. Every wake-up accepts all the
// connections pending and reads each at once; when the table is full the oldest connection that
// has not sent a whole request makes room, so stalled clients (slowloris), however many, never
// keep a scrape, which sends its request in one go, waiting. Limits: docs/LIMITS.md.

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace odeserve::metrics {

class HttpExposer {
 public:
  /// `render` produces the body of /metrics (Prometheus text format 0.0.4).
  explicit HttpExposer(std::function<std::string()> render);
  ~HttpExposer();

  /// Binds `host:port` (port 0 = any free port) and starts serving.
  absl::Status Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

 private:
  struct Connection;
  void Serve();
  /// The full response to a complete (or oversized) request head.
  std::string Respond(const std::string& request);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int port_ = 0;
  size_t max_connections_ = 0;  // set by Start() from RLIMIT_NOFILE
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace odeserve::metrics
