// runtime/: the TorchScript contract on every tiny model (Euler with n = L reproduces forward),
// the batch executor (rows with different step counts, trimming, abandonment and its exact
// compute accounting), solver convergence orders, device parsing and load errors.
// The only test file that includes LibTorch.

#include <dlfcn.h>
#include <set>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include "server/repository/model_config.h"
#include "absl/strings/match.h"
#include "server/runtime/native_field.h"
#include "server/runtime/solvers.h"
#include "server/runtime/threading.h"
#include "server/runtime/torch_executor.h"
#include "server/runtime/translation_executor.h"
#include "server/runtime/torch_model.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::runtime {
namespace {

namespace fs = std::filesystem;
using scheduler::ExecBatch;
using scheduler::ExecRow;
using scheduler::ExecStats;
using ::testing::HasSubstr;

const fs::path kRepository = ODESERVE_TEST_REPOSITORY;
// Outputs agree to 1e-5, relative to the output's scale when that exceeds 1 (the tiny
// classifier's logits exceed 128, where one float32 ulp is 1.5e-5).
constexpr double kTolerance = 1e-5;

class SingleThreadedTorch : public ::testing::Environment {
 public:
  void SetUp() override { torch::set_num_threads(1); }
};
[[maybe_unused]] ::testing::Environment* const kTorchEnvironment =
    ::testing::AddGlobalTestEnvironment(new SingleThreadedTorch);

// Texts of different lengths, including characters the tiny vocabulary lacks.
const std::vector<std::string> kTexts = {
    "library",
    "Python bindings for the GNU scientific library",
    "game",
    "development files for the XML parsing library, with documentation and many examples of use",
    "Stra\xC3\x9F" "e \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 tools",
    "tools for the command line",
};

struct TinyModel {
  v1::ModelConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<TorchModel> model;
  InputLayout layout;
  std::vector<tokenizer::EncodedText> rows;  // kTexts, encoded
  int depth = 0;
};

// Loads the model in `dir` the way server/core/model_manager.cc does.
std::unique_ptr<TinyModel> LoadModelIn(const fs::path& dir, ComputePrecision precision) {
  auto tiny = std::make_unique<TinyModel>();
  auto config = repository::LoadModelConfig(dir);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  tiny->config = *config;
  const tokenizer::TokenizerOptions options = repository::TokenizerOptionsFor(*config);
  auto tokenizer = tokenizer::Tokenizer::Load((dir / config->tokenizer().model_file()).string(), options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return nullptr;
  tiny->tokenizer = *std::move(tokenizer);
  auto model = TorchModel::Load((dir / config->torchscript_file()).string(), torch::Device(torch::kCPU),
                                config->trained_depth(),
                                config->task() == v1::TRANSLATION ? config->translation().decoder_trained_depth() : 0,
                                precision);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  tiny->model = std::shared_ptr<TorchModel>(std::move(*model));
  tiny->depth = tiny->model->trained_depth();
  tiny->layout.hashed = options.hashed;
  tiny->layout.feature_dim = options.hash.dim;
  tiny->layout.pad_id = tiny->tokenizer->pad_id();
  for (const auto& text : kTexts) {
    auto encoded = tiny->tokenizer->Encode(text, config->max_sequence_length(), true);
    EXPECT_TRUE(encoded.ok()) << encoded.status();
    if (!encoded.ok()) return nullptr;
    tiny->rows.push_back(*std::move(encoded));
  }
  return tiny;
}

std::unique_ptr<TinyModel> LoadTiny(const std::string& name,
                                    ComputePrecision precision = ComputePrecision::kFloat32) {
  return LoadModelIn(kRepository / name, precision);
}

int OutputWidth(const v1::ModelConfig& config) {
  return config.task() == v1::CLASSIFICATION ? config.labels_size() : config.embedding_dimension();
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(double(x)));
  return m;
}

// kTolerance scaled by the larger of 1 and the reference's largest magnitude.
double Tolerance(const std::vector<float>& reference) { return kTolerance * std::max(1.0, MaxAbs(reference)); }
double Tolerance(const torch::Tensor& reference) {
  return kTolerance * std::max(1.0, reference.abs().max().item<double>());
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

// Runs `batch` and returns each row's output (empty if the row never finished).
struct RunResult {
  absl::StatusOr<ExecStats> stats;
  std::vector<std::vector<float>> outputs;
  std::vector<int> done_calls;
};

// `join` may add rows at step boundaries: `total_rows` counts them with the batch's.
RunResult RunBatch(TorchExecutor& executor, const ExecBatch& batch,
                   const scheduler::RowAbandonedFn& abandoned = [](size_t) { return false; },
                   const scheduler::RowJoinFn& join = nullptr, size_t total_rows = 0) {
  RunResult result;
  result.outputs.resize(std::max(batch.rows.size(), total_rows));
  result.done_calls.assign(result.outputs.size(), 0);
  result.stats = executor.Run(
      batch,
      [&](size_t row, const scheduler::RowOutput& output) {
        result.outputs.at(row).assign(output.values.begin(), output.values.end());
        ++result.done_calls.at(row);
      },
      abandoned, join);
  return result;
}

// The executor's token-evaluation count, computed independently: every iteration costs
// (active rows) x (longest active row) x (evaluations per step). Row r runs the iterations
// after `joined_after[r]` (0 when empty: from the start) up to `leave_after[r]`.
int64_t ExpectedTokenEvaluations(const std::vector<int>& lengths, const std::vector<int>& leave_after,
                                 int evaluations, int pad_to_multiple = 1, int max_length = 0,
                                 const std::vector<int>& joined_after = {}) {
  int64_t total = 0;
  const int iterations = *std::max_element(leave_after.begin(), leave_after.end());
  for (int it = 1; it <= iterations; ++it) {
    int active = 0, longest = 0;
    for (size_t r = 0; r < lengths.size(); ++r) {
      if (leave_after[r] >= it && (joined_after.empty() || joined_after[r] < it)) {
        ++active;
        longest = std::max(longest, lengths[r]);
      }
    }
    total += int64_t{active} * scheduler::PaddedLength(longest, pad_to_multiple, max_length) * evaluations;
  }
  return total;
}

// ---- The contract on every tiny model --------------------------------------------------------

// A parameter "<model>" runs the model's TorchScript field; "<model>+native" its native field
// (TorchModel::UseNativeField), through every test of the contract below.
constexpr const char* kNativeSuffix = "+native";

class EveryTinyModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tiny_ = LoadParam();
    ASSERT_NE(tiny_, nullptr);
    ASSERT_EQ(tiny_->depth, tiny_->config.trained_depth());
  }
  // The parameter's model in `precision`, with its field as the parameter says.
  std::unique_ptr<TinyModel> LoadParam(ComputePrecision precision = ComputePrecision::kFloat32) {
    std::string name = GetParam();
    const bool native = absl::EndsWith(name, kNativeSuffix);
    if (native) name.resize(name.size() - std::string(kNativeSuffix).size());
    auto tiny = LoadTiny(name, precision);
    if (tiny == nullptr) return nullptr;
    if (native) {
      absl::StatusOr<std::string> field = tiny->model->UseNativeField();
      EXPECT_TRUE(field.ok()) << field.status();
      EXPECT_EQ(field.value_or(""), NativeField::kPreLnName) << "every families.py export declares the pre-LN block";
      if (!field.ok()) return nullptr;
    }
    return tiny;
  }
  // The model's layout with batches padded to multiples of `multiple`, within its positions.
  InputLayout PaddedLayout(int multiple) const {
    InputLayout layout = tiny_->layout;
    layout.pad_to_multiple = multiple;
    layout.max_length = tiny_->config.max_sequence_length();
    return layout;
  }
  std::unique_ptr<TinyModel> tiny_;
};

TEST_P(EveryTinyModel, MakeInputsPadsAndMasks) {
  TorchExecutor executor(tiny_->model, tiny_->layout);
  std::vector<ExecRow> rows;
  size_t longest = 0;
  for (const auto& row : tiny_->rows) {
    rows.push_back({&row, 1, {}});
    longest = std::max(longest, row.ids.size());
  }
  auto [x, mask] = executor.MakeInputs(rows);
  const int64_t batch = static_cast<int64_t>(rows.size());
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{batch, static_cast<int64_t>(longest)}));
  EXPECT_EQ(mask.scalar_type(), torch::kFloat32);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = static_cast<int64_t>(tiny_->rows[b].ids.size());
    EXPECT_EQ(mask[b].sum().item<float>(), static_cast<float>(length)) << b;
    EXPECT_EQ(mask[b].slice(0, 0, length).min().item<float>(), 1.0f) << b;
  }
  if (tiny_->layout.hashed) {
    const int64_t dim = tiny_->layout.feature_dim;
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{batch, static_cast<int64_t>(longest), dim}));
    EXPECT_EQ(x.scalar_type(), torch::kFloat32);
    for (int64_t b = 0; b < batch; ++b) {
      const auto& row = tiny_->rows[b];
      const int64_t length = static_cast<int64_t>(row.ids.size());
      const torch::Tensor want =
          torch::from_blob(const_cast<float*>(row.features.data()), {length, dim}, torch::kFloat32);
      EXPECT_TRUE(torch::equal(x[b].slice(0, 0, length), want)) << b;
      if (length < static_cast<int64_t>(longest)) {
        EXPECT_EQ(x[b].slice(0, length).abs().max().item<float>(), 0.0f) << "pads must be zero";
      }
    }
  } else {
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{batch, static_cast<int64_t>(longest)}));
    EXPECT_EQ(x.scalar_type(), torch::kInt64);
    for (int64_t b = 0; b < batch; ++b) {
      const auto& ids = tiny_->rows[b].ids;
      for (int64_t t = 0; t < static_cast<int64_t>(longest); ++t) {
        const int64_t want = t < static_cast<int64_t>(ids.size()) ? ids[t] : tiny_->layout.pad_id;
        EXPECT_EQ(x[b][t].item<int64_t>(), want) << b << "," << t;
      }
    }
  }
}

