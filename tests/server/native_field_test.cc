// runtime/native_field: the natively evaluated shared blocks against TorchScript modules that
// spell the same block out (written here in TorchScript source, so no Python is needed), the
// load-time check that refuses a module whose declared block is not the one it computes, and the
// errors of a malformed declaration. The pre-LN block of the exported families is also covered on
// every tiny model by runtime_test (EveryTinyModel, "_native" instances).

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "server/runtime/native_field.h"
#include "server/runtime/torch_executor.h"
#include "server/runtime/torch_model.h"

namespace odeserve::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kHeads = 2, kHeadDim = 8, kHidden = kHeads * kHeadDim, kFfn = 24, kVocab = 50, kDepth = 3;

// Methods every contract module needs besides the field: a token table in, mean pooling out.
constexpr const char* kStages = R"JIT(
def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:
    return torch.embedding(self.table, x) * mask.unsqueeze(-1)

def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:
    m = mask.unsqueeze(-1)
    return (h * m).sum(1) / m.sum(1)

def forward(self, x: Tensor, mask: Tensor) -> Tensor:
    h = self.input_stage(x, mask)
    for _ in range(self.trained_depth):
        h = h + self.vector_field(h, mask)
    return self.output_stage(h, mask)
)JIT";

// The importer's ALBERT layer (models/odeserve_models/albert/module.py), products as matmul.
constexpr const char* kAlbertField = R"JIT(
def _lin(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return torch.matmul(x, w.t()) + b

def _ln(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return torch.layer_norm(x, [w.size(0)], w, b, self.eps)

def _act(self, x: Tensor) -> Tensor:
    if self.activation == 0:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    if self.activation == 1:
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
    return torch.relu(x)

def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
    keep = mask.unsqueeze(-1) > 0
    h = torch.where(keep, h, torch.zeros_like(h))
    bias = ((1.0 - mask) * -1.0e9).unsqueeze(1).unsqueeze(2)
    B = h.size(0)
    T = h.size(1)
    q = self._lin(h, self.q_w, self.q_b).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
    k = self._lin(h, self.k_w, self.k_b).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
    v = self._lin(h, self.v_w, self.v_b).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
    probs = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.scale + bias, -1)
    ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)
    a = self._ln(self._lin(ctx, self.o_w, self.o_b) + h, self.attn_ln_w, self.attn_ln_b)
    f = self._lin(self._act(self._lin(a, self.ffn_w, self.ffn_b)), self.ffn_out_w, self.ffn_out_b)
    layer = self._ln(f + a, self.out_ln_w, self.out_ln_b)
    return torch.where(keep, layer - h, torch.zeros_like(h))
)JIT";

