#include "client/lib/bench_report.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/lib/json_writer.h"
#include "client/lib/svg_chart.h"

namespace odeserve::client {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kStepChoiceBudgetFloor = 4;  // odeserve.v1.StepChoice.BUDGET_FLOOR

// odeserve.v1.Solver values, lower-cased as the CLIs spell them (no proto types in this layer).
std::string SolverLabel(int solver) {
  switch (solver) {
    case 1: return "euler";
    case 2: return "heun";
    case 3: return "rk4";
    default: return absl::StrCat("solver", solver);
  }
}

void AddRecord(ClassSummary& c, const CallRecord& r) {
  ++c.requests;
  if (r.code == kDroppedCode) {  // never sent: no lag, no latency
    ++c.errors[StatusCodeName(r.code)];
    return;
  }
  c.send_lag_ms.Add(r.send_lag_ms);
  if (r.code != 0) {
    ++c.errors[StatusCodeName(r.code)];
    return;
  }
  ++c.ok;
  c.latency_ms.Add(r.latency_ms);
  if (!c.budget_ms || r.latency_ms <= *c.budget_ms) ++c.client_hits;
  if (!r.has_report) return;
  ++c.reported;
  if (r.budget_met) ++c.server_met;
  if (r.step_choice == kStepChoiceBudgetFloor) ++c.floor_served;
  c.steps.Add(r.steps);
  ++c.steps_histogram[r.steps];
  c.field_evaluations.Add(r.field_evaluations);
  ++c.choice_histogram[absl::StrCat(SolverLabel(r.solver), "-", r.steps)];
  c.queue_ms.Add(r.queue_ms);
  c.compute_ms.Add(r.compute_ms);
  c.server_total_ms.Add(r.server_total_ms);
  if (r.predicted_ms > 0 && r.server_total_ms > 0) {
    c.prediction_error.Add(std::fabs(r.predicted_ms - r.server_total_ms) / r.server_total_ms);
  }
  c.batch_size_sum += r.batch_size;
}

std::string Ms(double v) { return std::isfinite(v) ? absl::StrFormat("%.2f", v) : "-"; }
std::string Pct(double v) { return std::isfinite(v) ? absl::StrFormat("%.1f%%", 100 * v) : "-"; }

std::string StepsCell(const ClassSummary& c) {
  if (c.steps.empty()) return "-";
  return absl::StrFormat("%.2f (%g-%g)", c.steps.Mean(), c.steps.Min(), c.steps.Max());
}

std::string EvaluationsCell(const ClassSummary& c) {
  return c.field_evaluations.empty() ? "-" : absl::StrFormat("%.2f", c.field_evaluations.Mean());
}

// "key=n,key=n", or "-" when empty: error codes, and the (solver, steps) choices.
std::string CountsCell(const std::map<std::string, int64_t>& counts) {
  if (counts.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [key, n] : counts) parts.push_back(absl::StrCat(key, "=", n));
  return absl::StrJoin(parts, ",");
}

void WriteCounts(JsonWriter& w, absl::string_view key, const std::map<std::string, int64_t>& counts) {
  w.Key(key).BeginObject();
  for (const auto& [name, n] : counts) w.Field(name, n);
  w.EndObject();
}

void WriteSamples(JsonWriter& w, absl::string_view key, const Samples& s) {
  w.Key(key).BeginObject();
  w.Field("count", static_cast<int64_t>(s.count()));
  w.Field("mean", s.Mean());
  w.Field("min", s.Min());
  w.Field("p50", s.Percentile(50));
  w.Field("p90", s.Percentile(90));
  w.Field("p99", s.Percentile(99));
  w.Field("p999", s.Percentile(99.9));
  w.Field("max", s.Max());
  w.EndObject();
}

void WriteClass(JsonWriter& w, const ClassSummary& c) {
  w.BeginObject();
  w.Field("label", c.label);
  w.Key("budget_ms");
  if (c.budget_ms) {
    w.Number(*c.budget_ms);
  } else {
    w.Null();
  }
  w.Field("requests", c.requests);
  w.Field("ok", c.ok);
  w.Field("client_hits", c.client_hits);
  w.Field("client_hit_rate", c.ClientHitRate());
  w.Field("reported", c.reported);
  w.Field("server_budget_met", c.server_met);
  w.Field("server_budget_met_rate", c.ServerMetRate());
  w.Field("floor_served", c.floor_served);
  WriteSamples(w, "latency_ms", c.latency_ms);
  WriteSamples(w, "send_lag_ms", c.send_lag_ms);
  WriteSamples(w, "steps", c.steps);
  w.Key("steps_histogram").BeginObject();
  for (const auto& [steps, n] : c.steps_histogram) w.Field(absl::StrCat(steps), n);
  w.EndObject();
  WriteSamples(w, "field_evaluations", c.field_evaluations);
  WriteCounts(w, "choice_histogram", c.choice_histogram);
  w.Key("server_ms").BeginObject();
  w.Field("queue_mean", c.queue_ms.Mean());
  w.Field("queue_p99", c.queue_ms.Percentile(99));
  w.Field("compute_mean", c.compute_ms.Mean());
  w.Field("compute_p99", c.compute_ms.Percentile(99));
  w.Field("total_mean", c.server_total_ms.Mean());
  w.Field("total_p99", c.server_total_ms.Percentile(99));
  w.EndObject();
  w.Field("prediction_mean_abs_relative_error", c.prediction_error.Mean());
  w.Field("mean_batch_size", c.MeanBatchSize());
  WriteCounts(w, "errors", c.errors);
  w.EndObject();
}

}  // namespace

