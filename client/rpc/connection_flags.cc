#include "client/rpc/connection_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, address, "localhost:8500", "server address host:port");
ABSL_FLAG(bool, tls, false, "use TLS (system roots unless --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "", "PEM file of roots that verify the server (implies TLS)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate chain for mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM client private key for mutual TLS");
ABSL_FLAG(std::string, tls_server_name, "", "override the server name checked in its certificate");
ABSL_FLAG(std::string, token, "", "bearer token (default: $ODESERVE_TOKEN)");

namespace odeserve::client {

ConnectionOptions ConnectionFromFlags() {
  ConnectionOptions c;
  c.address = absl::GetFlag(FLAGS_address);
  c.tls = absl::GetFlag(FLAGS_tls);
  c.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  c.token = absl::GetFlag(FLAGS_token);
  if (c.token.empty()) {
    if (const char* t = std::getenv("ODESERVE_TOKEN")) c.token = t;
  }
  return c;
}

}  // namespace odeserve::client
