#include "server/scheduler/cost_model.h"

#include <algorithm>
#include <cmath>

namespace odeserve::scheduler {
namespace {

std::array<double, 4> Features(const CostSample& s) {
  return {1.0, double(s.rows), double(s.padded_tokens), double(s.token_evaluations)};
}

// Solves the normal equations restricted to `active` columns; others are zero.
std::array<double, 4> SolveRestricted(const std::vector<std::array<double, 4>>& features,
                                      const std::vector<double>& targets,
                                      const std::vector<double>& weights,
                                      const std::array<bool, 4>& active) {
  // Scale columns so that their magnitudes (1 .. 1e6) do not ruin the conditioning.
  std::array<double, 4> scale{1, 1, 1, 1};
  for (int j = 0; j < 4; ++j) {
    double max_abs = 0;
    for (const auto& f : features) max_abs = std::max(max_abs, std::abs(f[j]));
    scale[j] = max_abs > 0 ? max_abs : 1;
  }
  double a[4][5] = {};
  for (size_t i = 0; i < features.size(); ++i) {
    for (int r = 0; r < 4; ++r) {
      if (!active[r]) continue;
      const double fr = features[i][r] / scale[r];
      for (int c = 0; c < 4; ++c) {
        if (active[c]) a[r][c] += weights[i] * fr * features[i][c] / scale[c];
      }
      a[r][4] += weights[i] * fr * targets[i];
    }
  }
  for (int r = 0; r < 4; ++r) {
    if (!active[r]) {
      a[r][r] = 1;
    } else {
      a[r][r] += 1e-9;  // ridge: keeps a rank-deficient warm-up solvable
    }
  }
  for (int p = 0; p < 4; ++p) {  // Gaussian elimination with partial pivoting
    int best = p;
    for (int r = p + 1; r < 4; ++r) if (std::abs(a[r][p]) > std::abs(a[best][p])) best = r;
    std::swap(a[p], a[best]);
    if (std::abs(a[p][p]) < 1e-300) continue;
    for (int r = 0; r < 4; ++r) {
      if (r == p) continue;
      const double factor = a[r][p] / a[p][p];
      for (int c = p; c < 5; ++c) a[r][c] -= factor * a[p][c];
    }
  }
  std::array<double, 4> x{};
  for (int r = 0; r < 4; ++r) {
    x[r] = (active[r] && std::abs(a[r][r]) > 1e-300) ? a[r][4] / a[r][r] / scale[r] : 0;
  }
  return x;
}

}  // namespace

std::array<double, 4> FitNonNegative(const std::vector<std::array<double, 4>>& features,
                                     const std::vector<double>& targets,
                                     const std::vector<double>& weights) {
  std::array<bool, 4> active{true, true, true, true};
  std::array<double, 4> x{};
  for (int round = 0; round < 4; ++round) {
    x = SolveRestricted(features, targets, weights, active);
    int most_negative = -1;
    for (int j = 0; j < 4; ++j) {
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
  const double predicted =
      PredictLocked(coefficients_, 1, sample.rows, sample.padded_tokens, sample.token_evaluations);
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
  std::vector<std::array<double, 4>> features;
  std::vector<double> targets, weights;
  // Relative (not absolute) error is what budgets care about: weight each sample by 1/t^2.
  auto add = [&](const CostSample& s, double weight) {
    if (s.seconds <= 0) return;
    features.push_back(Features(s));
    targets.push_back(s.seconds);
    weights.push_back(weight / (s.seconds * s.seconds));
  };
  for (const auto& s : calibration_) add(s, 1.0);
  // Recent batches describe the machine as it is now: weigh them more as they accumulate.
  for (const auto& s : online_) add(s, 2.0);
  if (features.empty()) return;
  const auto x = FitNonNegative(features, targets, weights);
  coefficients_ = {x[0], x[1], x[2], x[3]};
}

double CostModel::PredictLocked(const CostCoefficients& c, int64_t batches, int64_t rows,
                                int64_t tokens, int64_t token_evaluations) const {
  return c.fixed * double(batches) + c.per_row * double(rows) + c.per_token * double(tokens) +
         c.per_token_evaluation * double(token_evaluations);
}

double CostModel::Predict(int64_t rows, int64_t padded_tokens, int64_t token_evaluations) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return PredictLocked(coefficients_, 1, rows, padded_tokens, token_evaluations);
}

double CostModel::PredictBatches(int64_t batches, int64_t rows, int64_t padded_tokens,
                                 int64_t token_evaluations) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return PredictLocked(coefficients_, batches, rows, padded_tokens, token_evaluations);
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
