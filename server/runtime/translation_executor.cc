#include "server/runtime/translation_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "server/runtime/threading.h"

namespace odeserve::runtime {
namespace {

// A score no real hypothesis reaches: keeps the K-1 empty beams of a fresh row out of the
// first ranking without the NaNs that -inf arithmetic could produce.
constexpr float kDeadBeam = -1e9f;

struct Finished {
  std::vector<int32_t> tokens;
  float score = 0;  // log-probability / generated_tokens ^ length_penalty (EOS counted)
};

// Search state of one row of a group.
struct RowSearch {
  size_t row = 0;                           // index into batch.rows
  int max_output = 1;
  int min_output = 1;                       // EOS is no candidate before this many tokens
  float length_penalty = 1;
  std::vector<std::vector<int32_t>> beams;  // K live hypotheses (tokens so far)
  std::vector<float> scores;                // their summed log-probabilities
  std::vector<Finished> finished;
};

// The ranking score of a hypothesis of `tokens` generated tokens (EOS counted).
float Normalized(float log_probability, int64_t tokens, float length_penalty) {
  return length_penalty == 1 ? log_probability / float(tokens)
                             : log_probability / std::pow(float(tokens), length_penalty);
}

}  // namespace

TranslationExecutor::TranslationExecutor(std::shared_ptr<TorchModel> model, InputLayout layout,
                                         int max_output_tokens)
    : TorchExecutor(std::move(model), layout), max_output_tokens_(max_output_tokens) {}

absl::StatusOr<scheduler::ExecStats> TranslationExecutor::Run(const scheduler::ExecBatch& batch,
                                                              const scheduler::RowDoneFn& on_done,
                                                              const scheduler::RowAbandonedFn& abandoned,
                                                              const scheduler::RowJoinFn& /*join*/) {
  const auto started = std::chrono::steady_clock::now();
  scheduler::ExecStats stats;
  if (batch.rows.empty()) return stats;
  for (const auto& row : batch.rows) {
    if (row.decode.decoder_steps <= 0 || row.decode.beam_size <= 0) {
      return absl::InternalError("translation row without decoder steps or beam size");
    }
  }
  try {
    c10::InferenceMode guard;
    PrecisionScope precision(model_->precision(), model_->device());
    // Encoder: memory per finished row, trimmed to its own length.
    std::vector<torch::Tensor> memories(batch.rows.size());
    Integrate(batch, abandoned, /*join=*/nullptr, stats,
              [&](const std::vector<size_t>& rows, const torch::Tensor& h, const torch::Tensor& mask) {
                const torch::Tensor memory = model_->OutputStageUnchecked(h, mask).to(torch::kFloat32);
                for (size_t k = 0; k < rows.size(); ++k) {
                  const int64_t length = static_cast<int64_t>(batch.rows[rows[k]].input->ids.size());
                  memories[rows[k]] = memory[static_cast<int64_t>(k)].narrow(0, 0, length);
                }
              });
    std::map<std::pair<int, int>, std::vector<size_t>> groups;
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      if (!memories[r].defined()) continue;  // abandoned during the encoder
      groups[{batch.rows[r].decode.decoder_steps, batch.rows[r].decode.beam_size}].push_back(r);
    }
    const auto decoding = std::chrono::steady_clock::now();
    const double paused_before_decoding = stats.paused_seconds;
    for (const auto& [key, rows] : groups) DecodeGroup(batch, rows, memories, on_done, abandoned, stats);
    stats.decoder_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - decoding).count() -
                            (stats.paused_seconds - paused_before_decoding);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("model execution failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model execution failed: ", e.what()));
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() - stats.paused_seconds;
  return stats;
}

