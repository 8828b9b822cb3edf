#include "server/runtime/torch_executor.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "server/runtime/solvers.h"
#include "server/runtime/threading.h"

namespace odeserve::runtime {
namespace {

int RowLength(const scheduler::ExecRow& row) { return static_cast<int>(row.input->ids.size()); }

}  // namespace

TorchExecutor::TorchExecutor(std::shared_ptr<TorchModel> model, InputLayout layout)
    : model_(std::move(model)), layout_(layout) {}

std::pair<torch::Tensor, torch::Tensor> TorchExecutor::MakeInputs(
    const std::vector<scheduler::ExecRow>& rows) const {
  const int64_t batch = static_cast<int64_t>(rows.size());
  int64_t length = 0;
  for (const auto& row : rows) length = std::max<int64_t>(length, RowLength(row));
  length = scheduler::PaddedLength(length, layout_.pad_to_multiple, layout_.max_length);
  torch::Tensor mask = torch::zeros({batch, length}, torch::kFloat32);
  auto mask_data = mask.accessor<float, 2>();
  torch::Tensor x;
  if (layout_.hashed) {
    const int64_t dim = layout_.feature_dim;
    x = torch::zeros({batch, length, dim}, torch::kFloat32);
    float* data = x.data_ptr<float>();
    for (int64_t b = 0; b < batch; ++b) {
      const auto& features = rows[b].input->features;
      std::copy(features.begin(), features.end(), data + b * length * dim);
    }
  } else {
    x = torch::full({batch, length}, layout_.pad_id, torch::kInt64);
    int64_t* data = x.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      const auto& ids = rows[b].input->ids;
      std::copy(ids.begin(), ids.end(), data + b * length);
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int t = 0; t < RowLength(rows[b]); ++t) mask_data[b][t] = 1.0f;
  }
  const auto& device = model_->device();
  if (device.is_cpu()) return {x, mask};
  return {x.to(device, /*non_blocking=*/false), mask.to(device)};
}

namespace {

// `t` ([B, T, ...]) zero-padded along dim 1 to `length` tokens.
torch::Tensor PadTokens(const torch::Tensor& t, int64_t length) {
  if (t.size(1) == length) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[1] = length;
  torch::Tensor padded = torch::zeros(shape, t.options());
  padded.narrow(1, 0, t.size(1)).copy_(t);
  return padded;
}

}  // namespace

