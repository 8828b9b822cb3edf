#pragma once
// Aggregation and reporting for odeserve-bench: per-call records in, a summary out (overall and
// per budget class), rendered as a text table, JSON and an SVG chart. No gRPC types here.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/lib/budget_mix.h"
#include "client/lib/stats.h"

namespace odeserve::client {

/// CallRecord::code of an open-loop arrival the generator never sent (max in-flight reached):
/// a user who got nothing, so a miss of its class and an error of the run.
inline constexpr int kDroppedCode = -1;

/// One finished call as the load generator saw it.
struct CallRecord {
  size_t budget_class = 0;
  double latency_ms = 0;  // client-measured (open loop: from the scheduled arrival time)
  double send_lag_ms = 0; // open loop: how long after its scheduled arrival it was sent
  int code = 0;           // gRPC status code (0 = OK), or kDroppedCode
  bool has_report = false;
  int steps = 0;
  int solver = 0;  // odeserve.v1.Solver value
  int field_evaluations = 0;
  int step_choice = 0;  // odeserve.v1.StepChoice value
  double queue_ms = 0;
  double compute_ms = 0;
  double server_total_ms = 0;
  double predicted_ms = 0;
  bool budget_met = false;
  int batch_size = 0;
};

/// Statistics of one budget class (or of all calls).
struct ClassSummary {
  std::string label;
  std::optional<double> budget_ms;
  int64_t requests = 0;     // finished calls, any status, and dropped arrivals
  int64_t ok = 0;
  int64_t client_hits = 0;  // OK and client latency <= budget (every OK call when no budget)
  int64_t reported = 0;     // OK calls that carried a ComputeReport
  int64_t server_met = 0;   // reported calls with budget_met = true
  int64_t floor_served = 0; // reported calls with step_choice = BUDGET_FLOOR
  Samples latency_ms;       // OK calls only
  Samples send_lag_ms;      // every call: the load generator's own lateness
  Samples steps;            // reported calls
  Samples field_evaluations;  // reported calls: steps times the solver's evaluations per step
  Samples queue_ms, compute_ms, server_total_ms;
  Samples prediction_error;  // |predicted - total| / total, reported calls with both > 0
  double batch_size_sum = 0;
  std::map<int, int64_t> steps_histogram;
  // Reported calls by the (solver, steps) the server ran, keyed "heun-1", "euler-4": the steps
  // alone hide a choice of a costlier solver.
  std::map<std::string, int64_t> choice_histogram;
  std::map<std::string, int64_t> errors;  // by gRPC code name

  /// Fraction of all calls in the class that returned OK within the budget (errors count as
  /// misses). NaN when the class saw no calls.
  double ClientHitRate() const;
  /// Fraction of reported calls whose server report says budget_met. NaN when none.
  double ServerMetRate() const;
  double MeanBatchSize() const;
};

/// What the run was, echoed into the reports.
struct RunInfo {
  std::string tool_version = "odeserve-bench 0.1.0";
  std::string address;
  std::string method;
  std::string model;
  std::string mode;  // "open" | "closed"
  double rate = 0;   // open loop: offered req/s
  int concurrency = 0;
  double duration_s = 0;
  double warmup_s = 0;
  int batch = 1;
  std::string budgets;  // the mix as given
  int steps = 0;
  std::string solver;
  std::string on_miss;
  int min_steps = 0;
  bool set_deadline = false;
  bool charge_send_lag = false;
  uint64_t seed = 0;
  int64_t distinct_inputs = 0;
  std::string started_at;  // RFC 3339
};

/// What the load generator counted besides the per-call records.
struct LoadTotals {
  double window_s = 0;       // the measurement window (--duration)
  int64_t sent = 0;          // measured calls sent (scheduled in the window)
  int64_t dropped = 0;       // measured arrivals not sent: max in-flight reached (open loop)
  // OK completions of any call, warm-up included, that landed inside the window: the rate the
  // server kept up. Counting the measured calls instead over the time until the last of them
  // finished would let one slow call (or one that ran into --timeout) shrink it several times.
  int64_t ok_in_window = 0;
  double drain_s = 0;        // from the window's end until the last measured call finished
};

struct BenchSummary {
  RunInfo info;
  LoadTotals totals;
  ClassSummary overall;
  std::vector<ClassSummary> classes;

  double ThroughputRps() const;  // OK completions inside the window per second of it
  double InputsPerSecond() const;
  double ErrorRate() const;      // non-OK (dropped arrivals included) / all measured calls
};

/// Aggregates records (budget_class indexes `classes`).
BenchSummary Summarize(const RunInfo& info, const std::vector<BudgetClass>& classes,
                       const std::vector<CallRecord>& records, const LoadTotals& totals);

/// Canonical gRPC status code name ("OK", "DEADLINE_EXCEEDED", ...); "CODE_<n>" if unknown.
std::string StatusCodeName(int code);

/// Human-readable report (several lines, a table per budget class).
std::string FormatSummaryTable(const BenchSummary& s);
/// Machine-readable report (one JSON document).
std::string SummaryToJson(const BenchSummary& s);
/// Chart: latency CDF per class against its budget, and mean chosen steps per class.
std::string SummaryToSvg(const BenchSummary& s);

}  // namespace odeserve::client
