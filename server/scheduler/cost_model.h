#pragma once
// Predicts a batch's compute time from its shape, linear in six features:
//   seconds = fixed + per_row * rows + per_token * padded_tokens
//             + per_token_evaluation * padded_tokens * field_evaluations
//             + per_decoder_call * decoder_calls + per_decoder_row_evaluation * decoder_rows
// (the decoder terms are zero for encoder-only models; a translation's decoder pays a fixed
// cost per field call, whatever the number of hypotheses, plus a cost per hypothesis row).
// Fitted by least squares to a warm-up at load, refitted online from every measured batch
// (calibration samples are kept, recent online samples replace older ones), so drift in the
// machine's speed is followed without forgetting the shape of the curve.

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "server/scheduler/executor.h"

namespace odeserve::scheduler {

/// The work in a batch, as the cost model sees it.
struct CostShape {
  int64_t batches = 1;
  int64_t rows = 0;
  int64_t padded_tokens = 0;
  int64_t token_evaluations = 0;
  int64_t decoder_calls = 0;
  int64_t decoder_row_evaluations = 0;
};

/// The work of `rows` rows padded to `longest` tokens, run with these choices (translation:
/// `expected_output_tokens` positions of `decoder_steps` over rows x `beam_size` hypotheses).
CostShape WorkShape(int64_t rows, int64_t longest, int steps, Solver solver, int decoder_steps,
                    int beam_size, int expected_output_tokens);

struct CostSample {
  CostShape shape;
  double seconds = 0;
};

constexpr int kCostFeatures = 6;
using CostFeatures = std::array<double, kCostFeatures>;

struct CostCoefficients {
  double fixed = 0;
  double per_row = 0;
  double per_token = 0;
  double per_token_evaluation = 0;
  double per_decoder_call = 0;
  double per_decoder_row_evaluation = 0;
};

struct CostModelSnapshot {
  CostCoefficients coefficients;
  int64_t calibration_samples = 0;
  int64_t online_samples = 0;
  double mean_abs_relative_error = 0;  // exponentially weighted, over online samples
};

class CostModel {
 public:
  explicit CostModel(size_t online_window = 256);

  /// Adds warm-up measurements (kept for the model's lifetime) and refits.
  void Calibrate(const std::vector<CostSample>& samples);
  /// Adds one measured batch; returns its relative prediction error |pred - actual| / actual.
  double Observe(const CostSample& sample);
  /// Predicted seconds for `shape.batches` batches holding these totals together.
  double Predict(const CostShape& shape) const;
  CostModelSnapshot Snapshot() const;

 private:
  void RefitLocked();
  double PredictLocked(const CostShape& shape) const;

  const size_t online_window_;
  mutable std::mutex mutex_;
  std::vector<CostSample> calibration_;
  std::deque<CostSample> online_;
  int64_t online_total_ = 0;
  CostCoefficients coefficients_;
  double mean_abs_relative_error_ = 0;
};

/// Solves min ||A x - y||^2 with x >= 0 over the given feature columns by active-set
/// elimination of negative coefficients (a tiny NNLS for 6 unknowns). Exposed for tests.
CostFeatures FitNonNegative(const std::vector<CostFeatures>& features,
                            const std::vector<double>& targets, const std::vector<double>& weights);

}  // namespace odeserve::scheduler
