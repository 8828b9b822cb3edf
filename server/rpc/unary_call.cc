#include "server/rpc/unary_call.h"

namespace odeserve::rpc {

absl::Status Authorize(const BearerTokenAuth* auth, const grpc::ServerContextBase& context,
                       core::InferenceCore* core, const char* method) {
  if (auth == nullptr) return absl::OkStatus();
  absl::Status status = auth->Check(context);
  if (!status.ok()) core->RecordServerCall(method, status);
  return status;
}

}  // namespace odeserve::rpc