TEST_P(EveryTinyModel, EulerWithDtOneReproducesForward) {
  TorchExecutor executor(tiny_->model, tiny_->layout);
  std::vector<ExecRow> rows;
  for (const auto& row : tiny_->rows) rows.push_back({&row, tiny_->depth, {}});
  auto [x, mask] = executor.MakeInputs(rows);
  c10::InferenceMode guard;

  auto forward = tiny_->model->Forward(x, mask);
  ASSERT_TRUE(forward.ok()) << forward.status();
  const torch::Tensor reference = *forward;
  ASSERT_EQ(reference.sizes(), (std::vector<int64_t>{static_cast<int64_t>(rows.size()), OutputWidth(tiny_->config)}));
  ASSERT_GT(reference.abs().max().item<float>(), 0.0f);

  auto h0 = tiny_->model->InputStage(x, mask);
  ASSERT_TRUE(h0.ok()) << h0.status();
  torch::Tensor h = *h0;
  const VectorField field = [&](const torch::Tensor& state) {
    return tiny_->model->VectorFieldUnchecked(state, mask);
  };
  const torch::Tensor dt = torch::ones({h.size(0)}, torch::kFloat64);
  for (int i = 0; i < tiny_->depth; ++i) h = SolverStep(scheduler::Solver::kEuler, field, h, dt);
  auto out = tiny_->model->OutputStage(h, mask);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LE(MaxAbsDiff(*out, reference), Tolerance(reference));

  // The same through the executor, one step of dt = L / L per step.
  RunResult run = RunBatch(executor, ExecBatch{scheduler::Solver::kEuler, rows});
  ASSERT_TRUE(run.stats.ok()) << run.stats.status();
  EXPECT_EQ(run.stats->iterations, tiny_->depth);
  EXPECT_EQ(run.stats->padded_tokens, mask.numel());
  EXPECT_EQ(run.stats->token_evaluations, mask.numel() * tiny_->depth);
  EXPECT_GT(run.stats->seconds, 0.0);
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(run.done_calls[r], 1) << r;
    const torch::Tensor want = reference[static_cast<int64_t>(r)].contiguous();
    const std::vector<float> expected(want.data_ptr<float>(), want.data_ptr<float>() + want.numel());
    EXPECT_LE(MaxAbsDiff(run.outputs[r], expected), Tolerance(expected)) << "row " << r;
  }
}

TEST_P(EveryTinyModel, RowsWithDifferentStepsMatchRunningAlone) {
  TorchExecutor executor(tiny_->model, tiny_->layout);
  const int L = tiny_->depth;
  // The longest text (index 3) leaves first, so the batch is trimmed while others still run.
  const std::vector<int> steps = {3, L, 2 * L, 1, 2, L + 1};
  for (const auto solver : {scheduler::Solver::kEuler, scheduler::Solver::kHeun, scheduler::Solver::kRk4}) {
    ExecBatch batch{solver, {}};
    std::vector<int> lengths;
    for (size_t r = 0; r < tiny_->rows.size(); ++r) {
      batch.rows.push_back({&tiny_->rows[r], steps[r], {}});
      lengths.push_back(static_cast<int>(tiny_->rows[r].ids.size()));
    }
    ASSERT_EQ(*std::max_element(lengths.begin(), lengths.end()), lengths[3]) << "text 3 must be the longest";
    RunResult together = RunBatch(executor, batch);
    ASSERT_TRUE(together.stats.ok()) << together.stats.status();
    EXPECT_EQ(together.stats->iterations, 2 * L);
    EXPECT_EQ(together.stats->token_evaluations,
              ExpectedTokenEvaluations(lengths, steps, scheduler::EvaluationsPerStep(solver)));
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      RunResult alone = RunBatch(executor, ExecBatch{solver, {batch.rows[r]}});
      ASSERT_TRUE(alone.stats.ok());
      EXPECT_EQ(together.done_calls[r], 1);
      ASSERT_EQ(together.outputs[r].size(), static_cast<size_t>(OutputWidth(tiny_->config)));
      EXPECT_LE(MaxAbsDiff(together.outputs[r], alone.outputs[0]), Tolerance(alone.outputs[0]))
          << scheduler::SolverName(solver) << " row " << r << " steps " << steps[r];
    }
  }
}

TEST_P(EveryTinyModel, PaddedBatchesMatchUnpaddedRows) {
  // batching.pad_to_multiple: every batch (and every re-trimmed one) runs at a multiple of the
  // padding, capped at the model's length limit, and padding changes no row's output.
  constexpr int kMultiple = 8;
  const InputLayout padded_layout = PaddedLayout(kMultiple);
  TorchExecutor padded(tiny_->model, padded_layout);
  TorchExecutor unpadded(tiny_->model, tiny_->layout);
  const int L = tiny_->depth;
  const std::vector<int> steps = {3, L, 2 * L, 1, 2, L + 1};
  ExecBatch batch{scheduler::Solver::kHeun, {}};
  std::vector<int> lengths;
  for (size_t r = 0; r < tiny_->rows.size(); ++r) {
    batch.rows.push_back({&tiny_->rows[r], steps[r], {}});
    lengths.push_back(static_cast<int>(tiny_->rows[r].ids.size()));
  }
  const int longest = *std::max_element(lengths.begin(), lengths.end());
  const int64_t want_length = scheduler::PaddedLength(longest, kMultiple, padded_layout.max_length);
  ASSERT_GT(want_length, longest) << "the texts must need padding for this test to mean anything";
  auto [x, mask] = padded.MakeInputs(batch.rows);
  EXPECT_EQ(mask.size(1), want_length);
  EXPECT_EQ(mask.sum().item<float>(), static_cast<float>(std::accumulate(lengths.begin(), lengths.end(), 0)));

  RunResult together = RunBatch(padded, batch);
  ASSERT_TRUE(together.stats.ok()) << together.stats.status();
  EXPECT_EQ(together.stats->padded_tokens, static_cast<int64_t>(lengths.size()) * want_length);
  EXPECT_EQ(together.stats->token_evaluations,
            ExpectedTokenEvaluations(lengths, steps, scheduler::EvaluationsPerStep(batch.solver), kMultiple,
                                     padded_layout.max_length));
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    RunResult alone = RunBatch(unpadded, ExecBatch{batch.solver, {batch.rows[r]}});
    ASSERT_TRUE(alone.stats.ok());
    EXPECT_EQ(together.done_calls[r], 1);
    EXPECT_LE(MaxAbsDiff(together.outputs[r], alone.outputs[0]), Tolerance(alone.outputs[0])) << "row " << r;
  }
}

TEST_P(EveryTinyModel, RowsJoiningARunningBatchMatchRunningAlone) {
  // Continuous batching: rows join at step boundaries, one longer than every running row (the
  // state is zero-padded to it) and one shorter, and each still computes exactly what it
  // computes alone; padded_tokens counts every input stage and token_evaluations every step.
  constexpr int kMultiple = 4;
  const InputLayout layout = PaddedLayout(kMultiple);
  TorchExecutor executor(tiny_->model, layout);
  const int L = tiny_->depth;
  const scheduler::Solver solver = scheduler::Solver::kHeun;
  // Texts by length: the two shortest start, the longest joins after step 1, the rest after 2.
  std::vector<size_t> order(tiny_->rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tiny_->rows[a].ids.size() < tiny_->rows[b].ids.size(); });
  const std::vector<int> steps = {L, 2 * L, 3, 1, L + 1, 2};  // by position in the run
  std::vector<ExecRow> rows;
  for (size_t k = 0; k < order.size(); ++k) rows.push_back({&tiny_->rows[order[k]], steps[k], {}});
  // Run positions 0, 1 start; 5 (the longest) joins after step 1; 2, 3, 4 after step 2.
  const std::vector<size_t> run_order = {0, 1, 5, 2, 3, 4};
  const std::vector<int> joined_after = {0, 0, 1, 2, 2, 2};
  ASSERT_GT(scheduler::PaddedLength(rows[5].input->ids.size(), kMultiple, layout.max_length),
            scheduler::PaddedLength(rows[1].input->ids.size(), kMultiple, layout.max_length))
      << "the joining row must be longer than the running batch for this test to mean anything";
  ExecBatch batch{solver, {rows[0], rows[1]}};
  std::vector<scheduler::JoinRoom> rooms;
  auto join = [&](const scheduler::JoinRoom& room) {
    rooms.push_back(room);
    std::vector<ExecRow> joining;
    if (room.iteration == 1) joining.push_back(rows[5]);
    if (room.iteration == 2) joining = {rows[2], rows[3], rows[4]};
    return joining;
  };
  RunResult together = RunBatch(executor, batch, [](size_t) { return false; }, join, rows.size());
  ASSERT_TRUE(together.stats.ok()) << together.stats.status();
  ASSERT_GE(rooms.size(), 2u);
  EXPECT_EQ(rooms[0].rows, 2);
  EXPECT_EQ(rooms[1].rows, 3);
  EXPECT_EQ(rooms[1].padded_length, scheduler::PaddedLength(rows[5].input->ids.size(), kMultiple, layout.max_length));

  std::vector<int> lengths, leave_after;
  int64_t want_padded_tokens = 2 * scheduler::PaddedLength(rows[1].input->ids.size(), kMultiple, layout.max_length);
  for (size_t i = 0; i < run_order.size(); ++i) {
    const ExecRow& row = rows[run_order[i]];
    lengths.push_back(static_cast<int>(row.input->ids.size()));
    leave_after.push_back(joined_after[i] + row.steps);
  }
  want_padded_tokens += scheduler::PaddedLength(lengths[2], kMultiple, layout.max_length);
  want_padded_tokens += 3 * scheduler::PaddedLength(std::max({lengths[3], lengths[4], lengths[5]}), kMultiple,
                                                    layout.max_length);
  EXPECT_EQ(together.stats->padded_tokens, want_padded_tokens);
  EXPECT_EQ(together.stats->token_evaluations,
            ExpectedTokenEvaluations(lengths, leave_after, scheduler::EvaluationsPerStep(solver), kMultiple,
                                     layout.max_length, joined_after));
  EXPECT_EQ(together.stats->iterations, *std::max_element(leave_after.begin(), leave_after.end()));
  TorchExecutor unpadded(tiny_->model, tiny_->layout);
  for (size_t i = 0; i < run_order.size(); ++i) {
    const ExecRow& row = rows[run_order[i]];
    RunResult alone = RunBatch(unpadded, ExecBatch{solver, {row}});
    ASSERT_TRUE(alone.stats.ok());
    EXPECT_EQ(together.done_calls[i], 1) << "run row " << i;
    EXPECT_LE(MaxAbsDiff(together.outputs[i], alone.outputs[0]), Tolerance(alone.outputs[0]))
        << "run row " << i << " joined after step " << joined_after[i];
  }
}