// families.py's pre-LN block_field.
constexpr const char* kPreLnField = R"JIT(
def _lin(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return torch.matmul(x, w.t()) + b

def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
    B = h.size(0)
    T = h.size(1)
    H = h.size(2)
    bias = ((mask - 1.0) * 1e9).unsqueeze(1).unsqueeze(2)
    x = torch.layer_norm(h, [H], self.ln1_w, self.ln1_b, 1e-5)
    qkv = self._lin(x, self.w_qkv, self.b_qkv).view(B, T, 3, self.num_heads, H // self.num_heads).permute(2, 0, 3, 1, 4)
    scores = torch.add(bias, torch.matmul(qkv[0], qkv[1].transpose(-1, -2)), alpha=self.scale)
    ctx = torch.matmul(torch.softmax(scores, -1), qkv[2]).transpose(1, 2).reshape(B, T, H)
    a = self._lin(ctx, self.w_o, self.b_o)
    y = torch.layer_norm(h + a, [H], self.ln2_w, self.ln2_b, 1e-5)
    u = self._lin(y, self.w_1, self.b_1)
    m = self._lin(0.5 * u * (1.0 + torch.erf(u * 0.7071067811865476)), self.w_2, self.b_2)
    return a + m
)JIT";

torch::Tensor Random(std::vector<int64_t> shape, double scale) { return torch::randn(shape) * scale; }

void AddCommon(torch::jit::Module& m, const char* declared) {
  m.register_parameter("table", Random({kVocab, kHidden}, 1.0), false);
  m.register_attribute("trained_depth", c10::IntType::get(), int64_t{kDepth});
  m.register_attribute("num_heads", c10::IntType::get(), kHeads);
  m.register_attribute("scale", c10::FloatType::get(), 1.0 / std::sqrt(double(kHeadDim)));
  if (declared != nullptr) m.register_attribute(NativeField::kAttribute, c10::StringType::get(), std::string(declared));
}

// An ALBERT-layer module; `skip` names a tensor left out.
torch::jit::Module AlbertModule(int activation, const char* declared = NativeField::kAlbertPostLnName,
                                const std::string& skip = "") {
  torch::manual_seed(7 + activation);
  torch::jit::Module m("AlbertLike");
  AddCommon(m, declared);
  m.register_attribute("head_dim", c10::IntType::get(), kHeadDim);
  m.register_attribute("eps", c10::FloatType::get(), 1e-12);
  m.register_attribute("activation", c10::IntType::get(), int64_t{activation});
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"q_w", {kHidden, kHidden}}, {"q_b", {kHidden}}, {"k_w", {kHidden, kHidden}}, {"k_b", {kHidden}},
      {"v_w", {kHidden, kHidden}}, {"v_b", {kHidden}}, {"o_w", {kHidden, kHidden}}, {"o_b", {kHidden}},
      {"attn_ln_w", {kHidden}}, {"attn_ln_b", {kHidden}}, {"ffn_w", {kFfn, kHidden}}, {"ffn_b", {kFfn}},
      {"ffn_out_w", {kHidden, kFfn}}, {"ffn_out_b", {kHidden}}, {"out_ln_w", {kHidden}}, {"out_ln_b", {kHidden}}};
  for (const auto& [name, shape] : tensors) {
    // Random LayerNorm gains and biases too, so a swapped tensor would show.
    if (name != skip) m.register_parameter(name, Random(shape, shape.size() == 2 ? 0.4 : 0.5), false);
  }
  if (!skip.empty()) return m;  // its methods would not compile; FromModule reads attributes only
  m.define(kAlbertField);
  m.define(kStages);
  return m;
}

torch::jit::Module PreLnModule(const char* declared = NativeField::kPreLnName, const char* field = kPreLnField) {
  torch::manual_seed(11);
  torch::jit::Module m("PreLnLike");
  AddCommon(m, declared);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"ln1_w", {kHidden}}, {"ln1_b", {kHidden}}, {"w_qkv", {3 * kHidden, kHidden}}, {"b_qkv", {3 * kHidden}},
      {"w_o", {kHidden, kHidden}}, {"b_o", {kHidden}}, {"ln2_w", {kHidden}}, {"ln2_b", {kHidden}},
      {"w_1", {kFfn, kHidden}}, {"b_1", {kFfn}}, {"w_2", {kHidden, kFfn}}, {"b_2", {kHidden}}};
  for (const auto& [name, shape] : tensors) m.register_parameter(name, Random(shape, shape.size() == 2 ? 0.4 : 0.5), false);
  m.define(field);
  m.define(kStages);
  return m;
}

// Saves `module` and loads it the way the server does.
std::unique_ptr<TorchModel> SaveAndLoad(torch::jit::Module& module, const std::string& name,
                                        ComputePrecision precision = ComputePrecision::kFloat32) {
  const fs::path path = fs::path(::testing::TempDir()) / (name + ".pt");
  module.save(path.string());
  auto model = TorchModel::Load(path.string(), torch::Device(torch::kCPU), kDepth, 0, precision);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// States at LayerNorm scale with the last row padded after 4 of 7 positions; pads hold garbage.
std::pair<torch::Tensor, torch::Tensor> ProbeStates() {
  torch::manual_seed(3);
  torch::Tensor h = torch::randn({3, 7, kHidden});
  torch::Tensor mask = torch::ones({3, 7});
  mask.index_put_({2, torch::indexing::Slice(4, torch::indexing::None)}, 0.0);
  h.index_put_({2, torch::indexing::Slice(4, torch::indexing::None)}, 1e4);
  return {h, mask};
}

double MaxDiffOnTokens(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)) * mask.unsqueeze(-1)).abs().max().item<double>();
}

