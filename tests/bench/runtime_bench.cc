// Runtime benchmarks (Google Benchmark): what one batch costs as a function of ODE steps and
// solver, on a real model folder. Read ratios inside one run; this machine is noisy.
//
//   odeserve_runtime_bench --model_dir=models/repository/embed-sharebert [--benchmark_filter=...]
//
// Each benchmark reports field_evals/s and the padded tokens per batch; compare Steps/L with
// Steps/L/4 for the "compute scales with steps" target.
//
// BM_Translate runs the translation executor (encoder ODE + beam search over the decoder ODE)
// on --translate_model_dir (default models/repository/translate-en-de) over real English
// short descriptions and reports generated tokens/s at batch 1 and 16, greedy and beam 4, at
// the trained decoder depth and at half of it.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <iterator>
#include <string>
#include <vector>

#include "server/repository/model_config.h"
#include "server/runtime/allocator.h"
#include "server/runtime/threading.h"
#include "server/runtime/torch_executor.h"
#include "server/runtime/translation_executor.h"
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
std::string g_translate_model_dir;
bool g_native_fields = true;  // as the server's --native_fields

// How a benchmark runs the model (its `bf16` argument). The config's compute_precision is
// ignored: each benchmark names the precision it runs, so they compare in one run.
enum Precision : int {
  kFloat32 = 0,
  kBfloat16 = 1,             // as the server runs a bfloat16 model: product weights stored bfloat16
  kBfloat16CastPerCall = 2,  // weights stored float32, cast by autocast at every call
};

Loaded* Load(const std::string& dir, int precision) {
  const bool bfloat16 = precision != kFloat32;
  auto* l = new Loaded();
  auto config = repository::LoadModelConfig(dir);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    std::exit(2);
  }
  l->config = *config;
  const bool translation = l->config.task() == v1::TRANSLATION;
  const tokenizer::TokenizerOptions options = repository::TokenizerOptionsFor(l->config);
  l->tokenizer = *tokenizer::Tokenizer::Load((std::filesystem::path(dir) / l->config.tokenizer().model_file()).string(), options);
  auto model = runtime::TorchModel::Load((std::filesystem::path(dir) / l->config.torchscript_file()).string(),
                                         torch::Device(torch::kCPU), l->config.trained_depth(),
                                         translation ? l->config.translation().decoder_trained_depth() : 0,
                                         bfloat16 ? runtime::ComputePrecision::kBFloat16
                                                  : runtime::ComputePrecision::kFloat32);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    std::exit(2);
  }
  if (precision == kBfloat16) {
    if (auto stored = (*model)->StoreProductWeightsInBfloat16(); !stored.ok()) {
      std::fprintf(stderr, "%s\n", stored.status().ToString().c_str());
      std::exit(2);
    }
  }
  if (g_native_fields) {
    for (const auto& native : {(*model)->UseNativeField(), (*model)->UseNativeDecoder()}) {
      if (!native.ok() && !absl::IsNotFound(native.status())) {
        std::fprintf(stderr, "%s\n", native.status().ToString().c_str());
        std::exit(2);
      }
    }
  }
  l->model = *std::move(model);
  runtime::InputLayout layout{options.hashed, options.hash.dim, l->tokenizer->pad_id()};
  if (translation) {
    l->executor = std::make_unique<runtime::TranslationExecutor>(l->model, layout,
                                                                 l->config.translation().max_output_tokens());
  } else {
    l->executor = std::make_unique<runtime::TorchExecutor>(l->model, layout);
  }
  return l;
}

// One loaded copy per (folder, precision), made on first use.
Loaded& Cached(const std::string& dir, int precision) {
  static std::map<std::pair<std::string, int>, Loaded*> loaded;
  Loaded*& slot = loaded[{dir, precision}];
  if (slot == nullptr) slot = Load(dir, precision);
  return *slot;
}

Loaded& Model(int precision = kFloat32) { return Cached(g_model_dir, precision); }
Loaded& Translator(int precision = kFloat32) { return Cached(g_translate_model_dir, precision); }

