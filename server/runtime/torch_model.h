#pragma once
// A loaded TorchScript model of the artifact contract (docs/MODEL_CONTRACT.md). Every LibTorch
// call is made under InferenceMode and inside a try/catch: no c10::Error leaves this class.

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "server/runtime/native_field.h"

namespace odeserve::runtime {

/// Arithmetic of the matrix products (config `compute_precision`).
enum class ComputePrecision { kFloat32, kBFloat16 };

/// Holds LibTorch autocast on for this thread while alive (bfloat16 on `device`'s type) when
/// `precision` is kBFloat16; does nothing for kFloat32. Restores the previous autocast state.
class PrecisionScope {
 public:
  PrecisionScope(ComputePrecision precision, const torch::Device& device);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

/// Whether `device` runs bfloat16 matrix products natively: a CPU with AVX512_BF16 or AMX-BF16
/// (read from /proc/cpuinfo), or a CUDA device. Elsewhere LibTorch emulates them, slower than
/// float32.
bool NativeBfloat16(const torch::Device& device);

/// Parses "cpu", "cuda" or "cuda:N" and checks the device exists in this LibTorch build.
absl::StatusOr<torch::Device> ParseDevice(const std::string& spec);

class TorchModel {
 public:
  /// Loads `path` onto `device`, checks the contract's methods and `trained_depth` (and, when
  /// `expected_decoder_depth` > 0, the translation decoder's methods and `decoder_depth`), then
  /// calls `prepare()` once if the module has it. `precision` applies to every call below
  /// (the executors hold one PrecisionScope per batch).
  static absl::StatusOr<std::unique_ptr<TorchModel>> Load(
      const std::string& path, const torch::Device& device, int expected_trained_depth,
      int expected_decoder_depth = 0, ComputePrecision precision = ComputePrecision::kFloat32);

  absl::StatusOr<torch::Tensor> InputStage(const torch::Tensor& x, const torch::Tensor& mask);
  absl::StatusOr<torch::Tensor> VectorField(const torch::Tensor& h, const torch::Tensor& mask);
  absl::StatusOr<torch::Tensor> OutputStage(const torch::Tensor& h, const torch::Tensor& mask);
  /// The model as trained (L Euler steps inside the module); for tests and validation.
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& x, const torch::Tensor& mask);

  /// Evaluates the shared block natively (NativeField) from now on, when the module declares a
  /// native field: after checking, on a probe state under this model's precision, that the native
  /// field equals the module's own vector_field (to 1e-4 of the field's scale in float32, 5e-2 in
  /// bfloat16, whose roundings the two paths may place differently). Returns the field's name;
  /// NotFound when the module declares none (the TorchScript field stays); InvalidArgument when
  /// the declaration is malformed or the probe disagrees (the model must not load: its declared
  /// block is not the one it computes). Call after StoreProductWeightsInBfloat16, if at all.
  absl::StatusOr<std::string> UseNativeField();
  /// The native field's name, empty while the TorchScript field runs.
  std::string native_field() const { return native_field_ ? std::string(native_field_->name()) : std::string(); }
  /// The same for a translator's decoder_field (NativeDecoderField, attribute native_decoder), with
  /// the same probe and tolerances (field and both caches compared). NotFound without a decoder
  /// or a declaration.
  absl::StatusOr<std::string> UseNativeDecoder();
  bool native_decoder() const { return native_decoder_ != nullptr; }

  /// Unchecked calls for the hot loop; callers catch c10::Error themselves.
  torch::Tensor VectorFieldUnchecked(const torch::Tensor& h, const torch::Tensor& mask);
  torch::Tensor InputStageUnchecked(const torch::Tensor& x, const torch::Tensor& mask);
  torch::Tensor OutputStageUnchecked(const torch::Tensor& h, const torch::Tensor& mask);

