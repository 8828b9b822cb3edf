#include "client/rpc/compute_options.h"

#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

TEST(ComputeOptionsTest, ParsesSolversAndPolicies) {
  EXPECT_EQ(*ParseSolver(""), v1::SOLVER_UNSPECIFIED);
  EXPECT_EQ(*ParseSolver("euler"), v1::EULER);
  EXPECT_EQ(*ParseSolver("Heun"), v1::HEUN);
  EXPECT_EQ(*ParseSolver("RK4"), v1::RK4);
  EXPECT_EQ(ParseSolver("midpoint").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseMissPolicy("floor"), v1::SERVE_FLOOR);
  EXPECT_EQ(*ParseMissPolicy("SERVE_FLOOR"), v1::SERVE_FLOOR);
  EXPECT_EQ(*ParseMissPolicy("refuse"), v1::REFUSE);
  EXPECT_EQ(*ParseMissPolicy(""), v1::BUDGET_MISS_POLICY_UNSPECIFIED);
  EXPECT_FALSE(ParseMissPolicy("drop").ok());
}

TEST(ComputeOptionsTest, BuildsTheProto) {
  ComputeFlags f;
  f.steps = 6;
  f.solver = "rk4";
  f.budget = absl::Milliseconds(1500);
  f.min_steps = 2;
  f.on_miss = "refuse";
  auto c = BuildComputeOptions(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->steps(), 6);
  EXPECT_EQ(c->solver(), v1::RK4);
  EXPECT_EQ(c->latency_budget().seconds(), 1);
  EXPECT_EQ(c->latency_budget().nanos(), 500000000);
  EXPECT_EQ(c->min_steps(), 2);
  EXPECT_EQ(c->on_budget_miss(), v1::REFUSE);
  EXPECT_DOUBLE_EQ(ProtoMs(c->latency_budget()), 1500);
  EXPECT_FALSE(BuildComputeOptions({}).value().has_latency_budget());
}

TEST(ComputeOptionsTest, RejectsBadValues) {
  ComputeFlags f;
  f.budget = absl::ZeroDuration();
  EXPECT_EQ(BuildComputeOptions(f).status().code(), absl::StatusCode::kInvalidArgument);
  f = {};
  f.steps = -1;
  EXPECT_NE(BuildComputeOptions(f).status().message().find("--steps"), absl::string_view::npos);
  f = {};
  f.solver = "euler2";
  EXPECT_FALSE(BuildComputeOptions(f).ok());
}

}  // namespace
}  // namespace odeserve::client
