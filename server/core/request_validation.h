#pragma once
// Request validation: a call's inputs and options checked against its model's config, before
// any work is spent on it. Pure functions (no model, no threads), so every refusal of the
// README's error table that depends only on the request and the config is unit-tested here
// (tests/server/request_validation_test.cc). Each refusal is INVALID_ARGUMENT naming the field
// and the limit, except a call to a model of another task (FAILED_PRECONDITION).

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "odeserve/v1/inference.pb.h"
#include "odeserve/v1/model_config.pb.h"

namespace odeserve::core {

/// A model of `config.task()` serves `task` (the RPC `method` asks for).
absl::Status CheckTask(const v1::ModelConfig& config, v1::Task task, const std::string& method);

/// 1..max_inputs_per_request inputs, none empty, each valid UTF-8.
absl::Status ValidateInputs(const v1::ModelConfig& config,
                            const google::protobuf::RepeatedPtrField<std::string>& inputs);

/// Steps, min_steps, solver, budget-miss policy and latency budget within the model's limits;
/// decoder_steps only for translation models.
absl::Status ValidateCompute(const v1::ModelConfig& config, const v1::ComputeOptions& compute);

/// Translate's own fields (beam_size 0 = greedy, max_output_tokens 0 = from the input length,
/// length_penalty 0 = the model's).
struct DecodeOptions {
  int beam_size = 0;
  int max_output_tokens = 0;
  float length_penalty = 0;
};

/// Translation models: decoder steps, min_steps against the decoder range, beams, output length
/// and length penalty within the model's limits.
absl::Status ValidateDecode(const v1::ModelConfig& config, const v1::ComputeOptions& compute,
                            const DecodeOptions& decode);

/// Classify's top_k: >= 0 (0 = the top label only).
absl::Status ValidateTopK(int top_k);

}  // namespace odeserve::core
