#include "client/lib/health_codec.h"

#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

TEST(HealthCodecTest, EncodesTheServiceField) {
  EXPECT_EQ(EncodeHealthCheckRequest(""), "");
  EXPECT_EQ(EncodeHealthCheckRequest("odeserve.v1.Inference"),
            std::string("\x0a\x15odeserve.v1.Inference", 23));
  const std::string long_name(300, 'x');
  const std::string enc = EncodeHealthCheckRequest(long_name);
  EXPECT_EQ(enc.substr(0, 3), std::string("\x0a\xac\x02", 3));  // varint 300
  EXPECT_EQ(enc.size(), 303u);
}

TEST(HealthCodecTest, DecodesStatusAndSkipsUnknownFields) {
  EXPECT_EQ(*DecodeHealthCheckResponse(""), 0);
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x08\x01", 2)), 1);
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x12\x02hi\x08\x02", 6)), 2);
  EXPECT_FALSE(DecodeHealthCheckResponse(std::string("\x08", 1)).ok());
  EXPECT_FALSE(DecodeHealthCheckResponse(std::string("\x12\x05hi", 4)).ok());
  EXPECT_EQ(HealthStatusName(1), "SERVING");
  EXPECT_EQ(HealthStatusName(2), "NOT_SERVING");
  EXPECT_EQ(HealthStatusName(3), "SERVICE_UNKNOWN");
}

}  // namespace
}  // namespace odeserve::client
