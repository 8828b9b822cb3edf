#include "client/rpc/connection.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "client/lib/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace odeserve::client {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  return ss.str();
}

namespace {

// An empty PEM is not an error to gRPC: an empty CA bundle means "trust the system roots" and
// an empty certificate chain "no client certificate", neither what the flag asked for. A
// directory reads as empty without an error, so it is caught here too.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' is not a file"));
  }
  OC_ASSIGN_OR_RETURN(std::string pem, ReadFileToString(path));
  if (pem.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' is empty"));
  return pem;
}

}  // namespace

bool UsesTls(const ConnectionOptions& options) {
  return options.tls || !options.tls_ca.empty() || !options.tls_cert.empty();
}

std::string PlaintextTokenWarning(const ConnectionOptions& options) {
  if (options.token.empty() || UsesTls(options)) return "";
  return absl::StrCat("warning: the bearer token goes to ", options.address,
                      " in clear text (no --tls); anyone on the path can read it\n");
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ConnectionOptions& options,
                                                           int index) {
  if (options.address.empty()) return absl::InvalidArgumentError("--address is empty");
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  if (index > 0) {
    // Distinct channel arguments plus a local subchannel pool: a separate TCP connection.
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    args.SetInt("odeserve.channel_index", index);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (UsesTls(options)) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca.empty()) {
      OC_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPemFile("--tls_ca", options.tls_ca));
    }
    if (!options.tls_cert.empty()) {
      OC_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPemFile("--tls_cert", options.tls_cert));
      OC_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPemFile("--tls_key", options.tls_key));
    }
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(options.address, creds, args);
}

absl::Status WaitForConnected(grpc::Channel& channel, const std::string& address,
                              absl::Duration timeout) {
  const auto deadline =
      std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
  if (channel.WaitForConnected(deadline)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot connect to ", address, " within ",
                                             absl::FormatDuration(timeout)));
}

void PrepareContext(grpc::ClientContext& context, const ConnectionOptions& options,
                    std::optional<absl::Duration> deadline) {
  if (!options.token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options.token));
  }
  if (deadline) {
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoNanoseconds(*deadline));
  }
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<HealthStatus> CheckHealth(grpc::Channel& channel, const ConnectionOptions& options,
                                         const std::string& service, absl::Duration timeout) {
  std::shared_ptr<grpc::Channel> shared(&channel, [](grpc::Channel*) {});
  auto stub = grpc::health::v1::Health::NewStub(shared);
  grpc::ClientContext context;
  PrepareContext(context, options, timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  OC_RETURN_IF_ERROR(FromGrpc(stub->Check(&context, request, &response)));
  return response.status();
}

std::string HealthStatusName(HealthStatus status) {
  const std::string& name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status);
  return name.empty() ? absl::StrCat("STATUS_", static_cast<int>(status)) : name;
}

}  // namespace odeserve::client
