#include "client/lib/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/lib/utf8.h"

namespace odeserve::client {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
const char* Color(size_t i) { return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))]; }

std::string Num(double v) { return absl::StrFormat("%.2f", v); }

std::string TickLabel(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000 || std::fabs(v) < 0.01) return absl::StrFormat("%g", v);
  return absl::StrFormat("%g", std::round(v * 1000) / 1000);
}

struct Rect {
  double x, y, w, h;
};

void Text(std::string* out, double x, double y, absl::string_view text, int size,
          const char* anchor = "start", const char* extra = "") {
  absl::StrAppend(out, "<text x=\"", Num(x), "\" y=\"", Num(y), "\" font-size=\"", size,
                  "\" text-anchor=\"", anchor, "\"", extra, ">", XmlEscape(text), "</text>\n");
}

void Line(std::string* out, double x1, double y1, double x2, double y2, const char* stroke,
          double width = 1, const char* extra = "") {
  absl::StrAppend(out, "<line x1=\"", Num(x1), "\" y1=\"", Num(y1), "\" x2=\"", Num(x2),
                  "\" y2=\"", Num(y2), "\" stroke=\"", stroke, "\" stroke-width=\"", Num(width),
                  "\"", extra, "/>\n");
}

void CdfPanel(std::string* out, const ChartSpec& spec, const Rect& r) {
  Text(out, r.x, r.y - 12, spec.cdf_title, 14, "start", " font-weight=\"bold\"");
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : spec.cdf) {
    if (!s.sorted_values.empty()) {
      lo = std::min(lo, s.sorted_values.front());
      hi = std::max(hi, s.sorted_values.back());
    }
    if (s.marker) {
      lo = std::min(lo, *s.marker);
      hi = std::max(hi, *s.marker);
    }
  }
  absl::StrAppend(out, "<rect x=\"", Num(r.x), "\" y=\"", Num(r.y), "\" width=\"", Num(r.w),
                  "\" height=\"", Num(r.h), "\" fill=\"none\" stroke=\"#888\"/>\n");
  if (!std::isfinite(lo)) {
    Text(out, r.x + r.w / 2, r.y + r.h / 2, "no successful requests", 14, "middle");
    return;
  }
  if (hi <= lo) hi = lo + 1;
  const bool log_scale = lo > 0 && hi / lo > 20;
  double xlo = lo, xhi = hi;
  if (log_scale) {
    xlo = std::pow(10, std::floor(std::log10(lo)));
    xhi = std::pow(10, std::ceil(std::log10(hi)));
  } else {
    xlo = std::max(0.0, lo - 0.05 * (hi - lo));
    xhi = hi + 0.05 * (hi - lo);
  }
  auto X = [&](double v) {
    if (log_scale) {
      v = std::max(v, xlo);
      return r.x + r.w * (std::log10(v) - std::log10(xlo)) / (std::log10(xhi) - std::log10(xlo));
    }
    return r.x + r.w * (v - xlo) / (xhi - xlo);
  };
  // y: fraction of requests on a tail-stretching scale, T(f) = -log10(1 - f), so that p90,
  // p99 and p99.9 get equal room (the part of the distribution that budgets are about).
  size_t max_n = 1;
  for (const auto& s : spec.cdf) max_n = std::max(max_n, s.sorted_values.size());
  const double tmax =
      std::clamp(std::ceil(std::log10(static_cast<double>(max_n))), 2.0, 3.0);
  auto T = [&](double f) { return f >= 1 ? tmax : std::min(tmax, -std::log10(1 - f)); };
  auto Y = [&](double f) { return r.y + r.h * (1 - T(f) / tmax); };

  for (double t : NiceTicks(xlo, xhi, log_scale)) {
    const double x = X(t);
    Line(out, x, r.y, x, r.y + r.h, "#e5e5e5");
    Text(out, x, r.y + r.h + 16, TickLabel(t), 11, "middle");
  }
  for (double f : {0.0, 0.5, 0.9, 0.99, 0.999}) {
    if (-std::log10(1 - f) >= tmax - 1e-9) break;  // the top line is the maximum
    Line(out, r.x, Y(f), r.x + r.w, Y(f), "#e5e5e5");
    Text(out, r.x - 6, Y(f) + 4, f == 0 ? std::string("0") : absl::StrFormat("p%g", 100 * f), 11,
         "end");
  }
  Text(out, r.x - 6, r.y + 4, "max", 11, "end");
  Text(out, r.x + r.w / 2, r.y + r.h + 34,
       absl::StrCat(spec.cdf_x_label, log_scale ? " (log scale)" : ""), 12, "middle");
  Text(out, r.x - 48, r.y + r.h / 2, "fraction of requests (tail scale)", 12, "middle",
       absl::StrCat(" transform=\"rotate(-90 ", Num(r.x - 48), " ", Num(r.y + r.h / 2), ")\"")
           .c_str());

  for (size_t i = 0; i < spec.cdf.size(); ++i) {
    const CdfSeries& s = spec.cdf[i];
    if (s.marker) {
      Line(out, X(*s.marker), r.y, X(*s.marker), r.y + r.h, Color(i), 1.5,
           " stroke-dasharray=\"6,4\"");
    }
    const size_t n = s.sorted_values.size();
    if (n == 0) continue;
    // A step function through at most ~600 ranks, evenly spaced on the tail scale.
    std::vector<size_t> ranks;  // 1-based
    for (int j = 0; j <= 600; ++j) {
      const double f = 1 - std::pow(10.0, -tmax * j / 600.0);
      const size_t k = std::min(n, std::max<size_t>(1, static_cast<size_t>(std::ceil(f * n))));
      if (ranks.empty() || k > ranks.back()) ranks.push_back(k);
    }
    if (ranks.back() != n) ranks.push_back(n);
    std::string pts = absl::StrCat(Num(X(s.sorted_values[0])), ",", Num(Y(0)));
    size_t prev = 0;
    for (size_t k : ranks) {
      const double x = X(s.sorted_values[k - 1]);
      absl::StrAppend(&pts, " ", Num(x), ",", Num(Y(static_cast<double>(prev) / n)), " ", Num(x),
                      ",", Num(Y(static_cast<double>(k) / n)));
      prev = k;
    }
    absl::StrAppend(out, "<polyline fill=\"none\" stroke=\"", Color(i),
                    "\" stroke-width=\"2\" points=\"", pts, "\"/>\n");
  }
  // Legend, bottom right inside the plot.
  const double lx = r.x + r.w - 330, ly0 = r.y + r.h - 14 - 18.0 * spec.cdf.size();
  absl::StrAppend(out, "<rect x=\"", Num(lx - 8), "\" y=\"", Num(ly0 - 6), "\" width=\"334\" height=\"",
                  Num(18.0 * spec.cdf.size() + 10), "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n");
  for (size_t i = 0; i < spec.cdf.size(); ++i) {
    const double y = ly0 + 18.0 * i + 6;
    Line(out, lx, y, lx + 22, y, Color(i), 3);
    Text(out, lx + 28, y + 4, spec.cdf[i].label, 11);
  }
}

