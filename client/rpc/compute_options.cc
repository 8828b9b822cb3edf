#include "client/rpc/compute_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace odeserve::client {

absl::StatusOr<v1::Solver> ParseSolver(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n.empty()) return v1::SOLVER_UNSPECIFIED;
  if (n == "euler") return v1::EULER;
  if (n == "heun") return v1::HEUN;
  if (n == "rk4") return v1::RK4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown solver '", name, "' (expected euler, heun or rk4)"));
}

absl::StatusOr<v1::BudgetMissPolicy> ParseMissPolicy(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n.empty()) return v1::BUDGET_MISS_POLICY_UNSPECIFIED;
  if (n == "floor" || n == "serve_floor") return v1::SERVE_FLOOR;
  if (n == "refuse") return v1::REFUSE;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --on_miss '", name, "' (expected floor or refuse)"));
}

absl::StatusOr<v1::ComputeOptions> BuildComputeOptions(const ComputeFlags& flags) {
  v1::ComputeOptions out;
  if (flags.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--steps must be >= 0, got ", flags.steps));
  }
  if (flags.min_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_steps must be >= 0, got ", flags.min_steps));
  }
  if (flags.decoder_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--decoder_steps must be >= 0, got ", flags.decoder_steps));
  }
  out.set_steps(flags.steps);
  out.set_min_steps(flags.min_steps);
  out.set_decoder_steps(flags.decoder_steps);
  auto solver = ParseSolver(flags.solver);
  if (!solver.ok()) return solver.status();
  out.set_solver(*solver);
  auto policy = ParseMissPolicy(flags.on_miss);
  if (!policy.ok()) return policy.status();
  out.set_on_budget_miss(*policy);
  if (flags.budget) {
    if (*flags.budget <= absl::ZeroDuration() || *flags.budget == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--budget must be a positive duration, got ", absl::FormatDuration(*flags.budget)));
    }
    SetDuration(*flags.budget, out.mutable_latency_budget());
  }
  return out;
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

std::string SolverName(v1::Solver solver) {
  switch (solver) {
    case v1::EULER: return "euler";
    case v1::HEUN: return "heun";
    case v1::RK4: return "rk4";
    default: return "unspecified";
  }
}

}  // namespace odeserve::client