double ClassSummary::ClientHitRate() const {
  return requests ? static_cast<double>(client_hits) / requests : kNaN;
}
double ClassSummary::ServerMetRate() const {
  return reported ? static_cast<double>(server_met) / reported : kNaN;
}
double ClassSummary::MeanBatchSize() const {
  return reported ? batch_size_sum / reported : kNaN;
}

double BenchSummary::ThroughputRps() const {
  return totals.window_s > 0 ? totals.ok_in_window / totals.window_s : kNaN;
}
double BenchSummary::InputsPerSecond() const {
  return totals.window_s > 0
             ? totals.ok_in_window * static_cast<double>(info.batch) / totals.window_s
             : kNaN;
}
double BenchSummary::ErrorRate() const {
  return overall.requests ? static_cast<double>(overall.requests - overall.ok) / overall.requests
                          : 0.0;
}

std::string StatusCodeName(int code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",   "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code == kDroppedCode) return "DROPPED";
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[code];
  return absl::StrCat("CODE_", code);
}

BenchSummary Summarize(const RunInfo& info, const std::vector<BudgetClass>& classes,
                       const std::vector<CallRecord>& records, const LoadTotals& totals) {
  BenchSummary s;
  s.info = info;
  s.totals = totals;
  s.overall.label = "all";
  for (const auto& c : classes) {
    ClassSummary cs;
    cs.label = c.label;
    if (c.budget) cs.budget_ms = ToMs(*c.budget);
    s.classes.push_back(std::move(cs));
  }
  for (const CallRecord& r : records) {
    AddRecord(s.overall, r);
    if (r.budget_class < s.classes.size()) AddRecord(s.classes[r.budget_class], r);
  }
  // Overall client hits: count per-class hits (the overall entry has no single budget).
  s.overall.client_hits = 0;
  for (const auto& c : s.classes) s.overall.client_hits += c.client_hits;
  return s;
}