const char* PrecisionLabel(int precision) {
  switch (precision) {
    case kBfloat16: return "bfloat16";
    case kBfloat16CastPerCall: return "bfloat16, weights cast per call";
    default: return "float32";
  }
}

// A row of exactly `length` tokens of real-looking text.
tokenizer::EncodedText Row(int length) {
  std::string text;
  while (text.size() < static_cast<size_t>(length) * 10) {
    text += "command line utility for converting and compressing image files with python bindings ";
  }
  return *Model().tokenizer->Encode(text, length, /*truncate=*/true);
}

// Args: batch rows, tokens per row, steps as a divisor of L (steps = L / divisor), solver,
// and a Precision.
void BM_Batch(benchmark::State& state) {
  const int precision = static_cast<int>(state.range(4));
  Loaded& m = Model(precision);
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
    auto stats = m.executor->Run(batch, [](size_t, const scheduler::RowOutput&) {}, [](size_t) { return false; }, nullptr);
    if (!stats.ok()) {
      state.SkipWithError(std::string(stats.status().message()).c_str());
      return;
    }
    evaluations += steps * scheduler::EvaluationsPerStep(solver);
  }
  state.counters["steps"] = steps;
  state.counters["padded_tokens"] = rows * length;
  state.counters["field_evals/s"] = benchmark::Counter(static_cast<double>(evaluations), benchmark::Counter::kIsRate);
  const std::string field = m.model->native_field().empty() ? "torchscript" : "native " + m.model->native_field();
  state.SetLabel(std::string(scheduler::SolverName(solver)) + " L=" + std::to_string(depth) + " " +
                 PrecisionLabel(precision) + ", field " + field);
}

// Real English short descriptions (Debian packages), the kind of text translate-en-de serves.
constexpr const char* kSources[] = {
    "development files for the GNU C library",
    "transitional package",
    "Perl module for parsing and writing XML documents",
    "command-line tool to convert images between formats",
    "documentation for the Python standard library",
    "shared library for reading compressed archives",
    "fast and lightweight web server",
    "GNOME desktop environment -- essential components",
    "debugging symbols for the network manager daemon",
    "Haskell library for building command-line interfaces",
    "fonts with support for many scripts and languages",
    "simple editor for plain text files",
    "Python 3 bindings for the cryptography library",
    "utilities to manage disk partitions",
    "game engine for 2D platform games",
    "client library for the PostgreSQL database",
};

// Args: batch rows, beam size, decoder steps as a divisor of the decoder's L, and a Precision.
// Encoder at L.
void BM_Translate(benchmark::State& state) {
  const int precision = static_cast<int>(state.range(3));
  Loaded& m = Translator(precision);
  const int rows = static_cast<int>(state.range(0));
  const int beam = static_cast<int>(state.range(1));
  const int decoder_depth = m.config.translation().decoder_trained_depth();
  const int decoder_steps = std::max<int>(1, decoder_depth / static_cast<int>(state.range(2)));
  std::vector<tokenizer::EncodedText> inputs;
  for (int i = 0; i < rows; ++i) {
    inputs.push_back(*m.tokenizer->Encode(kSources[i % std::size(kSources)], m.config.max_sequence_length(), true));
  }
  scheduler::ExecBatch batch;
  for (const auto& input : inputs) {
    batch.rows.push_back({&input, m.config.trained_depth(), scheduler::DecodeSpec{decoder_steps, beam, 0, 1}});
  }
  int64_t generated = 0;
  double decoder_seconds = 0;
  for (auto _ : state) {
    auto stats = m.executor->Run(
        batch,
        [&](size_t, const scheduler::RowOutput& out) {
          if (!out.partial) generated += static_cast<int64_t>(out.tokens.size()) + 1;
        },
        [](size_t) { return false; }, nullptr);
    if (!stats.ok()) {
      state.SkipWithError(std::string(stats.status().message()).c_str());
      return;
    }
    decoder_seconds += stats->decoder_seconds;
  }
  state.counters["decoder_steps"] = decoder_steps;
  // Decoding alone (the search after the encoder), the figure the decoder's step count moves.
  state.counters["decoded_tokens/s"] = static_cast<double>(generated) / std::max(1e-9, decoder_seconds);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(generated), benchmark::Counter::kIsRate);
  state.counters["tokens/batch"] = benchmark::Counter(static_cast<double>(generated), benchmark::Counter::kAvgIterations);
  state.SetLabel(std::string(m.model->native_decoder() ? "native" : "torchscript") + " decoder, beam " +
                 std::to_string(beam) + ", decoder L=" + std::to_string(decoder_depth) + ", " +
                 PrecisionLabel(precision));
}

