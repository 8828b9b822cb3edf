#pragma once
// Self-contained SVG charts (no scripts, fonts or external references) for odeserve-bench:
// a latency CDF with one curve per budget class and a dashed line at each class's budget,
// and a bar panel (e.g. mean chosen steps per class).

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace odeserve::client {

/// Escapes &, <, >, " and ' for XML text and attribute values.
std::string XmlEscape(absl::string_view s);

struct CdfSeries {
  std::string label;                  // legend text
  std::vector<double> sorted_values;  // ascending (e.g. latency in ms)
  std::optional<double> marker;       // drawn as a dashed vertical line (e.g. the budget)
};

struct BarItem {
  std::string label;       // category under the bar
  double value = 0;        // bar height; NaN draws no bar
  std::string annotation;  // text above the bar
};

struct ChartSpec {
  std::string title;
  std::string subtitle;
  std::string cdf_title = "Latency distribution by budget class (dashed line: the budget)";
  std::string cdf_x_label = "client latency (ms)";
  std::vector<CdfSeries> cdf;
  std::string bar_title = "Mean chosen steps by budget class";
  std::string bar_y_label = "steps";
  std::vector<BarItem> bars;  // empty: no bar panel
};

/// The whole chart as an SVG 1.1 document.
std::string RenderChartSvg(const ChartSpec& spec);

/// Tick positions for an axis over [lo, hi]: "nice" 1/2/5 steps (linear), or 1/2/5 x 10^k
/// (log). Exposed for tests.
std::vector<double> NiceTicks(double lo, double hi, bool log_scale);

}  // namespace odeserve::client
