#pragma once
// The shared block of a standard architecture, evaluated with direct ATen calls instead of the
// TorchScript interpreter (docs/MODEL_CONTRACT.md, "Native fields"). A module opts in with its
// string attribute `native_field`; the block's tensors are read from the module by name, once.
// Why: at small shapes the interpreter's per-operator cost is a large share of a step (the
// runtime benchmark's 1 x 32 row), and a known block can also drop operators the script spells
// out (ALBERT's tanh GELU as seven elementwise operators becomes one).
//
// No gRPC types, no threads: TorchModel owns one and calls Evaluate inside its own guards.

#include <memory>
#include <string>

#include <torch/script.h>

#include "absl/status/statusor.h"

namespace odeserve::runtime {

/// [B, T] mask (1 token, 0 pad) -> additive attention bias [B, 1, 1, T], as families.mask_bias.
torch::Tensor MaskBias(const torch::Tensor& mask);

class NativeField {
 public:
  enum class Kind {
    // families.py's pre-LN block: f(h) = a + FFN(LN2(h + a)), a = Attn(LN1(h)); fused QKV
    // matrix, exact GELU, LayerNorm eps 1e-5.
    kPreLn,
    // The importer's ALBERT layer (models/odeserve_models/albert/module.py): post-LN, f(h) =
    // layer(h) - h, zero at pad positions; separate Q/K/V matrices, gelu_new / gelu / relu.
    kAlbertPostLn,
  };

  /// The module attribute that declares a native field, and its values. Tensor names get the
  /// optional string attribute `native_field_prefix` in front (the translator's encoder: "e_").
  static constexpr const char* kAttribute = "native_field";
  static constexpr const char* kPrefixAttribute = "native_field_prefix";
  static constexpr const char* kPreLnName = "pre_ln";
  static constexpr const char* kAlbertPostLnName = "albert_post_ln";

  /// The field `module` declares. NotFound when it declares none (it keeps the TorchScript
  /// field); InvalidArgument, naming the attribute or tensor, when the declaration is unknown or
  /// a tensor it needs is missing or has the wrong shape. Tensors are read as they are now: call
  /// again after the module's weights change (TorchModel::StoreProductWeightsInBfloat16).
  static absl::StatusOr<std::unique_ptr<NativeField>> FromModule(const torch::jit::Module& module);

  /// f(h) for states h [B, T, D] float32 and mask [B, T] (1 token, 0 pad), under the caller's
  /// InferenceMode and autocast; throws c10::Error like a TorchScript call.
  torch::Tensor Evaluate(const torch::Tensor& h, const torch::Tensor& mask) const;

  Kind kind() const { return kind_; }
  const char* name() const;
  int64_t state_width() const { return hidden_; }  // D

 private:
  NativeField() = default;
  torch::Tensor PreLn(const torch::Tensor& h, const torch::Tensor& mask) const;
  torch::Tensor AlbertPostLn(const torch::Tensor& h, const torch::Tensor& mask) const;

  Kind kind_ = Kind::kPreLn;
  int64_t hidden_ = 0;
  int64_t heads_ = 0;
  double scale_ = 0;
  double eps_ = 1e-5;
  int activation_ = 0;  // kAlbertPostLn: 0 gelu_new (tanh), 1 gelu (erf), 2 relu
  // Pre-LN: ln1, qkv (fused), o, ln2, ffn in, ffn out. ALBERT: qkv (fused here from its three
  // matrices), o, attention LayerNorm, ffn in, ffn out, output LayerNorm.
  torch::Tensor ln1_w_, ln1_b_, qkv_w_, qkv_b_, o_w_, o_b_, ln2_w_, ln2_b_, ffn_w_, ffn_b_, out_w_, out_b_;
};

/// The translator's decoder block (models/odeserve_models/translation.py, decoder_field): pre-LN
/// self-attention over a KV cache, cross-attention to the source, feed-forward; tensors d_*.
/// Declared by the module's string attribute `native_decoder` = "pre_ln_cross".
class NativeDecoderField {
 public:
  static constexpr const char* kAttribute = "native_decoder";
  static constexpr const char* kPreLnCrossName = "pre_ln_cross";

  /// As NativeField::FromModule: NotFound without a declaration, InvalidArgument naming what is
  /// wrong with one.
  static absl::StatusOr<std::unique_ptr<NativeDecoderField>> FromModule(const torch::jit::Module& module);

  struct Result {
    torch::Tensor field, cache_k, cache_v;
  };
  /// decoder_field(g [B, 1, H], cache_k/v [B, heads, P, dh], cross_k/v [B, heads, S, dh],
  /// cross_bias [B, 1, 1, S]): the field at this position and the caches with it appended.
  Result Evaluate(const torch::Tensor& g, const torch::Tensor& cache_k, const torch::Tensor& cache_v,
                  const torch::Tensor& cross_k, const torch::Tensor& cross_v, const torch::Tensor& cross_bias) const;

  int64_t width() const { return ln1_w_.size(0); }  // H
  int64_t heads() const { return heads_; }

 private:
  NativeDecoderField() = default;

  int64_t heads_ = 0;
  double scale_ = 0;
  torch::Tensor ln1_w_, ln1_b_, w_qkv_, b_qkv_, w_o_, b_o_, ln2_w_, ln2_b_, w_q2_, b_q2_, w_o2_, b_o2_, ln3_w_, ln3_b_,
      w_1_, b_1_, w_2_, b_2_;
};

}  // namespace odeserve::runtime
