#include "client/rpc/models.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/lib/status_macros.h"
#include "odeserve/v1/inference.grpc.pb.h"

namespace odeserve::client {

absl::StatusOr<std::string> ResolveModel(grpc::Channel& channel, const ConnectionOptions& options,
                                         v1::Task task, absl::Duration timeout) {
  std::shared_ptr<grpc::Channel> shared(&channel, [](grpc::Channel*) {});
  auto stub = v1::Inference::NewStub(shared);
  grpc::ClientContext context;
  PrepareContext(context, options, timeout);
  v1::ListModelsResponse resp;
  OC_RETURN_IF_ERROR(FromGrpc(stub->ListModels(&context, v1::ListModelsRequest(), &resp)));
  std::vector<std::string> names;
  for (const auto& m : resp.models()) {
    if (m.task() == task && m.state() == v1::READY) names.push_back(m.name());
  }
  if (names.size() == 1) return names[0];
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat("the server has no ready ",
                                            absl::AsciiStrToLower(v1::Task_Name(task)),
                                            " model (see odeserve-cli models)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "several ready models fit, choose one with --model: ", absl::StrJoin(names, ", ")));
}

v1::Task TaskOfMethod(const std::string& method) {
  if (method == "embed") return v1::EMBEDDING;
  if (method == "classify") return v1::CLASSIFICATION;
  if (method == "translate") return v1::TRANSLATION;
  return v1::TASK_UNSPECIFIED;
}

}  // namespace odeserve::client