std::string FormatSummaryTable(const BenchSummary& s) {
  const RunInfo& i = s.info;
  std::string out;
  absl::StrAppend(&out, "odeserve-bench: ", i.method, " model=", i.model, " @ ", i.address, "\n");
  if (i.mode == "open") {
    absl::StrAppendFormat(&out, "  open loop, Poisson arrivals at %.1f req/s", i.rate);
  } else {
    absl::StrAppendFormat(&out, "  closed loop, concurrency %d", i.concurrency);
  }
  absl::StrAppendFormat(&out, ", %.1f s measured after %.1f s warmup, batch %d, budgets %s",
                        s.totals.window_s, i.warmup_s, i.batch, i.budgets);
  if (i.steps > 0) absl::StrAppend(&out, ", steps ", i.steps);
  if (!i.solver.empty()) absl::StrAppend(&out, ", solver ", i.solver);
  absl::StrAppend(&out, "\n\n");
  absl::StrAppendFormat(&out,
                        "requests %d  ok %d  errors %d (dropped %d)  throughput %.1f req/s "
                        "(%.1f inputs/s; the last measured call finished %.2f s after the window)\n",
                        s.overall.requests, s.overall.ok, s.overall.requests - s.overall.ok,
                        s.totals.dropped, s.ThroughputRps(), s.InputsPerSecond(), s.totals.drain_s);
  const ClassSummary& a = s.overall;
  absl::StrAppend(&out, "latency ms (client, OK calls): p50 ", Ms(a.latency_ms.Percentile(50)),
                  "  p90 ", Ms(a.latency_ms.Percentile(90)), "  p99 ",
                  Ms(a.latency_ms.Percentile(99)), "  max ", Ms(a.latency_ms.Max()), "  mean ",
                  Ms(a.latency_ms.Mean()), "\n");
  absl::StrAppend(&out, "client send lag ms (sent after the scheduled arrival, in the latency): p50 ",
                  Ms(a.send_lag_ms.Percentile(50)), "  p99 ", Ms(a.send_lag_ms.Percentile(99)), "  max ",
                  Ms(a.send_lag_ms.Max()), "\n");
  absl::StrAppend(&out, "server split ms (means): queue ", Ms(a.queue_ms.Mean()), "  compute ",
                  Ms(a.compute_ms.Mean()), "  total ", Ms(a.server_total_ms.Mean()),
                  "  cost-model error ", Pct(a.prediction_error.Mean()), "  batch ",
                  absl::StrFormat("%.2f", a.MeanBatchSize()), "\n\n");

  const char* fmt = "%-8s %8s %8s %8s %8s %8s %8s %9s %9s %18s %6s %7s %8s %7s  %s\n";
  absl::StrAppendFormat(&out, fmt, "budget", "reqs", "ok", "p50", "p90", "p99", "max", "hit",
                        "met(srv)", "steps mean(min-max)", "evals", "queue", "compute", "floor",
                        "errors");
  auto row = [&](const ClassSummary& c) {
    absl::StrAppendFormat(&out, fmt, c.label, absl::StrCat(c.requests), absl::StrCat(c.ok),
                          Ms(c.latency_ms.Percentile(50)), Ms(c.latency_ms.Percentile(90)),
                          Ms(c.latency_ms.Percentile(99)), Ms(c.latency_ms.Max()),
                          Pct(c.ClientHitRate()), Pct(c.ServerMetRate()), StepsCell(c),
                          EvaluationsCell(c), Ms(c.queue_ms.Mean()), Ms(c.compute_ms.Mean()),
                          absl::StrCat(c.floor_served), CountsCell(c.errors));
  };
  for (const auto& c : s.classes) row(c);
  if (s.classes.size() > 1) row(s.overall);
  absl::StrAppend(&out, "\nchoices (solver-steps=calls):\n");
  for (const auto& c : s.classes) {
    absl::StrAppendFormat(&out, "  %-8s %s\n", c.label, CountsCell(c.choice_histogram));
  }
  absl::StrAppend(&out,
                  "\nhit = OK and client latency <= budget, over all calls of the class (errors and "
                  "dropped arrivals are misses); "
                  "met(srv) = server-reported budget_met; evals = mean field evaluations (steps x the "
                  "solver's evaluations per step); floor = budget missed, floor served\n");
  return out;
}