// Batch 1 and 16, greedy and beam 4, decoder at L and L/2 (tokens include each row's EOS).
BENCHMARK(BM_Translate)->ArgNames({"rows", "beam", "L_over", "bf16"})
    ->Args({1, 1, 1, 0})->Args({1, 1, 2, 0})->Args({1, 4, 1, 0})->Args({1, 4, 2, 0})
    ->Args({16, 1, 1, 0})->Args({16, 1, 2, 0})->Args({16, 4, 1, 0})->Args({16, 4, 2, 0})
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
// The same model with compute_precision BFLOAT16, at the trained depth.
BENCHMARK(BM_Translate)->ArgNames({"rows", "beam", "L_over", "bf16"})
    ->Args({1, 1, 1, 1})->Args({16, 1, 1, 1})->Args({16, 4, 1, 1})
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);

constexpr int kEuler = static_cast<int>(scheduler::Solver::kEuler);
constexpr int kHeun = static_cast<int>(scheduler::Solver::kHeun);
constexpr int kRk4 = static_cast<int>(scheduler::Solver::kRk4);

// The target shape: 32 inputs x 64 tokens at L, L/2 and L/4 Euler steps.
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->Args({32, 64, 1, kEuler, 0})->Args({32, 64, 2, kEuler, 0})->Args({32, 64, 4, kEuler, 0})
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
// Batch 1 (latency; 1 x 64 is ONNX Runtime's side-by-side shape, tests/bench/side_by_side.py)
// and the higher-order solvers at equal field evaluations.
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->Args({1, 32, 1, kEuler, 0})->Args({1, 64, 1, kEuler, 0})->Args({1, 32, 4, kEuler, 0})
    ->Args({32, 64, 2, kHeun, 0})
    ->Args({32, 64, 4, kRk4, 0})
    ->Unit(benchmark::kMillisecond)->MinTime(1.0);
// compute_precision BFLOAT16 against float32 at the trained depth, batch 1 and 32.
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->Args({1, 32, 1, kEuler, 0})->Args({1, 32, 1, kEuler, 1})
    ->Args({32, 32, 1, kEuler, 0})->Args({32, 32, 1, kEuler, 1})
    ->Args({32, 64, 1, kEuler, 1})
    ->Unit(benchmark::kMillisecond)->MinTime(1.0);
// One bfloat16 Euler step (L_over = L) by batch size: where more intra-op threads start to pay
// (compare runs with --intra_op_threads=1 and =2).
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {64}, {8}, {kEuler}, {kBfloat16}})
    ->Unit(benchmark::kMillisecond)->MinTime(0.5);
// Against the sweep above (weights stored bfloat16 at load, as served): the same calls with
// autocast casting the float32 weights at every call.
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->ArgsProduct({{1, 8, 32}, {64}, {8}, {kEuler}, {kBfloat16CastPerCall}})
    ->Unit(benchmark::kMillisecond)->MinTime(0.5);
// The same sweep in float32: compare --row_parallel=0 and =1 (large calls' rows split across
// the intra-op threads, since float32 products run on one OpenBLAS thread).
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {64}, {8}, {kEuler}, {0}})
    ->Unit(benchmark::kMillisecond)->MinTime(0.5);
