#pragma once
// File-descriptor defences of the gRPC listener. gRPC 1.51 stops accepting for good after one
// failed accept(2) (EMFILE when the process runs out of file descriptors) and has no cap on
// connections, so the server raises its own descriptor limit at start and, on a TLS port (where
// gRPC's own listener accepts; a plaintext port has server/rpc/connection_acceptor), watches that
// the listener still accepts: a server that accepts nothing must not live on looking healthy.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace odeserve::rpc {

/// Raises the soft RLIMIT_NOFILE to the hard limit (connections, model files and gRPC's own
/// descriptors all count against it). Returns what it did, for the start-up log.
std::string RaiseOpenFileLimit();

/// This process's sockets listening on TCP `port` (descriptor numbers), found in /proc/self/fd.
std::vector<int> FindListeningSockets(int port);

/// Connections that completed the TCP handshake on listening socket `fd` and wait for
/// accept(2) (Linux's TCP_INFO of a listener), or an error if `fd` is not one.
absl::StatusOr<int> PendingAccepts(int fd);

struct ListenerCheckOptions {
  int port = 0;
  /// The listening sockets to watch (FindListeningSockets once gRPC listens): found again only
  /// if they no longer listen on `port`, since listing /proc/self/fd needs a descriptor itself.
  std::vector<int> listeners;
  std::string probe_host = "127.0.0.1";  // where the probe connects: the bound address, or loopback
  /// How long the probe connection may wait to be accepted (it is accepted within microseconds
  /// by a live listener).
  absl::Duration accept_timeout = absl::Seconds(2);
};

/// One check: opens a TCP connection to the listener and waits until it has been accepted (the
/// listeners' accept queues empty). OK, or why the listener does not accept.
absl::Status CheckListenerAccepts(const ListenerCheckOptions& options);

/// The address to probe a listener bound to `bind_host` at: loopback for a wildcard address.
std::string ProbeHostFor(const std::string& bind_host);

/// Runs CheckListenerAccepts every `interval` on its own thread; after `failures_to_give_up`
/// failures in a row it calls `on_dead` once, with the last reason.
class ListenerWatchdog {
 public:
  ListenerWatchdog(ListenerCheckOptions options, absl::Duration interval, int failures_to_give_up,
                   std::function<void(const std::string& reason)> on_dead);
  ~ListenerWatchdog();  // stops the thread

 private:
  void Loop();

  const ListenerCheckOptions options_;
  const absl::Duration interval_;
  const int failures_to_give_up_;
  const std::function<void(const std::string&)> on_dead_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace odeserve::rpc
