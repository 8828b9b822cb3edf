#pragma once
// Runs scheduler batches on a TorchModel: pads rows into tensors, runs the input stage, steps
// every row through the shared block with its own dt = L / steps, and hands each row to the
// scheduler the moment its steps are done; finished and abandoned rows leave the batch, the
// batch is re-trimmed to its longest remaining row, and queued rows may join at a step boundary.

#include <functional>
#include <memory>
#include <vector>

#include "server/runtime/torch_model.h"
#include "server/scheduler/executor.h"

namespace odeserve::runtime {

struct InputLayout {
  bool hashed = false;  // float [B, T, feature_dim] features instead of int64 [B, T] ids
  int feature_dim = 0;
  int64_t pad_id = 0;
  // Batches are padded to a multiple of this many tokens, at most max_length (PaddedLength).
  int pad_to_multiple = 1;
  int64_t max_length = 0;
};

class TorchExecutor : public scheduler::BatchExecutor {
 public:
  TorchExecutor(std::shared_ptr<TorchModel> model, InputLayout layout);

  absl::StatusOr<scheduler::ExecStats> Run(const scheduler::ExecBatch& batch,
                                           const scheduler::RowDoneFn& on_done,
                                           const scheduler::RowAbandonedFn& abandoned,
                                           const scheduler::RowJoinFn& join) override;
  bool AcceptsJoins() const override { return true; }

  /// Builds the padded input tensors (on the model's device) for `rows`.
  std::pair<torch::Tensor, torch::Tensor> MakeInputs(
      const std::vector<scheduler::ExecRow>& rows) const;

 protected:
  /// Rows (indices into the batch) whose steps are done, with their states and masks.
  using FinishedRowsFn = std::function<void(const std::vector<size_t>& rows,
                                            const torch::Tensor& h, const torch::Tensor& mask)>;
  /// Input stage, then every row's own number of solver steps; finished rows are handed to
  /// `on_finished`, abandoned ones just leave, and rows `join` (may be empty) returns join at
  /// a step boundary. Each model call, `on_finished`'s included, runs on the intra-op thread
  /// count its shape calls for (SetIntraOpThreadsFor); the caller's count is restored after.
  /// Fills the encoder fields of `stats`. Throws c10::Error; callers hold InferenceMode and
  /// catch.
  void Integrate(const scheduler::ExecBatch& batch, const scheduler::RowAbandonedFn& abandoned,
                 const scheduler::RowJoinFn& join, scheduler::ExecStats& stats,
                 const FinishedRowsFn& on_finished);

  std::shared_ptr<TorchModel> model_;
  InputLayout layout_;
};

}  // namespace odeserve::runtime
