#include "server/scheduler/cost_model.h"

#include <algorithm>
#include <cmath>

namespace odeserve::scheduler {
namespace {

constexpr int N = kCostFeatures;

CostFeatures Features(const CostShape& s) {
  return {double(s.batches), double(s.rows), double(s.padded_tokens), double(s.token_evaluations),
          double(s.decoder_calls), double(s.decoder_row_evaluations)};
}

// Solves the normal equations restricted to `active` columns; others are zero.
CostFeatures SolveRestricted(const std::vector<CostFeatures>& features,
                             const std::vector<double>& targets, const std::vector<double>& weights,
                             const std::array<bool, N>& active) {
  // Scale columns so that their magnitudes (1 .. 1e6) do not ruin the conditioning.
  CostFeatures scale;
  scale.fill(1);
  for (int j = 0; j < N; ++j) {
    double max_abs = 0;
    for (const auto& f : features) max_abs = std::max(max_abs, std::abs(f[j]));
    scale[j] = max_abs > 0 ? max_abs : 1;
  }
  double a[N][N + 1] = {};
  for (size_t i = 0; i < features.size(); ++i) {
    for (int r = 0; r < N; ++r) {
      if (!active[r]) continue;
      const double fr = features[i][r] / scale[r];
      for (int c = 0; c < N; ++c) {
        if (active[c]) a[r][c] += weights[i] * fr * features[i][c] / scale[c];
      }
      a[r][N] += weights[i] * fr * targets[i];
    }
  }
  for (int r = 0; r < N; ++r) {
    if (!active[r]) {
      a[r][r] = 1;
    } else {
      a[r][r] += 1e-9;  // ridge: keeps a rank-deficient warm-up solvable
    }
  }
  for (int p = 0; p < N; ++p) {  // Gaussian elimination with partial pivoting
    int best = p;
    for (int r = p + 1; r < N; ++r) if (std::abs(a[r][p]) > std::abs(a[best][p])) best = r;
    std::swap(a[p], a[best]);
    if (std::abs(a[p][p]) < 1e-300) continue;
    for (int r = 0; r < N; ++r) {
      if (r == p) continue;
      const double factor = a[r][p] / a[p][p];
      for (int c = p; c <= N; ++c) a[r][c] -= factor * a[p][c];
    }
  }
  CostFeatures x{};
  for (int r = 0; r < N; ++r) {
    x[r] = (active[r] && std::abs(a[r][r]) > 1e-300) ? a[r][N] / a[r][r] / scale[r] : 0;
  }
  return x;
}

}  // namespace

CostShape WorkShape(int64_t rows, int64_t longest, int steps, Solver solver, int decoder_steps,
                    int beam_size, int expected_output_tokens) {
  CostShape w;
  w.rows = rows;
  w.padded_tokens = rows * longest;
  w.token_evaluations = w.padded_tokens * steps * EvaluationsPerStep(solver);
  if (decoder_steps > 0 && rows > 0) {
    // Every position runs decoder_steps field calls over all of the call's hypotheses.
    w.decoder_calls = int64_t{expected_output_tokens} * decoder_steps;
    w.decoder_row_evaluations = w.decoder_calls * rows * beam_size;
  }
  return w;
}

CostFeatures FitNonNegative(const std::vector<CostFeatures>& features,
                            const std::vector<double>& targets, const std::vector<double>& weights) {
  std::array<bool, N> active;
  active.fill(true);
  CostFeatures x{};
  for (int round = 0; round < N; ++round) {
    x = SolveRestricted(features, targets, weights, active);
    int most_negative = -1;
    for (int j = 0; j < N; ++j) {
      if (active[j] && x[j] < 0 && (most_negative < 0 || x[j] < x[most_negative])) most_negative = j;
    }
    if (most_negative < 0) break;
    active[most_negative] = false;
  }
  for (double& v : x) v = std::max(0.0, v);
  return x;
}

CostModel::CostModel(size_t online_window) : online_window_(online_window) {}

void CostModel::Calibrate(const std::vector<CostSample>& samples) {
  std::lock_guard<std::mutex> lock(mutex_);
  calibration_.insert(calibration_.end(), samples.begin(), samples.end());
  RefitLocked();
}

double CostModel::Observe(const CostSample& sample) {
  std::lock_guard<std::mutex> lock(mutex_);
  const double predicted = PredictLocked(sample.shape);
  const double error = sample.seconds > 0 ? std::abs(predicted - sample.seconds) / sample.seconds : 0;
  constexpr double kErrorSmoothing = 0.05;
  mean_abs_relative_error_ = online_total_ == 0
                                 ? error
                                 : (1 - kErrorSmoothing) * mean_abs_relative_error_ + kErrorSmoothing * error;
  online_.push_back(sample);
  ++online_total_;
  if (online_.size() > online_window_) online_.pop_front();
  RefitLocked();
  return error;
}

void CostModel::RefitLocked() {
  std::vector<CostFeatures> features;
  std::vector<double> targets, weights;
  // Relative (not absolute) error is what budgets care about: weight each sample by 1/t^2.
  auto add = [&](const CostSample& s, double weight) {
    if (s.seconds <= 0) return;
    features.push_back(Features(s.shape));
    targets.push_back(s.seconds);
    weights.push_back(weight / (s.seconds * s.seconds));
  };
  for (const auto& s : calibration_) add(s, 1.0);
  // Recent batches describe the machine as it is now: weigh them more as they accumulate.
  for (const auto& s : online_) add(s, 2.0);
  if (features.empty()) return;
  const auto x = FitNonNegative(features, targets, weights);
  coefficients_ = {x[0], x[1], x[2], x[3], x[4], x[5]};
}

double CostModel::PredictLocked(const CostShape& shape) const {
  const CostCoefficients& c = coefficients_;
  const CostFeatures f = Features(shape);
  return c.fixed * f[0] + c.per_row * f[1] + c.per_token * f[2] + c.per_token_evaluation * f[3] +
         c.per_decoder_call * f[4] + c.per_decoder_row_evaluation * f[5];
}

double CostModel::Predict(const CostShape& shape) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return PredictLocked(shape);
}

CostModelSnapshot CostModel::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CostModelSnapshot snapshot;
  snapshot.coefficients = coefficients_;
  snapshot.calibration_samples = static_cast<int64_t>(calibration_.size());
  snapshot.online_samples = online_total_;
  snapshot.mean_abs_relative_error = mean_abs_relative_error_;
  return snapshot;
}

}  // namespace odeserve::scheduler