void TorchExecutor::Integrate(const scheduler::ExecBatch& batch,
                              const scheduler::RowAbandonedFn& abandoned, const scheduler::RowJoinFn& join,
                              scheduler::ExecStats& stats, const FinishedRowsFn& on_finished) {
  // Every row of the run, indexed as the callbacks see them: the batch's, then joined ones.
  std::vector<scheduler::ExecRow> rows = batch.rows;
  std::vector<int> joined_after(rows.size(), 0);  // the step boundary each row joined at
  // Every model call below picks its thread count from its own shape; the caller's count is
  // back when the encoder is done.
  IntraOpThreadsScope threads;
  auto [x, mask] = MakeInputs(rows);
  stats.padded_tokens = mask.numel();
  const int evaluations = scheduler::EvaluationsPerStep(batch.solver);
  int most_steps = 1;
  for (const auto& row : rows) most_steps = std::max(most_steps, row.steps);
  // Decided once for the run, joined rows included.
  const bool leave_cores = LeaveCoresForRpc(batch.others_waiting || batch.arrivals_during_previous_batch,
                                            mask.size(1) * most_steps * evaluations);
  SetIntraOpThreadsFor(mask.numel(), leave_cores);
  // The ODE state stays float32 whatever the compute precision: bfloat16 steps would round
  // away small updates of the shared block, and steps accumulate.
  torch::Tensor h = model_->InputStageUnchecked(x, mask).to(torch::kFloat32);

  // Rows still in the batch, as indices into `rows`, aligned with h's first dimension.
  std::vector<size_t> active(rows.size());
  std::iota(active.begin(), active.end(), 0);
  auto step_sizes = [&](size_t first) {
    std::vector<double> values;
    for (size_t r = first; r < rows.size(); ++r) values.push_back(double(model_->trained_depth()) / rows[r].steps);
    return torch::tensor(values, torch::kFloat64).to(h.device());
  };
  torch::Tensor dt = step_sizes(0);

  int iteration = 0;
  // Float32 products on the CPU run on one OpenBLAS thread, so large calls split their rows
  // across the intra-op threads instead (RowChunksFor); bfloat16 (oneDNN) parallelizes inside.
  const bool row_parallel = model_->device().is_cpu() && model_->precision() == ComputePrecision::kFloat32;
  const RowChunkFn vector_field = [this](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{model_->VectorFieldUnchecked(in[0], in[1])};
  };
  while (!active.empty()) {
    torch::Tensor current_mask = mask;
    const int chunks = row_parallel ? RowChunksFor(h.size(0), mask.numel()) : 1;
    const VectorField field = [&](const torch::Tensor& state) {
      return EvaluateRowChunks(chunks, {state, current_mask}, vector_field)[0];
    };
    SetIntraOpThreadsFor(mask.numel(), leave_cores);
    {
      // A call too small for row ranges (one row, or under their token threshold; whatever
      // --row_parallel says) spreads its products over OpenBLAS's threads instead, unless calls
      // were waiting when the batch started: then the RPC threads need the other core
      // (measured: saturated one-row traffic lost up to 15% of throughput to the hand-over).
      BlasThreadsScope blas(row_parallel && !batch.others_waiting, h.size(0), mask.numel());
      h = SolverStep(batch.solver, field, h, dt);
    }
    stats.token_evaluations += mask.numel() * evaluations;
    ++iteration;

    std::vector<int64_t> finished, kept;
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t row = active[i];
      if (rows[row].steps <= iteration - joined_after[row]) {
        finished.push_back(static_cast<int64_t>(i));
      } else if (!abandoned(row)) {
        kept.push_back(static_cast<int64_t>(i));
      }
    }
    if (!finished.empty()) {
      const torch::Tensor index = torch::tensor(finished, torch::kInt64).to(h.device());
      std::vector<size_t> done;
      for (int64_t i : finished) done.push_back(active[i]);
      const torch::Tensor done_mask = mask.index_select(0, index);
      SetIntraOpThreadsFor(done_mask.numel(), leave_cores);
      on_finished(done, h.index_select(0, index), done_mask);
    }
    if (kept.size() != active.size()) {
      std::vector<size_t> next_active;
      int64_t longest = 0;
      for (int64_t i : kept) {
        next_active.push_back(active[i]);
        longest = std::max<int64_t>(longest, RowLength(rows[active[i]]));
      }
      active.swap(next_active);
      if (active.empty()) break;
      const torch::Tensor index = torch::tensor(kept, torch::kInt64).to(h.device());
      longest = scheduler::PaddedLength(longest, layout_.pad_to_multiple, layout_.max_length);
      h = h.index_select(0, index).narrow(1, 0, longest).contiguous();
      mask = mask.index_select(0, index).narrow(1, 0, longest).contiguous();
      dt = dt.index_select(0, index);
    }
    if (!active.empty()) stats.paused_seconds += scheduler::YieldBetweenSteps(batch);
    if (!join) continue;
    std::vector<scheduler::ExecRow> joined =
        join({static_cast<int>(active.size()), h.size(1), iteration});
    if (joined.empty()) continue;
    // Joined rows run the input stage on their own, then share the state tensor (zero-padded
    // to the longer of the two lengths: padded positions are masked out of attention).
    const size_t first = rows.size();
    rows.insert(rows.end(), joined.begin(), joined.end());
    joined_after.resize(rows.size(), iteration);
    auto [joined_x, joined_mask] = MakeInputs(joined);
    stats.padded_tokens += joined_mask.numel();
    SetIntraOpThreadsFor(joined_mask.numel(), leave_cores);
    const torch::Tensor joined_h = model_->InputStageUnchecked(joined_x, joined_mask).to(torch::kFloat32);
    const int64_t length = std::max(h.size(1), joined_h.size(1));
    h = torch::cat({PadTokens(h, length), PadTokens(joined_h, length)});
    mask = torch::cat({PadTokens(mask, length), PadTokens(joined_mask, length)});
    dt = torch::cat({dt, step_sizes(first)});
    for (size_t r = first; r < rows.size(); ++r) active.push_back(r);
  }
  stats.iterations = iteration;
}

absl::StatusOr<scheduler::ExecStats> TorchExecutor::Run(const scheduler::ExecBatch& batch,
                                                        const scheduler::RowDoneFn& on_done,
                                                        const scheduler::RowAbandonedFn& abandoned,
                                                        const scheduler::RowJoinFn& join) {
  const auto started = std::chrono::steady_clock::now();
  scheduler::ExecStats stats;
  if (batch.rows.empty()) return stats;
  try {
    c10::InferenceMode guard;
    PrecisionScope precision(model_->precision(), model_->device());
    Integrate(batch, abandoned, join, stats,
              [&](const std::vector<size_t>& rows, const torch::Tensor& h, const torch::Tensor& mask) {
                const torch::Tensor out =
                    model_->OutputStageUnchecked(h, mask).to(torch::kCPU, torch::kFloat32).contiguous();
                const int64_t width = out.size(1);
                const float* data = out.data_ptr<float>();
                for (size_t k = 0; k < rows.size(); ++k) {
                  scheduler::RowOutput output;
                  output.values = absl::MakeConstSpan(data + k * width, width);
                  on_done(rows[k], output);
                }
              });
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("model execution failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model execution failed: ", e.what()));
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() - stats.paused_seconds;
  return stats;
}

}  // namespace odeserve::runtime
