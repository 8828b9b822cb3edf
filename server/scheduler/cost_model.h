#pragma once
// Predicts a batch's compute time from its shape, linear in four features:
//   seconds = fixed + per_row * rows + per_token * padded_tokens
//             + per_token_evaluation * padded_tokens * field_evaluations.
// Fitted by least squares to a warm-up at load, refitted online from every measured batch
// (calibration samples are kept, recent online samples replace older ones), so drift in the
// machine's speed is followed without forgetting the shape of the curve.

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace odeserve::scheduler {

struct CostSample {
  int64_t rows = 0;
  int64_t padded_tokens = 0;
  int64_t token_evaluations = 0;
  double seconds = 0;
};

struct CostCoefficients {
  double fixed = 0;
  double per_row = 0;
  double per_token = 0;
  double per_token_evaluation = 0;
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
  /// Predicted seconds for a batch of this shape.
  double Predict(int64_t rows, int64_t padded_tokens, int64_t token_evaluations) const;
  /// Predicted seconds for `batches` batches holding these totals together.
  double PredictBatches(int64_t batches, int64_t rows, int64_t padded_tokens,
                        int64_t token_evaluations) const;
  CostModelSnapshot Snapshot() const;

 private:
  void RefitLocked();
  double PredictLocked(const CostCoefficients& c, int64_t batches, int64_t rows, int64_t tokens,
                       int64_t token_evaluations) const;

  const size_t online_window_;
  mutable std::mutex mutex_;
  std::vector<CostSample> calibration_;
  std::deque<CostSample> online_;
  int64_t online_total_ = 0;
  CostCoefficients coefficients_;
  double mean_abs_relative_error_ = 0;
};

/// Solves min ||A x - y||^2 with x >= 0 over the given feature columns by active-set
/// elimination of negative coefficients (a tiny NNLS for 4 unknowns). Exposed for tests.
std::array<double, 4> FitNonNegative(const std::vector<std::array<double, 4>>& features,
                                     const std::vector<double>& targets,
                                     const std::vector<double>& weights);

}  // namespace odeserve::scheduler
