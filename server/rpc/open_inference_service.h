#pragma once
// inference.GRPCInferenceService (Open Inference Protocol / KServe v2) on the callback API,
// served on the same port as odeserve.v1.Inference. Handlers are thin: ModelInfer looks the
// model up, turns the v2 request into the v1 request (open_inference_codec.h), runs it through
// the same InferenceCore as v1 (so outputs, budgets, deadlines, errors, drain and in-flight
// accounting are v1's), and converts the v1 response back. docs/OPEN_INFERENCE.md.

#include <string>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/core/inference_core.h"
#include "server/rpc/security.h"

namespace odeserve::rpc {

class OpenInferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  /// `auth` may be null (no authentication); `core` and `auth` must outlive the service.
  /// `version` is ServerMetadata's server version.
  OpenInferenceService(core::InferenceCore* core, const BearerTokenAuth* auth, std::string version)
      : core_(core), auth_(auth), version_(std::move(version)) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;

 private:
  /// GetModel's description of `name` (UNAVAILABLE while starting or draining, NOT_FOUND).
  absl::StatusOr<v1::ModelInfo> Describe(const std::string& name) const;

  core::InferenceCore* const core_;
  const BearerTokenAuth* const auth_;
  const std::string version_;
};

}  // namespace odeserve::rpc