// Float32 calls around the hand-over, one Euler step: compare --blas_parallel=0 and =1 (the
// default, as the server's). 1 x 64 and 3 x 32 tokens hand their products to OpenBLAS's threads;
// 1 x 16, 1 x 32 and 3 x 16 are under kBlasParallelMinTokens and 3 x 64 splits its rows (both
// run the same code either way: their difference is the machine's noise).
BENCHMARK(BM_Batch)->ArgNames({"rows", "tokens", "L_over", "solver", "bf16"})
    ->ArgsProduct({{1, 3}, {16, 32, 64}, {8}, {kEuler}, {0}})
    ->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace
}  // namespace odeserve

int main(int argc, char** argv) {
  const std::string prefix = "--model_dir=";
  const std::string translate_prefix = "--translate_model_dir=";
  const std::string threads_prefix = "--intra_op_threads=";  // as the server's flag; 0 = one per CPU
  int intra_op_threads = 0;
  const std::string min_tokens_prefix = "--parallel_min_tokens=";  // as the server's flag
  int parallel_min_tokens = odeserve::runtime::kDefaultParallelMinTokens;
  const std::string row_parallel_prefix = "--row_parallel=";  // as the server's flag: 0 or 1
  bool row_parallel = true;
  const std::string blas_parallel_prefix = "--blas_parallel=";  // as the server's flag: 0 or 1
  bool blas_parallel = true;
  const std::string native_prefix = "--native_fields=";  // as the server's flag: 0 or 1
  const std::string malloc_prefix = "--malloc_retain=";  // as the server's flag: 0 or 1
  bool malloc_retain = true;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]).rfind(prefix, 0) == 0) {
      odeserve::g_model_dir = std::string(argv[i]).substr(prefix.size());
    } else if (std::string(argv[i]).rfind(min_tokens_prefix, 0) == 0) {
      parallel_min_tokens = std::stoi(std::string(argv[i]).substr(min_tokens_prefix.size()));
    } else if (std::string(argv[i]).rfind(row_parallel_prefix, 0) == 0) {
      row_parallel = std::string(argv[i]).substr(row_parallel_prefix.size()) != "0";
    } else if (std::string(argv[i]).rfind(blas_parallel_prefix, 0) == 0) {
      blas_parallel = std::string(argv[i]).substr(blas_parallel_prefix.size()) != "0";
    } else if (std::string(argv[i]).rfind(native_prefix, 0) == 0) {
      odeserve::g_native_fields = std::string(argv[i]).substr(native_prefix.size()) != "0";
    } else if (std::string(argv[i]).rfind(malloc_prefix, 0) == 0) {
      malloc_retain = std::string(argv[i]).substr(malloc_prefix.size()) != "0";
    } else if (std::string(argv[i]).rfind(threads_prefix, 0) == 0) {
      intra_op_threads = std::stoi(std::string(argv[i]).substr(threads_prefix.size()));
    } else if (std::string(argv[i]).rfind(translate_prefix, 0) == 0) {
      odeserve::g_translate_model_dir = std::string(argv[i]).substr(translate_prefix.size());
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (odeserve::g_model_dir.empty()) odeserve::g_model_dir = ODESERVE_DEFAULT_BENCH_MODEL;
  if (odeserve::g_translate_model_dir.empty()) odeserve::g_translate_model_dir = ODESERVE_DEFAULT_TRANSLATE_MODEL;
  const auto allocator = odeserve::runtime::ConfigureAllocator(malloc_retain);
  const auto threading = odeserve::runtime::ConfigureThreading(intra_op_threads, parallel_min_tokens, row_parallel, blas_parallel);
  benchmark::AddCustomContext("model_dir", odeserve::g_model_dir);
  benchmark::AddCustomContext("translate_model_dir", odeserve::g_translate_model_dir);
  benchmark::AddCustomContext("threading", threading.summary());
  benchmark::AddCustomContext("native_fields", odeserve::g_native_fields ? "on" : "off");
  benchmark::AddCustomContext("allocator", allocator.summary);
  int rest_count = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_count, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
