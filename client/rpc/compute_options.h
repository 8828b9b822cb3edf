#pragma once
// Command-line compute settings -> odeserve.v1.ComputeOptions, and proto <-> absl helpers.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "odeserve/v1/inference.pb.h"

namespace odeserve::client {

struct ComputeFlags {
  int steps = 0;                          // 0: server chooses
  std::string solver;                     // "" | euler | heun | rk4
  std::optional<absl::Duration> budget;   // latency budget
  int min_steps = 0;
  std::string on_miss;                    // "" | floor | refuse
  int decoder_steps = 0;
};

/// "euler" | "heun" | "rk4" (any case; also the enum names); "" = SOLVER_UNSPECIFIED.
absl::StatusOr<v1::Solver> ParseSolver(absl::string_view name);
/// "floor" | "serve_floor" | "refuse" (any case); "" = unspecified (the server serves the floor).
absl::StatusOr<v1::BudgetMissPolicy> ParseMissPolicy(absl::string_view name);
/// Validates the flags (non-negative steps, positive budget) and builds the proto.
absl::StatusOr<v1::ComputeOptions> BuildComputeOptions(const ComputeFlags& flags);

void SetDuration(absl::Duration d, google::protobuf::Duration* out);
absl::Duration FromProto(const google::protobuf::Duration& d);
inline double ProtoMs(const google::protobuf::Duration& d) {
  return absl::ToDoubleMilliseconds(FromProto(d));
}
/// "euler", "heun", "rk4" or "unspecified".
std::string SolverName(v1::Solver solver);

}  // namespace odeserve::client
