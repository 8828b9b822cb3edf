#include "server/core/work_limit.h"

#include <cstdint>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace odeserve::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(CallWork, CountsEncoderTokensAndDecoderPositionsOfEveryHypothesis) {
  CallShape embed;
  embed.tokens = 64 * 128;
  embed.encoder_field_evaluations = 8 * 4;  // RK4, 8 steps
  EXPECT_EQ(CallWork(embed), 64 * 128 * 32);

  // The probed call: 32 inputs of 128 tokens, beam 8, 12 + 12 Euler steps, 256 output positions.
  CallShape translate;
  translate.tokens = 32 * 128;
  translate.encoder_field_evaluations = 12;
  translate.hypotheses = 32 * 8;
  translate.max_output_tokens = 256;
  translate.decoder_field_evaluations = 12;
  EXPECT_EQ(CallWork(translate), 32 * 128 * 12 + 32 * 8 * 256 * 12);
}

TEST(CallWork, SaturatesInsteadOfOverflowing) {
  CallShape huge;
  huge.tokens = std::numeric_limits<int64_t>::max() / 2;
  huge.encoder_field_evaluations = 4;
  huge.hypotheses = std::numeric_limits<int64_t>::max() / 3;
  huge.max_output_tokens = 8192;
  huge.decoder_field_evaluations = 1024;
  EXPECT_EQ(CallWork(huge), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(CheckCallWork(huge, std::numeric_limits<int64_t>::max() - 1, "m").ok());
}

TEST(CheckCallWork, AtTheLimitIsServedOverItIsRefusedNamingEveryFactor) {
  CallShape shape;
  shape.tokens = 100;
  shape.encoder_field_evaluations = 10;
  EXPECT_TRUE(CheckCallWork(shape, 1000, "tiny").ok());
  const absl::Status over = CheckCallWork(shape, 999, "tiny");
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over.message()),
              AllOf(HasSubstr("model 'tiny' is 1000 token field evaluations"), HasSubstr("100 input tokens x 10 encoder"),
                    HasSubstr("limit of 999 (--max_call_work)"), ::testing::Not(HasSubstr("beam"))));

  shape.hypotheses = 4;
  shape.max_output_tokens = 20;
  shape.decoder_field_evaluations = 3;
  const absl::Status translation = CheckCallWork(shape, 1000, "tr");
  EXPECT_THAT(std::string(translation.message()),
              AllOf(HasSubstr("is 1240 token field evaluations"),
                    HasSubstr("4 hypotheses (inputs x beam) x 20 output positions x 3 decoder field evaluations"),
                    HasSubstr("smaller beam_size or max_output_tokens")));
}

}  // namespace
}  // namespace odeserve::core
