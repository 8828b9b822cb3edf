#pragma once
// The odeserve-bench load generator over real gRPC (callback API, one issuing thread).
//  - open loop: Poisson arrivals at `rate`; a call is sent at its arrival time whatever the
//    state of earlier calls (latency is measured from the scheduled arrival, so a slow client
//    cannot hide server queueing: no coordinated omission);
//  - closed loop: `concurrency` calls in flight; each completion starts the next call.
// Calls scheduled in [warmup, warmup + duration) are measured.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/lib/bench_report.h"
#include "client/lib/budget_mix.h"
#include "client/rpc/compute_options.h"
#include "client/rpc/connection.h"

namespace odeserve::client {

struct LoadConfig {
  ConnectionOptions connection;
  int connections = 1;          // channels (TCP connections) to spread calls over
  std::string method = "embed";  // embed | classify | translate
  std::string model;
  std::vector<std::string> inputs;  // sampled uniformly with `seed`
  int batch = 1;                    // inputs per request
  uint64_t seed = 1;
  std::vector<BudgetClass> budgets{{"none", std::nullopt, 1.0}};
  ComputeFlags compute;        // its budget is ignored: each call draws one from `budgets`
  bool set_deadline = false;   // also set the gRPC deadline to the drawn budget
  // Open loop: a call sent late (the generator's own lag after its scheduled arrival, which its
  // latency counts) tells the server only what is left of its budget (and deadline), as a user
  // who arrived on time would.
  bool charge_send_lag = true;
  absl::Duration timeout = absl::Seconds(30);  // gRPC deadline otherwise
  bool normalize = false;
  bool truncate = true;
  int top_k = 1;
  int beam_size = 0;
  double rate = 0;             // > 0: open loop at this many req/s (at most kMaxRate)
  int concurrency = 1;         // closed loop
  absl::Duration warmup = absl::Seconds(2);
  absl::Duration duration = absl::Seconds(10);
  absl::Duration connect_timeout = absl::Seconds(10);  // to wait for each channel at start
  int64_t max_inflight = 20000;  // open loop: arrivals beyond this are dropped and counted
  std::ostream* progress = nullptr;  // one line a second when set
  std::string progress_label;
};

struct LoadResult {
  std::vector<CallRecord> records;  // measured calls, and measured arrivals dropped (kDroppedCode)
  LoadTotals totals;
};

// Above this the arrival gaps round to nothing on the steady clock.
inline constexpr double kMaxRate = 1e6;

absl::Status ValidateLoadConfig(const LoadConfig& config);

/// What is left of `budget` once the call is sent `lag` after its scheduled arrival: at least
/// 1 us (a budget must be positive; the server then serves its floor or refuses).
absl::Duration RemainingBudget(absl::Duration budget, absl::Duration lag);
/// Connects, runs the load and returns the measured calls.
absl::StatusOr<LoadResult> RunLoad(const LoadConfig& config);

}  // namespace odeserve::client
