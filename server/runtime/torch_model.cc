#include "server/runtime/torch_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/cuda.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "server/common/status_macros.h"

namespace odeserve::runtime {
namespace {

constexpr const char* kRequiredMethods[] = {"input_stage", "vector_field", "output_stage",
                                            "forward"};
constexpr const char* kDecoderMethods[] = {"cross_kv", "decoder_input", "decoder_field",
                                           "decoder_logits"};
constexpr const char* kDecoderAttributes[] = {"decoder_depth", "max_len", "bos_id", "eos_id", "vocab_size"};
constexpr const char* kShortlistAttribute = "exact_logit_candidates";

// Products that autocast runs in bfloat16 on the CPU and on CUDA (LibTorch 1.13's
// lower_precision_fp lists): each casts all its floating inputs, so one stored in bfloat16
// gives the same result.
bool IsBfloat16Product(torch::jit::NodeKind kind) {
  namespace aten = c10::aten;
  return kind == aten::linear || kind == aten::matmul || kind == aten::mm || kind == aten::bmm ||
         kind == aten::addmm || kind == aten::baddbmm || kind == aten::addbmm;
}

// Uses that read a tensor's shape or device, not its values.
bool ReadsOnlyMetadata(torch::jit::NodeKind kind) {
  static const torch::jit::NodeKind numel = c10::Symbol::fromQualString("aten::numel");
  return kind == numel || kind == c10::aten::size || kind == c10::aten::dim || kind == c10::prim::device;
}

// The attribute names from the module (`self`) down to `get_attr` (a chain of prim::GetAttr),
// or empty when the chain starts elsewhere.
std::vector<std::string> AttributePath(const torch::jit::Node* get_attr, const torch::jit::Value* self) {
  std::vector<std::string> path;
  const torch::jit::Node* node = get_attr;
  while (true) {
    path.insert(path.begin(), node->s(torch::jit::attr::name));
    const torch::jit::Value* source = node->input();
    if (source == self) return path;
    node = source->node();
    if (node->kind() != torch::jit::prim::GetAttr) return {};
  }
}

void VisitNodes(torch::jit::Block* block, const std::function<void(torch::jit::Node*)>& visit) {
  for (torch::jit::Node* node : block->nodes()) {
    visit(node);
    for (torch::jit::Block* inner : node->blocks()) VisitNodes(inner, visit);
  }
}

bool HasGraphCalls(torch::jit::Graph& graph) {
  bool found = false;
  VisitNodes(graph.block(), [&](torch::jit::Node* node) {
    found = found || torch::jit::tryToGraphFunction(node) != nullptr;
  });
  return found;
}

// With the graph optimizer off (ConfigureThreading turns it off on the loading thread),
// torch::jit::Inline pastes each callee's graph as written, so the calls inside it (F.linear in the
// models' helpers) stay and hide the products behind them. TorchScript has no recursion, so
// inlining level by level ends.
void InlineEveryCall(torch::jit::Graph& graph) {
  while (HasGraphCalls(graph)) torch::jit::Inline(graph);
}

}  // namespace

PrecisionScope::PrecisionScope(ComputePrecision precision, const torch::Device& device) {
  if (precision != ComputePrecision::kBFloat16) return;
  active_ = true;
  cuda_ = device.is_cuda();
  if (cuda_) {
    was_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  }
  at::autocast::increment_nesting();
}

PrecisionScope::~PrecisionScope() {
  if (!active_) return;
  // Leaving the outermost scope drops the weight casts autocast cached during the batch.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
}

bool NativeBfloat16(const torch::Device& device) {
  if (device.is_cuda()) return true;
  // Asked for every model at load (precision and the translator's shortlist): read the CPU once.
  static const bool cpu_native = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
      if (!absl::StartsWith(line, "flags")) continue;
      return absl::StrContains(line, " avx512_bf16") || absl::StrContains(line, " amx_bf16");
    }
    return false;
  }();
  return cpu_native;
}