TEST(PaddedLength, RoundsUpToTheMultipleWithinTheLimit) {
  EXPECT_EQ(scheduler::PaddedLength(5, 1, 64), 5);
  EXPECT_EQ(scheduler::PaddedLength(5, 0, 64), 5);
  EXPECT_EQ(scheduler::PaddedLength(5, 16, 64), 16);
  EXPECT_EQ(scheduler::PaddedLength(16, 16, 64), 16);
  EXPECT_EQ(scheduler::PaddedLength(17, 16, 64), 32);
  EXPECT_EQ(scheduler::PaddedLength(50, 16, 60), 60) << "never past the model's positions";
  EXPECT_EQ(scheduler::PaddedLength(17, 16, 0), 32) << "0 = no limit";
  EXPECT_EQ(scheduler::PaddedLength(0, 16, 64), 0) << "an empty batch stays empty";
}

// Threading is process-wide: restores the suite's single thread and graph-executor setting.
class ThreadingRestorer {
 public:
  ThreadingRestorer() : optimize_(torch::jit::getGraphExecutorOptimize()) {}
  ~ThreadingRestorer() {
    ConfigureThreading(1, 0);
    torch::jit::setGraphExecutorOptimize(optimize_);
  }

 private:
  bool optimize_;
};

TEST_P(EveryTinyModel, RowParallelRunsMatchOneThread) {
  TorchExecutor executor(tiny_->model, tiny_->layout);
  // Every text four times, with different step counts, so that rows leave while others run.
  ExecBatch batch{scheduler::Solver::kHeun, {}};
  for (int copy = 0; copy < 4; ++copy) {
    for (const auto& row : tiny_->rows) batch.rows.push_back({&row, 1 + static_cast<int>((copy + batch.rows.size()) % 3), {}});
  }
  RunResult one_thread = RunBatch(executor, batch);
  ASSERT_TRUE(one_thread.stats.ok()) << one_thread.stats.status();

  ThreadingRestorer restore;
  ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/true);
  auto [x, mask] = executor.MakeInputs(batch.rows);
  ASSERT_EQ(RowChunksFor(mask.size(0), mask.numel()), 2) << "the batch must be large enough to split";
  RunResult split;
  const int64_t splits_before = RowChunkSplits();
  std::thread batcher([&] { split = RunBatch(executor, batch); });  // a fresh thread, as a batcher
  batcher.join();
  ASSERT_TRUE(split.stats.ok()) << split.stats.status();
  EXPECT_GT(RowChunkSplits(), splits_before) << "the field evaluations were never split";
  EXPECT_EQ(split.stats->token_evaluations, one_thread.stats->token_evaluations);
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    EXPECT_EQ(split.done_calls[r], 1) << r;
    EXPECT_LE(MaxAbsDiff(split.outputs[r], one_thread.outputs[r]), Tolerance(one_thread.outputs[r])) << "row " << r;
  }
}

TEST(Threading, RowChunksFollowTheFlagThreadsAndSize) {
  ThreadingRestorer restore;
  ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/true);
  EXPECT_EQ(RowChunksFor(4, kRowParallelMinTokens), 2);
  EXPECT_EQ(RowChunksFor(4, kRowParallelMinTokens - 1), 1) << "small calls stay whole";
  EXPECT_EQ(RowChunksFor(8, 8, kRowParallelMinHypotheses), 2) << "a decoder call's own threshold";
  EXPECT_EQ(RowChunksFor(4, 4, kRowParallelMinHypotheses), 1);
  EXPECT_EQ(RowChunksFor(3, 8, kRowParallelMinHypotheses, /*min_rows_per_chunk=*/2), 1)
      << "no range of a single row when two are asked for";
  EXPECT_EQ(RowChunksFor(1, 4 * kRowParallelMinTokens), 1) << "one row cannot split";
  ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/false);
  EXPECT_EQ(RowChunksFor(4, 4 * kRowParallelMinTokens), 1);
  ConfigureThreading(1, kDefaultParallelMinTokens, /*row_parallel=*/true);
  EXPECT_EQ(RowChunksFor(4, 4 * kRowParallelMinTokens), 1) << "one intra-op thread";
}

TEST(Threading, RowChunksRunAtOnceInOrderUnderInferenceMode) {
  ThreadingRestorer restore;
  ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/true);
  const torch::Tensor a = torch::arange(30, torch::kFloat32).reshape({10, 3});
  const torch::Tensor b = torch::ones({10, 3});
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<int64_t> chunk_rows;
  bool always_inference = true;
  // Each chunk waits until both have started, so they must run at the same time.
  std::atomic<int> started{0};
  std::atomic<int> saw_the_other{0};
  const RowChunkFn fn = [&](const std::vector<torch::Tensor>& in) {
    const torch::Tensor& x = in[0];
    const torch::Tensor& y = in[1];
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
      chunk_rows.push_back(x.size(0));
      always_inference = always_inference && c10::InferenceMode::is_enabled();
    }
    ++started;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    if (started.load() >= 2) ++saw_the_other;  // not after a give-up: chunks one after another
    return std::vector<torch::Tensor>{x * 2 + y, x.sum(1)};
  };
  std::vector<torch::Tensor> result;
  std::thread batcher([&] {
    IntraOpThreadsScope scope;
    result = EvaluateRowChunks(2, {a, b}, fn);
  });
  batcher.join();
  ASSERT_EQ(result.size(), 2u);
  EXPECT_TRUE(torch::equal(result[0], a * 2 + b)) << "rows come back in order";
  EXPECT_TRUE(torch::equal(result[1], a.sum(1))) << "every output is concatenated";
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_EQ(saw_the_other.load(), 2) << "the chunks ran one after another";
  EXPECT_THAT(chunk_rows, ::testing::UnorderedElementsAre(5, 5));
  EXPECT_TRUE(always_inference);

  const RowChunkFn fails = [](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
    if (in[0].size(0) > 0) throw std::runtime_error("field failed");
    return in;
  };
  std::string error;
  std::thread failing([&] {
    try {
      EvaluateRowChunks(2, {a, b}, fails);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  failing.join();
  EXPECT_EQ(error, "field failed") << "a worker's exception reaches the caller";
  int threads_after_error = 0;
  std::thread counted([&] {
    IntraOpThreadsScope scope;
    SetIntraOpThreadsFor(1);  // one thread, as a small call
    try {
      EvaluateRowChunks(2, {a, b}, fails);
    } catch (const std::exception&) {
    }
    threads_after_error = at::get_num_threads();
  });
  counted.join();
  EXPECT_EQ(threads_after_error, 1) << "the caller's thread count is back after an error";
}

// OpenBLAS's own thread count, or 0 where this process runs another BLAS.
int OpenBlasThreads() {
  using GetInt = int (*)();
  const auto get = reinterpret_cast<GetInt>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get == nullptr ? 0 : get();
}

TEST(Threading, BlasThreadsScopeHandsProductsToOpenBlasAndRestores) {
  ThreadingRestorer restore;
  const ThreadingReport report =
      ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/true, /*blas_parallel=*/true);
  if (!report.openblas_found) GTEST_SKIP() << "LibTorch here does not run OpenBLAS";
  ASSERT_TRUE(report.blas_parallel) << report.summary();
  const torch::Tensor a = torch::randn({256, 256});
  torch::Tensor one_thread;
  {
    c10::InferenceMode inference;
    one_thread = torch::mm(a, a);
  }
  std::thread caller([&] {  // a fresh thread, as a batcher
    IntraOpThreadsScope threads;
    ASSERT_EQ(at::get_num_threads(), 2);
    {
      BlasThreadsScope small(true, 1, kBlasParallelMinTokens - 1);
      EXPECT_FALSE(small.active()) << "small calls keep one OpenBLAS thread";
      EXPECT_EQ(OpenBlasThreads(), 1);
    }
    {
      EXPECT_FALSE(BlasThreadsScope(true, 2, kRowParallelMinTokens).active()) << "row ranges take this call";
      EXPECT_FALSE(BlasThreadsScope(false, 1, kBlasParallelMinTokens).active()) << "not allowed by the caller";
      BlasThreadsScope blas(true, 1, kRowParallelMinTokens);
      EXPECT_TRUE(blas.active()) << "one row cannot split, however long";
      EXPECT_EQ(OpenBlasThreads(), 2);
      EXPECT_EQ(at::get_num_threads(), 1) << "LibTorch's operators run serially meanwhile";
      // Large enough for OpenBLAS to thread (the tiny models' products are not).
      c10::InferenceMode inference;
      // Float rounding only: the threads' kernels may block the sums differently.
      const double diff = (torch::mm(a, a) - one_thread).abs().max().item<double>();
      EXPECT_LT(diff, 1e-3) << "threaded products agree (entries are ~16 in size)";
    }
    EXPECT_EQ(OpenBlasThreads(), 1);
    EXPECT_EQ(at::get_num_threads(), 2) << "the caller's count is back";
  });
  caller.join();
  ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/true, /*blas_parallel=*/false);
  EXPECT_FALSE(BlasThreadsScope(true, 1, 4 * kBlasParallelMinTokens).active()) << "off unless asked for";
  EXPECT_FALSE(ConfigureThreading(1, kDefaultParallelMinTokens, true, /*blas_parallel=*/true).blas_parallel)
      << "one intra-op thread leaves nothing to hand over";
  EXPECT_FALSE(BlasThreadsScope(true, 1, 4 * kBlasParallelMinTokens).active());
}

TEST(Threading, OpenBlasThreadsSleepAfterAThreadedProduct) {
  // With OpenBLAS's default spin a worker keeps a core busy for ~0.1 s after every threaded
  // call (this test then measures ~99 ms of CPU); with the server's setting it sleeps within
  // about 0.4 ms.
  ThreadingRestorer restore;
  if (const char* preset = std::getenv("OPENBLAS_THREAD_TIMEOUT"); preset != nullptr && std::atoi(preset) > 20) {
    GTEST_SKIP() << "OPENBLAS_THREAD_TIMEOUT=" << preset << " was set by the caller, and the caller's value wins";
  }
  if (!ConfigureThreading(2, kDefaultParallelMinTokens, true, /*blas_parallel=*/true).blas_parallel) {
    GTEST_SKIP() << "no OpenBLAS with threads to put to sleep";
  }
  const torch::Tensor a = torch::randn({512, 512});
  {
    c10::InferenceMode inference;
    BlasThreadsScope blas(true, 1, kBlasParallelMinTokens);
    ASSERT_TRUE(blas.active());
    for (int i = 0; i < 10; ++i) (void)torch::mm(a, a);
  }
  timespec before{}, after{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &before);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &after);
  const double cpu_ms = (after.tv_sec - before.tv_sec) * 1e3 + (after.tv_nsec - before.tv_nsec) / 1e6;
  EXPECT_LT(cpu_ms, 30.0) << "OpenBLAS threads kept spinning while the process was idle";
}

