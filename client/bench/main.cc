// odeserve-bench: load generator and latency-budget report. See client/README.md.
#include <iostream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "client/rpc/connection_flags.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "client/bench/bench_app.h"

ABSL_FLAG(int, connections, 1, "gRPC channels (TCP connections) to spread calls over");
ABSL_FLAG(std::string, method, "embed", "embed | classify | translate");
ABSL_FLAG(std::string, model, "", "model name (default: the only ready model of the task)");
ABSL_FLAG(std::string, inputs_file, "", "texts, one per line, sampled with --seed (default: built-in sample)");
ABSL_FLAG(int, batch, 1, "inputs per request");
ABSL_FLAG(uint64_t, seed, 1, "seed for input sampling, budget draws and arrivals");
ABSL_FLAG(double, rate, 0, "open loop: Poisson arrivals at this many req/s (0 = closed loop)");
ABSL_FLAG(int, concurrency, 1, "closed loop: calls in flight");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "measured duration");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2), "unmeasured warm-up before it");
ABSL_FLAG(std::string, budgets, "none", "budget mix drawn per request, e.g. 5ms,10ms,20ms,40ms or none (weights: 5ms:3,40ms:1)");
ABSL_FLAG(int, steps, 0, "fixed solver steps for every request (0 = server's choice)");
ABSL_FLAG(std::string, solver, "", "euler | heun | rk4");
ABSL_FLAG(int, min_steps, 0, "quality floor for budget-driven step choice");
ABSL_FLAG(std::string, on_miss, "", "floor | refuse when a budget cannot be met");
ABSL_FLAG(bool, set_deadline, false, "also set the gRPC deadline to the request's budget");
ABSL_FLAG(bool, charge_send_lag, true,
          "open loop: a call sent after its scheduled arrival gets only what is left of its budget "
          "(and deadline); its latency counts from the scheduled arrival either way");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30), "gRPC deadline of calls without --set_deadline");
ABSL_FLAG(bool, normalize, false, "embed: L2-normalize");
ABSL_FLAG(bool, truncate, true, "cut inputs longer than the model's limit");
ABSL_FLAG(int, top_k, 1, "classify: labels per input");
ABSL_FLAG(int, beam_size, 0, "translate: beam size");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(10), "how long to wait for the server at start");
ABSL_FLAG(int64_t, max_inflight, 20000, "open loop: arrivals beyond this many in flight are dropped (and counted)");
ABSL_FLAG(std::string, json_out, "", "write the report as JSON here (- = stdout, instead of the table)");
ABSL_FLAG(std::string, svg_out, "", "write the latency/steps chart as SVG here");
ABSL_FLAG(bool, sweep, false, "find saturation throughput: raise --concurrency (or --rate, if given) step by step");
ABSL_FLAG(double, sweep_factor, 0, "sweep: level multiplier per step (default 2 closed loop, 1.5 open loop)");
ABSL_FLAG(double, sweep_max, 1024, "sweep: highest concurrency or rate");
ABSL_FLAG(absl::Duration, sweep_step, absl::Seconds(5), "sweep: measured time per level");
ABSL_FLAG(absl::Duration, sweep_warmup, absl::Seconds(1), "sweep: warm-up per level");
ABSL_FLAG(double, sweep_max_error_rate, 0.01, "sweep: error rate that counts as degraded");
ABSL_FLAG(std::optional<double>, sweep_p99_limit_ms, std::nullopt, "sweep: p99 (ms) that counts as degraded (default: the largest budget)");
ABSL_FLAG(double, sweep_min_gain, 0.05, "sweep: throughput gain below this fraction is a plateau");
ABSL_FLAG(int, sweep_patience, 2, "sweep: stop after this many plateau/degraded levels in a row");
ABSL_FLAG(bool, progress, true, "print a progress line to stderr each second");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "odeserve-bench [flags]: open-loop (--rate) or closed-loop (--concurrency) load with a "
      "latency-budget mix; reports latency, budget hit rates and chosen steps per class.");
  absl::ParseCommandLine(argc, argv);
  odeserve::client::BenchOptions o;
  auto& c = o.load;
  c.connection = odeserve::client::ConnectionFromFlags();
  c.connections = absl::GetFlag(FLAGS_connections);
  c.method = absl::GetFlag(FLAGS_method);
  c.model = absl::GetFlag(FLAGS_model);
  c.batch = absl::GetFlag(FLAGS_batch);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.rate = absl::GetFlag(FLAGS_rate);
  c.concurrency = absl::GetFlag(FLAGS_concurrency);
  c.duration = absl::GetFlag(FLAGS_duration);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.compute.steps = absl::GetFlag(FLAGS_steps);
  c.compute.solver = absl::GetFlag(FLAGS_solver);
  c.compute.min_steps = absl::GetFlag(FLAGS_min_steps);
  c.compute.on_miss = absl::GetFlag(FLAGS_on_miss);
  c.set_deadline = absl::GetFlag(FLAGS_set_deadline);
  c.charge_send_lag = absl::GetFlag(FLAGS_charge_send_lag);
  c.timeout = absl::GetFlag(FLAGS_timeout);
  c.normalize = absl::GetFlag(FLAGS_normalize);
  c.truncate = absl::GetFlag(FLAGS_truncate);
  c.top_k = absl::GetFlag(FLAGS_top_k);
  c.beam_size = absl::GetFlag(FLAGS_beam_size);
  c.max_inflight = absl::GetFlag(FLAGS_max_inflight);
  c.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.inputs_file = absl::GetFlag(FLAGS_inputs_file);
  o.budgets = absl::GetFlag(FLAGS_budgets);
  o.json_out = absl::GetFlag(FLAGS_json_out);
  o.svg_out = absl::GetFlag(FLAGS_svg_out);
  o.sweep = absl::GetFlag(FLAGS_sweep);
  o.sweep_options.factor = absl::GetFlag(FLAGS_sweep_factor);
  o.sweep_options.max_level = absl::GetFlag(FLAGS_sweep_max);
  o.sweep_options.max_error_rate = absl::GetFlag(FLAGS_sweep_max_error_rate);
  o.sweep_options.p99_limit_ms = absl::GetFlag(FLAGS_sweep_p99_limit_ms);
  o.sweep_options.min_gain = absl::GetFlag(FLAGS_sweep_min_gain);
  o.sweep_options.patience = absl::GetFlag(FLAGS_sweep_patience);
  o.sweep_step = absl::GetFlag(FLAGS_sweep_step);
  o.sweep_warmup = absl::GetFlag(FLAGS_sweep_warmup);
  o.progress = absl::GetFlag(FLAGS_progress);
  return odeserve::client::RunBench(std::move(o), std::cout, std::cerr);
}
