#pragma once
// Latency statistics for the client tools: exact percentiles over a sample set, and a
// log-bucketed histogram (HDR-like: bounded relative error, O(1) record) for live progress.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace odeserve::client {

/// Exact statistics over a set of values. Percentiles use the nearest-rank definition:
/// P(p) is the smallest sample such that at least p% of the samples are <= it.
class Samples {
 public:
  void Add(double value);
  void Reserve(size_t n) { values_.reserve(n); }
  size_t count() const { return values_.size(); }
  bool empty() const { return values_.empty(); }
  /// p in [0, 100]. NaN when empty. P(0) is the minimum, P(100) the maximum.
  double Percentile(double p) const;
  double Mean() const;  // NaN when empty
  double Min() const;   // NaN when empty
  double Max() const;   // NaN when empty
  double Sum() const { return sum_; }
  /// The samples in ascending order.
  const std::vector<double>& Sorted() const;

 private:
  mutable std::vector<double> values_;
  mutable bool sorted_ = true;
  double sum_ = 0.0;
};

/// Log-bucketed histogram: values in [lowest, highest] are kept with a relative error of at most
/// `relative_precision`; values outside are clamped into the first / last bucket (min and max
/// stay exact). Mergeable; recording is O(1).
class LogHistogram {
 public:
  explicit LogHistogram(double lowest = 1e-3, double highest = 1e7,
                        double relative_precision = 0.01);
  void Record(double value);
  void Merge(const LogHistogram& other);  // same bounds and precision required
  int64_t count() const { return count_; }
  /// Nearest-rank percentile: the upper edge of the bucket holding that rank, clamped to the
  /// exact [min, max] seen. NaN when empty.
  double Percentile(double p) const;
  double Min() const;
  double Max() const;
  double Mean() const;
  /// Non-empty buckets as (upper edge, count), ascending.
  std::vector<std::pair<double, int64_t>> Buckets() const;

 private:
  size_t BucketOf(double value) const;
  double UpperEdge(size_t bucket) const;

  double lowest_;
  double log_base_;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0.0;
  double min_ = 0.0;
  double max_ = 0.0;
};

}  // namespace odeserve::client