  // Translation decoder (docs/MODEL_CONTRACT.md, "Translation"); only when has_decoder().
  struct DecoderFieldResult {
    torch::Tensor field, cache_k, cache_v;
  };
  struct CrossAttention {
    torch::Tensor k, v, bias;  // the same at every decoder step index and position
  };
  CrossAttention CrossKvUnchecked(const torch::Tensor& memory, const torch::Tensor& mask);
  torch::Tensor DecoderInputUnchecked(const torch::Tensor& tokens, const torch::Tensor& positions);
  DecoderFieldResult DecoderFieldUnchecked(const torch::Tensor& g, const torch::Tensor& cache_k,
                                           const torch::Tensor& cache_v, const torch::Tensor& cross_k,
                                           const torch::Tensor& cross_v, const torch::Tensor& cross_bias);
  torch::Tensor DecoderLogitsUnchecked(const torch::Tensor& g);

  /// The bfloat16 vocabulary shortlist of decoder_logits (docs/MODEL_CONTRACT.md, attribute
  /// exact_logit_candidates): `use` true restores the exported K, false runs the exact float32
  /// projection. Load turns it off on a CPU without native bfloat16, where the emulated product
  /// is 7-16x slower than float32 (docs/BENCHMARKS.md). No effect on a model exported without one.
  void UseLogitShortlist(bool use);
  int logit_shortlist() const;           // K in effect (0: float32 projection)
  int exported_logit_shortlist() const { return exported_logit_shortlist_; }

  /// For a bfloat16 model: stores in bfloat16 every float32 module tensor that the served
  /// methods only pass to products autocast runs in bfloat16 (linear, matmul, mm, bmm, addmm,
  /// baddbmm, addbmm) or only read the shape or device of. Autocast would cast each such tensor
  /// at every call; cast once, the outputs are bit-identical and a call reads half the bytes.
  /// Tensors with any other use (an embedding table, a position table that is sliced and added)
  /// stay float32. Found by reading the inlined TorchScript graphs, so it holds for every input.
  /// Call after Load, once; FailedPrecondition unless the precision is bfloat16.
  struct StoredWeights {
    int tensors = 0;
    int64_t values = 0;
  };
  absl::StatusOr<StoredWeights> StoreProductWeightsInBfloat16();

  bool has_decoder() const { return decoder_depth_ > 0; }
  int decoder_depth() const { return decoder_depth_; }
  int decoder_positions() const { return decoder_positions_; }  // the decoder's position table
  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }
  int vocab_size() const { return vocab_size_; }  // width of decoder_logits

  int trained_depth() const { return trained_depth_; }
  int64_t parameter_count() const { return parameter_count_; }
  const torch::Device& device() const { return device_; }
  ComputePrecision precision() const { return precision_; }

 private:
  TorchModel(torch::jit::Module module, torch::Device device, int trained_depth);
  absl::StatusOr<torch::Tensor> Call(const char* method, const torch::Tensor& a,
                                     const torch::Tensor& b);

  torch::jit::Module module_;
  torch::jit::Method input_stage_;
  torch::jit::Method vector_field_;
  torch::jit::Method output_stage_;
  std::optional<torch::jit::Method> cross_kv_, decoder_input_, decoder_field_, decoder_logits_;
  std::unique_ptr<NativeField> native_field_;  // replaces vector_field_ on the hot path when set
  std::unique_ptr<NativeDecoderField> native_decoder_;  // replaces decoder_field_ when set
  // Largest |script - native| over `script`'s scale against this precision's tolerance: an
  // InvalidArgument naming `declaration` when it is exceeded.
  absl::Status CompareWithScript(const std::string& declaration, const std::vector<torch::Tensor>& script,
                                 const std::vector<torch::Tensor>& native) const;
  torch::Device device_;
  ComputePrecision precision_ = ComputePrecision::kFloat32;
  int trained_depth_;
  int decoder_depth_ = 0;
  int decoder_positions_ = 0;
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  int vocab_size_ = 0;
  int exported_logit_shortlist_ = 0;
  int64_t parameter_count_ = 0;
};

}  // namespace odeserve::runtime
