#include "client/lib/svg_chart.h"

#include <cmath>

#include "gtest/gtest.h"
#include "python_check.h"

namespace odeserve::client {
namespace {

ChartSpec Spec() {
  ChartSpec spec;
  spec.title = "bench <embed> & \"friends\"";
  spec.subtitle = "closed loop";
  CdfSeries a{"5ms: hit 90%", {1, 2, 3, 4, 6}, 5.0};
  CdfSeries b{"none", {}, std::nullopt};
  CdfSeries c{"40ms", {}, 40.0};
  for (int i = 1; i <= 2000; ++i) c.sorted_values.push_back(i * 0.02);
  spec.cdf = {a, b, c};
  spec.bars = {{"budget 5ms", 3.5, "3.5 (2-4)"}, {"no budget", NAN, "no reports"},
               {"budget 40ms", 12, "12 (12-12)"}};
  return spec;
}

TEST(SvgChartTest, EscapesText) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&apos; ");
  EXPECT_EQ(XmlEscape("\xE9t\xC3\xA9"), "\xEF\xBF\xBDt\xC3\xA9") << "ill-formed UTF-8 as U+FFFD";
  const std::string svg = RenderChartSvg(Spec());
  EXPECT_NE(svg.find("bench &lt;embed&gt; &amp; &quot;friends&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<embed>"), std::string::npos);
}

TEST(SvgChartTest, HasOneCurvePerNonEmptySeriesAndABudgetLineEach) {
  const std::string svg = RenderChartSvg(Spec());
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = svg.find(needle); p != std::string::npos; p = svg.find(needle, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<polyline"), 2u);
  EXPECT_EQ(count("stroke-dasharray"), 2u);
  EXPECT_EQ(count("<rect x="), 2u /*frames*/ + 1u /*legend*/ + 2u /*bars*/);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

TEST(SvgChartTest, WellFormedXml) {
  if (!testing::HavePython()) GTEST_SKIP() << "python3 not available";
  EXPECT_TRUE(testing::IsWellFormedXml(RenderChartSvg(Spec()),
                                       "r.tag == \"{http://www.w3.org/2000/svg}svg\""));
  ChartSpec empty;
  empty.title = "nothing";
  EXPECT_TRUE(testing::IsWellFormedXml(RenderChartSvg(empty)));
}

TEST(NiceTicksTest, LinearAndLog) {
  EXPECT_EQ(NiceTicks(0, 10, false), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(NiceTicks(0.5, 3.2, false), (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ(NiceTicks(1, 100, true), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_TRUE(NiceTicks(5, 5, false).empty());
  EXPECT_TRUE(NiceTicks(0, 10, true).empty());
}

}  // namespace
}  // namespace odeserve::client
