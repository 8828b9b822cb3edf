#include "server/rpc/security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace odeserve::rpc {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
  return buffer.str();
}

// Constant-time comparison: token checks must not leak a matching prefix through timing.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files) {
  if (files.cert.empty() && files.key.empty()) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  auto cert = ReadFile("--tls_cert", files.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadFile("--tls_key", files.key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      files.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!files.client_ca.empty()) {
    auto ca = ReadFile("--tls_client_ca", files.client_ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<BearerTokenAuth>> BearerTokenAuth::FromFile(const std::string& path) {
  auto text = ReadFile("--auth_tokens_file", path);
  if (!text.ok()) return text.status();
  std::set<std::string> tokens;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    const std::string token(absl::StripAsciiWhitespace(line));
    if (!token.empty() && token[0] != '#') tokens.insert(token);
  }
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("--auth_tokens_file: '", path, "' holds no token"));
  return std::make_unique<BearerTokenAuth>(std::move(tokens));
}

absl::Status BearerTokenAuth::Check(const grpc::ServerContextBase& context) const {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  const std::string value(it->second.data(), it->second.size());
  absl::string_view token = value;
  // RFC 7235: the scheme is case-insensitive ("bearer", "BEARER"); the token is not.
  if (!absl::StartsWithIgnoreCase(token, "Bearer ")) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  token.remove_prefix(7);
  bool known = false;
  for (const auto& candidate : tokens_) known |= SameToken(candidate, std::string(token));
  if (!known) return absl::UnauthenticatedError("bearer token not accepted");
  return absl::OkStatus();
}

}  // namespace odeserve::rpc
