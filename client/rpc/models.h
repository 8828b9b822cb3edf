#pragma once
// Model lookup shared by the tools.

#include <string>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "client/rpc/connection.h"
#include "odeserve/v1/inference.pb.h"

namespace odeserve::client {

/// The name of the only READY model of `task` on the server (ListModels). NOT_FOUND when there
/// is none, INVALID_ARGUMENT listing the candidates when there are several.
absl::StatusOr<std::string> ResolveModel(grpc::Channel& channel, const ConnectionOptions& options,
                                         v1::Task task, absl::Duration timeout);

/// embed -> EMBEDDING, classify -> CLASSIFICATION, translate -> TRANSLATION.
v1::Task TaskOfMethod(const std::string& method);

}  // namespace odeserve::client
