#include "server/runtime/native_field.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"

namespace odeserve::runtime {
namespace {

// Reads a block's tensors (named `prefix` + name) and attributes from a module, with errors that
// name what is missing or misshaped.
class BlockReader {
 public:
  BlockReader(const torch::jit::Module& module, std::string prefix) : module_(module), prefix_(std::move(prefix)) {}

  absl::StatusOr<torch::Tensor> Tensor(const char* name, const std::vector<int64_t>& shape) const {
    ASSIGN_OR_RETURN(torch::Tensor tensor, Any(name));
    if (tensor.sizes() != c10::IntArrayRef(shape)) {
      return absl::InvalidArgumentError(absl::StrCat("native field: tensor '", prefix_, name, "' has shape [",
                                                     absl::StrJoin(tensor.sizes(), ", "), "], the block needs [",
                                                     absl::StrJoin(shape, ", "), "]"));
    }
    return tensor;
  }
  // A 1-D tensor of any length (the block's width is read from it).
  absl::StatusOr<torch::Tensor> Vector(const char* name) const {
    ASSIGN_OR_RETURN(torch::Tensor tensor, Any(name));
    if (tensor.dim() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("native field: tensor '", prefix_, name, "' is not 1-D"));
    }
    return tensor;
  }
  absl::StatusOr<int64_t> Int(const char* name) const {
    if (!module_.hasattr(name) || !module_.attr(name).isInt()) {
      return absl::InvalidArgumentError(absl::StrCat("native field: the module has no int attribute '", name, "'"));
    }
    return module_.attr(name).toInt();
  }
  absl::StatusOr<double> Double(const char* name) const {
    if (!module_.hasattr(name) || !module_.attr(name).isDouble()) {
      return absl::InvalidArgumentError(absl::StrCat("native field: the module has no float attribute '", name, "'"));
    }
    return module_.attr(name).toDouble();
  }

 private:
  absl::StatusOr<torch::Tensor> Any(const char* name) const {
    const std::string full = prefix_ + name;
    if (!module_.hasattr(full) || !module_.attr(full).isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat("native field: the module has no tensor '", full, "'"));
    }
    return module_.attr(full).toTensor();
  }

  const torch::jit::Module& module_;
  std::string prefix_;
};

// The declaration in string attribute `attribute`: NotFound without one.
absl::StatusOr<std::string> Declared(const torch::jit::Module& module, const char* attribute) {
  if (!module.hasattr(attribute)) {
    return absl::NotFoundError(absl::StrCat("the module declares no '", attribute, "'"));
  }
  const c10::IValue declared = module.attr(attribute);
  if (!declared.isString()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", attribute, "' is not a string"));
  }
  return declared.toStringRef();
}

// [B, heads, T, dh] -> [B, T, heads * dh]
torch::Tensor MergeHeads(const torch::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

// [B, T, H] -> [B, heads, T, H / heads] (a view)
torch::Tensor SplitHeads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// Multi-head self-attention context [B, T, H] of the fused projection `qkv` [B, T, 3H].
torch::Tensor AttentionContext(const torch::Tensor& qkv, const torch::Tensor& bias, int64_t heads, double scale) {
  const int64_t B = qkv.size(0), T = qkv.size(1), H = qkv.size(2) / 3;
  // One copy into [3, B, heads, T, dh] makes q, k and v contiguous, so the batched products
  // below read them in place (three strided views would each be copied by matmul).
  const torch::Tensor split = qkv.view({B, T, 3, heads, H / heads}).permute({2, 0, 3, 1, 4}).contiguous();
  const torch::Tensor q = split.select(0, 0), k = split.select(0, 1), v = split.select(0, 2);
  const torch::Tensor scores = at::add(bias, at::matmul(q, k.transpose(-1, -2)), scale);
  return at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({B, T, H});
}

}  // namespace

torch::Tensor MaskBias(const torch::Tensor& mask) {
  return at::mul(at::sub(mask, 1.0), 1e9).unsqueeze(1).unsqueeze(2);
}

