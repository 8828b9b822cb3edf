#pragma once
// The scheduler's view of a model: something that runs a batch of tokenized rows, each with its
// own ODE step count, and reports rows as they finish. The LibTorch implementation lives in
// runtime/; tests use fakes, so the scheduler is tested without tensors or timing noise.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::scheduler {

enum class Solver { kEuler = 1, kHeun = 2, kRk4 = 3 };

/// Field evaluations one step of `solver` costs (1, 2, 4).
int EvaluationsPerStep(Solver solver);
const char* SolverName(Solver solver);

struct ExecRow {
  const tokenizer::EncodedText* input = nullptr;  // owned by the caller for the whole run
  int steps = 1;
};

struct ExecBatch {
  Solver solver = Solver::kEuler;
  std::vector<ExecRow> rows;
};

/// What a run cost, for the cost model.
struct ExecStats {
  int64_t padded_tokens = 0;       // rows x longest row at the start
  int64_t token_evaluations = 0;   // sum over field evaluations of the active padded tokens
  int iterations = 0;              // solver steps of the longest-running row
  double seconds = 0;              // wall time of the whole run
};

/// Called once per finished row with its output (embedding or logits).
using RowDoneFn = std::function<void(size_t row, absl::Span<const float> output)>;
/// Polled at each step boundary; a row for which it returns true leaves the batch unfinished.
using RowAbandonedFn = std::function<bool(size_t row)>;

class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  /// Runs every row of `batch` to its step count. Thread-compatible: one Run at a time.
  virtual absl::StatusOr<ExecStats> Run(const ExecBatch& batch, const RowDoneFn& on_done,
                                        const RowAbandonedFn& abandoned) = 0;
};

}  // namespace odeserve::scheduler
