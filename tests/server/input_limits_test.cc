// core/input_limits: the byte limits checked before any tokenization.

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/core/input_limits.h"

namespace odeserve::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

google::protobuf::RepeatedPtrField<std::string> Inputs(std::initializer_list<std::string> texts) {
  google::protobuf::RepeatedPtrField<std::string> inputs;
  for (const auto& text : texts) *inputs.Add() = text;
  return inputs;
}

TEST(TextByteLimit, IsThirtyTwoBytesPerTokenWithinTheServerCap) {
  EXPECT_EQ(TextByteLimit(128, 65536), 4096);
  EXPECT_EQ(TextByteLimit(8192, 65536), 65536);
  EXPECT_EQ(TextByteLimit(32, 100), 100);
}

TEST(Utf8Prefix, NeverSplitsACharacter) {
  const std::string han = "\xE6\xBC\xA2\xE6\xBC\xA2";  // two 3-byte characters
  EXPECT_EQ(Utf8Prefix(han, 6), han);
  EXPECT_EQ(Utf8Prefix(han, 5), han.substr(0, 3));
  EXPECT_EQ(Utf8Prefix(han, 3), han.substr(0, 3));
  EXPECT_EQ(Utf8Prefix(han, 2), "");
  EXPECT_EQ(Utf8Prefix("abc", 2), "ab");
}

TEST(BoundInputBytes, PassesInputsWithinTheLimitUntouched) {
  const auto inputs = Inputs({"short", std::string(64, 'x')});
  const auto bounded = BoundInputBytes(inputs, "m", 2, 65536, false);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  ASSERT_EQ(bounded->size(), 2u);
  EXPECT_EQ((*bounded)[1].text, inputs[1]);
  EXPECT_FALSE((*bounded)[1].cut);
}

TEST(BoundInputBytes, RefusesALongerInputNamingItItsSizeAndTheLimit) {
  const auto inputs = Inputs({"fine", std::string(65, 'x')});
  const auto bounded = BoundInputBytes(inputs, "tiny", 2, 65536, false);
  ASSERT_EQ(bounded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bounded.status().message()),
              AllOf(HasSubstr("inputs[1] has 65 bytes"), HasSubstr("model 'tiny' limit of 64 bytes"),
                    HasSubstr("max_sequence_length"), HasSubstr("--max_text_bytes 65536"), HasSubstr("truncate=true")));
}

TEST(BoundInputBytes, CutsALongerInputAtACharacterBoundaryWhenTruncating) {
  std::string han;
  for (int i = 0; i < 100; ++i) han += "\xE6\xBC\xA2";
  const auto inputs = Inputs({han});
  const auto bounded = BoundInputBytes(inputs, "tiny", 2, 65536, true);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_EQ((*bounded)[0].text.size(), 63u) << "64 bytes end inside the 22nd character";
  EXPECT_TRUE((*bounded)[0].cut);
}

}  // namespace
}  // namespace odeserve::core
