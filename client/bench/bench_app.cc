#include "client/bench/bench_app.h"

#include <fstream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/lib/bench_report.h"
#include "client/lib/input_lines.h"
#include "client/lib/status_macros.h"
#include "client/rpc/models.h"

namespace odeserve::client {
namespace {

absl::StatusOr<std::vector<std::string>> LoadInputs(const std::string& path) {
  if (path.empty()) return BuiltinInputs();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --inputs_file '", path, "'"));
  std::vector<std::string> lines = ReadInputLines(in);
  if (lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--inputs_file '", path, "' has no lines"));
  }
  return lines;
}

absl::Status WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  out << content;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("writing '", path, "' failed"));
  return absl::OkStatus();
}

RunInfo MakeRunInfo(const BenchOptions& o, const LoadConfig& c) {
  RunInfo info;
  info.address = c.connection.address;
  info.method = c.method;
  info.model = c.model;
  info.mode = c.rate > 0 ? "open" : "closed";
  info.rate = c.rate;
  info.concurrency = c.concurrency;
  info.duration_s = absl::ToDoubleSeconds(c.duration);
  info.warmup_s = absl::ToDoubleSeconds(c.warmup);
  info.batch = c.batch;
  info.budgets = o.budgets;
  info.steps = c.compute.steps;
  info.solver = c.compute.solver;
  info.on_miss = c.compute.on_miss;
  info.min_steps = c.compute.min_steps;
  info.set_deadline = c.set_deadline;
  info.charge_send_lag = c.charge_send_lag;
  info.seed = c.seed;
  info.distinct_inputs = static_cast<int64_t>(c.inputs.size());
  info.started_at = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  return info;
}

absl::StatusOr<BenchSummary> RunOnce(const BenchOptions& o, const LoadConfig& c) {
  const RunInfo info = MakeRunInfo(o, c);
  OC_ASSIGN_OR_RETURN(LoadResult r, RunLoad(c));
  return Summarize(info, c.budgets, r.records, r.totals);
}

absl::Status WriteOutputs(const BenchOptions& o, const std::string& json, const BenchSummary* s,
                          std::ostream& out) {
  if (o.json_out == "-") {
    out << json;
  } else if (!o.json_out.empty()) {
    OC_RETURN_IF_ERROR(WriteFile(o.json_out, json));
  }
  if (!o.svg_out.empty() && s != nullptr) OC_RETURN_IF_ERROR(WriteFile(o.svg_out, SummaryToSvg(*s)));
  return absl::OkStatus();
}

absl::Status Run(BenchOptions& o, std::ostream& out, std::ostream& err) {
  LoadConfig& c = o.load;
  OC_ASSIGN_OR_RETURN(c.inputs, LoadInputs(o.inputs_file));
  OC_ASSIGN_OR_RETURN(c.budgets, ParseBudgetMix(o.budgets));
  OC_RETURN_IF_ERROR(ValidateLoadConfig(c));
  if (c.model.empty()) {
    OC_ASSIGN_OR_RETURN(auto channel, MakeChannel(c.connection));
    OC_ASSIGN_OR_RETURN(c.model, ResolveModel(*channel, c.connection, TaskOfMethod(c.method),
                                              absl::Seconds(10)));
    err << "model: " << c.model << "\n";
  }
  if (o.progress) c.progress = &err;

  if (!o.sweep) {
    OC_ASSIGN_OR_RETURN(BenchSummary s, RunOnce(o, c));
    if (o.json_out != "-") out << FormatSummaryTable(s);
    return WriteOutputs(o, SummaryToJson(s), &s, out);
  }

  SweepOptions so = o.sweep_options;
  so.open_loop = c.rate > 0;
  so.start = so.open_loop ? c.rate : c.concurrency;
  if (so.factor <= 1) so.factor = so.open_loop ? 1.5 : 2;
  if (so.patience < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--sweep_patience must be >= 1, got ", so.patience));
  }
  if (!so.p99_limit_ms) {
    // With budgets, a p99 above the largest budget is degradation.
    for (const auto& b : c.budgets) {
      if (b.budget) so.p99_limit_ms = std::max(so.p99_limit_ms.value_or(0), ToMs(*b.budget));
    }
  }
  SweepController ctl(so);
  std::vector<BenchSummary> runs;
  while (!ctl.done()) {
    LoadConfig step = c;
    const double level = ctl.next_level();
    if (so.open_loop) {
      step.rate = level;
    } else {
      step.concurrency = static_cast<int>(level);
    }
    step.duration = o.sweep_step;
    step.warmup = o.sweep_warmup;
    step.progress_label = absl::StrCat(so.open_loop ? "[rate " : "[concurrency ", level, "] ");
    OC_ASSIGN_OR_RETURN(BenchSummary s, RunOnce(o, step));
    SweepPoint p;
    p.throughput_rps = s.ThroughputRps();
    p.p50_ms = s.overall.latency_ms.Percentile(50);
    p.p99_ms = s.overall.latency_ms.Percentile(99);
    p.error_rate = s.ErrorRate();
    ctl.Observe(p);
    const SweepPoint seen = ctl.Result().points.back();
    err << absl::StrFormat("sweep %s %g: %.1f req/s, p99 %.2f ms, errors %.2f%% %s\n",
                           so.open_loop ? "rate" : "concurrency", seen.level, seen.throughput_rps,
                           seen.p99_ms, 100 * seen.error_rate,
                           seen.degraded ? "(degraded)" : seen.plateau ? "(plateau)" : "");
    runs.push_back(std::move(s));
  }
  const SweepResult result = ctl.Result();
  const BenchSummary* best = nullptr;
  for (size_t i = 0; i < result.points.size(); ++i) {
    if (result.saturation_rps > 0 && result.points[i].level == result.saturation_level) {
      best = &runs[i];
    }
  }
  if (o.json_out != "-") {
    out << FormatSweepTable(so, result);
    if (best != nullptr) out << "\nat saturation:\n" << FormatSummaryTable(*best);
  }
  return WriteOutputs(o, SweepToJson(so, result, best ? SummaryToJson(*best) : ""), best, out);
}

}  // namespace

std::vector<std::string> BuiltinInputs() {
  // Short and long package descriptions in the style of the Debian archive (the models'
  // training domain), so that a quick run needs no file.
  return {
      "command-line utility to convert between image formats",
      "GNU C library: shared libraries",
      "fast, scalable, distributed revision control system",
      "Python 3 bindings for the GObject introspection library",
      "collection of fonts for rendering East Asian scripts",
      "interactive high-level language for numerical computations",
      "daemon that synchronizes the system clock with remote time servers over the network",
      "arcade game in which you steer a snake that grows each time it eats an apple",
      "development files for the Qt 5 network module",
      "library for reading and writing compressed archives in the tar, cpio and zip formats; "
      "it supports streaming, sparse files and extended attributes",
      "documentation for the Perl programming language, including the FAQ and tutorials",
      "lightweight web server with support for FastCGI, SSL and URL rewriting",
      "molecular dynamics simulation package for biochemical systems",
      "virtual machine monitor that emulates a full computer with its processor and devices",
      "spell checker dictionary for German",
      "tool to record and replay terminal sessions as text",
  };
}

int RunBench(BenchOptions options, std::ostream& out, std::ostream& err) {
  err << PlaintextTokenWarning(options.load.connection);
  const absl::Status s = Run(options, out, err);
  if (s.ok()) return 0;
  err << "error: " << StatusCodeName(static_cast<int>(s.code())) << ": " << s.message() << "\n";
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace odeserve::client