TEST_P(EveryTinyModel, BlasParallelRunsMatchOneThread) {
  TorchExecutor executor(tiny_->model, tiny_->layout);
  // Copies of the longest text, enough for the hand-over, too few tokens to split the rows.
  const auto longest = std::max_element(tiny_->rows.begin(), tiny_->rows.end(), [](const auto& a, const auto& b) {
    return a.ids.size() < b.ids.size();
  });
  ExecBatch batch{scheduler::Solver::kEuler, {}};
  do {
    batch.rows.push_back({&*longest, 1 + static_cast<int>(batch.rows.size() % 2), {}});
  } while (executor.MakeInputs(batch.rows).second.numel() < kBlasParallelMinTokens);
  RunResult one_thread = RunBatch(executor, batch);
  ASSERT_TRUE(one_thread.stats.ok()) << one_thread.stats.status();

  ThreadingRestorer restore;
  if (!ConfigureThreading(2, kDefaultParallelMinTokens, true, /*blas_parallel=*/true).blas_parallel) {
    GTEST_SKIP() << "LibTorch here does not run OpenBLAS";
  }
  const int64_t tokens = executor.MakeInputs(batch.rows).second.numel();
  ASSERT_EQ(RowChunksFor(static_cast<int64_t>(batch.rows.size()), tokens), 1) << tokens << " tokens must not split";
  RunResult blas;
  const int64_t hand_overs = BlasHandOvers();
  std::thread batcher([&] { blas = RunBatch(executor, batch); });
  batcher.join();
  ASSERT_TRUE(blas.stats.ok()) << blas.stats.status();
  EXPECT_GT(BlasHandOvers(), hand_overs) << "the field evaluations ran in a BlasThreadsScope";
  ExecBatch waiting = batch;
  waiting.others_waiting = true;
  const int64_t before_waiting = BlasHandOvers();
  std::thread busy([&] { EXPECT_TRUE(RunBatch(executor, waiting).stats.ok()); });
  busy.join();
  EXPECT_EQ(BlasHandOvers(), before_waiting) << "no hand-over while calls wait";
  EXPECT_EQ(blas.stats->token_evaluations, one_thread.stats->token_evaluations);
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    EXPECT_LE(MaxAbsDiff(blas.outputs[r], one_thread.outputs[r]), Tolerance(one_thread.outputs[r])) << "row " << r;
  }
}

TEST_P(EveryTinyModel, StepCountsChangeTheOutput) {
  // Guards the test above: the tiny models' fields are strong enough that steps matter.
  TorchExecutor executor(tiny_->model, tiny_->layout);
  const auto& row = tiny_->rows[1];
  RunResult one = RunBatch(executor, ExecBatch{scheduler::Solver::kEuler, {{&row, 1, {}}}});
  RunResult full = RunBatch(executor, ExecBatch{scheduler::Solver::kEuler, {{&row, tiny_->depth, {}}}});
  ASSERT_TRUE(one.stats.ok());
  ASSERT_TRUE(full.stats.ok());
  EXPECT_GT(MaxAbsDiff(one.outputs[0], full.outputs[0]), 100 * Tolerance(full.outputs[0]));
}

TEST_P(EveryTinyModel, Bfloat16ComputeIsAutocastAroundAFloat32State) {
  auto bf16 = LoadParam(ComputePrecision::kBFloat16);
  ASSERT_NE(bf16, nullptr);
  ASSERT_EQ(bf16->model->precision(), ComputePrecision::kBFloat16);
  TorchExecutor exact(tiny_->model, tiny_->layout);
  TorchExecutor fast(bf16->model, bf16->layout);
  ExecBatch batch{scheduler::Solver::kEuler, {}};
  for (const auto& row : bf16->rows) batch.rows.push_back({&row, bf16->depth, {}});
  RunResult want = RunBatch(exact, batch);
  RunResult got = RunBatch(fast, batch);
  ASSERT_TRUE(want.stats.ok()) << want.stats.status();
  ASSERT_TRUE(got.stats.ok()) << got.stats.status();
  // The scope ends with the batch: float32 models on this thread are unaffected.
  EXPECT_FALSE(at::autocast::is_cpu_enabled());

  // Reference: every stage under autocast, the ODE state accumulated in float32.
  auto [x, mask] = fast.MakeInputs(batch.rows);
  torch::Tensor reference;
  {
    c10::InferenceMode guard;
    PrecisionScope scope(ComputePrecision::kBFloat16, torch::Device(torch::kCPU));
    ASSERT_TRUE(at::autocast::is_cpu_enabled());
    torch::Tensor h = bf16->model->InputStageUnchecked(x, mask).to(torch::kFloat32);
    const VectorField field = [&](const torch::Tensor& state) {
      return bf16->model->VectorFieldUnchecked(state, mask);
    };
    const torch::Tensor dt = torch::ones({h.size(0)}, torch::kFloat64);
    for (int i = 0; i < bf16->depth; ++i) {
      h = SolverStep(scheduler::Solver::kEuler, field, h, dt);
      ASSERT_EQ(h.scalar_type(), torch::kFloat32) << "step " << i;
    }
    reference = bf16->model->OutputStageUnchecked(h, mask).to(torch::kFloat32).contiguous();
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  double from_float32 = 0;
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    const torch::Tensor row = reference[static_cast<int64_t>(r)].contiguous();
    const std::vector<float> expected(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
    EXPECT_LE(MaxAbsDiff(got.outputs[r], expected), Tolerance(expected)) << "row " << r;
    from_float32 = std::max(from_float32, MaxAbsDiff(got.outputs[r], want.outputs[r]));
  }
  EXPECT_GT(from_float32, 0.0) << "bfloat16 made no difference: autocast did not run";
  RunResult again = RunBatch(exact, batch);
  ASSERT_TRUE(again.stats.ok());
  for (size_t r = 0; r < batch.rows.size(); ++r) EXPECT_EQ(again.outputs[r], want.outputs[r]) << "row " << r;
}

// Runs the same batch (even rows at full depth, odd rows at `short_steps`) through both models and
// expects bit-identical outputs: autocast casts a float32 weight with the same rounding as the
// cast at load.
void ExpectSameOutputs(const TinyModel& stored, const TinyModel& cast_per_call, scheduler::Solver solver,
                       int short_steps) {
  TorchExecutor fast(stored.model, stored.layout);
  TorchExecutor reference(cast_per_call.model, cast_per_call.layout);
  ExecBatch batch{solver, {}};
  for (size_t r = 0; r < stored.rows.size(); ++r) {
    batch.rows.push_back({&stored.rows[r], r % 2 == 0 ? stored.depth : short_steps, {}});
  }
  RunResult want = RunBatch(reference, batch);
  RunResult got = RunBatch(fast, batch);
  ASSERT_TRUE(want.stats.ok()) << want.stats.status();
  ASSERT_TRUE(got.stats.ok()) << got.stats.status();
  for (size_t r = 0; r < batch.rows.size(); ++r) EXPECT_EQ(got.outputs[r], want.outputs[r]) << "row " << r;
}

TEST_P(EveryTinyModel, Bfloat16WeightsStoredAtLoadGiveBitIdenticalOutputs) {
  auto stored = LoadParam(ComputePrecision::kBFloat16);
  auto cast_per_call = LoadParam(ComputePrecision::kBFloat16);
  ASSERT_NE(stored, nullptr);
  ASSERT_NE(cast_per_call, nullptr);
  absl::StatusOr<TorchModel::StoredWeights> weights = stored->model->StoreProductWeightsInBfloat16();
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_GT(weights->tensors, 0) << "every tiny model has projections that autocast runs in bfloat16";
  // Norms, biases added outside a product and token/position tables stay float32.
  EXPECT_LT(weights->values, stored->model->parameter_count());
  // Nothing float32 is left to store: the first call changed the module.
  absl::StatusOr<TorchModel::StoredWeights> again = stored->model->StoreProductWeightsInBfloat16();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->tensors, 0);

  for (const scheduler::Solver solver : {scheduler::Solver::kEuler, scheduler::Solver::kHeun}) {
    ExpectSameOutputs(*stored, *cast_per_call, solver, 1);
  }
}

// The trained models reach their products through torch.nn.functional and their own helpers, which
// call further functions. With the graph optimizer off, as ConfigureThreading leaves the thread the
// server loads on, torch::jit::Inline pastes a callee's graph as written and leaves the calls nested
// in it: every projection must be found either way.
struct BundledWeights {
  std::string model;
  // The counts of the same rule walked in Python: `python3 -m odeserve_models count-bf16-weights`.
  int tensors;
  int64_t values;
};

class BundledModelUnderGraphOptimizer : public ::testing::TestWithParam<std::tuple<BundledWeights, bool>> {};

TEST_P(BundledModelUnderGraphOptimizer, Bfloat16WeightsStoredAtLoadCoverEveryProjection) {
  const auto& [want, optimize] = GetParam();
  torch::jit::GraphOptimizerEnabledGuard optimizer(optimize);
  const fs::path dir = fs::path(ODESERVE_BUNDLED_REPOSITORY) / want.model;
  auto stored = LoadModelIn(dir, ComputePrecision::kBFloat16);
  auto cast_per_call = LoadModelIn(dir, ComputePrecision::kBFloat16);
  ASSERT_NE(stored, nullptr);
  ASSERT_NE(cast_per_call, nullptr);
  absl::StatusOr<TorchModel::StoredWeights> weights = stored->model->StoreProductWeightsInBfloat16();
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->tensors, want.tensors);
  EXPECT_EQ(weights->values, want.values);

  ExpectSameOutputs(*stored, *cast_per_call, scheduler::Solver::kEuler, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Bundled, BundledModelUnderGraphOptimizer,
    ::testing::Combine(
        // classify-sections: both encoders' attention and feed-forward weights and biases, the
        // ShareBERT slicing matrices, the projections into both encoders and the three heads. Token
        // tables are also read by aten::embedding and stay float32.
        ::testing::Values(BundledWeights{"classify-sections", 30, 911185},
                          BundledWeights{"embed-sharebert", 14, 505305},
                          BundledWeights{"embed-eelbert", 14, 432128}),
        ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<BundledWeights, bool>>& info) {
      std::string name = std::get<0>(info.param).model;
      std::replace(name.begin(), name.end(), '-', '_');
      return name + (std::get<1>(info.param) ? "_optimizer_on" : "_optimizer_off");
    });

