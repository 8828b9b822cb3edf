#pragma once
// A loaded TorchScript model of the artifact contract (docs/MODEL_CONTRACT.md). Every LibTorch
// call is made under InferenceMode and inside a try/catch: no c10::Error leaves this class.

#include <memory>
#include <string>

#include <torch/script.h>

#include "absl/status/statusor.h"

namespace odeserve::runtime {

/// Parses "cpu", "cuda" or "cuda:N" and checks the device exists in this LibTorch build.
absl::StatusOr<torch::Device> ParseDevice(const std::string& spec);

class TorchModel {
 public:
  /// Loads `path` onto `device`, checks the contract's methods and `trained_depth`, then calls
  /// `prepare()` once if the module has it.
  static absl::StatusOr<std::unique_ptr<TorchModel>> Load(const std::string& path,
                                                          const torch::Device& device,
                                                          int expected_trained_depth);

  absl::StatusOr<torch::Tensor> InputStage(const torch::Tensor& x, const torch::Tensor& mask);
  absl::StatusOr<torch::Tensor> VectorField(const torch::Tensor& h, const torch::Tensor& mask);
  absl::StatusOr<torch::Tensor> OutputStage(const torch::Tensor& h, const torch::Tensor& mask);
  /// The model as trained (L Euler steps inside the module); for tests and validation.
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& x, const torch::Tensor& mask);

  /// Unchecked calls for the hot loop; callers catch c10::Error themselves.
  torch::Tensor VectorFieldUnchecked(const torch::Tensor& h, const torch::Tensor& mask);
  torch::Tensor InputStageUnchecked(const torch::Tensor& x, const torch::Tensor& mask);
  torch::Tensor OutputStageUnchecked(const torch::Tensor& h, const torch::Tensor& mask);

  int trained_depth() const { return trained_depth_; }
  int64_t parameter_count() const { return parameter_count_; }
  const torch::Device& device() const { return device_; }

 private:
  TorchModel(torch::jit::Module module, torch::Device device, int trained_depth);
  absl::StatusOr<torch::Tensor> Call(const char* method, const torch::Tensor& a,
                                     const torch::Tensor& b);

  torch::jit::Module module_;
  torch::jit::Method input_stage_;
  torch::jit::Method vector_field_;
  torch::jit::Method output_stage_;
  torch::Device device_;
  int trained_depth_;
  int64_t parameter_count_ = 0;
};

}  // namespace odeserve::runtime
