#pragma once
// Channel setup shared by odeserve-cli and odeserve-bench: plaintext or TLS (optionally mutual),
// bearer-token metadata, per-call deadlines, status conversion, and grpc.health.v1 Check.

#include <memory>
#include <optional>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"

namespace odeserve::client {

struct ConnectionOptions {
  std::string address = "localhost:8500";
  bool tls = false;         // TLS even without --tls_ca (then the system roots verify the server)
  std::string tls_ca;       // PEM file: roots that verify the server; implies TLS
  std::string tls_cert;     // PEM file: client certificate chain (mutual TLS); needs tls_key
  std::string tls_key;      // PEM file: client private key
  std::string tls_server_name;  // override the name checked against the server certificate
  std::string token;        // sent as "authorization: Bearer <token>" on every call
};

/// Whether MakeChannel makes a TLS channel (--tls, or any of the TLS files given).
bool UsesTls(const ConnectionOptions& options);
/// A warning when a bearer token would travel over a plaintext channel; "" otherwise.
std::string PlaintextTokenWarning(const ConnectionOptions& options);

/// Reads a whole file; NOT_FOUND / PERMISSION_DENIED style errors name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

/// A channel to options.address. `index` > 0 gives a channel with its own connection (bench
/// spreads load over several).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ConnectionOptions& options,
                                                           int index = 0);

/// Waits until the channel is connected; UNAVAILABLE naming the address when it is not.
absl::Status WaitForConnected(grpc::Channel& channel, const std::string& address,
                              absl::Duration timeout);

/// Adds the bearer token (if any) and the deadline (if any) to a call.
void PrepareContext(grpc::ClientContext& context, const ConnectionOptions& options,
                    std::optional<absl::Duration> deadline);

/// gRPC status -> absl::Status (same code, same message).
absl::Status FromGrpc(const grpc::Status& status);

using HealthStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

/// grpc.health.v1.Health/Check for `service` ("" = the whole server); returns the
/// HealthCheckResponse status (SERVING, NOT_SERVING, ...).
absl::StatusOr<HealthStatus> CheckHealth(grpc::Channel& channel, const ConnectionOptions& options,
                                         const std::string& service, absl::Duration timeout);

/// The status's enum name ("SERVING", ...); "STATUS_<n>" for a value this proto does not name.
std::string HealthStatusName(HealthStatus status);

}  // namespace odeserve::client
