#pragma once
// Saturation search for odeserve-bench --sweep: raise the load step by step (closed-loop
// concurrency or open-loop rate) until throughput stops growing or latency/errors degrade;
// the saturation throughput is the best throughput seen at a healthy level.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace odeserve::client {

struct SweepOptions {
  bool open_loop = false;  // level = offered req/s; otherwise level = concurrency
  double start = 1;
  double factor = 2;        // next level = level * factor (closed loop: rounded, at least +1)
  double max_level = 1024;
  int max_points = 16;
  double max_error_rate = 0.01;         // above: degraded
  std::optional<double> p99_limit_ms;   // above: degraded
  double p99_growth = 5;                // open loop: p99 above this x the first p99: degraded
  double min_gain = 0.05;               // throughput gain below this fraction: plateau
  double keep_up = 0.9;                 // open loop: throughput below this x offered: degraded
  int patience = 2;                     // stop after this many plateau/degraded levels in a row
};

struct SweepPoint {
  double level = 0;
  double throughput_rps = 0;  // OK calls per second
  double p50_ms = 0;
  double p99_ms = 0;
  double error_rate = 0;
  // Filled by the controller:
  bool degraded = false;
  bool plateau = false;
  std::string note;
};

struct SweepResult {
  double saturation_rps = 0;     // best healthy throughput
  double saturation_level = 0;   // the level that reached it
  double saturation_p99_ms = 0;
  // False when no level degraded or plateaued before the sweep stopped (its level cap or its
  // number of levels): saturation_rps is then only a lower bound.
  bool saturation_reached = false;
  std::string stop_reason;
  std::vector<SweepPoint> points;
};

class SweepController {
 public:
  explicit SweepController(SweepOptions options);
  bool done() const { return done_; }
  /// The level to measure next (valid while !done()).
  double next_level() const { return next_; }
  /// Records the measurement at next_level() and decides the next one.
  void Observe(SweepPoint point);
  SweepResult Result() const;

 private:
  SweepOptions opt_;
  double next_;
  bool done_ = false;
  int strikes_ = 0;
  std::optional<size_t> best_;  // index of the best healthy point
  std::string stop_reason_;
  std::vector<SweepPoint> points_;
};

/// Text table of the levels and the saturation point; `fraction` (e.g. 0.7) adds the rate to
/// run at that fraction of saturation.
std::string FormatSweepTable(const SweepOptions& options, const SweepResult& result,
                             double fraction = 0.7);
/// JSON document of the sweep; `saturation_run_json` (a bench summary document, may be empty)
/// is embedded as "saturation_run".
std::string SweepToJson(const SweepOptions& options, const SweepResult& result,
                        const std::string& saturation_run_json, double fraction = 0.7);

}  // namespace odeserve::client