void TranslationExecutor::DecodeGroup(const scheduler::ExecBatch& batch, const std::vector<size_t>& rows,
                                      const std::vector<torch::Tensor>& memories,
                                      const scheduler::RowDoneFn& on_done,
                                      const scheduler::RowAbandonedFn& abandoned,
                                      scheduler::ExecStats& stats) {
  const auto& first = batch.rows[rows.front()].decode;
  const int steps = first.decoder_steps;
  const int64_t beam = first.beam_size;
  const double dt = double(model_->decoder_depth()) / steps;
  const auto device = memories[rows.front()].device();
  const int64_t eos = model_->eos_id();

  // Padded memory and mask of the group, one block of `beam` hypotheses per row.
  int64_t source_length = 0;
  for (size_t r : rows) source_length = std::max(source_length, memories[r].size(0));
  const int64_t group_rows = static_cast<int64_t>(rows.size());
  const int64_t hidden = memories[rows.front()].size(1);
  torch::Tensor memory = torch::zeros({group_rows, source_length, hidden}, memories[rows.front()].options());
  torch::Tensor memory_mask = torch::zeros({group_rows, source_length}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  for (int64_t i = 0; i < group_rows; ++i) {
    const int64_t length = memories[rows[i]].size(0);
    memory[i].narrow(0, 0, length).copy_(memories[rows[i]]);
    memory_mask[i].narrow(0, 0, length).fill_(1.0f);
  }
  TorchModel::CrossAttention cross = model_->CrossKvUnchecked(memory, memory_mask);
  const torch::Tensor expand = torch::arange(group_rows, torch::TensorOptions().dtype(torch::kInt64).device(device))
                                   .repeat_interleave(beam);
  auto select_cross = [&](const torch::Tensor& index) {
    cross.k = cross.k.index_select(0, index);
    cross.v = cross.v.index_select(0, index);
    cross.bias = cross.bias.index_select(0, index);
  };
  select_cross(expand);

  std::vector<RowSearch> live(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    live[i].row = rows[i];
    const auto& decode = batch.rows[rows[i]].decode;
    live[i].max_output = std::clamp(decode.max_output_tokens > 0
                                        ? decode.max_output_tokens
                                        : scheduler::DefaultMaxOutputTokens(
                                              static_cast<int>(batch.rows[rows[i]].input->ids.size()),
                                              max_output_tokens_),
                                    1, max_output_tokens_);
    live[i].min_output = std::min(decode.min_output_tokens, live[i].max_output);
    live[i].length_penalty = decode.length_penalty;
    live[i].beams.assign(beam, {});
    live[i].scores.assign(beam, kDeadBeam);
    live[i].scores[0] = 0;
  }
  const int64_t heads = cross.k.size(1);
  const int64_t head_dim = cross.k.size(3);
  const auto float_options = cross.k.options();
  std::vector<torch::Tensor> cache_k(steps), cache_v(steps);
  for (int i = 0; i < steps; ++i) {
    cache_k[i] = torch::zeros({group_rows * beam, heads, 0, head_dim}, float_options);
    cache_v[i] = cache_k[i];
  }
  std::vector<int64_t> next_tokens(group_rows * beam, model_->bos_id());
  auto finish_row = [&](RowSearch& search) {
    const auto best = std::max_element(search.finished.begin(), search.finished.end(),
                                       [](const Finished& a, const Finished& b) { return a.score < b.score; });
    scheduler::RowOutput output;
    output.tokens = absl::MakeConstSpan(best->tokens);
    output.score = best->score;
    on_done(search.row, output);
  };

  const bool row_parallel = device.is_cpu() && model_->precision() == ComputePrecision::kFloat32;
  const RowChunkFn decoder_field = [this](const std::vector<torch::Tensor>& in) {
    TorchModel::DecoderFieldResult r = model_->DecoderFieldUnchecked(in[0], in[1], in[2], in[3], in[4], in[5]);
    return std::vector<torch::Tensor>{std::move(r.field), std::move(r.cache_k), std::move(r.cache_v)};
  };
  const RowChunkFn decoder_logits = [this](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{model_->DecoderLogitsUnchecked(in[0])};
  };
  for (int64_t position = 0; !live.empty(); ++position) {
    if (position > 0) stats.paused_seconds += scheduler::YieldBetweenSteps(batch);
    const int64_t hypotheses = static_cast<int64_t>(live.size()) * beam;
    const torch::Tensor tokens = torch::tensor(next_tokens, torch::kInt64).to(device);
    const torch::Tensor positions = torch::full({hypotheses}, position, torch::TensorOptions().dtype(torch::kInt64).device(device));
    torch::Tensor g = model_->DecoderInputUnchecked(tokens, positions).to(torch::kFloat32);  // float32 state
    // Hypotheses are independent rows of every decoder call: float32 calls on the CPU split them
    // across the intra-op threads (RowChunksFor), as the encoder's field evaluations do.
    const int chunks =
        row_parallel ? RowChunksFor(hypotheses, hypotheses, kRowParallelMinHypotheses, /*min_rows_per_chunk=*/2) : 1;
    for (int i = 0; i < steps; ++i) {
      const std::vector<torch::Tensor> result =
          EvaluateRowChunks(chunks, {g, cache_k[i], cache_v[i], cross.k, cross.v, cross.bias}, decoder_field);
      cache_k[i] = result[1];
      cache_v[i] = result[2];
      g.add_(result[0], dt);
    }
    stats.decoder_calls += steps;
    stats.decoder_row_evaluations += int64_t{steps} * hypotheses;
    const torch::Tensor log_probs =
        EvaluateRowChunks(chunks, {g}, decoder_logits)[0].to(torch::kCPU, torch::kFloat32);
    const int64_t vocab = log_probs.size(1);
    std::vector<float> beam_scores;
    for (const auto& search : live) beam_scores.insert(beam_scores.end(), search.scores.begin(), search.scores.end());
    const torch::Tensor totals = (log_probs + torch::tensor(beam_scores).unsqueeze(1)).view({-1, beam * vocab});
    const int64_t candidates = std::min<int64_t>(2 * beam, beam * vocab);
    const auto [top_scores, top_index] = totals.topk(candidates, /*dim=*/1);
    const auto score_at = top_scores.accessor<float, 2>();
    const auto index_at = top_index.accessor<int64_t, 2>();

    std::vector<RowSearch> still_live;
    std::vector<int64_t> parents;  // hypothesis index (this iteration) of each kept hypothesis
    next_tokens.clear();
    for (size_t i = 0; i < live.size(); ++i) {
      RowSearch& search = live[i];
      const bool last = position + 1 >= search.max_output;
      std::vector<std::vector<int32_t>> beams;
      std::vector<float> scores;
      std::vector<int64_t> row_parents;
      for (int64_t c = 0; c < candidates && static_cast<int64_t>(beams.size()) < beam; ++c) {
        const int64_t parent = index_at[i][c] / vocab;
        const int32_t token = static_cast<int32_t>(index_at[i][c] % vocab);
        const float score = score_at[i][c];
        if (score <= kDeadBeam / 2) break;  // only dead beams remain
        std::vector<int32_t> tokens_so_far = search.beams[parent];
        if (token == eos) {
          if (position < search.min_output) continue;  // too short to end yet
          if (c < beam) {
            search.finished.push_back({std::move(tokens_so_far), Normalized(score, position + 1, search.length_penalty)});
          }
          continue;
        }
        tokens_so_far.push_back(token);
        if (last) {  // out of room: the hypothesis ends here, without EOS
          search.finished.push_back({std::move(tokens_so_far), Normalized(score, position + 1, search.length_penalty)});
          continue;
        }
        beams.push_back(std::move(tokens_so_far));
        scores.push_back(score);
        row_parents.push_back(static_cast<int64_t>(i) * beam + parent);
      }
      const bool done = last || static_cast<int64_t>(search.finished.size()) >= beam || beams.empty();
      if (done) {
        if (search.finished.empty()) {  // defensive: at most K of the 2K candidates are EOS
          search.finished.push_back({search.beams[0], Normalized(search.scores[0], position + 1, search.length_penalty)});
        }
        finish_row(search);
        continue;
      }
      if (abandoned(search.row)) continue;
      while (static_cast<int64_t>(beams.size()) < beam) {  // fewer than K continuations survived
        beams.push_back(beams.front());
        scores.push_back(kDeadBeam);
        row_parents.push_back(row_parents.front());
      }
      search.beams = std::move(beams);
      search.scores = std::move(scores);
      if (beam == 1) {  // greedy tokens are final as they come: report them for streaming
        scheduler::RowOutput progress;
        progress.tokens = absl::MakeConstSpan(search.beams[0]);
        progress.partial = true;
        on_done(search.row, progress);
      }
      for (int64_t k = 0; k < beam; ++k) next_tokens.push_back(search.beams[k].back());
      parents.insert(parents.end(), row_parents.begin(), row_parents.end());
      still_live.push_back(std::move(search));
    }
    const bool rows_left = still_live.size() < live.size();
    live.swap(still_live);
    if (live.empty()) break;
    bool identity = static_cast<int64_t>(parents.size()) == hypotheses;
    for (size_t k = 0; identity && k < parents.size(); ++k) identity = parents[k] == static_cast<int64_t>(k);
    if (identity) continue;  // greedy with nobody leaving: caches are already in order
    const torch::Tensor index = torch::tensor(parents, torch::kInt64).to(device);
    for (int i = 0; i < steps; ++i) {
      cache_k[i] = cache_k[i].index_select(0, index);
      cache_v[i] = cache_v[i].index_select(0, index);
    }
    // A row's beams share its cross-attention keys/values: they move only when rows leave.
    if (rows_left) select_cross(index);
  }
}

}  // namespace odeserve::runtime
