#pragma once
// The plaintext gRPC port's accept loop, run by odeserve instead of gRPC. gRPC 1.51's own
// listener stops accepting for good after one accept(2) that found no file descriptor left
// (EMFILE), so a burst of idle connections would leave a server that accepts nothing. This loop
// never stops: a connection that would leave fewer than `reserved_descriptors` descriptors free
// is closed at once, and when accept itself runs out it accepts into a spare descriptor kept for
// that and closes the connection. New clients are served again as soon as descriptors free up.
// Each accepted connection is handed to gRPC (grpc::AddInsecureChannelFromFd) by the caller;
// no gRPC types here, so it is tested with plain sockets.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace odeserve::rpc {

struct AcceptorOptions {
  std::string host = "0.0.0.0";  // a wildcard (0.0.0.0, ::, empty) binds IPv6 and IPv4 where it can
  int port = 0;                  // 0 = any free port
  int backlog = 4096;
  /// Descriptors kept free for the server's own use (model files, /metrics, gRPC): a connection
  /// whose descriptor would leave fewer is closed at once.
  int reserved_descriptors = 8;
};

class ConnectionAcceptor {
 public:
  /// Binds and listens, without accepting yet. An error names host:port when it cannot (a port
  /// in use is refused: no SO_REUSEPORT).
  static absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> Listen(AcceptorOptions options);
  /// Stops accepting and closes the listening socket.
  ~ConnectionAcceptor();
  ConnectionAcceptor(const ConnectionAcceptor&) = delete;
  ConnectionAcceptor& operator=(const ConnectionAcceptor&) = delete;

  int port() const { return port_; }
  /// Accepts on its own thread ("grpc-acceptor"); `hand_off` owns each connected, non-blocking
  /// descriptor it is given.
  void Start(std::function<void(int fd)> hand_off);
  /// Connections closed at once for lack of descriptors, since Start.
  int64_t shed() const { return shed_.load(); }

 private:
  ConnectionAcceptor(AcceptorOptions options, int listen_fd, int port, int wake_read, int wake_write, int spare);
  void Loop();
  void AcceptPending();
  // Closes a connection the server cannot hold, and says so (rate-limited).
  void Shed(int fd, const char* why);
  // Waits up to `timeout_ms` or until stopped; true when stopped.
  bool WaitStopped(int timeout_ms);

  const AcceptorOptions options_;
  const int listen_fd_;
  const int port_;
  const int wake_read_;
  const int wake_write_;
  int spare_;  // kept open to accept (and close) one connection when descriptors run out
  std::function<void(int)> hand_off_;
  std::atomic<int64_t> shed_{0};
  std::thread thread_;
};

}  // namespace odeserve::rpc
