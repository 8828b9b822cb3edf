#include "server/core/request_validation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/repository/model_config.h"
#include "server/tokenizer/ngram_hash.h"

namespace odeserve::core {

absl::Status CheckTask(const v1::ModelConfig& config, v1::Task task, const std::string& method) {
  const v1::Task model_task = config.task();
  if (model_task == task) return absl::OkStatus();
  const char* right_method = model_task == v1::EMBEDDING ? "Embed"
                             : model_task == v1::CLASSIFICATION ? "Classify" : "Translate";
  return absl::FailedPreconditionError(absl::StrCat("model '", config.name(), "' is a ", v1::Task_Name(model_task),
                                                    " model and cannot serve ", method, "; call ", right_method,
                                                    " instead"));
}

absl::Status ValidateInputs(const v1::ModelConfig& config,
                            const google::protobuf::RepeatedPtrField<std::string>& inputs) {
  const int limit = config.max_inputs_per_request();
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("inputs is empty; send between 1 and ", limit, " strings"));
  }
  if (inputs.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat("inputs has ", inputs.size(), " strings; model '",
                                                   config.name(), "' accepts at most ", limit,
                                                   " per request (max_inputs_per_request)"));
  }
  for (int i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "] is empty"));
    if (!tokenizer::IsValidUtf8(inputs[i])) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "] is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCompute(const v1::ModelConfig& config, const v1::ComputeOptions& compute) {
  const auto& steps = config.steps();
  const std::string& name = config.name();
  if (compute.steps() != 0 && (compute.steps() < steps.min() || compute.steps() > steps.max())) {
    return absl::InvalidArgumentError(absl::StrCat("compute.steps ", compute.steps(), " is outside model '", name,
                                                   "' range [", steps.min(), ", ", steps.max(), "]"));
  }
  if (compute.min_steps() < 0 || compute.min_steps() > steps.max()) {
    return absl::InvalidArgumentError(absl::StrCat("compute.min_steps ", compute.min_steps(), " is outside model '",
                                                   name, "' range [0, ", steps.max(), "]"));
  }
  if (compute.steps() != 0 && compute.min_steps() > compute.steps()) {
    return absl::InvalidArgumentError(absl::StrCat("compute.min_steps ", compute.min_steps(),
                                                   " is above compute.steps ", compute.steps()));
  }
  if (!v1::Solver_IsValid(compute.solver())) {
    return absl::InvalidArgumentError(absl::StrCat("compute.solver ", compute.solver(),
                                                   " is not a known solver (EULER, HEUN, RK4)"));
  }
  if (compute.solver() != v1::SOLVER_UNSPECIFIED &&
      std::find(config.solvers().begin(), config.solvers().end(), compute.solver()) == config.solvers().end()) {
    std::vector<std::string> allowed;
    for (int solver : config.solvers()) allowed.push_back(v1::Solver_Name(static_cast<v1::Solver>(solver)));
    return absl::InvalidArgumentError(absl::StrCat("compute.solver ", v1::Solver_Name(compute.solver()), " is not allowed by model '",
                                                   name, "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
  }
  if (!v1::BudgetMissPolicy_IsValid(compute.on_budget_miss())) {
    return absl::InvalidArgumentError(absl::StrCat("compute.on_budget_miss ", compute.on_budget_miss(),
                                                   " is not a known policy (SERVE_FLOOR, REFUSE)"));
  }
  if (compute.has_latency_budget()) {
    const auto& b = compute.latency_budget();
    if (b.seconds() < 0 || b.nanos() < 0 || (b.seconds() == 0 && b.nanos() == 0) || b.nanos() >= 1000000000) {
      return absl::InvalidArgumentError(absl::StrCat("compute.latency_budget must be > 0, got ", b.seconds(), "s ",
                                                     b.nanos(), "ns"));
    }
  }
  if (config.task() != v1::TRANSLATION && compute.decoder_steps() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compute.decoder_steps is only for translation models; model '", name, "' has no decoder"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDecode(const v1::ModelConfig& config, const v1::ComputeOptions& compute,
                            const DecodeOptions& decode) {
  const int beam_size = decode.beam_size;
  const int max_output_tokens = decode.max_output_tokens;
  const float length_penalty = decode.length_penalty;
  const std::string& name = config.name();
  const auto& t = config.translation();
  const auto& range = t.decoder_steps();
  if (compute.decoder_steps() != 0 &&
      (compute.decoder_steps() < range.min() || compute.decoder_steps() > range.max())) {
    return absl::InvalidArgumentError(absl::StrCat("compute.decoder_steps ", compute.decoder_steps(),
                                                   " is outside model '", name, "' range [", range.min(),
                                                   ", ", range.max(), "]"));
  }
  if (compute.min_steps() > range.max()) {
    return absl::InvalidArgumentError(absl::StrCat("compute.min_steps ", compute.min_steps(),
                                                   " is above model '", name, "' decoder step range [",
                                                   range.min(), ", ", range.max(),
                                                   "] (min_steps is a floor for the encoder and the decoder)"));
  }
  if (compute.decoder_steps() != 0 && compute.min_steps() > compute.decoder_steps()) {
    return absl::InvalidArgumentError(absl::StrCat("compute.min_steps ", compute.min_steps(),
                                                   " is above compute.decoder_steps ", compute.decoder_steps()));
  }
  if (beam_size < 0 || beam_size > t.max_beam_size()) {
    return absl::InvalidArgumentError(absl::StrCat("beam_size ", beam_size, " is outside [0, ",
                                                   t.max_beam_size(), "] (model '", name,
                                                   "' max_beam_size; 0 or 1 = greedy)"));
  }
  if (max_output_tokens < 0 || max_output_tokens > t.max_output_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("max_output_tokens ", max_output_tokens,
                                                   " is outside [0, ", t.max_output_tokens(), "] (model '",
                                                   name, "' limit; 0 = from the input length)"));
  }
  if (!(length_penalty >= 0 && length_penalty <= repository::kMaxLengthPenalty)) {
    return absl::InvalidArgumentError(absl::StrCat("length_penalty ", length_penalty, " is outside [0, ",
                                                   repository::kMaxLengthPenalty,
                                                   "] (0 = model '", name, "' default, ", t.length_penalty(), ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTopK(int top_k) {
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  return absl::OkStatus();
}

}  // namespace odeserve::core
