#include "server/rpc/inference_service.h"

#include <chrono>

#include "absl/time/time.h"
#include "server/rpc/status_mapping.h"

namespace odeserve::rpc {

// Runs an asynchronous core call and finishes the reactor with its status.
template <typename Request, typename Response, typename CoreMethod>
grpc::ServerUnaryReactor* InferenceService::Async(CoreMethod method, grpc::CallbackServerContext* context,
                                                  const Request* request, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (auth_ != nullptr) {
    if (auto status = auth_->Check(*context); !status.ok()) {
      reactor->Finish(ToGrpcStatus(status));
      return reactor;
    }
  }
  (core_->*method)(MakeCallContext(context), *request, response,
                   [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

template <typename Request, typename Response, typename CoreMethod>
grpc::ServerUnaryReactor* InferenceService::Sync(CoreMethod method, grpc::CallbackServerContext* context,
                                                 const Request* request, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = auth_ != nullptr ? auth_->Check(*context) : absl::OkStatus();
  if (status.ok()) status = (core_->*method)(*request, response);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

core::CallContext MakeCallContext(grpc::CallbackServerContext* context) {
  core::CallContext call;
  call.received = absl::Now();
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    call.deadline = absl::FromChrono(deadline);
  }
  call.cancelled = [context] { return context->IsCancelled(); };
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Embed(grpc::CallbackServerContext* context,
                                                  const v1::EmbedRequest* request,
                                                  v1::EmbedResponse* response) {
  return Async(&core::InferenceCore::Embed, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::Classify(grpc::CallbackServerContext* context,
                                                     const v1::ClassifyRequest* request,
                                                     v1::ClassifyResponse* response) {
  return Async(&core::InferenceCore::Classify, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::Translate(grpc::CallbackServerContext* context,
                                                      const v1::TranslateRequest* request,
                                                      v1::TranslateResponse* response) {
  return Async(&core::InferenceCore::Translate, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return Sync(&core::InferenceCore::ListModels, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request,
                                                     v1::GetModelResponse* response) {
  return Sync(&core::InferenceCore::GetModel, context, request, response);
}

}  // namespace odeserve::rpc