absl::StatusOr<std::unique_ptr<NativeField>> NativeField::FromModule(const torch::jit::Module& module) {
  ASSIGN_OR_RETURN(const std::string kind, Declared(module, kAttribute));
  std::string prefix;
  if (module.hasattr(kPrefixAttribute)) {
    if (!module.attr(kPrefixAttribute).isString()) {
      return absl::InvalidArgumentError(absl::StrCat("attribute '", kPrefixAttribute, "' is not a string"));
    }
    prefix = module.attr(kPrefixAttribute).toStringRef();
  }
  const BlockReader read(module, prefix);
  std::unique_ptr<NativeField> field(new NativeField());
  if (kind == kPreLnName) {
    field->kind_ = Kind::kPreLn;
    ASSIGN_OR_RETURN(field->ln1_w_, read.Vector("ln1_w"));
    ASSIGN_OR_RETURN(field->ffn_b_, read.Vector("b_1"));
    const int64_t H = field->ln1_w_.size(0), F = field->ffn_b_.size(0);
    field->hidden_ = H;
    ASSIGN_OR_RETURN(field->heads_, read.Int("num_heads"));
    ASSIGN_OR_RETURN(field->scale_, read.Double("scale"));
    ASSIGN_OR_RETURN(field->ln1_b_, read.Tensor("ln1_b", {H}));
    ASSIGN_OR_RETURN(field->qkv_w_, read.Tensor("w_qkv", {3 * H, H}));
    ASSIGN_OR_RETURN(field->qkv_b_, read.Tensor("b_qkv", {3 * H}));
    ASSIGN_OR_RETURN(field->o_w_, read.Tensor("w_o", {H, H}));
    ASSIGN_OR_RETURN(field->o_b_, read.Tensor("b_o", {H}));
    ASSIGN_OR_RETURN(field->ln2_w_, read.Tensor("ln2_w", {H}));
    ASSIGN_OR_RETURN(field->ln2_b_, read.Tensor("ln2_b", {H}));
    ASSIGN_OR_RETURN(field->ffn_w_, read.Tensor("w_1", {F, H}));
    ASSIGN_OR_RETURN(field->out_w_, read.Tensor("w_2", {H, F}));
    ASSIGN_OR_RETURN(field->out_b_, read.Tensor("b_2", {H}));
  } else if (kind == kAlbertPostLnName) {
    field->kind_ = Kind::kAlbertPostLn;
    ASSIGN_OR_RETURN(const int64_t heads, read.Int("num_heads"));
    ASSIGN_OR_RETURN(const int64_t head_dim, read.Int("head_dim"));
    ASSIGN_OR_RETURN(const int64_t activation, read.Int("activation"));
    ASSIGN_OR_RETURN(field->scale_, read.Double("scale"));
    ASSIGN_OR_RETURN(field->eps_, read.Double("eps"));
    if (activation < 0 || activation > 2) {
      return absl::InvalidArgumentError(absl::StrCat("native field: unknown activation code ", activation));
    }
    const int64_t H = heads * head_dim;
    field->hidden_ = H;
    field->heads_ = heads;
    field->activation_ = static_cast<int>(activation);
    ASSIGN_OR_RETURN(field->ffn_b_, read.Vector("ffn_b"));
    const int64_t F = field->ffn_b_.size(0);
    ASSIGN_OR_RETURN(const torch::Tensor q_w, read.Tensor("q_w", {H, H}));
    ASSIGN_OR_RETURN(const torch::Tensor q_b, read.Tensor("q_b", {H}));
    ASSIGN_OR_RETURN(const torch::Tensor k_w, read.Tensor("k_w", {H, H}));
    ASSIGN_OR_RETURN(const torch::Tensor k_b, read.Tensor("k_b", {H}));
    ASSIGN_OR_RETURN(const torch::Tensor v_w, read.Tensor("v_w", {H, H}));
    ASSIGN_OR_RETURN(const torch::Tensor v_b, read.Tensor("v_b", {H}));
    // One product for the three projections (same dtype as stored: bfloat16 stays bfloat16).
    field->qkv_w_ = at::cat({q_w, k_w, v_w}, 0);
    field->qkv_b_ = at::cat({q_b, k_b, v_b}, 0);
    ASSIGN_OR_RETURN(field->o_w_, read.Tensor("o_w", {H, H}));
    ASSIGN_OR_RETURN(field->o_b_, read.Tensor("o_b", {H}));
    ASSIGN_OR_RETURN(field->ln1_w_, read.Tensor("attn_ln_w", {H}));
    ASSIGN_OR_RETURN(field->ln1_b_, read.Tensor("attn_ln_b", {H}));
    ASSIGN_OR_RETURN(field->ffn_w_, read.Tensor("ffn_w", {F, H}));
    ASSIGN_OR_RETURN(field->out_w_, read.Tensor("ffn_out_w", {H, F}));
    ASSIGN_OR_RETURN(field->out_b_, read.Tensor("ffn_out_b", {H}));
    ASSIGN_OR_RETURN(field->ln2_w_, read.Tensor("out_ln_w", {H}));
    ASSIGN_OR_RETURN(field->ln2_b_, read.Tensor("out_ln_b", {H}));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", kAttribute, "' is '", kind, "'; this server knows '",
                                                   kPreLnName, "' and '", kAlbertPostLnName, "'"));
  }
  if (field->heads_ <= 0 || field->hidden_ % field->heads_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("native field: ", field->heads_, " heads do not divide the width ", field->hidden_));
  }
  return field;
}

