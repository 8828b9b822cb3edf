#pragma once
// gRPC front end of odeserve.v1.Inference on the callback API. Handlers are thin: they turn the
// ServerContext into a CallContext, call InferenceCore, and map its status once. No handler
// blocks a gRPC thread: Embed/Classify complete from the model's batcher thread.

#include "odeserve/v1/inference.grpc.pb.h"
#include "server/core/inference_core.h"
#include "server/rpc/security.h"

namespace odeserve::rpc {

class InferenceService final : public v1::Inference::CallbackService {
 public:
  /// `auth` may be null (no authentication); both must outlive the service.
  InferenceService(core::InferenceCore* core, const BearerTokenAuth* auth) : core_(core), auth_(auth) {}

  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context, const v1::EmbedRequest* request,
                                  v1::EmbedResponse* response) override;
  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context,
                                     const v1::ClassifyRequest* request,
                                     v1::ClassifyResponse* response) override;
  grpc::ServerUnaryReactor* Translate(grpc::CallbackServerContext* context,
                                      const v1::TranslateRequest* request,
                                      v1::TranslateResponse* response) override;
  grpc::ServerWriteReactor<v1::TranslateStreamResponse>* TranslateStream(
      grpc::CallbackServerContext* context, const v1::TranslateRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::GetModelResponse* response) override;

 private:
  template <typename Request, typename Response, typename CoreMethod>
  // `name`: the method's label in the request metrics (calls refused by auth are counted too).
  grpc::ServerUnaryReactor* Async(CoreMethod method, const char* name, grpc::CallbackServerContext* context,
                                  const Request* request, Response* response);

  core::InferenceCore* const core_;
  const BearerTokenAuth* const auth_;
};

/// Deadline and cancellation of a gRPC call, as the core sees them.
core::CallContext MakeCallContext(grpc::CallbackServerContext* context);

}  // namespace odeserve::rpc