// The field through the script, then (after UseNativeField) natively, on the same states.
void ExpectNativeMatchesScript(TorchModel& model, const std::string& want_name, double tolerance) {
  auto [h, mask] = ProbeStates();
  c10::InferenceMode guard;
  PrecisionScope precision(model.precision(), model.device());
  const torch::Tensor script = model.VectorFieldUnchecked(h, mask).to(torch::kFloat32);
  ASSERT_GT(script.abs().max().item<double>(), 0.1);
  absl::StatusOr<std::string> native = model.UseNativeField();
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(*native, want_name);
  EXPECT_EQ(model.native_field(), want_name);
  const torch::Tensor fast = model.VectorFieldUnchecked(h, mask).to(torch::kFloat32);
  EXPECT_LE(MaxDiffOnTokens(fast, script, mask), tolerance);
  // Finite at every token position, though the pads held 1e4 (ALBERT zeroes its pads: checked by the float32 test).
  EXPECT_TRUE(torch::isfinite(fast.masked_select(mask.unsqueeze(-1) > 0)).all().item<bool>());
}

class AlbertActivations : public ::testing::TestWithParam<int> {};

TEST_P(AlbertActivations, NativeFieldMatchesTheScriptInFloat32) {
  torch::jit::Module module = AlbertModule(GetParam());
  auto model = SaveAndLoad(module, "albert_f32_" + std::to_string(GetParam()));
  ASSERT_NE(model, nullptr);
  ExpectNativeMatchesScript(*model, NativeField::kAlbertPostLnName, 2e-5);
  auto [h, mask] = ProbeStates();
  c10::InferenceMode guard;
  const torch::Tensor pads = model->VectorFieldUnchecked(h, mask).index({2, torch::indexing::Slice(4, torch::indexing::None)});
  EXPECT_EQ(pads.abs().max().item<float>(), 0.0f) << "ALBERT's field is zero at pad positions";
}

TEST_P(AlbertActivations, NativeFieldMatchesTheScriptInBfloat16) {
  torch::jit::Module module = AlbertModule(GetParam());
  auto model = SaveAndLoad(module, "albert_bf16_" + std::to_string(GetParam()), ComputePrecision::kBFloat16);
  ASSERT_NE(model, nullptr);
  // The products round to bfloat16 (8 bits of mantissa) in both; the script rounds its GELU
  // operator by operator, the native path once.
  ExpectNativeMatchesScript(*model, NativeField::kAlbertPostLnName, 0.1);
}

INSTANTIATE_TEST_SUITE_P(GeluNewGeluRelu, AlbertActivations, ::testing::Values(0, 1, 2));

TEST(NativeField, PreLnMatchesTheScript) {
  torch::jit::Module module = PreLnModule();
  auto model = SaveAndLoad(module, "pre_ln");
  ASSERT_NE(model, nullptr);
  ExpectNativeMatchesScript(*model, NativeField::kPreLnName, 2e-5);
}

TEST(NativeField, EulerAtTheTrainedDepthStillReproducesForward) {
  for (const bool albert : {true, false}) {
    torch::jit::Module module = albert ? AlbertModule(0) : PreLnModule();
    auto model = SaveAndLoad(module, albert ? "albert_forward" : "pre_ln_forward");
    ASSERT_NE(model, nullptr);
    ASSERT_TRUE(model->UseNativeField().ok());
    const torch::Tensor x = torch::randint(1, kVocab, {3, 7}, torch::kInt64);
    torch::Tensor mask = torch::ones({3, 7});
    mask.index_put_({1, torch::indexing::Slice(2, torch::indexing::None)}, 0.0);
    auto forward = model->Forward(x, mask);  // the script's own loop over its own field
    ASSERT_TRUE(forward.ok()) << forward.status();
    c10::InferenceMode guard;
    torch::Tensor h = model->InputStageUnchecked(x, mask);
    for (int i = 0; i < kDepth; ++i) h = h + model->VectorFieldUnchecked(h, mask);
    const torch::Tensor out = model->OutputStageUnchecked(h, mask);
    EXPECT_LE((out - *forward).abs().max().item<double>(), 1e-4 * std::max(1.0, forward->abs().max().item<double>()))
        << (albert ? "albert" : "pre-LN");
  }
}

