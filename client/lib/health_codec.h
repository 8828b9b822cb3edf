#pragma once
// Wire encoding of grpc.health.v1 HealthCheckRequest / HealthCheckResponse. The installed gRPC
// ships no generated health stubs; these two messages are one field each, so the CLI encodes
// them directly rather than generating (and possibly duplicating) grpc.health.v1 descriptors.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace odeserve::client {

/// HealthCheckRequest{service} in protobuf wire format.
std::string EncodeHealthCheckRequest(absl::string_view service);
/// HealthCheckResponse.status (0 UNKNOWN, 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN).
absl::StatusOr<int> DecodeHealthCheckResponse(absl::string_view bytes);
std::string HealthStatusName(int status);

}  // namespace odeserve::client