// The bundled embedders declare the pre-LN block (models/odeserve_models/exporting/
// declare_native_field.py): served natively, their outputs are the script field's, in float32
// and in bfloat16 as served, at full depth and at 2 steps.
class BundledNativeField : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(BundledNativeField, OutputsEqualTheScriptFields) {
  const auto& [name, bfloat16] = GetParam();
  const ComputePrecision precision = bfloat16 ? ComputePrecision::kBFloat16 : ComputePrecision::kFloat32;
  const fs::path dir = fs::path(ODESERVE_BUNDLED_REPOSITORY) / name;
  auto script = LoadModelIn(dir, precision);
  auto native = LoadModelIn(dir, precision);
  ASSERT_NE(script, nullptr);
  ASSERT_NE(native, nullptr);
  if (bfloat16) {
    ASSERT_TRUE(script->model->StoreProductWeightsInBfloat16().ok());
    ASSERT_TRUE(native->model->StoreProductWeightsInBfloat16().ok());
  }
  absl::StatusOr<std::string> field = native->model->UseNativeField();
  ASSERT_TRUE(field.ok()) << field.status();
  EXPECT_EQ(*field, NativeField::kPreLnName);
  TorchExecutor slow(script->model, script->layout);
  TorchExecutor fast(native->model, native->layout);
  ExecBatch batch{scheduler::Solver::kEuler, {}};
  for (size_t r = 0; r < script->rows.size(); ++r) batch.rows.push_back({&script->rows[r], r % 2 == 0 ? script->depth : 2, {}});
  RunResult want = RunBatch(slow, batch);
  RunResult got = RunBatch(fast, batch);
  ASSERT_TRUE(want.stats.ok()) << want.stats.status();
  ASSERT_TRUE(got.stats.ok()) << got.stats.status();
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    EXPECT_LE(MaxAbsDiff(got.outputs[r], want.outputs[r]), (bfloat16 ? 1e-2 : 1e-5) * std::max(1.0, MaxAbs(want.outputs[r])))
        << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Bundled, BundledNativeField,
                         ::testing::Combine(::testing::Values("embed-sharebert", "embed-eelbert"), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, bool>>& info) {
                           std::string name = std::get<0>(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + (std::get<1>(info.param) ? "_bfloat16" : "_float32");
                         });

TEST(TorchModel, StoringBfloat16WeightsNeedsABfloat16Model) {
  auto tiny = LoadTiny("tiny-albert");
  ASSERT_NE(tiny, nullptr);
  absl::StatusOr<TorchModel::StoredWeights> weights = tiny->model->StoreProductWeightsInBfloat16();
  EXPECT_EQ(weights.status().code(), absl::StatusCode::kFailedPrecondition);
}

std::string TinyModelTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  std::replace(name.begin(), name.end(), '+', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, EveryTinyModel,
                         ::testing::Values("tiny-albert", "tiny-sharebert", "tiny-eelbert", "tiny-classifier",
                                           "tiny-lexical", "tiny-probe"),
                         TinyModelTestName);
// The exported families' shared block, evaluated natively (the lexical and probe classifiers
// compute other fields and declare none).
INSTANTIATE_TEST_SUITE_P(TinyModelsNativeField, EveryTinyModel,
                         ::testing::Values("tiny-albert+native", "tiny-sharebert+native", "tiny-eelbert+native",
                                           "tiny-classifier+native"),
                         TinyModelTestName);

TEST(TorchModel, ClassifiersWithOtherFieldsDeclareNoNativeField) {
  for (const char* name : {"tiny-lexical", "tiny-probe"}) {
    auto tiny = LoadTiny(name);
    ASSERT_NE(tiny, nullptr);
    EXPECT_EQ(tiny->model->UseNativeField().status().code(), absl::StatusCode::kNotFound) << name;
  }
}

// ---- Abandonment -----------------------------------------------------------------------------

TEST(TorchExecutor, AbandonedRowLeavesAndStopsCosting) {
  auto tiny = LoadTiny("tiny-albert");
  ASSERT_NE(tiny, nullptr);
  TorchExecutor executor(tiny->model, tiny->layout);
  const auto solver = scheduler::Solver::kHeun;
  const int steps = 8;
  const int k = 3;  // row 1 is abandoned from the k-th poll (after iteration k) on
  // Row 1 is the longest, so the batch is also trimmed when it leaves.
  const std::vector<const tokenizer::EncodedText*> inputs = {&tiny->rows[0], &tiny->rows[3], &tiny->rows[2]};
  ExecBatch batch{solver, {}};
  std::vector<int> lengths;
  for (const auto* input : inputs) {
    batch.rows.push_back({input, steps, {}});
    lengths.push_back(static_cast<int>(input->ids.size()));
  }
  ASSERT_GT(lengths[1], std::max(lengths[0], lengths[2]));
  std::vector<int> polls(3, 0);
  RunResult run = RunBatch(executor, batch, [&](size_t row) { return ++polls.at(row) >= k && row == 1; });
  ASSERT_TRUE(run.stats.ok()) << run.stats.status();
  EXPECT_EQ(run.done_calls, (std::vector<int>{1, 0, 1}));
  EXPECT_TRUE(run.outputs[1].empty());
  EXPECT_EQ(polls[1], k) << "an abandoned row is not polled again";
  EXPECT_EQ(run.stats->iterations, steps);
  EXPECT_EQ(run.stats->padded_tokens, 3 * lengths[1]);
  const int64_t expected = ExpectedTokenEvaluations(lengths, {steps, k, steps}, 2);
  EXPECT_EQ(expected, int64_t{k} * 3 * lengths[1] * 2 + int64_t{steps - k} * 2 * std::max(lengths[0], lengths[2]) * 2);
  EXPECT_EQ(run.stats->token_evaluations, expected);

  // The rows that stayed are unaffected by their neighbour leaving.
  RunResult pair = RunBatch(executor, ExecBatch{solver, {batch.rows[0], batch.rows[2]}});
  ASSERT_TRUE(pair.stats.ok());
  EXPECT_LE(MaxAbsDiff(run.outputs[0], pair.outputs[0]), Tolerance(pair.outputs[0]));
  EXPECT_LE(MaxAbsDiff(run.outputs[2], pair.outputs[1]), Tolerance(pair.outputs[1]));
}

// ---- Translation -----------------------------------------------------------------------------

struct Translated {
  absl::StatusOr<ExecStats> stats;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> scores;
  std::vector<int> done_calls;
  std::vector<std::vector<std::vector<int32_t>>> partials;  // per row, in order
};

Translated Translate(TorchExecutor& executor, const ExecBatch& batch,
                     const scheduler::RowAbandonedFn& abandoned = [](size_t) { return false; }) {
  Translated result;
  result.tokens.resize(batch.rows.size());
  result.scores.assign(batch.rows.size(), 0);
  result.done_calls.assign(batch.rows.size(), 0);
  result.partials.resize(batch.rows.size());
  result.stats = executor.Run(
      batch,
      [&](size_t row, const scheduler::RowOutput& output) {
        if (output.partial) {
          EXPECT_EQ(result.done_calls.at(row), 0) << "partial output after the final one";
          result.partials.at(row).emplace_back(output.tokens.begin(), output.tokens.end());
          return;
        }
        result.tokens.at(row).assign(output.tokens.begin(), output.tokens.end());
        result.scores.at(row) = output.score;
        ++result.done_calls.at(row);
      },
      abandoned, nullptr);
  return result;
}

// Every translation test runs twice: with the module's scripted encoder field and decoder_field,
// and with both evaluated natively (parameter true).
class TranslationExecutorTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    tiny_ = LoadTranslator();
    ASSERT_NE(tiny_, nullptr);
    ASSERT_TRUE(tiny_->model->has_decoder());
    executor_ = std::make_unique<runtime::TranslationExecutor>(tiny_->model, tiny_->layout,
                                                               tiny_->config.translation().max_output_tokens());
  }
  std::unique_ptr<TinyModel> LoadTranslator(ComputePrecision precision = ComputePrecision::kFloat32) {
    auto tiny = LoadTiny("tiny-translator", precision);
    if (tiny == nullptr || !GetParam()) return tiny;
    absl::StatusOr<std::string> field = tiny->model->UseNativeField();
    absl::StatusOr<std::string> decoder = tiny->model->UseNativeDecoder();
    EXPECT_TRUE(field.ok()) << field.status();
    EXPECT_TRUE(decoder.ok()) << decoder.status();
    return field.ok() && decoder.ok() ? std::move(tiny) : nullptr;
  }
  ExecRow RowOf(size_t text, int encoder_steps, int decoder_steps, int beam, int max_output = 0) {
    return {&tiny_->rows[text], encoder_steps, scheduler::DecodeSpec{decoder_steps, beam, max_output, 1}};
  }
  std::unique_ptr<TinyModel> tiny_;
  std::unique_ptr<runtime::TranslationExecutor> executor_;
};

TEST_P(TranslationExecutorTest, EachRowTranslatesAsItWouldAlone) {
  // Rows of different lengths, encoder steps, decoder steps and beams share one batch (two
  // decoder groups, padding, rows finishing at different positions).
  const std::vector<ExecRow> rows = {RowOf(0, 4, 4, 1), RowOf(1, 2, 4, 1), RowOf(3, 4, 2, 3),
                                     RowOf(4, 1, 4, 1), RowOf(5, 4, 2, 3)};
  Translated together = Translate(*executor_, ExecBatch{scheduler::Solver::kEuler, rows});
  ASSERT_TRUE(together.stats.ok()) << together.stats.status();
  std::set<size_t> lengths;
  for (size_t r = 0; r < rows.size(); ++r) {
    Translated alone = Translate(*executor_, ExecBatch{scheduler::Solver::kEuler, {rows[r]}});
    ASSERT_TRUE(alone.stats.ok());
    EXPECT_EQ(together.done_calls[r], 1);
    EXPECT_EQ(together.tokens[r], alone.tokens[0]) << "row " << r;
    EXPECT_NEAR(together.scores[r], alone.scores[0], 1e-4) << "row " << r;
    lengths.insert(together.tokens[r].size());
  }
  EXPECT_GT(lengths.size(), 1u) << "rows must end at different positions for this test to mean anything";
}