TEST(NativeField, TheExecutorRunsRowsWithDifferentStepsLikeTheScript) {
  torch::jit::Module module = AlbertModule(0);
  auto script_model = SaveAndLoad(module, "albert_exec_script");
  auto native_model = SaveAndLoad(module, "albert_exec_native");
  ASSERT_NE(script_model, nullptr);
  ASSERT_NE(native_model, nullptr);
  ASSERT_TRUE(native_model->UseNativeField().ok());
  std::vector<tokenizer::EncodedText> inputs(4);
  for (size_t r = 0; r < inputs.size(); ++r) {
    for (size_t t = 0; t < 3 + 2 * r; ++t) inputs[r].ids.push_back(static_cast<int64_t>(1 + (7 * t + r) % (kVocab - 1)));
  }
  const std::vector<int> steps = {1, kDepth, 2 * kDepth, 2};
  for (const auto solver : {scheduler::Solver::kEuler, scheduler::Solver::kHeun, scheduler::Solver::kRk4}) {
    scheduler::ExecBatch batch{solver, {}};
    for (size_t r = 0; r < inputs.size(); ++r) batch.rows.push_back({&inputs[r], steps[r], {}});
    std::vector<std::vector<float>> outputs[2];
    for (int which = 0; which < 2; ++which) {
      TorchExecutor executor(which == 0 ? std::shared_ptr<TorchModel>(script_model.get(), [](TorchModel*) {})
                                        : std::shared_ptr<TorchModel>(native_model.get(), [](TorchModel*) {}),
                             InputLayout{});
      outputs[which].resize(inputs.size());
      auto stats = executor.Run(
          batch, [&](size_t row, const scheduler::RowOutput& out) { outputs[which][row].assign(out.values.begin(), out.values.end()); },
          [](size_t) { return false; }, nullptr);
      ASSERT_TRUE(stats.ok()) << stats.status();
    }
    for (size_t r = 0; r < inputs.size(); ++r) {
      ASSERT_EQ(outputs[0][r].size(), static_cast<size_t>(kHidden));
      ASSERT_EQ(outputs[1][r].size(), outputs[0][r].size());
      for (size_t i = 0; i < outputs[0][r].size(); ++i) {
        EXPECT_NEAR(outputs[1][r][i], outputs[0][r][i], 1e-4) << "solver " << static_cast<int>(solver) << " row " << r;
      }
    }
  }
}

TEST(NativeField, AModuleWhoseFieldIsNotTheDeclaredBlockDoesNotLoadIt) {
  // Declares pre_ln and has every tensor of it, but its field is a feed-forward branch alone.
  torch::jit::Module wrong = PreLnModule(NativeField::kPreLnName, R"JIT(
def _lin(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return torch.matmul(x, w.t()) + b

def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:
    H = h.size(2)
    x = torch.layer_norm(h, [H], self.ln1_w, self.ln1_b, 1e-5)
    return self._lin(torch.relu(self._lin(x, self.w_1, self.b_1)), self.w_2, self.b_2)
)JIT");
  auto model = SaveAndLoad(wrong, "pre_ln_wrong");
  ASSERT_NE(model, nullptr);
  absl::StatusOr<std::string> native = model->UseNativeField();
  EXPECT_EQ(native.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(native.status().message(), HasSubstr("declares native_field 'pre_ln' but its script differs from that block"));
  EXPECT_EQ(model->native_field(), "") << "the script's field stays";
}

TEST(NativeField, ModulesThatDeclareNothingKeepTheScript) {
  torch::jit::Module module = PreLnModule(/*declared=*/nullptr);
  EXPECT_EQ(NativeField::FromModule(module).status().code(), absl::StatusCode::kNotFound);
  auto model = SaveAndLoad(module, "undeclared");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->UseNativeField().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(model->native_field(), "");
}

TEST(NativeField, MalformedDeclarationsNameWhatIsWrong) {
  torch::jit::Module unknown = PreLnModule("post_ln_v9");
  auto status = NativeField::FromModule(unknown).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'post_ln_v9'"));
  EXPECT_THAT(status.message(), HasSubstr("'pre_ln' and 'albert_post_ln'"));

  torch::jit::Module missing = AlbertModule(0, NativeField::kAlbertPostLnName, "ffn_out_w");
  status = NativeField::FromModule(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("no tensor 'ffn_out_w'"));

  torch::jit::Module misshaped = PreLnModule();
  misshaped.setattr("w_o", torch::zeros({kHidden, kHidden + 1}));
  status = NativeField::FromModule(misshaped).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w_o' has shape [16, 17], the block needs [16, 16]"));
}

}  // namespace
}  // namespace odeserve::runtime