absl::StatusOr<torch::Device> ParseDevice(const std::string& spec) {
  if (spec == "cpu") return torch::Device(torch::kCPU);
  if (spec == "cuda" || absl::StartsWith(spec, "cuda:")) {
    int index = 0;
    if (spec != "cuda" && !absl::SimpleAtoi(spec.substr(5), &index)) {  // "cuda:" too
      return absl::InvalidArgumentError(absl::StrCat("--device '", spec, "': bad CUDA index"));
    }
    if (!torch::cuda::is_available()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--device '", spec, "': this LibTorch build sees no CUDA device (CPU-only build or no GPU)"));
    }
    if (index < 0 || index >= static_cast<int>(torch::cuda::device_count())) {
      return absl::InvalidArgumentError(absl::StrCat("--device '", spec, "': only ",
                                                     torch::cuda::device_count(), " CUDA devices"));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device '", spec, "': expected cpu, cuda or cuda:N"));
}

TorchModel::TorchModel(torch::jit::Module module, torch::Device device, int trained_depth)
    : module_(std::move(module)),
      input_stage_(module_.get_method("input_stage")),
      vector_field_(module_.get_method("vector_field")),
      output_stage_(module_.get_method("output_stage")),
      device_(device),
      trained_depth_(trained_depth) {
  for (const auto& parameter : module_.parameters()) parameter_count_ += parameter.numel();
}

absl::StatusOr<std::unique_ptr<TorchModel>> TorchModel::Load(const std::string& path,
                                                             const torch::Device& device,
                                                             int expected_trained_depth,
                                                             int expected_decoder_depth,
                                                             ComputePrecision precision) {
  try {
    c10::InferenceMode guard;
    torch::jit::Module module = torch::jit::load(path, device);
    module.eval();
    for (const char* method : kRequiredMethods) {
      if (!module.find_method(method)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": TorchScript module lacks method '", method, "()'"));
      }
    }
    if (!module.hasattr("trained_depth")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": module lacks attribute 'trained_depth'"));
    }
    const int64_t depth = module.attr("trained_depth").toInt();
    if (depth != expected_trained_depth) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": module trained_depth ", depth,
                                                     " differs from config trained_depth ",
                                                     expected_trained_depth));
    }
    if (expected_decoder_depth > 0) {
      for (const char* method : kDecoderMethods) {
        if (!module.find_method(method)) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": TRANSLATION module lacks decoder method '", method, "()'"));
        }
      }
      for (const char* attribute : kDecoderAttributes) {
        if (!module.hasattr(attribute)) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": TRANSLATION module lacks attribute '", attribute, "'"));
        }
      }
      const int64_t decoder_depth = module.attr("decoder_depth").toInt();
      if (decoder_depth != expected_decoder_depth) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": module decoder_depth ", decoder_depth,
            " differs from config translation.decoder_trained_depth ", expected_decoder_depth));
      }
    }
    if (module.find_method("prepare")) module.get_method("prepare")(std::vector<c10::IValue>{});
    std::unique_ptr<TorchModel> model(new TorchModel(std::move(module), device, depth));
    model->precision_ = precision;
    if (expected_decoder_depth > 0) {
      torch::jit::Module& m = model->module_;
      model->cross_kv_ = m.get_method("cross_kv");
      model->decoder_input_ = m.get_method("decoder_input");
      model->decoder_field_ = m.get_method("decoder_field");
      model->decoder_logits_ = m.get_method("decoder_logits");
      model->decoder_depth_ = expected_decoder_depth;
      model->decoder_positions_ = static_cast<int>(m.attr("max_len").toInt());
      model->bos_id_ = m.attr("bos_id").toInt();
      model->eos_id_ = m.attr("eos_id").toInt();
      model->vocab_size_ = static_cast<int>(m.attr("vocab_size").toInt());
      if (m.hasattr(kShortlistAttribute)) {
        model->exported_logit_shortlist_ = static_cast<int>(m.attr(kShortlistAttribute).toInt());
        model->UseLogitShortlist(NativeBfloat16(device));
      }
    }
    return model;
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load TorchScript module: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot load TorchScript module: ", e.what()));
  }
}

absl::Status TorchModel::CompareWithScript(const std::string& declaration, const std::vector<torch::Tensor>& script,
                                           const std::vector<torch::Tensor>& native) const {
  double scale = 1.0, difference = 0.0;
  for (size_t i = 0; i < script.size(); ++i) {
    const torch::Tensor want = script[i].to(torch::kFloat32), got = native[i].to(torch::kFloat32);
    scale = std::max(scale, want.abs().max().item<double>());
    difference = std::max(difference, (want - got).abs().max().item<double>());
  }
  const double tolerance = (precision_ == ComputePrecision::kBFloat16 ? 5e-2 : 1e-4) * scale;
  if (!(difference <= tolerance)) {
    return absl::InvalidArgumentError(absl::StrCat("the module declares ", declaration,
                                                   " but its script differs from that block by ", difference,
                                                   " on a probe state (tolerance ", tolerance, ")"));
  }
  return absl::OkStatus();
}

namespace {

// Probe inputs: fixed-seed normal values at a LayerNorm output's scale.
torch::Tensor Probe(c10::IntArrayRef shape, uint64_t seed, const torch::Device& device) {
  return torch::randn(shape, at::detail::createCPUGenerator(seed), torch::kFloat32).to(device);
}

// Two rows, the second padded after 3 of `length` positions.
torch::Tensor ProbeMask(int64_t length, const torch::Device& device) {
  torch::Tensor mask = torch::ones({2, length});
  mask.index_put_({1, torch::indexing::Slice(3, torch::indexing::None)}, 0.0);
  return mask.to(device);
}

}  // namespace