TEST_P(TranslationExecutorTest, RowParallelDecodingMatchesOneThread) {
  // 5 rows x beam 3: 15 hypotheses per decoder call at first, enough to split.
  std::vector<ExecRow> rows;
  for (size_t text = 0; text < 5; ++text) rows.push_back(RowOf(text, 4, 4, 3));
  const ExecBatch batch{scheduler::Solver::kEuler, rows};
  Translated one_thread = Translate(*executor_, batch);
  ASSERT_TRUE(one_thread.stats.ok()) << one_thread.stats.status();

  ThreadingRestorer restore;
  ConfigureThreading(2, kDefaultParallelMinTokens, /*row_parallel=*/true);
  ASSERT_EQ(RowChunksFor(15, 15, kRowParallelMinHypotheses), 2);
  Translated split;
  const int64_t splits_before = RowChunkSplits();
  std::thread batcher([&] { split = Translate(*executor_, batch); });
  batcher.join();
  ASSERT_TRUE(split.stats.ok()) << split.stats.status();
  EXPECT_GT(RowChunkSplits(), splits_before) << "the decoder calls were never split";
  EXPECT_EQ(split.stats->decoder_row_evaluations, one_thread.stats->decoder_row_evaluations);
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(split.tokens[r], one_thread.tokens[r]) << "row " << r;
    EXPECT_NEAR(split.scores[r], one_thread.scores[r], 1e-4) << "row " << r;
  }
}

TEST_P(TranslationExecutorTest, LengthPenaltyRanksTheSameFinishedHypotheses) {
  // The search itself ranks raw log-probabilities; length_penalty only ranks the finished
  // hypotheses, by log-probability / tokens ^ penalty. So a larger penalty never picks a
  // shorter translation, and a translation that wins under two penalties carries the same
  // log-probability in both scores.
  constexpr int kMaxOutput = 24;
  const std::vector<float> penalties = {0.5f, 1.0f, 2.0f};
  std::vector<Translated> runs;
  for (const float penalty : penalties) {
    ExecBatch batch{scheduler::Solver::kEuler, {}};
    for (size_t text = 0; text < tiny_->rows.size(); ++text) {
      batch.rows.push_back({&tiny_->rows[text], 4, scheduler::DecodeSpec{4, 4, kMaxOutput, 1, penalty}});
    }
    runs.push_back(Translate(*executor_, batch));
    ASSERT_TRUE(runs.back().stats.ok()) << runs.back().stats.status();
  }
  int compared = 0;
  for (size_t r = 0; r < tiny_->rows.size(); ++r) {
    for (size_t p = 1; p < penalties.size(); ++p) {
      const auto& shorter = runs[p - 1].tokens[r];
      const auto& longer = runs[p].tokens[r];
      EXPECT_GE(longer.size(), shorter.size()) << "row " << r << " penalty " << penalties[p];
      if (shorter != longer) continue;
      // Generated tokens, EOS counted unless the row ran into its output limit.
      const double tokens = static_cast<double>(shorter.size()) + (shorter.size() < size_t{kMaxOutput} ? 1 : 0);
      const double log_probability_before = runs[p - 1].scores[r] * std::pow(tokens, penalties[p - 1]);
      const double log_probability_after = runs[p].scores[r] * std::pow(tokens, penalties[p]);
      EXPECT_NEAR(log_probability_after, log_probability_before, 1e-4 * std::abs(log_probability_before))
          << "row " << r << " penalty " << penalties[p];
      EXPECT_LT(log_probability_after, 0.0);
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << "no row kept its translation across penalties: the score check never ran";
}

TEST_P(TranslationExecutorTest, GreedyRowsReportTheirTokensAsTheyComeBeamRowsDoNot) {
  Translated run = Translate(*executor_, ExecBatch{scheduler::Solver::kEuler,
                                                   {RowOf(0, 4, 4, 1, 12), RowOf(1, 4, 4, 3, 12)}});
  ASSERT_TRUE(run.stats.ok());
  EXPECT_TRUE(run.partials[1].empty()) << "a beam's best hypothesis changes: nothing partial to report";
  const auto& partials = run.partials[0];
  const auto& final_tokens = run.tokens[0];
  ASSERT_FALSE(final_tokens.empty());
  // One partial per position that did not end the row, each one token longer, each a prefix.
  EXPECT_EQ(partials.size(), final_tokens.size() == 12u ? 11u : final_tokens.size());
  for (size_t i = 0; i < partials.size(); ++i) {
    ASSERT_EQ(partials[i].size(), i + 1);
    EXPECT_TRUE(std::equal(partials[i].begin(), partials[i].end(), final_tokens.begin())) << i;
  }
}

TEST_P(TranslationExecutorTest, OutputLimitAndCostCountersAreExact) {
  const int steps = 3;
  Translated run = Translate(*executor_, ExecBatch{scheduler::Solver::kEuler, {RowOf(1, 4, steps, 1, 5), RowOf(3, 4, steps, 1, 2)}});
  ASSERT_TRUE(run.stats.ok());
  EXPECT_LE(run.tokens[0].size(), 5u);
  EXPECT_LE(run.tokens[1].size(), 2u);
  // Greedy: a row that generated n tokens ran n + 1 positions if it ended by EOS, n if it hit
  // its limit; each position runs `steps` field calls over the rows still live.
  auto positions = [](size_t generated, int limit) { return generated == size_t(limit) ? int(generated) : int(generated) + 1; };
  const int p0 = positions(run.tokens[0].size(), 5), p1 = positions(run.tokens[1].size(), 2);
  EXPECT_EQ(run.stats->decoder_calls, int64_t{steps} * std::max(p0, p1));
  EXPECT_EQ(run.stats->decoder_row_evaluations, int64_t{steps} * (p0 + p1));
  EXPECT_GT(run.stats->decoder_seconds, 0.0);
  EXPECT_LE(run.stats->decoder_seconds, run.stats->seconds) << "the search is part of the run";
}

TEST_P(TranslationExecutorTest, AbandonedRowLeavesAtTheNextPosition) {
  // Rows are polled after each encoder iteration they continue past (encoder_steps - 1 polls),
  // then after each decoder position; row 1 is abandoned after `positions` decoder positions.
  const int encoder_steps = 4, steps = 4, positions = 2;
  const int k = (encoder_steps - 1) + positions;
  // Row 1 is a text whose translation outlives the abandonment (the random test model ends some
  // texts at once).
  size_t long_text = tiny_->rows.size();
  for (size_t text = 0; text < tiny_->rows.size() && long_text == tiny_->rows.size(); ++text) {
    Translated alone = Translate(*executor_, ExecBatch{scheduler::Solver::kEuler, {RowOf(text, encoder_steps, steps, 1, 12)}});
    if (alone.stats.ok() && alone.tokens[0].size() > size_t{positions}) long_text = text;
  }
  ASSERT_LT(long_text, tiny_->rows.size()) << "no test text translates to more than " << positions << " tokens";
  const ExecBatch batch{scheduler::Solver::kEuler,
                        {RowOf(0, encoder_steps, steps, 1, 12), RowOf(long_text, encoder_steps, steps, 1, 12)}};
  Translated full = Translate(*executor_, batch);
  ASSERT_TRUE(full.stats.ok());
  std::vector<int> polls(2, 0);
  Translated run = Translate(*executor_, batch, [&](size_t row) { return ++polls.at(row) >= k && row == 1; });
  ASSERT_TRUE(run.stats.ok());
  EXPECT_EQ(run.done_calls, (std::vector<int>{1, 0}));
  EXPECT_EQ(polls[1], k) << "an abandoned row is not polled again";
  EXPECT_EQ(run.tokens[0], full.tokens[0]) << "the row that stayed is unaffected";
  const int p0 = full.tokens[0].size() == 12u ? 12 : int(full.tokens[0].size()) + 1;
  EXPECT_EQ(run.stats->decoder_row_evaluations, int64_t{steps} * (p0 + positions));
}

TEST_P(TranslationExecutorTest, Bfloat16SearchFinishesEveryRowWithFloat32Scores) {
  auto bf16 = LoadTranslator(ComputePrecision::kBFloat16);
  ASSERT_NE(bf16, nullptr);
  TranslationExecutor fast(bf16->model, bf16->layout, bf16->config.translation().max_output_tokens());
  const ExecBatch batch{scheduler::Solver::kEuler,
                        {{&bf16->rows[0], 4, {4, 1, 12, 1}}, {&bf16->rows[1], 2, {4, 1, 12, 1}},
                         {&bf16->rows[3], 4, {2, 3, 12, 1}}}};
  Translated run = Translate(fast, batch);
  ASSERT_TRUE(run.stats.ok()) << run.stats.status();
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    EXPECT_EQ(run.done_calls[r], 1) << r;
    EXPECT_FALSE(run.tokens[r].empty()) << r;
    EXPECT_LE(run.tokens[r].size(), 12u) << r;
    // Mean log-probabilities: finite and negative whatever the precision of the products.
    EXPECT_TRUE(std::isfinite(run.scores[r])) << r;
    EXPECT_LT(run.scores[r], 0.0f) << r;
  }
}

TEST_P(TranslationExecutorTest, Bfloat16WeightsStoredAtLoadTranslateBitIdentically) {
  auto stored = LoadTranslator(ComputePrecision::kBFloat16);
  auto cast_per_call = LoadTranslator(ComputePrecision::kBFloat16);
  ASSERT_NE(stored, nullptr);
  ASSERT_NE(cast_per_call, nullptr);
  absl::StatusOr<TorchModel::StoredWeights> weights = stored->model->StoreProductWeightsInBfloat16();
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_GT(weights->tensors, 0);
  const int max_output = stored->config.translation().max_output_tokens();
  TranslationExecutor fast(stored->model, stored->layout, max_output);
  TranslationExecutor reference(cast_per_call->model, cast_per_call->layout, max_output);
  const ExecBatch batch{scheduler::Solver::kEuler,
                        {{&stored->rows[0], 4, {4, 1, 12, 1}}, {&stored->rows[1], 2, {2, 3, 12, 1}},
                         {&stored->rows[3], 4, {4, 3, 12, 1}}}};
  Translated want = Translate(reference, batch);
  Translated got = Translate(fast, batch);
  ASSERT_TRUE(want.stats.ok()) << want.stats.status();
  ASSERT_TRUE(got.stats.ok()) << got.stats.status();
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    EXPECT_EQ(got.tokens[r], want.tokens[r]) << "row " << r;
    EXPECT_EQ(got.scores[r], want.scores[r]) << "row " << r;
  }
}

