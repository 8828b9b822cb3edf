#pragma once
// What every unary handler does the same way, whatever its service: the bearer-token check and
// answering on the RPC thread with the call counted once and its status mapped once. Used by
// odeserve.v1's InferenceService and the Open Inference service alike.

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "server/core/inference_core.h"
#include "server/rpc/security.h"
#include "server/rpc/status_mapping.h"

namespace odeserve::rpc {

/// OK without `auth` (no --auth_tokens_file); else the caller's bearer token check. A refusal
/// is counted under `method` with no model label, like v1's.
absl::Status Authorize(const BearerTokenAuth* auth, const grpc::ServerContextBase& context,
                       core::InferenceCore* core, const char* method);

/// Answers a call on the RPC thread: the token check when `authenticate`, then `answer()` (an
/// absl::Status), counted under `method` with its time, then the one mapping to grpc::Status.
template <typename Answer>
grpc::ServerUnaryReactor* AnswerNow(grpc::CallbackServerContext* context, const BearerTokenAuth* auth,
                                    bool authenticate, core::InferenceCore* core, const char* method,
                                    Answer&& answer) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time received = absl::Now();
  absl::Status status = authenticate && auth != nullptr ? auth->Check(*context) : absl::OkStatus();
  if (status.ok()) status = answer();
  core->RecordServerCall(method, status, absl::Now() - received);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace odeserve::rpc
