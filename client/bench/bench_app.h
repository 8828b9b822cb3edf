#pragma once
// odeserve-bench as a function, so that tests can drive it without a process.

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/lib/sweep.h"
#include "client/rpc/load_generator.h"

namespace odeserve::client {

struct BenchOptions {
  LoadConfig load;              // inputs/budgets are filled from the two fields below
  std::string inputs_file;      // one text per line; empty: a small built-in sample
  std::string budgets = "none";  // budget mix, e.g. 5ms,10ms,20ms,40ms
  std::string json_out;          // "-": JSON to stdout instead of the table
  std::string svg_out;
  bool sweep = false;
  SweepOptions sweep_options;   // open_loop/start are set from load.rate / load.concurrency
  absl::Duration sweep_step = absl::Seconds(5);
  absl::Duration sweep_warmup = absl::Seconds(1);
  bool progress = true;
};

/// Runs the benchmark (or the sweep), prints the report to `out` and progress to `err`.
/// Returns 0, or 1 on failure (after printing "error: CODE: message"), 2 for bad flags.
int RunBench(BenchOptions options, std::ostream& out, std::ostream& err);

/// The built-in inputs used when no --inputs_file is given.
std::vector<std::string> BuiltinInputs();

}  // namespace odeserve::client
