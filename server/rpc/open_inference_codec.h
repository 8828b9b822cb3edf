#pragma once
// Open Inference Protocol (KServe v2) <-> odeserve.v1, as pure functions: tensor decoding and
// encoding, parameter mapping, validation and model metadata. The v2 service
// (open_inference_service.cc) builds v1 requests with these, runs them through the same
// InferenceCore as odeserve.v1, and converts the v1 responses back, so both APIs answer alike.
// Protobuf messages only, no gRPC types: everything here is testable without a server.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"
#include "odeserve/v1/inference.pb.h"

namespace odeserve::rpc::oip {

/// The one input tensor of every model: BYTES, shape [N], one UTF-8 text per element.
inline constexpr char kTextInput[] = "text";
/// ModelMetadata's platform for every model.
inline constexpr char kPlatform[] = "odeserve_torchscript";

/// Output tensors per task.
inline constexpr char kEmbeddingOutput[] = "embedding";          // FP32 [N, D]
inline constexpr char kProbabilitiesOutput[] = "probabilities";  // FP32 [N, labels], label order
inline constexpr char kLabelOutput[] = "label";                  // BYTES [N] (top_k > 1: [N, k])
inline constexpr char kTranslationOutput[] = "translation";      // BYTES [N]
inline constexpr char kScoreOutput[] = "score";                  // FP32 [N] (translation score)

/// A BYTES tensor's raw layout: each element a 4-byte little-endian length, then its bytes.
/// `what` names the tensor in errors. Errors are INVALID_ARGUMENT.
absl::StatusOr<std::vector<std::string>> ParseRawBytes(absl::string_view raw, absl::string_view what);
std::string EncodeRawBytes(const std::vector<std::string>& elements);
/// FP32 elements as raw little-endian bytes.
std::string EncodeRawFp32(const std::vector<float>& values);

/// The texts of the request's `text` tensor, from contents.bytes_contents or
/// raw_input_contents, checked: the only input, BYTES, rank 1, shape matching the element count,
/// raw contents that parse, valid UTF-8. Empty texts and too many of them are left to the core
/// (same messages as v1).
absl::StatusOr<std::vector<std::string>> DecodeTextInput(const inference::ModelInferRequest& request);

/// One v1 call built from a v2 request, plus how to answer it.
struct V1Call {
  std::variant<v1::EmbedRequest, v1::ClassifyRequest, v1::TranslateRequest> request;
  /// The request's id, echoed in the response.
  std::string id;
  /// Outputs to return, in response order (the request's `outputs`, or all of the task's).
  std::vector<std::string> outputs;
  /// raw_output_contents instead of typed contents (see ResolveRawOutput).
  bool raw_output = false;
  /// Classification: labels returned per input in `label` (1 = shape [N]).
  int top_k = 1;
};

/// Builds the v1 request for `model` (READY, task known) from a v2 request: the `text` tensor,
/// request parameters (docs/OPEN_INFERENCE.md has the table) and the output selection.
/// INVALID_ARGUMENT names the tensor or parameter at fault.
absl::StatusOr<V1Call> ToV1Call(const inference::ModelInferRequest& request, const v1::ModelInfo& model);

/// Maps request parameters onto `compute` and the task's request fields (exposed for tests;
/// ToV1Call calls it). Unknown names, wrong value types and values out of range are
/// INVALID_ARGUMENT; range checks against the model are the core's (same messages as v1).
absl::Status ApplyParameters(const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
                             const v1::ModelInfo& model, V1Call* call);

/// Whether the response carries raw_output_contents: the `binary_data_output` request parameter
/// when given, else the outputs' `binary_data` parameters when any is given, else whether the
/// request sent raw_input_contents (tritonclient's gRPC client does, and reads FP32 outputs only
/// from raw contents).
absl::StatusOr<bool> ResolveRawOutput(const inference::ModelInferRequest& request);

/// The v2 response for a finished v1 call. `model` gives the labels and version.
void EncodeEmbed(const v1::EmbedResponse& response, const V1Call& call, const v1::ModelInfo& model,
                 inference::ModelInferResponse* out);
void EncodeClassify(const v1::ClassifyResponse& response, const V1Call& call, const v1::ModelInfo& model,
                    inference::ModelInferResponse* out);
void EncodeTranslate(const v1::TranslateResponse& response, const V1Call& call, const v1::ModelInfo& model,
                     inference::ModelInferResponse* out);

/// The compute report as response parameters (steps, solver, field_evaluations, budget_met,
/// queue_us, compute_us, step_choice, ...; decoder fields for translation).
void ReportParameters(const v1::ComputeReport& report, bool translation,
                      google::protobuf::Map<std::string, inference::InferParameter>* parameters);

/// OK when `model` can serve: READY, and `version` empty or the model's version. NOT_FOUND for
/// another version; FAILED_PRECONDITION (v1's message) for a model that failed to load.
absl::Status CheckServable(const v1::ModelInfo& model, absl::string_view version);

/// INVALID_ARGUMENT for a ModelInfer without model_name, listing the READY models (as v1 does).
absl::Status MissingModelName(const v1::ListModelsResponse& models);

/// ModelMetadata of a servable model: its version, platform, `text` input, the task's outputs.
inference::ModelMetadataResponse ModelMetadata(const v1::ModelInfo& model);

}  // namespace odeserve::rpc::oip