absl::StatusOr<std::string> TorchModel::UseNativeField() {
  try {
    c10::InferenceMode guard;
    ASSIGN_OR_RETURN(std::unique_ptr<NativeField> field, NativeField::FromModule(module_));
    const torch::Tensor h = Probe({2, 5, field->state_width()}, 20261207, device_);
    const torch::Tensor mask = ProbeMask(5, device_);
    // Token positions only: pads may hold anything.
    const torch::Tensor tokens = mask.unsqueeze(-1);
    PrecisionScope precision(precision_, device_);
    RETURN_IF_ERROR(CompareWithScript(absl::StrCat(NativeField::kAttribute, " '", field->name(), "'"),
                                      {vector_field_({h, mask}).toTensor().to(torch::kFloat32) * tokens},
                                      {field->Evaluate(h, mask).to(torch::kFloat32) * tokens}));
    native_field_ = std::move(field);
    return std::string(native_field_->name());
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("native field: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::string> TorchModel::UseNativeDecoder() {
  if (!has_decoder()) return absl::NotFoundError("the module has no decoder");
  try {
    c10::InferenceMode guard;
    ASSIGN_OR_RETURN(std::unique_ptr<NativeDecoderField> decoder, NativeDecoderField::FromModule(module_));
    const int64_t width = decoder->width(), heads = decoder->heads(), head_dim = width / heads;
    const torch::Tensor g = Probe({2, 1, width}, 1, device_);
    const torch::Tensor cache_k = Probe({2, heads, 3, head_dim}, 2, device_);
    const torch::Tensor cache_v = Probe({2, heads, 3, head_dim}, 3, device_);
    const torch::Tensor cross_k = Probe({2, heads, 5, head_dim}, 4, device_);
    const torch::Tensor cross_v = Probe({2, heads, 5, head_dim}, 5, device_);
    const torch::Tensor cross_bias = MaskBias(ProbeMask(5, device_));
    PrecisionScope precision(precision_, device_);
    const DecoderFieldResult script = [&] {
      const auto out = (*decoder_field_)({g, cache_k, cache_v, cross_k, cross_v, cross_bias}).toTuple();
      return DecoderFieldResult{out->elements()[0].toTensor(), out->elements()[1].toTensor(), out->elements()[2].toTensor()};
    }();
    const NativeDecoderField::Result native = decoder->Evaluate(g, cache_k, cache_v, cross_k, cross_v, cross_bias);
    RETURN_IF_ERROR(CompareWithScript(absl::StrCat(NativeDecoderField::kAttribute, " '", NativeDecoderField::kPreLnCrossName, "'"),
                                      {script.field, script.cache_k, script.cache_v},
                                      {native.field, native.cache_k, native.cache_v}));
    native_decoder_ = std::move(decoder);
    return std::string(NativeDecoderField::kPreLnCrossName);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("native decoder: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<TorchModel::StoredWeights> TorchModel::StoreProductWeightsInBfloat16() {
  if (precision_ != ComputePrecision::kBFloat16) {
    return absl::FailedPreconditionError("bfloat16 weights need compute precision bfloat16");
  }
  try {
    std::vector<const char*> methods(std::begin(kRequiredMethods), std::end(kRequiredMethods));
    if (has_decoder()) methods.insert(methods.end(), std::begin(kDecoderMethods), std::end(kDecoderMethods));
    // Attribute path -> whether every read of it, in every served method, is a product or metadata.
    std::map<std::vector<std::string>, bool> product_only;
    for (const char* method : methods) {
      // Inlined, the submodules' methods and functions read their tensors through GetAttr chains
      // from `self`.
      const std::shared_ptr<torch::jit::Graph> graph = module_.get_method(method).graph()->copy();
      InlineEveryCall(*graph);
      const torch::jit::Value* self = graph->inputs()[0];
      VisitNodes(graph->block(), [&](torch::jit::Node* node) {
        if (node->kind() != torch::jit::prim::GetAttr) return;
        if (!node->output()->type()->isSubtypeOf(*c10::TensorType::get())) return;
        std::vector<std::string> path = AttributePath(node, self);
        if (path.empty()) return;
        bool ok = true;
        for (const torch::jit::Use& use : node->output()->uses()) {
          const torch::jit::NodeKind kind = use.user->kind();
          ok = ok && (IsBfloat16Product(kind) || ReadsOnlyMetadata(kind));
        }
        auto [it, inserted] = product_only.emplace(std::move(path), ok);
        if (!inserted) it->second = it->second && ok;
      });
    }
    c10::InferenceMode guard;
    StoredWeights stored;
    for (const auto& [path, ok] : product_only) {
      if (!ok) continue;
      torch::jit::Module owner = module_;
      for (size_t i = 0; i + 1 < path.size(); ++i) owner = owner.attr(path[i]).toModule();
      const c10::IValue value = owner.attr(path.back());
      if (!value.isTensor() || value.toTensor().scalar_type() != torch::kFloat32) continue;
      const torch::Tensor weight = value.toTensor();
      owner.setattr(path.back(), weight.to(torch::kBFloat16));
      ++stored.tensors;
      stored.values += weight.numel();
    }
    // The native blocks hold the float32 tensors just replaced.
    if (native_field_) {
      ASSIGN_OR_RETURN(native_field_, NativeField::FromModule(module_));
    }
    if (native_decoder_) {
      ASSIGN_OR_RETURN(native_decoder_, NativeDecoderField::FromModule(module_));
    }
    return stored;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("storing bfloat16 weights failed: ", e.what_without_backtrace()));
  }
}

torch::Tensor TorchModel::InputStageUnchecked(const torch::Tensor& x, const torch::Tensor& mask) {
  return input_stage_({x, mask}).toTensor();
}
torch::Tensor TorchModel::VectorFieldUnchecked(const torch::Tensor& h, const torch::Tensor& mask) {
  if (native_field_) return native_field_->Evaluate(h, mask);
  return vector_field_({h, mask}).toTensor();
}
torch::Tensor TorchModel::OutputStageUnchecked(const torch::Tensor& h, const torch::Tensor& mask) {
  return output_stage_({h, mask}).toTensor();
}

TorchModel::CrossAttention TorchModel::CrossKvUnchecked(const torch::Tensor& memory, const torch::Tensor& mask) {
  const auto out = (*cross_kv_)({memory, mask}).toTuple();
  return {out->elements()[0].toTensor(), out->elements()[1].toTensor(), out->elements()[2].toTensor()};
}
torch::Tensor TorchModel::DecoderInputUnchecked(const torch::Tensor& tokens, const torch::Tensor& positions) {
  return (*decoder_input_)({tokens, positions}).toTensor();
}
TorchModel::DecoderFieldResult TorchModel::DecoderFieldUnchecked(
    const torch::Tensor& g, const torch::Tensor& cache_k, const torch::Tensor& cache_v,
    const torch::Tensor& cross_k, const torch::Tensor& cross_v, const torch::Tensor& cross_bias) {
  if (native_decoder_) {
    NativeDecoderField::Result out = native_decoder_->Evaluate(g, cache_k, cache_v, cross_k, cross_v, cross_bias);
    return {std::move(out.field), std::move(out.cache_k), std::move(out.cache_v)};
  }
  const auto out = (*decoder_field_)({g, cache_k, cache_v, cross_k, cross_v, cross_bias}).toTuple();
  return {out->elements()[0].toTensor(), out->elements()[1].toTensor(), out->elements()[2].toTensor()};
}
torch::Tensor TorchModel::DecoderLogitsUnchecked(const torch::Tensor& g) {
  return (*decoder_logits_)({g}).toTensor();
}

void TorchModel::UseLogitShortlist(bool use) {
  // A TorchScript attribute is read at every call (the module is not frozen).
  if (exported_logit_shortlist_ > 0) module_.setattr(kShortlistAttribute, use ? exported_logit_shortlist_ : 0);
}

int TorchModel::logit_shortlist() const {
  return module_.hasattr(kShortlistAttribute) ? static_cast<int>(module_.attr(kShortlistAttribute).toInt()) : 0;
}

absl::StatusOr<torch::Tensor> TorchModel::Call(const char* method, const torch::Tensor& a,
                                               const torch::Tensor& b) {
  try {
    c10::InferenceMode guard;
    PrecisionScope precision(precision_, device_);
    return module_.get_method(method)({a, b}).toTensor();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(method, "() failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(method, "() failed: ", e.what()));
  }
}

absl::StatusOr<torch::Tensor> TorchModel::InputStage(const torch::Tensor& x, const torch::Tensor& mask) {
  return Call("input_stage", x, mask);
}
absl::StatusOr<torch::Tensor> TorchModel::VectorField(const torch::Tensor& h, const torch::Tensor& mask) {
  return Call("vector_field", h, mask);
}
absl::StatusOr<torch::Tensor> TorchModel::OutputStage(const torch::Tensor& h, const torch::Tensor& mask) {
  return Call("output_stage", h, mask);
}
absl::StatusOr<torch::Tensor> TorchModel::Forward(const torch::Tensor& x, const torch::Tensor& mask) {
  return Call("forward", x, mask);
}

}  // namespace odeserve::runtime
