#include "client/lib/sweep.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/lib/json_writer.h"

namespace odeserve::client {

SweepController::SweepController(SweepOptions options)
    : opt_(options), next_(std::max(options.open_loop ? 1e-3 : 1.0, options.start)) {}

void SweepController::Observe(SweepPoint p) {
  p.level = next_;
  const bool has_p99 = std::isfinite(p.p99_ms);
  if (p.error_rate > opt_.max_error_rate) {
    p.degraded = true;
    p.note = absl::StrFormat("error rate %.2f%% > %.2f%%", 100 * p.error_rate,
                             100 * opt_.max_error_rate);
  } else if (opt_.p99_limit_ms && has_p99 && p.p99_ms > *opt_.p99_limit_ms) {
    p.degraded = true;
    p.note = absl::StrFormat("p99 %.2f ms > limit %.2f ms", p.p99_ms, *opt_.p99_limit_ms);
  } else if (opt_.open_loop && p.throughput_rps < opt_.keep_up * p.level) {
    p.degraded = true;
    p.note = absl::StrFormat("served %.1f of %.1f req/s offered", p.throughput_rps, p.level);
  } else if (opt_.open_loop && !points_.empty() && has_p99 &&
             std::isfinite(points_.front().p99_ms) &&
             p.p99_ms > opt_.p99_growth * points_.front().p99_ms) {
    p.degraded = true;
    p.note = absl::StrFormat("p99 %.2f ms > %.1fx the first level's %.2f ms", p.p99_ms,
                             opt_.p99_growth, points_.front().p99_ms);
  }
  if (!p.degraded) {
    if (best_ && p.throughput_rps < points_[*best_].throughput_rps * (1 + opt_.min_gain)) {
      p.plateau = true;
      p.note = absl::StrFormat("throughput +%.1f%% < %.0f%%",
                               100 * (p.throughput_rps / points_[*best_].throughput_rps - 1),
                               100 * opt_.min_gain);
    }
  }
  points_.push_back(p);
  const size_t idx = points_.size() - 1;
  if (!p.degraded && (!best_ || p.throughput_rps > points_[*best_].throughput_rps)) best_ = idx;
  strikes_ = (p.degraded || p.plateau) ? strikes_ + 1 : 0;

  double next = opt_.open_loop ? next_ * opt_.factor
                               : std::max(next_ + 1, std::round(next_ * opt_.factor));
  if (strikes_ >= opt_.patience) {
    done_ = true;
    stop_reason_ = absl::StrFormat("%d levels in a row without healthy gain (last: %s)",
                                   strikes_, p.note);
  } else if (static_cast<int>(points_.size()) >= opt_.max_points) {
    done_ = true;
    stop_reason_ = "reached the maximum number of levels";
  } else if (next > opt_.max_level * (1 + 1e-9)) {
    done_ = true;
    stop_reason_ = absl::StrFormat("reached the maximum level %g", opt_.max_level);
  }
  next_ = next;
}

SweepResult SweepController::Result() const {
  SweepResult r;
  r.points = points_;
  r.stop_reason = done_ ? stop_reason_ : "not finished";
  if (best_) {
    r.saturation_rps = points_[*best_].throughput_rps;
    r.saturation_level = points_[*best_].level;
    r.saturation_p99_ms = points_[*best_].p99_ms;
  }
  for (const SweepPoint& p : points_) r.saturation_reached |= p.degraded || p.plateau;
  return r;
}

std::string FormatSweepTable(const SweepOptions& options, const SweepResult& result,
                             double fraction) {
  std::string out;
  const char* level_name = options.open_loop ? "rate" : "concurrency";
  absl::StrAppendFormat(&out, "%12s %12s %10s %10s %8s  %s\n", level_name, "ok req/s", "p50 ms",
                        "p99 ms", "errors", "verdict");
  for (const SweepPoint& p : result.points) {
    absl::StrAppendFormat(&out, "%12g %12.1f %10.2f %10.2f %7.2f%%  %s\n", p.level,
                          p.throughput_rps, p.p50_ms, p.p99_ms, 100 * p.error_rate,
                          p.degraded  ? absl::StrCat("degraded: ", p.note)
                          : p.plateau ? absl::StrCat("plateau: ", p.note)
                                      : std::string("ok"));
  }
  absl::StrAppend(&out, "stopped: ", result.stop_reason, "\n");
  if (result.saturation_rps > 0) {
    absl::StrAppendFormat(&out,
                          "saturation: %s%.1f req/s (%s %g, p99 %.2f ms%s); %.0f%% of it = "
                          "%.1f req/s (run: odeserve-bench --rate %.1f ...)\n",
                          result.saturation_reached ? "" : "at least ", result.saturation_rps,
                          level_name, result.saturation_level, result.saturation_p99_ms,
                          result.saturation_reached
                              ? ""
                              : "; no level degraded before the sweep stopped: raise --sweep_max",
                          100 * fraction, fraction * result.saturation_rps,
                          fraction * result.saturation_rps);
  } else {
    absl::StrAppend(&out, "saturation: not found (no healthy level)\n");
  }
  return out;
}

std::string SweepToJson(const SweepOptions& options, const SweepResult& result,
                        const std::string& saturation_run_json, double fraction) {
  JsonWriter w;
  w.BeginObject();
  w.Key("sweep").BeginObject();
  w.Field("mode", options.open_loop ? "open" : "closed");
  w.Field("level", options.open_loop ? "rate" : "concurrency");
  w.Field("factor", options.factor);
  w.Field("max_error_rate", options.max_error_rate);
  w.Key("p99_limit_ms");
  if (options.p99_limit_ms) {
    w.Number(*options.p99_limit_ms);
  } else {
    w.Null();
  }
  w.Field("min_gain", options.min_gain);
  w.Key("points").BeginArray();
  for (const SweepPoint& p : result.points) {
    w.BeginObject();
    w.Field("level", p.level);
    w.Field("throughput_rps", p.throughput_rps);
    w.Field("p50_ms", p.p50_ms);
    w.Field("p99_ms", p.p99_ms);
    w.Field("error_rate", p.error_rate);
    w.Field("degraded", p.degraded);
    w.Field("plateau", p.plateau);
    w.Field("note", p.note);
    w.EndObject();
  }
  w.EndArray();
  w.Field("stop_reason", result.stop_reason);
  w.Field("saturation_rps", result.saturation_rps);
  w.Field("saturation_level", result.saturation_level);
  w.Field("saturation_p99_ms", result.saturation_p99_ms);
  w.Field("saturation_reached", result.saturation_reached);
  w.Field("fraction", fraction);
  w.Field("rate_at_fraction", fraction * result.saturation_rps);
  w.EndObject();
  if (!saturation_run_json.empty()) w.Key("saturation_run").Raw(saturation_run_json);
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace odeserve::client