TEST_P(TranslationExecutorTest, NativeBlocksTranslateLikeTheScript) {
  if (!GetParam()) GTEST_SKIP() << "compares the native instance with the script";
  auto script = LoadTiny("tiny-translator");
  ASSERT_NE(script, nullptr);
  runtime::TranslationExecutor reference(script->model, script->layout, script->config.translation().max_output_tokens());
  std::vector<ExecRow> rows;
  for (size_t text = 0; text < tiny_->rows.size(); ++text) rows.push_back(RowOf(text, 4, 4, text % 2 == 0 ? 1 : 3));
  Translated want = Translate(reference, ExecBatch{scheduler::Solver::kEuler, rows});
  Translated got = Translate(*executor_, ExecBatch{scheduler::Solver::kEuler, rows});
  ASSERT_TRUE(want.stats.ok()) << want.stats.status();
  ASSERT_TRUE(got.stats.ok()) << got.stats.status();
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(got.tokens[r], want.tokens[r]) << "row " << r;
    EXPECT_NEAR(got.scores[r], want.scores[r], 1e-4) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(ScriptAndNative, TranslationExecutorTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "native" : "script"; });

// The bundled translator declares both blocks: decoded natively, greedy and beam 4, it writes
// the script's tokens with the script's scores.
TEST(BundledTranslator, NativeBlocksTranslateLikeTheScript) {
  const fs::path dir = ODESERVE_BUNDLED_TRANSLATOR;
  auto script = LoadModelIn(dir, ComputePrecision::kFloat32);
  auto native = LoadModelIn(dir, ComputePrecision::kFloat32);
  ASSERT_NE(script, nullptr);
  ASSERT_NE(native, nullptr);
  ASSERT_TRUE(native->model->UseNativeField().ok());
  absl::StatusOr<std::string> decoder = native->model->UseNativeDecoder();
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const int max_output = script->config.translation().max_output_tokens();
  runtime::TranslationExecutor slow(script->model, script->layout, max_output);
  runtime::TranslationExecutor fast(native->model, native->layout, max_output);
  const int encoder = script->depth, decoder_depth = script->config.translation().decoder_trained_depth();
  for (const int beam : {1, 4}) {
    ExecBatch batch{scheduler::Solver::kEuler, {}};
    for (const auto& row : script->rows) batch.rows.push_back({&row, encoder, scheduler::DecodeSpec{decoder_depth, beam, 0, 1}});
    Translated want = Translate(slow, batch);
    Translated got = Translate(fast, batch);
    ASSERT_TRUE(want.stats.ok()) << want.stats.status();
    ASSERT_TRUE(got.stats.ok()) << got.stats.status();
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      EXPECT_FALSE(want.tokens[r].empty());
      EXPECT_EQ(got.tokens[r], want.tokens[r]) << "beam " << beam << " row " << r;
      EXPECT_NEAR(got.scores[r], want.scores[r], 1e-4) << "beam " << beam << " row " << r;
    }
  }
}

TEST(TranslationLogits, ShortlistRunsOnlyWithNativeBfloat16AndAgreesWithFloat32) {
  const fs::path dir = ODESERVE_BUNDLED_TRANSLATOR;
  auto config = repository::LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto loaded = TorchModel::Load((dir / config->torchscript_file()).string(), torch::Device(torch::kCPU),
                                 config->trained_depth(), config->translation().decoder_trained_depth());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  TorchModel& model = **loaded;
  ASSERT_GT(model.exported_logit_shortlist(), 0) << "the bundled translator is exported with a shortlist";
  const bool native = NativeBfloat16(torch::Device(torch::kCPU));
  EXPECT_EQ(model.logit_shortlist(), native ? model.exported_logit_shortlist() : 0)
      << "emulated bfloat16 is slower than float32: Load turns the shortlist off without native support";

  c10::InferenceMode guard;
  // The decoder's input states of six tokens (the projection takes any [N, 1, H]).
  const torch::Tensor tokens = torch::tensor(std::vector<int64_t>{model.bos_id(), 100, 200, 300, 400, 500});
  const torch::Tensor positions = torch::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  const torch::Tensor g = model.DecoderInputUnchecked(tokens, positions);
  model.UseLogitShortlist(true);
  EXPECT_EQ(model.logit_shortlist(), model.exported_logit_shortlist());
  const torch::Tensor shortlist = model.DecoderLogitsUnchecked(g);
  model.UseLogitShortlist(false);
  EXPECT_EQ(model.logit_shortlist(), 0);
  const torch::Tensor exact = model.DecoderLogitsUnchecked(g);
  ASSERT_EQ(shortlist.sizes(), exact.sizes());
  EXPECT_GT(MaxAbsDiff(shortlist, exact), 0.0) << "the two projections must differ: the switch took effect";
  // The shortlist's candidates carry exact logits; only the normalizer sees the bfloat16 tail.
  EXPECT_LE(MaxAbsDiff(std::get<0>(shortlist.topk(4)), std::get<0>(exact.topk(4))), 5e-3);
  EXPECT_TRUE(torch::equal(std::get<1>(shortlist.topk(4)), std::get<1>(exact.topk(4))));
}

TEST(TorchExecutor, AllRowsAbandonedEndsTheRunAtOnce) {
  auto tiny = LoadTiny("tiny-albert");
  ASSERT_NE(tiny, nullptr);
  TorchExecutor executor(tiny->model, tiny->layout);
  ExecBatch batch{scheduler::Solver::kEuler, {{&tiny->rows[0], 8, {}}, {&tiny->rows[1], 8, {}}}};
  RunResult run = RunBatch(executor, batch, [](size_t) { return true; });
  ASSERT_TRUE(run.stats.ok());
  EXPECT_EQ(run.done_calls, (std::vector<int>{0, 0}));
  EXPECT_EQ(run.stats->iterations, 1);
  EXPECT_EQ(run.stats->token_evaluations, run.stats->padded_tokens);
}

// Between two steps the executor calls the scheduler's yield (which may lend the compute gate
// to another model), once per boundary, and leaves the time it waited out of its seconds.
TEST(TorchExecutor, YieldsBetweenStepsAndLeavesTheWaitOutOfItsSeconds) {
  auto tiny = LoadTiny("tiny-albert");
  ASSERT_NE(tiny, nullptr);
  TorchExecutor executor(tiny->model, tiny->layout);
  ExecBatch batch{scheduler::Solver::kEuler, {{&tiny->rows[0], 4, {}}, {&tiny->rows[1], 2, {}}}};
  int yields = 0;
  batch.yield = [&yields] {
    ++yields;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return absl::Milliseconds(100);
  };
  const auto started = std::chrono::steady_clock::now();
  RunResult run = RunBatch(executor, batch);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(run.stats.ok());
  EXPECT_EQ(yields, 3) << "one per boundary with rows still running (after steps 1, 2 and 3 of 4)";
  EXPECT_DOUBLE_EQ(run.stats->paused_seconds, 0.3);
  EXPECT_LT(run.stats->seconds, wall - 0.29);
}

TEST_P(TranslationExecutorTest, YieldsBetweenDecoderPositionsAndLeavesTheWaitOutOfItsSeconds) {
  const int encoder_steps = 2, steps = 2;
  ExecBatch batch{scheduler::Solver::kEuler, {RowOf(1, encoder_steps, steps, 1, 4)}};
  int yields = 0;
  batch.yield = [&yields] {
    ++yields;
    return absl::Milliseconds(50);  // as if it had waited; the executor trusts the scheduler
  };
  Translated run = Translate(*executor_, batch);
  ASSERT_TRUE(run.stats.ok());
  // One between the two encoder steps, then one before each decoder position after the first.
  const int positions = static_cast<int>(run.stats->decoder_calls / steps);
  EXPECT_EQ(yields, 1 + (positions - 1));
  EXPECT_DOUBLE_EQ(run.stats->paused_seconds, 0.05 * yields);
}

TEST(TorchExecutor, EmptyBatchCostsNothing) {
  auto tiny = LoadTiny("tiny-albert");
  ASSERT_NE(tiny, nullptr);
  TorchExecutor executor(tiny->model, tiny->layout);
  RunResult run = RunBatch(executor, ExecBatch{});
  ASSERT_TRUE(run.stats.ok());
  EXPECT_EQ(run.stats->token_evaluations, 0);
  EXPECT_EQ(run.stats->iterations, 0);
}

// ---- Solver orders ---------------------------------------------------------------------------

double ObservedOrder(scheduler::Solver solver, const VectorField& field, const torch::Tensor& h0,
                     const torch::Tensor& exact, int n) {
  const double coarse = MaxAbsDiff(Integrate(solver, field, h0, 1.0, n), exact);
  const double fine = MaxAbsDiff(Integrate(solver, field, h0, 1.0, 2 * n), exact);
  return std::log2(coarse / fine);
}

TEST(Solvers, ConvergenceOrdersOnALinearField) {
  torch::manual_seed(11);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor A = torch::randn({6, 6}, f64) * 0.5;
  const torch::Tensor h0 = torch::randn({3, 6}, f64);
  const VectorField field = [&](const torch::Tensor& h) { return torch::matmul(h, A); };
  // dh/dt = h A  =>  h(1) = h0 exp(A).
  const torch::Tensor exact = torch::matmul(h0, torch::matrix_exp(A));
  EXPECT_NEAR(ObservedOrder(scheduler::Solver::kEuler, field, h0, exact, 32), 1.0, 0.3);
  EXPECT_NEAR(ObservedOrder(scheduler::Solver::kHeun, field, h0, exact, 16), 2.0, 0.3);
  EXPECT_NEAR(ObservedOrder(scheduler::Solver::kRk4, field, h0, exact, 8), 4.0, 0.3);
  // And the errors themselves shrink in the expected ranking at equal evaluations (16).
  const double euler = MaxAbsDiff(Integrate(scheduler::Solver::kEuler, field, h0, 1.0, 16), exact);
  const double heun = MaxAbsDiff(Integrate(scheduler::Solver::kHeun, field, h0, 1.0, 8), exact);
  const double rk4 = MaxAbsDiff(Integrate(scheduler::Solver::kRk4, field, h0, 1.0, 4), exact);
  EXPECT_LT(heun, euler);
  EXPECT_LT(rk4, heun);
}

