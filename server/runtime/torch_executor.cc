#include "server/runtime/torch_executor.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "server/runtime/solvers.h"

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

void TorchExecutor::Integrate(const scheduler::ExecBatch& batch,
                              const scheduler::RowAbandonedFn& abandoned, scheduler::ExecStats& stats,
                              const FinishedRowsFn& on_finished) {
  auto [x, mask] = MakeInputs(batch.rows);
  stats.padded_tokens = mask.numel();
  // The ODE state stays float32 whatever the compute precision: bfloat16 steps would round
  // away small updates of the shared block, and steps accumulate.
  torch::Tensor h = model_->InputStageUnchecked(x, mask).to(torch::kFloat32);

  // Rows still in the batch, as indices into batch.rows, aligned with h's first dimension.
  std::vector<size_t> active(batch.rows.size());
  std::iota(active.begin(), active.end(), 0);
  std::vector<double> dt_values;
  for (const auto& row : batch.rows) dt_values.push_back(double(model_->trained_depth()) / row.steps);
  torch::Tensor dt = torch::tensor(dt_values, torch::kFloat64).to(h.device());

  const int evaluations = scheduler::EvaluationsPerStep(batch.solver);
  int iteration = 0;
  while (!active.empty()) {
    torch::Tensor current_mask = mask;
    const VectorField field = [&](const torch::Tensor& state) {
      return model_->VectorFieldUnchecked(state, current_mask);
    };
    h = SolverStep(batch.solver, field, h, dt);
    stats.token_evaluations += mask.numel() * evaluations;
    ++iteration;

    std::vector<int64_t> finished, kept;
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t row = active[i];
      if (batch.rows[row].steps <= iteration) {
        finished.push_back(static_cast<int64_t>(i));
      } else if (!abandoned(row)) {
        kept.push_back(static_cast<int64_t>(i));
      }
    }
    if (!finished.empty()) {
      const torch::Tensor index = torch::tensor(finished, torch::kInt64).to(h.device());
      std::vector<size_t> rows;
      for (int64_t i : finished) rows.push_back(active[i]);
      on_finished(rows, h.index_select(0, index), mask.index_select(0, index));
    }
    if (kept.size() == active.size()) continue;
    std::vector<size_t> next_active;
    int64_t longest = 0;
    for (int64_t i : kept) {
      next_active.push_back(active[i]);
      longest = std::max<int64_t>(longest, RowLength(batch.rows[active[i]]));
    }
    active.swap(next_active);
    if (active.empty()) break;
    const torch::Tensor index = torch::tensor(kept, torch::kInt64).to(h.device());
    longest = scheduler::PaddedLength(longest, layout_.pad_to_multiple, layout_.max_length);
    h = h.index_select(0, index).narrow(1, 0, longest).contiguous();
    mask = mask.index_select(0, index).narrow(1, 0, longest).contiguous();
    dt = dt.index_select(0, index);
  }
  stats.iterations = iteration;
}

absl::StatusOr<scheduler::ExecStats> TorchExecutor::Run(const scheduler::ExecBatch& batch,
                                                        const scheduler::RowDoneFn& on_done,
                                                        const scheduler::RowAbandonedFn& abandoned) {
  const auto started = std::chrono::steady_clock::now();
  scheduler::ExecStats stats;
  if (batch.rows.empty()) return stats;
  try {
    c10::InferenceMode guard;
    PrecisionScope precision(model_->precision(), model_->device());
    Integrate(batch, abandoned, stats,
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
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return stats;
}

}  // namespace odeserve::runtime
