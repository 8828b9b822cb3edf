#include "server/scheduler/executor.h"

#include <algorithm>

namespace odeserve::scheduler {

int EvaluationsPerStep(Solver solver) {
  switch (solver) {
    case Solver::kEuler: return 1;
    case Solver::kHeun: return 2;
    case Solver::kRk4: return 4;
  }
  return 1;
}

const char* SolverName(Solver solver) {
  switch (solver) {
    case Solver::kEuler: return "EULER";
    case Solver::kHeun: return "HEUN";
    case Solver::kRk4: return "RK4";
  }
  return "EULER";
}

int DefaultMaxOutputTokens(int input_tokens, int model_limit) {
  return std::clamp(2 * input_tokens + 8, 2, model_limit);
}

int64_t PaddedLength(int64_t longest, int pad_to_multiple, int64_t max_length) {
  if (pad_to_multiple <= 1 || longest <= 0) return longest;
  const int64_t padded = (longest + pad_to_multiple - 1) / pad_to_multiple * pad_to_multiple;
  return max_length > 0 ? std::max(longest, std::min(padded, max_length)) : padded;
}

double YieldBetweenSteps(const ExecBatch& batch) {
  return batch.yield ? absl::ToDoubleSeconds(batch.yield()) : 0.0;
}

}  // namespace odeserve::scheduler
