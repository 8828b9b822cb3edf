// CheckHealth (the generated grpc.health.v1 stub) against the in-process fake server, and the
// status names odeserve-cli prints. The CLI's `health` command itself: CliTest.Health.
#include "client/rpc/connection.h"

#include "fake_server.h"
#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

using grpc::health::v1::HealthCheckResponse;

TEST(HealthTest, ChecksTheServerAndItsServices) {
  testing::FakeServer server;
  ConnectionOptions options;
  options.address = server.address();
  auto channel = MakeChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  const absl::Duration timeout = absl::Seconds(10);
  EXPECT_EQ(*CheckHealth(**channel, options, "", timeout), HealthCheckResponse::SERVING);
  EXPECT_EQ(*CheckHealth(**channel, options, "odeserve.v1.Inference", timeout),
            HealthCheckResponse::SERVING);
  EXPECT_EQ(*CheckHealth(**channel, options, "draining.Service", timeout),
            HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(**channel, options, "no.Such", timeout).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(HealthTest, NamesEveryStatusAndNumbersUnknownOnes) {
  EXPECT_EQ(HealthStatusName(HealthCheckResponse::UNKNOWN), "UNKNOWN");
  EXPECT_EQ(HealthStatusName(HealthCheckResponse::SERVING), "SERVING");
  EXPECT_EQ(HealthStatusName(HealthCheckResponse::NOT_SERVING), "NOT_SERVING");
  EXPECT_EQ(HealthStatusName(HealthCheckResponse::SERVICE_UNKNOWN), "SERVICE_UNKNOWN");
  // proto3 enums are open: a newer server may send a value this proto does not name.
  EXPECT_EQ(HealthStatusName(static_cast<HealthStatus>(7)), "STATUS_7");
}

}  // namespace
}  // namespace odeserve::client
