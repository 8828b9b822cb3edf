#include "client/lib/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace odeserve::client {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(Utf8Test, WellFormedTextIsUnchanged) {
  // ASCII, 2-byte (é), 3-byte (€, 日), 4-byte (😀), and the edges of each range.
  const std::string text = "plain \xC3\xA9 \xE2\x82\xAC \xE6\x97\xA5 \xF0\x9F\x98\x80 \xC2\x80 \xDF\xBF "
                           "\xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xF0\x90\x80\x80 \xF4\x8F\xBF\xBF";
  EXPECT_EQ(ToValidUtf8(text), text);
  EXPECT_EQ(ToValidUtf8(""), "");
  EXPECT_EQ(ToValidUtf8(std::string("a\0b", 3)), std::string("a\0b", 3)) << "NUL is a character";
}

TEST(Utf8Test, EachMaximalIllFormedSubpartBecomesOneReplacement) {
  const std::string r = kReplacement;
  EXPECT_EQ(ToValidUtf8("a\xFF" "b"), "a" + r + "b");                    // never a lead byte
  EXPECT_EQ(ToValidUtf8("\x80\xBF"), r + r);                           // lone continuations
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), r + r);                           // overlong '/'
  EXPECT_EQ(ToValidUtf8("\xE0\x80\xAF"), r + r + r);                   // overlong, 3 bytes
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), r + r + r);                   // surrogate U+D800
  EXPECT_EQ(ToValidUtf8("\xF4\x90\x80\x80"), r + r + r + r);           // above U+10FFFF
  EXPECT_EQ(ToValidUtf8("\xE2\x82" "x"), r + "x");                     // truncated, then ASCII
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98"), r) << "truncated at the end";
  EXPECT_EQ(ToValidUtf8("\xE2\x82\xC3\xA9"), r + "\xC3\xA9") << "the byte that breaks a "
                                                                   "sequence starts the next one";
}

}  // namespace
}  // namespace odeserve::client
