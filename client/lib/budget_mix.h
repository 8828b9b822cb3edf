#pragma once
// The latency-budget mix of odeserve-bench: "--budgets 5ms,10ms,20ms,none" (optionally
// weighted: "5ms:3,40ms:1"). Each request draws one class.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace odeserve::client {

struct BudgetClass {
  std::string label;                    // "5ms", "1.5ms", "none"
  std::optional<absl::Duration> budget;  // nullopt: no latency budget
  double weight = 1.0;
};

/// Parses a comma-separated budget mix. Each item is an absl duration ("5ms", "250us", "1s")
/// or "none", optionally followed by ":WEIGHT" (a positive number; default 1). Durations must
/// be positive and items distinct. An empty spec is an error.
absl::StatusOr<std::vector<BudgetClass>> ParseBudgetMix(absl::string_view spec);

/// Draws class indices with probability proportional to weight; deterministic for a seed.
class BudgetSampler {
 public:
  BudgetSampler(const std::vector<BudgetClass>& classes, uint64_t seed);
  size_t Next();

 private:
  std::vector<double> cumulative_;  // normalized cumulative weights, last == 1
  std::mt19937_64 rng_;
};

/// A duration as milliseconds.
inline double ToMs(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace odeserve::client
