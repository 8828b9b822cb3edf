// rpc/status_mapping: absl::Status -> grpc::Status keeps the canonical code and the message.

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/rpc/status_mapping.h"
#include "server/tokenizer/ngram_hash.h"

namespace odeserve::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ToGrpcStatus, OkIsOk) {
  const grpc::Status status = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(status.error_message(), "");
}

TEST(ToGrpcStatus, EveryCodeMapsToTheSameGrpcCode) {
  const std::pair<absl::StatusCode, grpc::StatusCode> pairs[] = {
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& [from, to] : pairs) {
    const std::string message = "model 'm': input 3 is " + absl::StatusCodeToString(from);
    const grpc::Status status = ToGrpcStatus(absl::Status(from, message));
    EXPECT_EQ(status.error_code(), to) << absl::StatusCodeToString(from);
    EXPECT_EQ(status.error_message(), message);
    EXPECT_FALSE(status.ok());
  }
}

TEST(ToGrpcStatus, CodeOutsideTheCanonicalRangeIsUnknown) {
  const grpc::Status status = ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "odd"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(status.error_message(), "odd");
}

TEST(ToGrpcStatus, LongMessagesAreTruncated) {
  const std::string at_limit(2048, 'a');
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError(at_limit)).error_message(), at_limit);

  const std::string long_message = "input 0: " + std::string(10000, 'x');
  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(long_message));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), long_message.substr(0, 2048) + "...(truncated)");
  EXPECT_THAT(status.error_message(), StartsWith("input 0: xxx"));
}

// gRPC status messages travel as (percent-encoded) UTF-8 and clients decode them as text:
// truncation must not cut a multi-byte character in half.
TEST(ToGrpcStatus, TruncationKeepsMessagesValidUtf8) {
  // 2047 ASCII bytes, then 2-byte characters: byte 2048 is the middle of one.
  std::string message(2047, 'a');
  for (int i = 0; i < 100; ++i) message += "\xC3\xA9";  // U+00E9
  ASSERT_TRUE(tokenizer::IsValidUtf8(message));
  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_THAT(status.error_message(), HasSubstr("...(truncated)"));
  EXPECT_TRUE(tokenizer::IsValidUtf8(status.error_message())) << "cut inside a UTF-8 character";
  EXPECT_LE(status.error_message().size(), 2048u + std::string("...(truncated)").size());
}

}  // namespace
}  // namespace odeserve::rpc
