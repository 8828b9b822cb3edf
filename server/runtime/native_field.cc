#include "server/runtime/native_field.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"

namespace odeserve::runtime {
namespace {

// Reads the named tensor attribute, checking its shape.
absl::StatusOr<torch::Tensor> ReadTensor(const torch::jit::Module& module, const char* name,
                                         const std::vector<int64_t>& shape) {
  if (!module.hasattr(name) || !module.attr(name).isTensor()) {
    return absl::InvalidArgumentError(absl::StrCat("native field: the module has no tensor '", name, "'"));
  }
  torch::Tensor tensor = module.attr(name).toTensor();
  if (tensor.sizes() != c10::IntArrayRef(shape)) {
    return absl::InvalidArgumentError(absl::StrCat("native field: tensor '", name, "' has shape [",
                                                   absl::StrJoin(tensor.sizes(), ", "), "], the block needs [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  return tensor;
}

// A 1-D tensor of any length (the block's width is read from it).
absl::StatusOr<torch::Tensor> ReadVector(const torch::jit::Module& module, const char* name) {
  if (!module.hasattr(name) || !module.attr(name).isTensor() || module.attr(name).toTensor().dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("native field: the module has no 1-D tensor '", name, "'"));
  }
  return module.attr(name).toTensor();
}

absl::StatusOr<int64_t> ReadInt(const torch::jit::Module& module, const char* name) {
  if (!module.hasattr(name) || !module.attr(name).isInt()) {
    return absl::InvalidArgumentError(absl::StrCat("native field: the module has no int attribute '", name, "'"));
  }
  return module.attr(name).toInt();
}

absl::StatusOr<double> ReadDouble(const torch::jit::Module& module, const char* name) {
  if (!module.hasattr(name) || !module.attr(name).isDouble()) {
    return absl::InvalidArgumentError(absl::StrCat("native field: the module has no float attribute '", name, "'"));
  }
  return module.attr(name).toDouble();
}

// [B, T] mask (1 token, 0 pad) -> additive attention bias [B, 1, 1, T], as families.mask_bias.
torch::Tensor MaskBias(const torch::Tensor& mask) {
  return at::mul(at::sub(mask, 1.0), 1e9).unsqueeze(1).unsqueeze(2);
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

absl::StatusOr<std::unique_ptr<NativeField>> NativeField::FromModule(const torch::jit::Module& module) {
  if (!module.hasattr(kAttribute)) {
    return absl::NotFoundError(absl::StrCat("the module declares no '", kAttribute, "'"));
  }
  const c10::IValue declared = module.attr(kAttribute);
  if (!declared.isString()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", kAttribute, "' is not a string"));
  }
  const std::string kind = declared.toStringRef();
  std::unique_ptr<NativeField> field(new NativeField());
  if (kind == kPreLnName) {
    field->kind_ = Kind::kPreLn;
    ASSIGN_OR_RETURN(field->ln1_w_, ReadVector(module, "ln1_w"));
    ASSIGN_OR_RETURN(field->ffn_b_, ReadVector(module, "b_1"));
    const int64_t H = field->ln1_w_.size(0), F = field->ffn_b_.size(0);
    field->hidden_ = H;
    ASSIGN_OR_RETURN(field->heads_, ReadInt(module, "num_heads"));
    ASSIGN_OR_RETURN(field->scale_, ReadDouble(module, "scale"));
    ASSIGN_OR_RETURN(field->ln1_b_, ReadTensor(module, "ln1_b", {H}));
    ASSIGN_OR_RETURN(field->qkv_w_, ReadTensor(module, "w_qkv", {3 * H, H}));
    ASSIGN_OR_RETURN(field->qkv_b_, ReadTensor(module, "b_qkv", {3 * H}));
    ASSIGN_OR_RETURN(field->o_w_, ReadTensor(module, "w_o", {H, H}));
    ASSIGN_OR_RETURN(field->o_b_, ReadTensor(module, "b_o", {H}));
    ASSIGN_OR_RETURN(field->ln2_w_, ReadTensor(module, "ln2_w", {H}));
    ASSIGN_OR_RETURN(field->ln2_b_, ReadTensor(module, "ln2_b", {H}));
    ASSIGN_OR_RETURN(field->ffn_w_, ReadTensor(module, "w_1", {F, H}));
    ASSIGN_OR_RETURN(field->out_w_, ReadTensor(module, "w_2", {H, F}));
    ASSIGN_OR_RETURN(field->out_b_, ReadTensor(module, "b_2", {H}));
  } else if (kind == kAlbertPostLnName) {
    field->kind_ = Kind::kAlbertPostLn;
    ASSIGN_OR_RETURN(const int64_t heads, ReadInt(module, "num_heads"));
    ASSIGN_OR_RETURN(const int64_t head_dim, ReadInt(module, "head_dim"));
    ASSIGN_OR_RETURN(const int64_t activation, ReadInt(module, "activation"));
    ASSIGN_OR_RETURN(field->scale_, ReadDouble(module, "scale"));
    ASSIGN_OR_RETURN(field->eps_, ReadDouble(module, "eps"));
    if (activation < 0 || activation > 2) {
      return absl::InvalidArgumentError(absl::StrCat("native field: unknown activation code ", activation));
    }
    const int64_t H = heads * head_dim;
    field->hidden_ = H;
    field->heads_ = heads;
    field->activation_ = static_cast<int>(activation);
    ASSIGN_OR_RETURN(field->ffn_b_, ReadVector(module, "ffn_b"));
    const int64_t F = field->ffn_b_.size(0);
    ASSIGN_OR_RETURN(const torch::Tensor q_w, ReadTensor(module, "q_w", {H, H}));
    ASSIGN_OR_RETURN(const torch::Tensor q_b, ReadTensor(module, "q_b", {H}));
    ASSIGN_OR_RETURN(const torch::Tensor k_w, ReadTensor(module, "k_w", {H, H}));
    ASSIGN_OR_RETURN(const torch::Tensor k_b, ReadTensor(module, "k_b", {H}));
    ASSIGN_OR_RETURN(const torch::Tensor v_w, ReadTensor(module, "v_w", {H, H}));
    ASSIGN_OR_RETURN(const torch::Tensor v_b, ReadTensor(module, "v_b", {H}));
    // One product for the three projections (same dtype as stored: bfloat16 stays bfloat16).
    field->qkv_w_ = at::cat({q_w, k_w, v_w}, 0);
    field->qkv_b_ = at::cat({q_b, k_b, v_b}, 0);
    ASSIGN_OR_RETURN(field->o_w_, ReadTensor(module, "o_w", {H, H}));
    ASSIGN_OR_RETURN(field->o_b_, ReadTensor(module, "o_b", {H}));
    ASSIGN_OR_RETURN(field->ln1_w_, ReadTensor(module, "attn_ln_w", {H}));
    ASSIGN_OR_RETURN(field->ln1_b_, ReadTensor(module, "attn_ln_b", {H}));
    ASSIGN_OR_RETURN(field->ffn_w_, ReadTensor(module, "ffn_w", {F, H}));
    ASSIGN_OR_RETURN(field->out_w_, ReadTensor(module, "ffn_out_w", {H, F}));
    ASSIGN_OR_RETURN(field->out_b_, ReadTensor(module, "ffn_out_b", {H}));
    ASSIGN_OR_RETURN(field->ln2_w_, ReadTensor(module, "out_ln_w", {H}));
    ASSIGN_OR_RETURN(field->ln2_b_, ReadTensor(module, "out_ln_b", {H}));
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

}  // namespace odeserve::runtime