const char* NativeField::name() const {
  return kind_ == Kind::kPreLn ? kPreLnName : kAlbertPostLnName;
}

torch::Tensor NativeField::Evaluate(const torch::Tensor& h, const torch::Tensor& mask) const {
  return kind_ == Kind::kPreLn ? PreLn(h, mask) : AlbertPostLn(h, mask);
}

torch::Tensor NativeField::PreLn(const torch::Tensor& h, const torch::Tensor& mask) const {
  const int64_t H = hidden_;
  const torch::Tensor x = at::layer_norm(h, {H}, ln1_w_, ln1_b_, 1e-5);
  const torch::Tensor ctx = AttentionContext(at::linear(x, qkv_w_, qkv_b_), MaskBias(mask), heads_, scale_);
  const torch::Tensor a = at::linear(ctx, o_w_, o_b_);
  const torch::Tensor y = at::layer_norm(h + a, {H}, ln2_w_, ln2_b_, 1e-5);
  torch::Tensor m = at::linear(at::gelu(at::linear(y, ffn_w_, ffn_b_)), out_w_, out_b_);
  // a and m come out of the same kind of product, so they share a dtype: adding in place is
  // the script's `a + m`.
  return m.add_(a);
}

torch::Tensor NativeField::AlbertPostLn(const torch::Tensor& state, const torch::Tensor& mask) const {
  const int64_t H = hidden_;
  // Pad positions: state read as zero (whatever the server left there), field zero.
  const torch::Tensor keep = mask.unsqueeze(-1) > 0;
  const torch::Tensor h = at::where(keep, state.to(at::kFloat), at::zeros({}, state.options().dtype(at::kFloat)));
  const torch::Tensor bias = at::mul(at::rsub(mask, 1.0), -1.0e9).unsqueeze(1).unsqueeze(2);
  const torch::Tensor ctx = AttentionContext(at::linear(h, qkv_w_, qkv_b_), bias, heads_, scale_);
  const torch::Tensor a = at::layer_norm(at::linear(ctx, o_w_, o_b_) + h, {H}, ln1_w_, ln1_b_, eps_);
  torch::Tensor inner = at::linear(a, ffn_w_, ffn_b_);
  switch (activation_) {
    case 0: inner = at::gelu(inner, "tanh"); break;  // gelu_new: the same formula, one operator
    case 1: inner = at::gelu(inner); break;
    default: inner = at::relu(inner); break;
  }
  const torch::Tensor layer = at::layer_norm(at::linear(inner, out_w_, out_b_) + a, {H}, ln2_w_, ln2_b_, eps_);
  const torch::Tensor field = layer.to(at::kFloat) - h;
  return at::where(keep, field, at::zeros({}, field.options()));
}

