#include "client/lib/json_writer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "python_check.h"

namespace odeserve::client {
namespace {

TEST(JsonWriterTest, CompactDocumentExact) {
  JsonWriter w(0);
  w.BeginObject();
  w.Field("name", "a\"b\\c\n\x01");
  w.Field("n", 3);
  w.Field("x", 0.25);
  w.Field("ok", true);
  w.Key("nan").Number(std::nan(""));
  w.Key("list").BeginArray().Int(1).Int(-2).Null().BeginObject().EndObject().BeginArray().EndArray().EndArray();
  w.EndObject();
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.str(),
            R"({"name":"a\"b\\c\n\u0001","n":3,"x":0.25,"ok":true,"nan":null,)"
            R"("list":[1,-2,null,{},[]]})");
}

TEST(JsonWriterTest, PrettyDocumentExact) {
  JsonWriter w(2);
  w.BeginObject().Field("a", 1).Key("b").BeginArray().Int(1).Int(2).EndArray().EndObject();
  EXPECT_EQ(w.str(), "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}");
}

TEST(JsonWriterTest, UnsignedIntegersKeepTheirWholeRange) {
  JsonWriter w(0);
  w.BeginObject().Field("seed", uint64_t{18446744073709551615u}).Field("one", uint64_t{1}).EndObject();
  EXPECT_EQ(w.str(), R"({"seed":18446744073709551615,"one":1})");
}

TEST(JsonWriterTest, NumbersRoundTripShortest) {
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(1e-7), "1e-07");
  EXPECT_EQ(JsonNumber(12345), "12345");
  EXPECT_EQ(JsonNumber(-2.5), "-2.5");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  const double third = 1.0 / 3;
  EXPECT_EQ(std::strtod(JsonNumber(third).c_str(), nullptr), third);
}

TEST(JsonWriterTest, RawEmbedsADocument) {
  JsonWriter inner;
  inner.BeginObject().Field("k", "v").EndObject();
  JsonWriter w(0);
  w.BeginObject().Key("inner").Raw(inner.str() + "\n").Field("after", 1).EndObject();
  EXPECT_EQ(w.str(), "{\"inner\":{\n  \"k\": \"v\"\n},\"after\":1}");
}

TEST(JsonWriterTest, PythonParsesItBack) {
  if (!testing::HavePython()) GTEST_SKIP() << "python3 not available";
  JsonWriter w;
  w.BeginObject().Field("text", "tab\there \xc3\xa9 \"q\"").Field("v", 1.5).Key("a").BeginArray();
  for (int i = 0; i < 3; ++i) w.Number(i * 0.1);
  w.EndArray().EndObject();
  EXPECT_TRUE(testing::IsValidJson(
      w.str(), "d[\"text\"] == \"tab\\there \\u00e9 \\\"q\\\"\" and d[\"v\"] == 1.5 and len(d[\"a\"]) == 3"));
}

TEST(JsonWriterTest, IllFormedUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(JsonQuote("caf\xC3\xA9 \xFF"), "\"caf\xC3\xA9 \xEF\xBF\xBD\"");
  if (!testing::HavePython()) GTEST_SKIP() << "python3 not available";
  JsonWriter w;
  w.BeginObject().Field("error", "cannot open /tmp/\xE9t\xE9.txt").EndObject();  // Latin-1 name
  EXPECT_TRUE(testing::IsValidJson(w.str(), "d[\"error\"] == \"cannot open /tmp/\\ufffdt\\ufffd.txt\""))
      << w.str();
}

}  // namespace
}  // namespace odeserve::client
