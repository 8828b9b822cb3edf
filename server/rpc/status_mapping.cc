#include "server/rpc/status_mapping.h"

#include <string>

namespace odeserve::rpc {
namespace {
constexpr size_t kMaxMessageBytes = 2048;
}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxMessageBytes) {
    message.resize(kMaxMessageBytes);
    message += "...(truncated)";
  }
  // absl's canonical codes share gRPC's numbering (both follow google.rpc.Code).
  const int code = static_cast<int>(status.code());
  const bool known = code >= 0 && code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  return grpc::Status(known ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN, message);
}

}  // namespace odeserve::rpc