absl::StatusOr<std::unique_ptr<NativeDecoderField>> NativeDecoderField::FromModule(const torch::jit::Module& module) {
  ASSIGN_OR_RETURN(const std::string kind, Declared(module, kAttribute));
  if (kind != kPreLnCrossName) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", kAttribute, "' is '", kind, "'; this server knows '", kPreLnCrossName, "'"));
  }
  const BlockReader read(module, "d_");
  std::unique_ptr<NativeDecoderField> field(new NativeDecoderField());
  ASSIGN_OR_RETURN(field->ln1_w_, read.Vector("ln1_w"));
  ASSIGN_OR_RETURN(field->b_1_, read.Vector("b_1"));
  const int64_t H = field->ln1_w_.size(0), F = field->b_1_.size(0);
  ASSIGN_OR_RETURN(field->heads_, read.Int("num_heads"));
  ASSIGN_OR_RETURN(field->scale_, read.Double("scale"));
  if (field->heads_ <= 0 || H % field->heads_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("native decoder: ", field->heads_, " heads do not divide the width ", H));
  }
  ASSIGN_OR_RETURN(field->ln1_b_, read.Tensor("ln1_b", {H}));
  ASSIGN_OR_RETURN(field->w_qkv_, read.Tensor("w_qkv", {3 * H, H}));
  ASSIGN_OR_RETURN(field->b_qkv_, read.Tensor("b_qkv", {3 * H}));
  ASSIGN_OR_RETURN(field->w_o_, read.Tensor("w_o", {H, H}));
  ASSIGN_OR_RETURN(field->b_o_, read.Tensor("b_o", {H}));
  ASSIGN_OR_RETURN(field->ln2_w_, read.Tensor("ln2_w", {H}));
  ASSIGN_OR_RETURN(field->ln2_b_, read.Tensor("ln2_b", {H}));
  ASSIGN_OR_RETURN(field->w_q2_, read.Tensor("w_q2", {H, H}));
  ASSIGN_OR_RETURN(field->b_q2_, read.Tensor("b_q2", {H}));
  ASSIGN_OR_RETURN(field->w_o2_, read.Tensor("w_o2", {H, H}));
  ASSIGN_OR_RETURN(field->b_o2_, read.Tensor("b_o2", {H}));
  ASSIGN_OR_RETURN(field->ln3_w_, read.Tensor("ln3_w", {H}));
  ASSIGN_OR_RETURN(field->ln3_b_, read.Tensor("ln3_b", {H}));
  ASSIGN_OR_RETURN(field->w_1_, read.Tensor("w_1", {F, H}));
  ASSIGN_OR_RETURN(field->w_2_, read.Tensor("w_2", {H, F}));
  ASSIGN_OR_RETURN(field->b_2_, read.Tensor("b_2", {H}));
  return field;
}

NativeDecoderField::Result NativeDecoderField::Evaluate(const torch::Tensor& g, const torch::Tensor& cache_k,
                                                        const torch::Tensor& cache_v, const torch::Tensor& cross_k,
                                                        const torch::Tensor& cross_v,
                                                        const torch::Tensor& cross_bias) const {
  const int64_t H = ln1_w_.size(0);
  // Self-attention over the earlier positions' keys and values plus this one's.
  const std::vector<torch::Tensor> qkv =
      at::linear(at::layer_norm(g, {H}, ln1_w_, ln1_b_, 1e-5), w_qkv_, b_qkv_).chunk(3, -1);
  const torch::Tensor q = SplitHeads(qkv[0], heads_);
  Result out;
  out.cache_k = at::cat({cache_k, SplitHeads(qkv[1], heads_)}, 2);
  out.cache_v = at::cat({cache_v, SplitHeads(qkv[2], heads_)}, 2);
  const torch::Tensor self_scores = at::mul(at::matmul(q, out.cache_k.transpose(-1, -2)), scale_);
  const torch::Tensor a = at::linear(MergeHeads(at::matmul(at::softmax(self_scores, -1), out.cache_v)), w_o_, b_o_);
  // Cross-attention over the source.
  const torch::Tensor y = at::layer_norm(g + a, {H}, ln2_w_, ln2_b_, 1e-5);
  const torch::Tensor q2 = SplitHeads(at::linear(y, w_q2_, b_q2_), heads_);
  const torch::Tensor cross_scores = at::add(cross_bias, at::matmul(q2, cross_k.transpose(-1, -2)), scale_);
  const torch::Tensor c = at::linear(MergeHeads(at::matmul(at::softmax(cross_scores, -1), cross_v)), w_o2_, b_o2_);
  const torch::Tensor z = at::layer_norm(g + a + c, {H}, ln3_w_, ln3_b_, 1e-5);
  torch::Tensor m = at::linear(at::gelu(at::linear(z, w_1_, b_1_)), w_2_, b_2_);
  out.field = (a + c).add_(m);
  return out;
}

}  // namespace odeserve::runtime