std::string SummaryToJson(const BenchSummary& s) {
  JsonWriter w;
  const RunInfo& i = s.info;
  w.BeginObject();
  w.Key("run").BeginObject();
  w.Field("tool", i.tool_version);
  w.Field("started_at", i.started_at);
  w.Field("address", i.address);
  w.Field("method", i.method);
  w.Field("model", i.model);
  w.Field("mode", i.mode);
  if (i.mode == "open") {
    w.Field("rate", i.rate);
  } else {
    w.Field("concurrency", i.concurrency);
  }
  w.Field("duration_s", i.duration_s);
  w.Field("warmup_s", i.warmup_s);
  w.Field("batch", i.batch);
  w.Field("budgets", i.budgets);
  w.Field("steps", i.steps);
  w.Field("solver", i.solver);
  w.Field("on_miss", i.on_miss);
  w.Field("min_steps", i.min_steps);
  w.Field("set_deadline", i.set_deadline);
  w.Field("charge_send_lag", i.charge_send_lag);
  w.Field("seed", i.seed);
  w.Field("distinct_inputs", i.distinct_inputs);
  w.EndObject();
  w.Field("elapsed_s", s.totals.window_s);
  w.Field("drain_s", s.totals.drain_s);
  w.Field("sent", s.totals.sent);
  w.Field("dropped", s.totals.dropped);
  w.Field("ok_in_window", s.totals.ok_in_window);
  w.Field("requests", s.overall.requests);
  w.Field("ok", s.overall.ok);
  w.Field("error_rate", s.ErrorRate());
  w.Field("throughput_rps", s.ThroughputRps());
  w.Field("inputs_per_s", s.InputsPerSecond());
  w.Key("overall");
  WriteClass(w, s.overall);
  w.Key("classes").BeginArray();
  for (const auto& c : s.classes) WriteClass(w, c);
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

std::string SummaryToSvg(const BenchSummary& s) {
  ChartSpec spec;
  const RunInfo& i = s.info;
  spec.title = absl::StrCat("odeserve-bench: ", i.method, " ", i.model);
  spec.subtitle = absl::StrCat(
      i.mode == "open" ? absl::StrFormat("open loop %.1f req/s", i.rate)
                       : absl::StrFormat("closed loop x%d", i.concurrency),
      absl::StrFormat(", %.1f s, batch %d, %d calls, %.1f req/s OK, p99 %s ms", s.totals.window_s,
                      i.batch, s.overall.requests, s.ThroughputRps(),
                      Ms(s.overall.latency_ms.Percentile(99))),
      i.steps > 0 ? absl::StrCat(", steps ", i.steps) : "",
      i.solver.empty() ? "" : absl::StrCat(", ", i.solver));
  bool any_steps = false;
  for (const auto& c : s.classes) {
    CdfSeries series;
    series.label = absl::StrFormat("%s: n=%d hit %s  p50 %s  p99 %s ms", c.label, c.requests,
                                   Pct(c.ClientHitRate()), Ms(c.latency_ms.Percentile(50)),
                                   Ms(c.latency_ms.Percentile(99)));
    series.sorted_values = c.latency_ms.Sorted();
    series.marker = c.budget_ms;
    spec.cdf.push_back(std::move(series));
    BarItem bar;
    bar.label = c.budget_ms ? absl::StrCat("budget ", c.label) : "no budget";
    bar.value = c.steps.empty() ? kNaN : c.steps.Mean();
    bar.annotation = c.steps.empty()
                         ? "no reports"
                         : absl::StrFormat("%.2f (%g-%g), %.2f evaluations", c.steps.Mean(),
                                           c.steps.Min(), c.steps.Max(),
                                           c.field_evaluations.Mean());
    any_steps |= !c.steps.empty();
    spec.bars.push_back(std::move(bar));
  }
  if (!any_steps) spec.bars.clear();
  return RenderChartSvg(spec);
}

}  // namespace odeserve::client
