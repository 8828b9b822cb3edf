#pragma once
// The one place where absl::Status becomes grpc::Status.

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace odeserve::rpc {

/// Same canonical code; the message is kept (truncated to a sane length for the wire).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace odeserve::rpc
