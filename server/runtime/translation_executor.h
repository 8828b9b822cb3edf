#pragma once
// Runs translation batches: the encoder ODE exactly as TorchExecutor runs it (each row with its
// own encoder steps), then beam search over the decoder ODE. Rows are decoded in groups of equal
// (decoder steps, beam size); inside a group every hypothesis advances one position per
// iteration, each position running `decoder_steps` Euler steps of the shared decoder block with
// a self-attention KV cache per step index. Cross-attention keys/values are computed once per
// row (the block's weights are shared, so every step index sees the same ones).
//
// Search: at each position the top 2K continuations of the K live hypotheses are ranked; an EOS
// among the first K finishes a hypothesis (score = log-probability / generated_tokens ^
// length_penalty, EOS counted), the best non-EOS ones fill the next beam. A row is done once K
// hypotheses have finished or it reaches its max_output_tokens (live hypotheses are then
// finished as they are); the best finished score wins. K = 1 is greedy decoding. Finished and abandoned rows
// leave the group at once.

#include <memory>

#include "server/runtime/torch_executor.h"

namespace odeserve::runtime {

class TranslationExecutor : public TorchExecutor {
 public:
  /// `model` must have a decoder (TorchModel::has_decoder()); `max_output_tokens` is the
  /// model's limit, applied to rows that do not set their own.
  TranslationExecutor(std::shared_ptr<TorchModel> model, InputLayout layout, int max_output_tokens);

  absl::StatusOr<scheduler::ExecStats> Run(const scheduler::ExecBatch& batch,
                                           const scheduler::RowDoneFn& on_done,
                                           const scheduler::RowAbandonedFn& abandoned,
                                           const scheduler::RowJoinFn& join) override;
  /// Rows never join: a batch's encoder and decoder run as one unit, and `join` is not called.
  bool AcceptsJoins() const override { return false; }

 private:
  /// Beam search for `rows` (indices into batch.rows) sharing decoder steps and beam size.
  void DecodeGroup(const scheduler::ExecBatch& batch, const std::vector<size_t>& rows,
                   const std::vector<torch::Tensor>& memories, const scheduler::RowDoneFn& on_done,
                   const scheduler::RowAbandonedFn& abandoned, scheduler::ExecStats& stats);

  int max_output_tokens_;
};

}  // namespace odeserve::runtime