void BarPanel(std::string* out, const ChartSpec& spec, const Rect& r) {
  Text(out, r.x, r.y - 12, spec.bar_title, 14, "start", " font-weight=\"bold\"");
  absl::StrAppend(out, "<rect x=\"", Num(r.x), "\" y=\"", Num(r.y), "\" width=\"", Num(r.w),
                  "\" height=\"", Num(r.h), "\" fill=\"none\" stroke=\"#888\"/>\n");
  double hi = 0;
  for (const auto& b : spec.bars) {
    if (std::isfinite(b.value)) hi = std::max(hi, b.value);
  }
  if (hi <= 0) hi = 1;
  const std::vector<double> ticks = NiceTicks(0, hi * 1.15, false);
  const double top = ticks.empty() ? hi * 1.15 : std::max(hi * 1.15, ticks.back());
  auto Y = [&](double v) { return r.y + r.h * (1 - v / top); };
  for (double t : ticks) {
    Line(out, r.x, Y(t), r.x + r.w, Y(t), "#e5e5e5");
    Text(out, r.x - 6, Y(t) + 4, TickLabel(t), 11, "end");
  }
  Text(out, r.x - 40, r.y + r.h / 2, spec.bar_y_label, 12, "middle",
       absl::StrCat(" transform=\"rotate(-90 ", Num(r.x - 40), " ", Num(r.y + r.h / 2), ")\"")
           .c_str());
  const size_t n = spec.bars.size();
  const double slot = r.w / std::max<size_t>(1, n);
  const double bw = std::min(80.0, slot * 0.6);
  for (size_t i = 0; i < n; ++i) {
    const BarItem& b = spec.bars[i];
    const double cx = r.x + slot * (i + 0.5);
    if (std::isfinite(b.value) && b.value > 0) {
      absl::StrAppend(out, "<rect x=\"", Num(cx - bw / 2), "\" y=\"", Num(Y(b.value)),
                      "\" width=\"", Num(bw), "\" height=\"", Num(Y(0) - Y(b.value)),
                      "\" fill=\"", Color(i), "\"/>\n");
    }
    const double ty = std::isfinite(b.value) ? Y(std::max(0.0, b.value)) - 5 : Y(0) - 5;
    Text(out, cx, ty, b.annotation, 11, "middle");
    Text(out, cx, r.y + r.h + 16, b.label, 12, "middle");
  }
}

}  // namespace

std::string XmlEscape(absl::string_view raw) {
  // An XML parser rejects the whole document at one ill-formed UTF-8 byte.
  const std::string s = ToValidUtf8(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even when escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
          out.push_back(' ');
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, bool log_scale) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  if (log_scale) {
    if (lo <= 0) return ticks;
    for (int e = static_cast<int>(std::floor(std::log10(lo)));
         e <= static_cast<int>(std::ceil(std::log10(hi))); ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    }
    return ticks;
  }
  const double raw = (hi - lo) / 6;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

std::string RenderChartSvg(const ChartSpec& spec) {
  const double width = 960;
  const double cdf_h = 380, bar_h = spec.bars.empty() ? 0 : 200;
  const double height = 90 + cdf_h + 60 + (spec.bars.empty() ? 0 : bar_h + 90);
  std::string out = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"", Num(width),
      "\" height=\"", Num(height), "\" viewBox=\"0 0 ", Num(width), " ", Num(height),
      "\" font-family=\"Helvetica, Arial, sans-serif\">\n",
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  Text(&out, width / 2, 26, spec.title, 18, "middle", " font-weight=\"bold\"");
  Text(&out, width / 2, 46, spec.subtitle, 12, "middle", " fill=\"#555\"");
  CdfPanel(&out, spec, Rect{80, 90, width - 120, cdf_h});
  if (!spec.bars.empty()) BarPanel(&out, spec, Rect{80, 90 + cdf_h + 90, width - 120, bar_h});
  out += "</svg>\n";
  return out;
}

}  // namespace odeserve::client
