#include "server/rpc/open_inference_service.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "server/common/status_macros.h"
#include "server/rpc/inference_service.h"
#include "server/rpc/open_inference_codec.h"
#include "server/rpc/status_mapping.h"
#include "server/rpc/unary_call.h"

namespace odeserve::rpc {
namespace {

constexpr char kServerName[] = "odeserve";

// A v1 call in flight: what its completion needs after the handler has returned.
struct Pending {
  v1::ModelInfo model;
  oip::V1Call call;
};

// Runs the v1 call through the core; its completion (possibly on a batcher thread) encodes the
// v1 response into the v2 one and finishes the reactor.
template <typename Response, typename Request, typename Method, typename Encode>
void RunV1(core::InferenceCore* core, const core::CallContext& call, std::shared_ptr<Pending> pending,
           const Request& request, Method method, Encode encode, inference::ModelInferResponse* out,
           grpc::ServerUnaryReactor* reactor) {
  auto response = std::make_shared<Response>();
  (core->*method)(call, request, response.get(), [pending, response, encode, out, reactor](absl::Status status) {
    if (status.ok()) encode(*response, pending->call, pending->model, out);
    reactor->Finish(ToGrpcStatus(status));
  });
}

}  // namespace

absl::StatusOr<v1::ModelInfo> OpenInferenceService::Describe(const std::string& name) const {
  v1::GetModelRequest request;
  request.set_name(name);
  v1::GetModelResponse response;
  RETURN_IF_ERROR(core_->GetModel(request, &response));
  return std::move(*response.mutable_model());
}

// Live and ready stay open like gRPC health (probes carry no credentials) and follow it: live
// until SIGTERM starts the drain; ready once models are loaded with one READY, until the drain.
grpc::ServerUnaryReactor* OpenInferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                           const inference::ServerLiveRequest*,
                                                           inference::ServerLiveResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/false, core_, "ServerLive", [&] {
    response->set_live(!core_->draining());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OpenInferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                            const inference::ServerReadyRequest*,
                                                            inference::ServerReadyResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/false, core_, "ServerReady", [&] {
    // ListModels refuses (UNAVAILABLE) while starting or draining: not ready, not an error.
    v1::ListModelsResponse models;
    bool ready = core_->ListModels({}, &models).ok();
    ready = ready && std::any_of(models.models().begin(), models.models().end(),
                                 [](const v1::ModelInfo& m) { return m.state() == v1::READY; });
    response->set_ready(ready);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OpenInferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                           const inference::ModelReadyRequest* request,
                                                           inference::ModelReadyResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/true, core_, "ModelReady", [&]() -> absl::Status {
    auto model = Describe(request->name());
    if (absl::IsUnavailable(model.status())) {
      response->set_ready(false);  // starting or draining
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(model.status());
    const absl::Status servable = oip::CheckServable(*model, request->version());
    if (absl::IsNotFound(servable)) return servable;  // another version
    response->set_ready(servable.ok());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OpenInferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                               const inference::ServerMetadataRequest*,
                                                               inference::ServerMetadataResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/true, core_, "ServerMetadata", [&] {
    response->set_name(kServerName);
    response->set_version(version_);
    // No protocol extension (model repository, statistics, sequences, ...) is implemented.
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OpenInferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                              const inference::ModelMetadataRequest* request,
                                                              inference::ModelMetadataResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/true, core_, "ModelMetadata", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const v1::ModelInfo model, Describe(request->name()));
    RETURN_IF_ERROR(oip::CheckServable(model, request->version()));
    *response = oip::ModelMetadata(model);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OpenInferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                           const inference::ModelInferRequest* request,
                                                           inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Made first: the lookup and decoding below count against the call's deadline and budget.
  core::CallContext call = MakeCallContext(context);
  call.method = "ModelInfer";
  if (auto status = Authorize(auth_, *context, core_, "ModelInfer"); !status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  auto pending = [&]() -> absl::StatusOr<std::shared_ptr<Pending>> {
    if (request->model_name().empty()) {
      v1::ListModelsResponse models;
      RETURN_IF_ERROR(core_->ListModels({}, &models));
      return oip::MissingModelName(models);
    }
    auto result = std::make_shared<Pending>();
    ASSIGN_OR_RETURN(result->model, Describe(request->model_name()));
    RETURN_IF_ERROR(oip::CheckServable(result->model, request->model_version()));
    ASSIGN_OR_RETURN(result->call, oip::ToV1Call(*request, result->model));
    return result;
  }();
  if (!pending.ok()) {
    // Refused before the core: counted here, with no model label (as v1 counts such refusals).
    core_->RecordServerCall("ModelInfer", pending.status(), absl::Now() - call.received);
    reactor->Finish(ToGrpcStatus(pending.status()));
    return reactor;
  }
  auto& v1_request = (*pending)->call.request;
  if (auto* embed = std::get_if<v1::EmbedRequest>(&v1_request)) {
    RunV1<v1::EmbedResponse>(core_, call, *pending, *embed, &core::InferenceCore::Embed, oip::EncodeEmbed, response,
                             reactor);
  } else if (auto* classify = std::get_if<v1::ClassifyRequest>(&v1_request)) {
    RunV1<v1::ClassifyResponse>(core_, call, *pending, *classify, &core::InferenceCore::Classify,
                                oip::EncodeClassify, response, reactor);
  } else {
    RunV1<v1::TranslateResponse>(core_, call, *pending, std::get<v1::TranslateRequest>(v1_request),
                                 &core::InferenceCore::Translate, oip::EncodeTranslate, response, reactor);
  }
  return reactor;
}

}  // namespace odeserve::rpc
