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
    // Cut at a character boundary: messages quote user input, and gRPC messages must stay UTF-8.
    size_t cut = kMaxMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    message.resize(cut);
    message += "...(truncated)";
  }
  // absl's canonical codes share gRPC's numbering (both follow google.rpc.Code).
  const int code = static_cast<int>(status.code());
  const bool known = code >= 0 && code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  return grpc::Status(known ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN, message);
}

}  // namespace odeserve::rpc
