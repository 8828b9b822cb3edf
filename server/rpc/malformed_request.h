#pragma once
// Requests whose bytes are not a valid message of their method's request type.
//
// gRPC 1.51 parses a request before any handler runs, and answers one it cannot parse with
// UNIMPLEMENTED and an empty message, uncounted, while libprotobuf writes an ERROR line per
// request. The interceptor made here turns that answer into INVALID_ARGUMENT naming the method
// and the problem, and counts it like any refused call; InstallProtobufLogHandler bounds
// libprotobuf's lines so a flood of bad requests cannot flood the log.

#include <memory>

#include <grpcpp/support/server_interceptor.h>

#include "server/core/inference_core.h"

namespace odeserve::rpc {

/// For ServerBuilder::experimental().SetInterceptorCreators; `core` counts the refused calls.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeMalformedRequestInterceptorFactory(
    core::InferenceCore* core);

/// Routes libprotobuf's log lines through odeserve's log, at most a few per 10 s (later ones
/// are counted, and the next line written says how many were dropped). Call once at start.
void InstallProtobufLogHandler();

}  // namespace odeserve::rpc
