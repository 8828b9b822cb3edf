#pragma once
// Transport security and caller authentication for the gRPC server.
//  - TLS when --tls_cert/--tls_key are given; mutual TLS when --tls_client_ca is also given.
//  - Bearer tokens (--auth_tokens_file, one per line) for odeserve.v1.Inference. Health and
//    reflection stay open: kubelet's gRPC probes cannot send credentials.

#include <memory>
#include <set>
#include <string>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include "absl/status/statusor.h"

namespace odeserve::rpc {

struct TlsFiles {
  std::string cert;       // PEM server certificate chain
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA bundle; set = clients must present a certificate it signed
};

/// Insecure credentials when no files are given; an error naming the file if one is unreadable.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files);

class BearerTokenAuth {
 public:
  /// Reads tokens (one per line, blank lines and '#' comments ignored).
  static absl::StatusOr<std::unique_ptr<BearerTokenAuth>> FromFile(const std::string& path);
  explicit BearerTokenAuth(std::set<std::string> tokens) : tokens_(std::move(tokens)) {}

  /// OK if the call carries `authorization: Bearer <token>` with a known token.
  absl::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::set<std::string> tokens_;
};

}  // namespace odeserve::rpc
