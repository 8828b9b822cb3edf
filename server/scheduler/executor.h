#pragma once
// The scheduler's view of a model: something that runs a batch of tokenized rows, each with its
// own ODE step count, and reports rows as they finish. The LibTorch implementation lives in
// runtime/; tests use fakes, so the scheduler is tested without tensors or timing noise.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::scheduler {

enum class Solver { kEuler = 1, kHeun = 2, kRk4 = 3 };

/// Field evaluations one step of `solver` costs (1, 2, 4).
int EvaluationsPerStep(Solver solver);
const char* SolverName(Solver solver);

/// Translation only: how a row is decoded once its encoder steps are done.
struct DecodeSpec {
  int decoder_steps = 0;      // 0: not a translation row
  int beam_size = 1;          // 1 = greedy
  int max_output_tokens = 0;  // positions the decoder may run (a cut-off output has no EOS)
  int min_output_tokens = 1;  // EOS is not a candidate before this many tokens (no empty output)
  float length_penalty = 1;   // finished hypotheses rank by log-probability / tokens ^ this
};

/// The output length the server allows when a call does not set one: twice the input tokens
/// plus a little (German runs ~1.5x the English token count here), within the model's limit.
int DefaultMaxOutputTokens(int input_tokens, int model_limit);

/// The token length a batch whose longest row has `longest` tokens runs at: rounded up to a
/// multiple of `pad_to_multiple` (<= 1: not rounded), never past `max_length`, the model's
/// position limit (0: none).
int64_t PaddedLength(int64_t longest, int pad_to_multiple, int64_t max_length);

struct ExecRow {
  const tokenizer::EncodedText* input = nullptr;  // owned by the caller for the whole run
  int steps = 1;
  DecodeSpec decode;
};

struct ExecBatch {
  Solver solver = Solver::kEuler;
  std::vector<ExecRow> rows;
  // Calls were waiting (this model's queue or the compute gate) when the batch started: the
  // server is busy, and its RPC threads (receiving, tokenizing, replying) need the spare cores,
  // so an executor should not take them for this batch. A snapshot at the start.
  bool others_waiting = false;
  // Calls were submitted to this model while its previous batch computed. Busy too, in a way
  // others_waiting misses under closed-loop load: the batcher takes every queued call, so the
  // queue is empty at each start while replies and the next calls keep the RPC threads running.
  bool arrivals_during_previous_batch = false;
  // Called between two steps, and between two decoder positions (may be empty): the scheduler
  // lends the compute gate there to another model's batch that waits for it, so one long call
  // cannot hold every model up. Returns how long this run waited, which the executor leaves
  // out of ExecStats' times (the cost model learns compute, not waits).
  std::function<absl::Duration()> yield = nullptr;
};

/// Calls `batch.yield` if set; the seconds it waited.
double YieldBetweenSteps(const ExecBatch& batch);

/// What a run cost, for the cost model.
struct ExecStats {
  int64_t padded_tokens = 0;       // input-stage tokens: rows x padded length, per start or join
  int64_t token_evaluations = 0;   // sum over field evaluations of the active padded tokens
  int iterations = 0;              // solver steps of the longest-running row
  int64_t decoder_calls = 0;       // decoder field calls (positions x decoder steps, per group)
  int64_t decoder_row_evaluations = 0;  // hypothesis rows summed over those calls
  double decoder_seconds = 0;      // translation: wall time of the search (encoder excluded)
  double seconds = 0;              // wall time of the whole run, less paused_seconds
  double paused_seconds = 0;       // waits in ExecBatch::yield (another model computed)
};

/// A finished row: `values` (embedding or logits) for encoders; `tokens` (without BOS/EOS)
/// and `score` (length-normalized log-probability) for translations. With `partial` set it is
/// not finished: a greedy translation's tokens so far, reported after each position.
struct RowOutput {
  absl::Span<const float> values;
  absl::Span<const int32_t> tokens;
  float score = 0;
  bool partial = false;
};

/// Called once per finished row with its output (and, for greedy translation rows, with each
/// partial output before that).
using RowDoneFn = std::function<void(size_t row, const RowOutput& output)>;
/// Polled at each step boundary; a row for which it returns true leaves the batch unfinished.
using RowAbandonedFn = std::function<bool(size_t row)>;

/// A running batch between two steps, once its finished and abandoned rows have left.
struct JoinRoom {
  int rows = 0;               // rows still running
  int64_t padded_length = 0;  // their token length as the batch runs it
  int iteration = 0;          // solver steps run so far
};
/// Continuous batching: called at each step boundary while rows are still running. The rows it
/// returns join the batch there, take the row indices that follow the rows already in the run,
/// and run their own step counts from that boundary. Their inputs must outlive the run.
using RowJoinFn = std::function<std::vector<ExecRow>(const JoinRoom& room)>;

class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  /// Runs every row of `batch`, and every row `join` (may be empty) adds, to its step count.
  /// Thread-compatible: one Run at a time.
  virtual absl::StatusOr<ExecStats> Run(const ExecBatch& batch, const RowDoneFn& on_done,
                                        const RowAbandonedFn& abandoned, const RowJoinFn& join) = 0;
  /// Whether Run ever calls `join` (translation runs the encoder and decoder as one unit).
  virtual bool AcceptsJoins() const { return false; }
};

}  // namespace odeserve::scheduler
