// Runtime benchmarks (Google Benchmark): what one batch costs as a function of ODE steps and
// solver, on a real model folder. Read ratios inside one run; this machine is noisy.
//
//   odeserve_runtime_bench --model_dir=models/repository/embed-sharebert [--benchmark_filter=...]
//
// Each benchmark reports field_evals/s and the padded tokens per batch; compare Steps/L with
// Steps/L/4 for the "compute scales with steps" target.

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "server/repository/model_config.h"
#include "server/runtime/threading.h"
#include "server/runtime/torch_executor.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve {
namespace {

struct Loaded {
  v1::ModelConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<runtime::TorchModel> model;
  std::unique_ptr<runtime::TorchExecutor> executor;
};

std::string g_model_dir;

Loaded& Model() {
  static Loaded* loaded = [] {
    auto* l = new Loaded();
    auto config = repository::LoadModelConfig(g_model_dir);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      std::exit(2);
    }
    l->config = *config;
    const tokenizer::TokenizerOptions options = repository::TokenizerOptionsFor(l->config);
    l->tokenizer = *tokenizer::Tokenizer::Load((std::filesystem::path(g_model_dir) / l->config.tokenizer().model_file()).string(), options);
    l->model = *runtime::TorchModel::Load((std::filesystem::path(g_model_dir) / l->config.torchscript_file()).string(),
                                          torch::Device(torch::kCPU), l->config.trained_depth());
    runtime::InputLayout layout{options.hashed, options.hash.dim, l->tokenizer->pad_id()};
    l->executor = std::make_unique<runtime::TorchExecutor>(l->model, layout);
    return l;
  }();
  return *loaded;
}

// A row of exactly `length` tokens of real-looking text.
tokenizer::EncodedText Row(int length) {
  std::string text;
  while (text.size() < static_cast<size_t>(length) * 10) {
    text += "command line utility for converting and compressing image files with python bindings ";
  }
  return *Model().tokenizer->Encode(text, length, /*truncate=*/true);
}

// Args: batch rows, tokens per row, steps as a divisor of L (steps = L / divisor), solver.
void BM_Batch(benchmark::State& state) {
  Loaded& m = Model();
  const int rows = static_cast<int>(state.range(0));
  const int length = std::min<int>(state.range(1), m.config.max_sequence_length());
  const int depth = m.config.trained_depth();
  const int steps = std::max<int>(1, depth / static_cast<int>(state.range(2)));
  const auto solver = static_cast<scheduler::Solver>(state.range(3));
  const tokenizer::EncodedText row = Row(length);
  scheduler::ExecBatch batch;
  batch.solver = solver;
  for (int i = 0; i < rows; ++i) batch.rows.push_back({&row, steps, {}});
  int64_t evaluations = 0;
  for (auto _ : state) {
    auto stats = m.executor->Run(batch, [](size_t, const scheduler::RowOutput&) {}, [](size_t) { return false; });
    if (!stats.ok()) {
      state.SkipWithError(std::string(stats.status().message()).c_str());
      return;
    }
    evaluations += steps * scheduler::EvaluationsPerStep(solver);
  }
  state.counters["steps"] = steps;
  state.counters["padded_tokens"] = rows * length;
  state.counters["field_evals/s"] = benchmark::Counter(static_cast<double>(evaluations), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(scheduler::SolverName(solver)) + " L=" + std::to_string(depth));
}

constexpr int kEuler = static_cast<int>(scheduler::Solver::kEuler);
constexpr int kHeun = static_cast<int>(scheduler::Solver::kHeun);
constexpr int kRk4 = static_cast<int>(scheduler::Solver::kRk4);

// The target shape: 32 inputs x 64 tokens at L, L/2 and L/4 Euler steps.
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver"})
    ->Args({32, 64, 1, kEuler})->Args({32, 64, 2, kEuler})->Args({32, 64, 4, kEuler})
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
// Batch 1 (latency) and the higher-order solvers at equal field evaluations.
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver"})
    ->Args({1, 32, 1, kEuler})->Args({1, 32, 4, kEuler})->Args({32, 64, 2, kHeun})->Args({32, 64, 4, kRk4})
    ->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace odeserve

int main(int argc, char** argv) {
  const std::string prefix = "--model_dir=";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]).rfind(prefix, 0) == 0) {
      odeserve::g_model_dir = std::string(argv[i]).substr(prefix.size());
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (odeserve::g_model_dir.empty()) odeserve::g_model_dir = ODESERVE_DEFAULT_BENCH_MODEL;
  const auto threading = odeserve::runtime::ConfigureThreading(0);
  benchmark::AddCustomContext("model_dir", odeserve::g_model_dir);
  benchmark::AddCustomContext("threading", threading.summary());
  int rest_count = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_count, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
