#pragma once
// Portable random helpers: the standard distributions are implementation-defined, so the
// bench uses these to make a --seed reproduce the same run on any standard library.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace odeserve::client {

/// Uniform double in [0, 1) from the top 53 bits of one draw.
inline double UniformUnit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

/// Uniform integer in [0, n) (n > 0), by rejection so that it is unbiased.
inline uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

/// Poisson process arrivals: exponential inter-arrival gaps with mean 1/rate seconds.
class PoissonArrivals {
 public:
  PoissonArrivals(double rate_per_second, uint64_t seed) : rate_(rate_per_second), rng_(seed) {}
  /// Seconds until the next arrival.
  double NextGapSeconds() { return -std::log1p(-UniformUnit(rng_)) / rate_; }
  double rate() const { return rate_; }

 private:
  double rate_;
  std::mt19937_64 rng_;
};

}  // namespace odeserve::client

namespace odeserve::client {
/// Arrival offsets (seconds from 0) of a Poisson process over [0, duration_seconds).
inline std::vector<double> PoissonSchedule(double rate_per_second, double duration_seconds,
                                           uint64_t seed) {
  std::vector<double> out;
  PoissonArrivals arrivals(rate_per_second, seed);
  for (double t = arrivals.NextGapSeconds(); t < duration_seconds; t += arrivals.NextGapSeconds()) {
    out.push_back(t);
  }
  return out;
}
}  // namespace odeserve::client
