#include "client/lib/stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace odeserve::client {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Index (0-based) of the nearest-rank sample for percentile p among n samples.
size_t NearestRankIndex(double p, size_t n) {
  if (p <= 0.0) return 0;
  if (p >= 100.0) return n - 1;
  // ceil(p/100 * n) computed with a small tolerance so that e.g. p=90, n=10 gives rank 9.
  double rank = std::ceil(p / 100.0 * static_cast<double>(n) - 1e-9);
  if (rank < 1.0) rank = 1.0;
  return std::min(n, static_cast<size_t>(rank)) - 1;
}
}  // namespace

void Samples::Add(double value) {
  if (sorted_ && !values_.empty() && value < values_.back()) sorted_ = false;
  values_.push_back(value);
  sum_ += value;
}

const std::vector<double>& Samples::Sorted() const {
  if (!sorted_) {
    std::sort(values_.begin(), values_.end());
    sorted_ = true;
  }
  return values_;
}

double Samples::Percentile(double p) const {
  if (values_.empty()) return kNaN;
  const auto& v = Sorted();
  return v[NearestRankIndex(p, v.size())];
}

double Samples::Mean() const {
  return values_.empty() ? kNaN : sum_ / static_cast<double>(values_.size());
}
double Samples::Min() const { return values_.empty() ? kNaN : Sorted().front(); }
double Samples::Max() const { return values_.empty() ? kNaN : Sorted().back(); }

LogHistogram::LogHistogram(double lowest, double highest, double relative_precision)
    : lowest_(lowest), log_base_(std::log1p(relative_precision)) {
  assert(lowest > 0 && highest > lowest && relative_precision > 0);
  const size_t buckets =
      static_cast<size_t>(std::ceil(std::log(highest / lowest) / log_base_)) + 2;
  counts_.assign(buckets, 0);
}

size_t LogHistogram::BucketOf(double value) const {
  if (!(value > lowest_)) return 0;  // also catches NaN
  const double idx = std::ceil(std::log(value / lowest_) / log_base_);
  if (idx >= static_cast<double>(counts_.size() - 1)) return counts_.size() - 1;
  return static_cast<size_t>(idx);
}

double LogHistogram::UpperEdge(size_t bucket) const {
  return lowest_ * std::exp(log_base_ * static_cast<double>(bucket));
}

void LogHistogram::Record(double value) {
  if (std::isnan(value)) return;
  ++counts_[BucketOf(value)];
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  sum_ += value;
}

void LogHistogram::Merge(const LogHistogram& other) {
  assert(other.counts_.size() == counts_.size());
  if (other.count_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
  sum_ += other.sum_;
}

double LogHistogram::Percentile(double p) const {
  if (count_ == 0) return kNaN;
  if (p <= 0) return min_;
  if (p >= 100) return max_;
  const int64_t target = static_cast<int64_t>(NearestRankIndex(p, static_cast<size_t>(count_))) + 1;
  int64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= target) {
      if (i == counts_.size() - 1) return max_;  // overflow bucket: only max is known
      return std::clamp(UpperEdge(i), min_, max_);
    }
  }
  return max_;
}

double LogHistogram::Min() const { return count_ ? min_ : kNaN; }
double LogHistogram::Max() const { return count_ ? max_ : kNaN; }
double LogHistogram::Mean() const { return count_ ? sum_ / static_cast<double>(count_) : kNaN; }

std::vector<std::pair<double, int64_t>> LogHistogram::Buckets() const {
  std::vector<std::pair<double, int64_t>> out;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] > 0) out.emplace_back(UpperEdge(i), counts_[i]);
  }
  return out;
}

}  // namespace odeserve::client