TEST(Solvers, ConvergenceOrdersOnATanhField) {
  torch::manual_seed(5);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor W = torch::randn({8, 8}, f64) * 0.6;
  const torch::Tensor h0 = torch::randn({4, 8}, f64);
  const VectorField field = [&](const torch::Tensor& h) { return torch::tanh(torch::matmul(h, W)); };
  const torch::Tensor reference = Integrate(scheduler::Solver::kRk4, field, h0, 1.0, 2048);
  EXPECT_NEAR(ObservedOrder(scheduler::Solver::kEuler, field, h0, reference, 32), 1.0, 0.3);
  EXPECT_NEAR(ObservedOrder(scheduler::Solver::kHeun, field, h0, reference, 16), 2.0, 0.3);
  EXPECT_NEAR(ObservedOrder(scheduler::Solver::kRk4, field, h0, reference, 8), 4.0, 0.3);
}

TEST(Threading, SmallCallsRunOnOneThreadAndOnlyTheCallingThreadChanges) {
  ThreadingRestorer restore;
  const ThreadingReport report = ConfigureThreading(2, /*parallel_min_tokens=*/64);
  EXPECT_EQ(report.parallel_min_tokens, 64);
  EXPECT_THAT(report.summary(), HasSubstr("parallel_min_tokens=64"));
  EXPECT_EQ(IntraOpThreadsFor(63), 1);
  EXPECT_EQ(IntraOpThreadsFor(64), 2);
  EXPECT_EQ(IntraOpThreadsFor(64, /*leave_cores_for_rpc=*/true), 1);
  EXPECT_TRUE(LeaveCoresForRpc(/*busy=*/true, kRpcBoundRowTokenEvaluations - 1));
  EXPECT_FALSE(LeaveCoresForRpc(/*busy=*/true, kRpcBoundRowTokenEvaluations)) << "rows with this much compute keep every thread";
  EXPECT_FALSE(LeaveCoresForRpc(/*busy=*/false, 1)) << "an idle server keeps every thread";
  int small = 0, large = 0, busy = 0, restored = 0;
  std::thread batcher([&] {
    {
      IntraOpThreadsScope scope;
      SetIntraOpThreadsFor(63);
      small = at::get_num_threads();
      SetIntraOpThreadsFor(64);
      large = at::get_num_threads();
      SetIntraOpThreadsFor(64, /*leave_cores_for_rpc=*/true);
      busy = at::get_num_threads();
      SetIntraOpThreadsFor(1);
    }
    restored = at::get_num_threads();
  });
  batcher.join();
  EXPECT_EQ(small, 1);
  EXPECT_EQ(large, 2);
  EXPECT_EQ(busy, 1);
  EXPECT_EQ(restored, 2) << "the scope restores the thread's count";
  EXPECT_EQ(at::get_num_threads(), 2) << "another thread's count is its own";
}

TEST(Solvers, EachRowUsesItsOwnStepSize) {
  torch::manual_seed(3);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor W = torch::randn({5, 5}, f64);
  const VectorField field = [&](const torch::Tensor& h) { return torch::tanh(torch::matmul(h, W)); };
  const torch::Tensor h = torch::randn({3, 2, 5}, f64);  // [B, T, H] like the models
  const torch::Tensor dt = torch::tensor({0.5, 0.25, 2.0}, f64);
  for (const auto solver : {scheduler::Solver::kEuler, scheduler::Solver::kHeun, scheduler::Solver::kRk4}) {
    const torch::Tensor together = SolverStep(solver, field, h, dt);
    for (int64_t b = 0; b < 3; ++b) {
      const torch::Tensor alone = SolverStep(solver, field, h.slice(0, b, b + 1), dt.slice(0, b, b + 1));
      EXPECT_LE(MaxAbsDiff(together.slice(0, b, b + 1), alone), 1e-12) << scheduler::SolverName(solver) << " row " << b;
    }
  }
  // Euler is h + dt f(h) exactly.
  const torch::Tensor euler = SolverStep(scheduler::Solver::kEuler, field, h, dt);
  EXPECT_LE(MaxAbsDiff(euler, h + dt.view({3, 1, 1}) * field(h)), 1e-15);
  // Field evaluations per step: 1, 2, 4.
  for (const auto& [solver, want] : std::vector<std::pair<scheduler::Solver, int>>{
           {scheduler::Solver::kEuler, 1}, {scheduler::Solver::kHeun, 2}, {scheduler::Solver::kRk4, 4}}) {
    int calls = 0;
    const VectorField counting = [&](const torch::Tensor& s) {
      ++calls;
      return field(s);
    };
    SolverStep(solver, counting, h, dt);
    EXPECT_EQ(calls, want) << scheduler::SolverName(solver);
    EXPECT_EQ(scheduler::EvaluationsPerStep(solver), want);
  }
}

// ---- Devices and load errors -----------------------------------------------------------------

TEST(ParseDevice, CpuCudaAndNonsense) {
  auto cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->is_cpu());

  auto tpu = ParseDevice("tpu");
  EXPECT_EQ(tpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tpu.status().message()), HasSubstr("'tpu'"));
  EXPECT_EQ(ParseDevice("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDevice("CPU ").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDevice("cudax").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDevice("cuda:x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDevice("cuda:").status().code(), absl::StatusCode::kInvalidArgument);  // no index

  if (torch::cuda::is_available()) {
    for (const char* spec : {"cuda", "cuda:0"}) {
      auto cuda = ParseDevice(spec);
      ASSERT_TRUE(cuda.ok()) << spec << ": " << cuda.status();
      EXPECT_TRUE(cuda->is_cuda()) << spec;
      EXPECT_EQ(cuda->index(), 0) << spec;
    }
    const std::string past = "cuda:" + std::to_string(torch::cuda::device_count());
    auto missing = ParseDevice(past);
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument) << past;
    EXPECT_THAT(std::string(missing.status().message()), HasSubstr("CUDA devices"));
    return;
  }
  for (const char* spec : {"cuda", "cuda:0", "cuda:3"}) {
    auto cuda = ParseDevice(spec);
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << spec;
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr(std::string("'") + spec + "'"));
  }
}

class LoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("odeserve-runtime-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LoadErrors, NotTorchScriptIsInvalidArgumentNamingTheFile) {
  const std::string path = (dir_ / "model.pt").string();
  std::ofstream(path) << "this is not a TorchScript archive\n";
  auto model = TorchModel::Load(path, torch::Device(torch::kCPU), 4);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(path));

  const std::string missing = (dir_ / "missing.pt").string();
  model = TorchModel::Load(missing, torch::Device(torch::kCPU), 4);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(missing));
}

TEST_F(LoadErrors, TrainedDepthMismatchIsInvalidArgument) {
  const std::string path = (kRepository / "tiny-albert" / "model.pt").string();
  auto model = TorchModel::Load(path, torch::Device(torch::kCPU), 6);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("trained_depth 4 differs from config trained_depth 6"));
}

TEST_F(LoadErrors, MissingMethodsAndAttributeAreNamed) {
  const std::string partial = (dir_ / "partial.pt").string();
  {
    torch::jit::Module module("Partial");
    module.define("def forward(self, x: Tensor, mask: Tensor) -> Tensor:\n  return x\n");
    module.save(partial);
  }
  auto model = TorchModel::Load(partial, torch::Device(torch::kCPU), 4);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(partial));
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("lacks method 'input_stage()'"));

  const std::string no_depth = (dir_ / "no_depth.pt").string();
  {
    torch::jit::Module module("NoDepth");
    module.define(
        "def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:\n  return x\n"
        "def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:\n  return h\n"
        "def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:\n  return h\n"
        "def forward(self, x: Tensor, mask: Tensor) -> Tensor:\n  return x\n");
    module.save(no_depth);
  }
  model = TorchModel::Load(no_depth, torch::Device(torch::kCPU), 4);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("lacks attribute 'trained_depth'"));
}

TEST_F(LoadErrors, AModelWhoseFieldFailsIsAnErrorNotACrash) {
  // A field that only accepts 1-row batches: the executor must report, not throw.
  const std::string path = (dir_ / "failing.pt").string();
  {
    torch::jit::Module module("Failing");
    module.register_attribute("trained_depth", c10::IntType::get(), 2);
    module.define(
        "def input_stage(self, x: Tensor, mask: Tensor) -> Tensor:\n"
        "  return x.float().unsqueeze(-1) * mask.unsqueeze(-1)\n"
        "def vector_field(self, h: Tensor, mask: Tensor) -> Tensor:\n"
        "  assert h.size(0) == 1, 'field exploded'\n"
        "  return -0.5 * h\n"
        "def output_stage(self, h: Tensor, mask: Tensor) -> Tensor:\n"
        "  return h.sum(1)\n"
        "def forward(self, x: Tensor, mask: Tensor) -> Tensor:\n"
        "  h = self.input_stage(x, mask)\n"
        "  for _ in range(2):\n"
        "    h = h + self.vector_field(h, mask)\n"
        "  return self.output_stage(h, mask)\n");
    module.save(path);
  }
  auto loaded = TorchModel::Load(path, torch::Device(torch::kCPU), 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = std::shared_ptr<TorchModel>(std::move(*loaded));
  TorchExecutor executor(model, InputLayout{});
  tokenizer::EncodedText a, b;
  a.ids = {4, 2};
  b.ids = {1};
  // One row: dh/dt = -h/2 with RK4 over t in [0, 2]: h(2) = h0 e^-1, summed over tokens.
  RunResult one = RunBatch(executor, ExecBatch{scheduler::Solver::kRk4, {{&a, 16, {}}}});
  ASSERT_TRUE(one.stats.ok()) << one.stats.status();
  ASSERT_EQ(one.outputs[0].size(), 1u);
  EXPECT_NEAR(one.outputs[0][0], 6.0 * std::exp(-1.0), 1e-5);
  // Two rows: the field throws inside the executor.
  RunResult two = RunBatch(executor, ExecBatch{scheduler::Solver::kEuler, {{&a, 2, {}}, {&b, 2, {}}}});
  ASSERT_FALSE(two.stats.ok());
  EXPECT_EQ(two.stats.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(two.stats.status().message()), HasSubstr("field exploded"));
  EXPECT_EQ(two.done_calls, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace odeserve::runtime
