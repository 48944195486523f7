#include "sim/svg_canvas.h"

#include <cmath>
#include <cstddef>
#include <limits>

namespace graphbandit::sim::report_internal {

void DrawAxes(Svg& svg, const Frame& f, const Axis& x, const Axis& y, absl::string_view x_label,
              absl::string_view y_label) {
  svg.Raw("<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n");
  if (x.log) {
    const int e0 = static_cast<int>(std::floor(std::log10(x.lo) + 1e-9));
    const int e1 = static_cast<int>(std::ceil(std::log10(x.hi) - 1e-9));
    if (e1 - e0 <= 6) {
      for (int e = e0; e < e1; ++e) {
        for (int m = 2; m <= 9; ++m) {
          const double v = m * std::pow(10.0, e);
          if (v <= x.lo || v >= x.hi) continue;
          svg.Line(MapX(f, x, v), f.top, MapX(f, x, v), f.bottom, "stroke=\"#f2f2f2\"");
        }
      }
    }
  }
  for (const double t : x.ticks) svg.Line(MapX(f, x, t), f.top, MapX(f, x, t), f.bottom);
  for (const double t : y.ticks) svg.Line(f.left, MapY(f, y, t), f.right, MapY(f, y, t));
  svg.Raw("</g>\n");

  svg.Raw("<g class=\"axes\" stroke=\"#333333\" stroke-width=\"1\">\n");
  svg.Line(f.left, f.bottom, f.right, f.bottom);
  svg.Line(f.left, f.top, f.left, f.bottom);
  for (const double t : x.ticks) svg.Line(MapX(f, x, t), f.bottom, MapX(f, x, t), f.bottom + 5);
  for (const double t : y.ticks) svg.Line(f.left - 5, MapY(f, y, t), f.left, MapY(f, y, t));
  svg.Raw("</g>\n");

  svg.Raw("<g class=\"tick-labels\" font-size=\"12\" fill=\"#333333\">\n");
  for (const double t : x.ticks) {
    svg.Text(MapX(f, x, t), f.bottom + 19, FormatTick(t), "class=\"xtick\" text-anchor=\"middle\"");
  }
  for (const double t : y.ticks) {
    svg.Text(f.left - 9, MapY(f, y, t) + 4, FormatTick(t), "class=\"ytick\" text-anchor=\"end\"");
  }
  svg.Raw("</g>\n");

  svg.Text((f.left + f.right) / 2, PlotFrame::kHeight - 12, x_label,
           "font-size=\"14\" text-anchor=\"middle\" fill=\"#222222\"");
  const double cy = (f.top + f.bottom) / 2;
  svg.Text(18, cy, y_label,
           absl::StrCat("font-size=\"14\" text-anchor=\"middle\" fill=\"#222222\" "
                        "transform=\"rotate(-90 18 ",
                        Px(cy), ")\""));
}

constexpr double kLegendRow = 18, kLegendPad = 8, kLegendSwatch = 26, kLegendFont = 12;

void DrawLegend(Svg& svg, const Frame& f, const std::vector<LegendEntry>& entries,
                const std::vector<std::pair<double, double>>& occupied, LegendInfo* info) {
  if (entries.empty()) return;
  constexpr double kRow = kLegendRow, kPad = kLegendPad, kSwatch = kLegendSwatch,
                   kFont = kLegendFont, kInset = 10;
  double text_width = 0;
  for (const LegendEntry& e : entries) text_width = std::max(text_width, TextWidth(e.name, kFont));
  const double w = kPad + kSwatch + 6 + text_width + kPad;
  const double h = 2 * kPad + kRow * entries.size() - 4;
  const Box corners[] = {
      {f.left + kInset, f.top + kInset, f.left + kInset + w, f.top + kInset + h},
      {f.right - kInset - w, f.top + kInset, f.right - kInset, f.top + kInset + h},
      {f.right - kInset - w, f.bottom - kInset - h, f.right - kInset, f.bottom - kInset},
      {f.left + kInset, f.bottom - kInset - h, f.left + kInset + w, f.bottom - kInset},
      {f.right + 12, f.top, f.right + 12 + w, f.top + h},  // outside
  };
  int best = 4;
  size_t best_count = 0;
  if (!f.legend_outside) {
    best_count = std::numeric_limits<size_t>::max();
    for (int c = 0; c < 4; ++c) {
      size_t count = 0;
      for (const auto& [px, py] : occupied) count += corners[c].Contains(px, py) ? 1 : 0;
      if (count < best_count) {
        best_count = count;
        best = c;
      }
    }
  }
  if (info != nullptr) {
    info->width = w;
    info->covers_data = best_count > 0;
  }
  const Box& box = corners[best];
  svg.Raw("<g class=\"legend\">\n");
  svg.Raw(absl::StrCat("<rect x=\"", Px(box.x0), "\" y=\"", Px(box.y0), "\" width=\"", Px(w),
                       "\" height=\"", Px(h),
                       "\" fill=\"#ffffff\" fill-opacity=\"0.9\" stroke=\"#bbbbbb\" rx=\"3\"/>\n"));
  for (size_t i = 0; i < entries.size(); ++i) {
    const LegendEntry& e = entries[i];
    const double cy = box.y0 + kPad + kRow * i + kRow / 2 - 2;
    const double x0 = box.x0 + kPad;
    if (e.band) {
      svg.Raw(absl::StrCat("<rect x=\"", Px(x0), "\" y=\"", Px(cy - 6), "\" width=\"", Px(kSwatch),
                           "\" height=\"12\" fill=\"", e.colour, "\" fill-opacity=\"0.2\"/>\n"));
    }
    if (e.marker) {
      svg.Raw(absl::StrCat("<circle cx=\"", Px(x0 + kSwatch / 2), "\" cy=\"", Px(cy),
                           "\" r=\"5\" fill=\"", e.colour, "\"/>\n"));
    } else {
      svg.Line(
          x0, cy, x0 + kSwatch, cy,
          absl::StrCat("stroke=\"", e.colour, "\" stroke-width=\"2\"",
                       e.dash.empty() ? "" : absl::StrCat(" stroke-dasharray=\"", e.dash, "\"")));
    }
    svg.Text(x0 + kSwatch + 6, cy + 4, e.name,
             absl::StrCat("class=\"legend-entry\" font-size=\"", kFont, "\" fill=\"#222222\""));
  }
  svg.Raw("</g>\n");
}

void AddSegment(std::vector<std::pair<double, double>>& occupied, double x0, double y0, double x1,
                double y1) {
  const double len = std::hypot(x1 - x0, y1 - y0);
  const int n = std::max(1, static_cast<int>(len / 4));
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    occupied.emplace_back(x0 + t * (x1 - x0), y0 + t * (y1 - y0));
  }
}

}  // namespace graphbandit::sim::report_internal
