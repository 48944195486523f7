// The hand-written SVG 1.1 canvas the simulator's plots draw on (internal to
// sim/report_plots.cc): an 800 x 500 px document with a title, a clip path for the plot area,
// grid lines, axes with tick labels, Okabe-Ito colours (colour-blind safe; dashes and marker
// shapes take over once the 8 colours run out), and a legend placed in the emptiest corner of
// the plot area, or to its right when it would cover data in every corner (RenderWithLegend).
//
// Thread-compatible: an Svg is a string builder owned by one caller; the functions are pure.
#ifndef GRAPHBANDIT_SIM_SVG_CANVAS_H_
#define GRAPHBANDIT_SIM_SVG_CANVAS_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sim/plot_axis.h"
#include "sim/report_format.h"

namespace graphbandit::sim::report_internal {

// Okabe & Ito (2008), ordered for contrast on white; the yellow comes last.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#E69F00",
                                    "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr const char* kDashes[] = {"", "8 4", "2 3", "8 3 2 3"};  // once the colours run out

inline const char* Colour(int index) { return kPalette[index % kPaletteSize]; }
inline const char* Dash(int index) { return kDashes[(index / kPaletteSize) % 4]; }

// The plot area in px: PlotFrame's, or narrower when the legend has to go to its right.
struct Frame {
  double left = PlotFrame::kLeft;
  double top = PlotFrame::kTop;
  double right = PlotFrame::kWidth - PlotFrame::kRight;
  double bottom = PlotFrame::kHeight - PlotFrame::kBottom;
  bool legend_outside = false;
};

inline double MapX(const Frame& f, const Axis& axis, double v) {
  return f.left + axis.Fraction(v) * (f.right - f.left);
}
inline double MapY(const Frame& f, const Axis& axis, double v) {
  return f.top + (1 - axis.Fraction(v)) * (f.bottom - f.top);
}

struct Box {
  double x0, y0, x1, y1;
  bool Contains(double x, double y) const { return x >= x0 && x <= x1 && y >= y0 && y <= y1; }
  bool Overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

class Svg {
 public:
  Svg(absl::string_view title, const Frame& f) {
    absl::StrAppend(&out_, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"",
                    PlotFrame::kWidth, "\" height=\"", PlotFrame::kHeight, "\" viewBox=\"0 0 ",
                    PlotFrame::kWidth, " ", PlotFrame::kHeight,
                    "\" font-family=\"Helvetica, Arial, sans-serif\">\n");
    absl::StrAppend(&out_, "<title>", XmlEscape(title), "</title>\n");
    absl::StrAppend(&out_, "<defs><clipPath id=\"plot-area\"><rect x=\"", Px(f.left), "\" y=\"",
                    Px(f.top), "\" width=\"", Px(f.right - f.left), "\" height=\"",
                    Px(f.bottom - f.top), "\"/></clipPath></defs>\n");
    absl::StrAppend(&out_, "<rect x=\"0\" y=\"0\" width=\"", PlotFrame::kWidth, "\" height=\"",
                    PlotFrame::kHeight, "\" fill=\"#ffffff\"/>\n");
  }

  void Raw(absl::string_view s) { absl::StrAppend(&out_, s); }

  void Line(double x1, double y1, double x2, double y2, absl::string_view extra = "") {
    absl::StrAppend(&out_, "<line x1=\"", Px(x1), "\" y1=\"", Px(y1), "\" x2=\"", Px(x2),
                    "\" y2=\"", Px(y2), "\"", extra.empty() ? "" : " ", extra, "/>\n");
  }

  void Text(double x, double y, absl::string_view text, absl::string_view attributes) {
    absl::StrAppend(&out_, "<text x=\"", Px(x), "\" y=\"", Px(y), "\" ", attributes, ">",
                    XmlEscape(text), "</text>\n");
  }

  // Title (shrunk to fit the width) and a grey caption line under it.
  void Heading(absl::string_view title, absl::string_view caption) {
    const double width = PlotFrame::kWidth - 20;
    double size = 17;
    if (TextWidth(title, size) > width) size = std::max(9.0, size * width / TextWidth(title, size));
    Text(PlotFrame::kWidth / 2, 26, title,
         absl::StrCat("font-size=\"", Px(size),
                      "\" font-weight=\"bold\" text-anchor=\"middle\" "
                      "fill=\"#222222\""));
    if (!caption.empty()) {
      double csize = 12;
      if (TextWidth(caption, csize) > width) {
        csize = std::max(8.0, csize * width / TextWidth(caption, csize));
      }
      Text(PlotFrame::kWidth / 2, 46, caption,
           absl::StrCat("font-size=\"", Px(csize), "\" text-anchor=\"middle\" fill=\"#555555\""));
    }
  }

  std::string Finish() {
    out_ += "</svg>\n";
    return std::move(out_);
  }

 private:
  std::string out_;
};

// Grid lines, axis lines, tick marks, tick labels and axis labels. For a log x axis, the
// unlabelled 2..9 x 10^k lines are drawn lighter.
void DrawAxes(Svg& svg, const Frame& f, const Axis& x, const Axis& y, absl::string_view x_label,
              absl::string_view y_label);

struct LegendEntry {
  std::string name;
  std::string colour;
  std::string dash;
  bool band = false;    // draw a shaded swatch behind the line
  bool marker = false;  // a dot instead of a line
};

struct LegendInfo {
  double width = 0;          // px
  bool covers_data = false;  // drawn inside the plot area over some data
};

// Inside the plot area (unless f.legend_outside): the corner box that covers the fewest of
// `occupied` (data points in px), preferring top-left, top-right, bottom-right, bottom-left on
// ties. Outside: at the top right of the canvas, to the right of the plot area.
void DrawLegend(Svg& svg, const Frame& f, const std::vector<LegendEntry>& entries,
                const std::vector<std::pair<double, double>>& occupied, LegendInfo* info);

// render(frame, &info) with the legend inside the plot area; if that legend would cover data,
// renders again with a narrower plot area and the legend to its right (unless it is too wide).
template <typename Render>
std::string RenderWithLegend(Render render) {
  LegendInfo info;
  std::string out = render(Frame(), &info);
  if (!info.covers_data || info.width > 240) return out;
  Frame f;
  f.legend_outside = true;
  f.right = PlotFrame::kWidth - 8 - info.width - 12;
  return render(f, &info);
}

// Adds points every few px along the segment, for the legend placement.
void AddSegment(std::vector<std::pair<double, double>>& occupied, double x0, double y0, double x1,
                double y1);

}  // namespace graphbandit::sim::report_internal

#endif  // GRAPHBANDIT_SIM_SVG_CANVAS_H_
