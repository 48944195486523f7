#include "sim/report_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "sim/report_format.h"
#include "sim/svg_canvas.h"

namespace graphbandit::sim {
namespace {

using report_internal::AddSegment;
using report_internal::Aggregate;
using report_internal::AggregateRuns;
using report_internal::Box;
using report_internal::Colour;
using report_internal::Dash;
using report_internal::DrawAxes;
using report_internal::DrawLegend;
using report_internal::Field;
using report_internal::Frame;
using report_internal::Group;
using report_internal::GroupRuns;
using report_internal::kPaletteSize;
using report_internal::LegendEntry;
using report_internal::LegendInfo;
using report_internal::MapX;
using report_internal::MapY;
using report_internal::Px;
using report_internal::RenderWithLegend;
using report_internal::Svg;
using report_internal::TextWidth;
using report_internal::ValidateRuns;
using report_internal::WriteFile;
using report_internal::XmlEscape;

struct PlotSeries {
  std::string name;
  int colour_index = 0;
  Aggregate agg;
};

std::string SeedCount(int lo, int hi) {
  if (lo == hi) return absl::StrCat(lo, lo == 1 ? " seed" : " seeds");
  return absl::StrCat(lo, "–", hi, " seeds");
}

// Mean curves with +-1 SE bands, one per series.
std::string LinePlot(const std::vector<PlotSeries>& series, absl::string_view title,
                     absl::string_view x_label, absl::string_view y_label, const Frame& f,
                     LegendInfo* info) {
  int min_runs = std::numeric_limits<int>::max(), max_runs = 0, skipped = 0;
  bool truncated = false;
  int64_t last_step = 0;
  double y_lo = 0, y_hi = 0;
  for (const PlotSeries& s : series) {
    min_runs = std::min(min_runs, s.agg.runs);
    max_runs = std::max(max_runs, s.agg.runs);
    skipped += s.agg.skipped;
    truncated = truncated || s.agg.truncated;
    if (!s.agg.steps.empty()) last_step = std::max(last_step, s.agg.steps.back());
    for (size_t i = 0; i < s.agg.steps.size(); ++i) {
      if (s.agg.count[i] == 0) continue;
      y_lo = std::min(y_lo, s.agg.mean[i] - s.agg.se[i]);
      y_hi = std::max(y_hi, s.agg.mean[i] + s.agg.se[i]);
    }
  }
  const Axis x = NiceAxis(0, static_cast<double>(last_step), /*extend=*/false);
  const Axis y = NiceAxis(y_lo, y_hi, /*extend=*/true);

  std::vector<std::string> caption;
  caption.push_back(max_runs >= 2 ? absl::StrCat("mean over ", SeedCount(min_runs, max_runs),
                                                 ", shaded ±1 standard error")
                                  : std::string("single run per policy (no error band)"));
  if (truncated) caption.push_back("runs with different step grids: common prefix only");
  if (skipped > 0) {
    caption.push_back(
        absl::StrCat(skipped, skipped == 1 ? " NaN value" : " NaN values", " skipped"));
  }

  Svg svg(title, f);
  svg.Heading(title, absl::StrJoin(caption, " · "));
  DrawAxes(svg, f, x, y, x_label, y_label);

  std::vector<std::pair<double, double>> occupied;
  std::vector<LegendEntry> legend;
  std::string bands, lines;
  for (const PlotSeries& s : series) {
    const Aggregate& a = s.agg;
    const size_t n = a.steps.size();
    // Thin the points to about two per px; always keep the ends of each stretch of valid points.
    std::vector<bool> keep(n, false);
    double last_px = -1e9;
    for (size_t i = 0; i < n; ++i) {
      if (a.count[i] == 0) continue;
      const double px = MapX(f, x, static_cast<double>(a.steps[i]));
      const bool edge = i == 0 || a.count[i - 1] == 0 || i + 1 == n || a.count[i + 1] == 0;
      if (edge || px - last_px >= 0.5) {
        keep[i] = true;
        last_px = px;
      }
    }
    // Band: one closed sub-path per stretch of steps with at least two values.
    std::string band, line;
    for (size_t i = 0; i < n;) {
      if (a.count[i] < 2) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < n && a.count[j] >= 2) ++j;
      std::vector<size_t> stretch;
      for (size_t k = i; k < j; ++k) {
        if (keep[k] || k == i || k + 1 == j) stretch.push_back(k);
      }
      if (stretch.size() >= 2) {
        for (size_t k = 0; k < stretch.size(); ++k) {
          const size_t idx = stretch[k];
          const double px = MapX(f, x, static_cast<double>(a.steps[idx]));
          const double hi = MapY(f, y, a.mean[idx] + a.se[idx]);
          absl::StrAppend(&band, k == 0 ? "M" : " L", Px(px), ",", Px(hi));
          occupied.emplace_back(px, hi);
        }
        for (size_t k = stretch.size(); k-- > 0;) {
          const size_t idx = stretch[k];
          const double px = MapX(f, x, static_cast<double>(a.steps[idx]));
          const double lo = MapY(f, y, a.mean[idx] - a.se[idx]);
          absl::StrAppend(&band, " L", Px(px), ",", Px(lo));
          occupied.emplace_back(px, lo);
        }
        band += " Z ";
      }
      i = j;
    }
    bool pen_down = false;
    double prev_x = 0, prev_y = 0;
    for (size_t i = 0; i < n; ++i) {
      if (a.count[i] == 0) {
        pen_down = false;
        continue;
      }
      if (!keep[i]) continue;
      const double px = MapX(f, x, static_cast<double>(a.steps[i]));
      const double py = MapY(f, y, a.mean[i]);
      absl::StrAppend(&line, pen_down ? " L" : (line.empty() ? "M" : " M"), Px(px), ",", Px(py));
      if (pen_down) AddSegment(occupied, prev_x, prev_y, px, py);
      occupied.emplace_back(px, py);
      pen_down = true;
      prev_x = px;
      prev_y = py;
    }
    const std::string colour = Colour(s.colour_index);
    const std::string dash = Dash(s.colour_index);
    // Bands first, lines on top of every band, so that no band veils another policy's line.
    const std::string tooltip = absl::StrCat("<title>", XmlEscape(s.name), "</title>");
    if (!band.empty()) {
      while (band.back() == ' ') band.pop_back();
      absl::StrAppend(&bands, "<g class=\"policy\">", tooltip, "<path class=\"band\" d=\"", band,
                      "\" fill=\"", colour, "\" fill-opacity=\"0.2\" stroke=\"none\"/></g>\n");
    }
    if (!line.empty()) {
      absl::StrAppend(&lines, "<g class=\"policy\">", tooltip, "<path class=\"line\" d=\"", line,
                      "\" fill=\"none\" stroke=\"", colour,
                      "\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"",
                      dash[0] ? absl::StrCat(" stroke-dasharray=\"", dash, "\"") : "", "/></g>\n");
    }
    std::string name = s.name;
    if (min_runs != max_runs) absl::StrAppend(&name, " (", SeedCount(a.runs, a.runs), ")");
    legend.push_back({name, colour, dash, a.runs >= 2, false});
  }
  svg.Raw(
      absl::StrCat("<g class=\"series\" clip-path=\"url(#plot-area)\">\n", bands, lines, "</g>\n"));
  DrawLegend(svg, f, legend, occupied, info);
  return svg.Finish();
}

absl::Status WriteSeriesPlot(const std::vector<RunResult>& runs, const std::string& environment,
                             const std::string& path, const std::string& title,
                             const std::string& y_label, Field field) {
  if (absl::Status status = ValidateRuns(runs); !status.ok()) return status;
  std::vector<PlotSeries> series;
  bool any_environment = false;
  for (const Group& group : GroupRuns(runs)) {
    if (group.environment != environment) continue;
    any_environment = true;
    std::vector<const RunResult*> members;
    for (const RunResult* run : group.runs) {
      if (field == Field::kRegret || !run->auxiliary.empty()) members.push_back(run);
    }
    if (members.empty()) continue;
    series.push_back({group.policy, group.policy_index, AggregateRuns(members, field)});
  }
  if (!any_environment) {
    return absl::InvalidArgumentError(
        absl::StrCat("no runs for environment \"", environment, "\""));
  }
  if (series.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no run for environment \"", environment, "\" has an auxiliary series"));
  }
  const std::string& heading = title.empty() ? environment : title;
  return WriteFile(path, RenderWithLegend([&](const Frame& f, LegendInfo* info) {
                     return LinePlot(series, heading, "round", y_label, f, info);
                   }));
}

}  // namespace

absl::Status WriteRegretPlot(const std::vector<RunResult>& runs, const std::string& environment,
                             const std::string& path, const std::string& title) {
  return WriteSeriesPlot(runs, environment, path, title, "cumulative regret", Field::kRegret);
}

absl::Status WriteAuxiliaryPlot(const std::vector<RunResult>& runs, const std::string& environment,
                                const std::string& path, const std::string& title,
                                const std::string& y_label) {
  return WriteSeriesPlot(runs, environment, path, title, y_label, Field::kAuxiliary);
}

absl::Status WriteScatterPlot(const std::vector<ScatterPoint>& points, const std::string& path,
                              const std::string& title, const std::string& x_label,
                              const std::string& y_label, bool log_x) {
  std::vector<const ScatterPoint*> valid;
  for (const ScatterPoint& p : points) {
    const double err = std::isfinite(p.y_err) ? std::abs(p.y_err) : 0;
    if (std::isfinite(p.x) && std::isfinite(p.y) && (!log_x || p.x > 0) && std::isfinite(err)) {
      valid.push_back(&p);
    }
  }
  if (valid.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no point to plot (", points.size(),
                                                   " given, none with finite coordinates",
                                                   log_x ? " and x > 0)" : ")"));
  }
  auto err_of = [](const ScatterPoint& p) {
    return std::isfinite(p.y_err) ? std::abs(p.y_err) : 0.0;
  };
  double x_lo = valid.front()->x, x_hi = x_lo, y_lo = 0, y_hi = 0;
  for (const ScatterPoint* p : valid) {
    x_lo = std::min(x_lo, p->x);
    x_hi = std::max(x_hi, p->x);
    y_lo = std::min(y_lo, p->y - err_of(*p));
    y_hi = std::max(y_hi, p->y + err_of(*p));
  }
  // A little room around the extreme points, so that no marker sits on the frame.
  constexpr double kPad = 0.05;
  const double x_min = std::min(0.0, x_lo);
  const Axis x = log_x ? LogAxis(x_lo / (1 + kPad), x_hi * (1 + kPad))
                       : NiceAxis(x_min, x_hi + kPad * (x_hi - x_min), true);
  const Axis y = NiceAxis(y_lo, y_hi + kPad * (y_hi - y_lo), true);

  // Colours: by group when groups are given, else one per point.
  const bool grouped = std::any_of(valid.begin(), valid.end(),
                                   [](const ScatterPoint* p) { return !p->group.empty(); });
  std::vector<std::string> groups;
  std::map<std::string, int> group_index;
  std::vector<int> colour(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    if (!grouped) {
      colour[i] = static_cast<int>(i);
      continue;
    }
    auto [it, inserted] = group_index.emplace(valid[i]->group, groups.size());
    if (inserted) groups.push_back(valid[i]->group);
    colour[i] = it->second;
  }

  std::vector<std::string> caption;
  if (std::any_of(valid.begin(), valid.end(),
                  [&](const ScatterPoint* p) { return err_of(*p) > 0; })) {
    caption.push_back("error bars: ±1 standard error");
  }
  if (log_x) caption.push_back("log scale x");
  if (valid.size() < points.size()) {
    const size_t skipped = points.size() - valid.size();
    caption.push_back(absl::StrCat(skipped, skipped == 1 ? " point" : " points", " skipped (",
                                   log_x ? "non-finite or x ≤ 0)" : "non-finite)"));
  }
  auto render = [&](const Frame& f, LegendInfo* info) {
    Svg svg(title, f);
    svg.Heading(title, absl::StrJoin(caption, " · "));
    DrawAxes(svg, f, x, y, x_label, y_label);

    std::vector<std::pair<double, double>> occupied;
    std::vector<Box> taken;  // markers and labels already placed
    std::vector<std::pair<double, double>> pixel(valid.size());
    for (size_t i = 0; i < valid.size(); ++i) {
      pixel[i] = {MapX(f, x, valid[i]->x), MapY(f, y, valid[i]->y)};
      taken.push_back(
          {pixel[i].first - 6, pixel[i].second - 6, pixel[i].first + 6, pixel[i].second + 6});
    }
    svg.Raw("<g class=\"points\">\n");
    for (size_t i = 0; i < valid.size(); ++i) {
      const ScatterPoint& p = *valid[i];
      const auto [px, py] = pixel[i];
      const std::string c = Colour(colour[i]);
      svg.Raw(absl::StrCat("<g class=\"point\"><title>", XmlEscape(p.label), "</title>\n"));
      const double err = err_of(p);
      if (err > 0) {
        const double top = MapY(f, y, p.y + err), bottom = MapY(f, y, p.y - err);
        const std::string style = absl::StrCat("stroke=\"", c, "\" stroke-width=\"1.5\"");
        svg.Line(px, top, px, bottom, style);
        svg.Line(px - 4, top, px + 4, top, style);
        svg.Line(px - 4, bottom, px + 4, bottom, style);
        AddSegment(occupied, px, top, px, bottom);
      }
      // Marker shape changes once the colours run out: circle, square, diamond, triangle.
      const int shape = (colour[i] / kPaletteSize) % 4;
      const std::string fill =
          absl::StrCat("fill=\"", c, "\" stroke=\"#ffffff\" stroke-width=\"1\"");
      if (shape == 0) {
        svg.Raw(absl::StrCat("<circle class=\"marker\" cx=\"", Px(px), "\" cy=\"", Px(py),
                             "\" r=\"5\" ", fill, "/>\n"));
      } else {
        std::string d;
        if (shape == 1) {
          d = absl::StrCat("M", Px(px - 4.5), ",", Px(py - 4.5), " h9 v9 h-9 Z");
        } else if (shape == 2) {
          d = absl::StrCat("M", Px(px), ",", Px(py - 6), " L", Px(px + 6), ",", Px(py), " L",
                           Px(px), ",", Px(py + 6), " L", Px(px - 6), ",", Px(py), " Z");
        } else {
          d = absl::StrCat("M", Px(px), ",", Px(py - 6), " L", Px(px + 5.5), ",", Px(py + 4), " L",
                           Px(px - 5.5), ",", Px(py + 4), " Z");
        }
        svg.Raw(absl::StrCat("<path class=\"marker\" d=\"", d, "\" ", fill, "/>\n"));
      }
      occupied.emplace_back(px, py);

      // Label: the first candidate position that stays inside the plot and overlaps nothing.
      constexpr double kFont = 11;
      const double w = TextWidth(p.label, kFont), h = kFont + 2;
      struct Candidate {
        double dx, dy;
        bool right;
      };
      static constexpr Candidate kCandidates[] = {
          {8, 0, true},    {-8, 0, false}, {8, -12, true}, {8, 12, true},    {-8, -12, false},
          {-8, 12, false}, {8, -24, true}, {8, 24, true},  {-8, -24, false}, {-8, 24, false}};
      const Box area{f.left, f.top, f.right, f.bottom};
      Box chosen{0, 0, 0, 0};
      bool right = true, found = false;
      double tx = px + 8, ty = py + 4;
      for (int pass = 0; pass < 2 && !found; ++pass) {
        for (const Candidate& cand : kCandidates) {
          const double x0 = cand.right ? px + cand.dx : px + cand.dx - w;
          const Box box{x0, py + cand.dy - h / 2, x0 + w, py + cand.dy + h / 2};
          const bool inside =
              box.x0 >= area.x0 && box.x1 <= area.x1 && box.y0 >= area.y0 && box.y1 <= area.y1;
          bool clear = true;
          for (size_t k = 0; k < taken.size() && pass == 0; ++k) {
            if (k != i && box.Overlaps(taken[k])) clear = false;
          }
          if (inside && clear) {
            chosen = box;
            right = cand.right;
            tx = px + cand.dx;
            ty = py + cand.dy + 4;
            found = true;
            break;
          }
        }
      }
      if (found) taken.push_back(chosen);
      svg.Text(tx, ty, p.label,
               absl::StrCat("class=\"point-label\" font-size=\"", kFont, "\" fill=\"#222222\"",
                            right ? "" : " text-anchor=\"end\""));
      svg.Raw("</g>\n");
    }
    svg.Raw("</g>\n");
    if (grouped) {
      std::vector<LegendEntry> legend;
      for (size_t g = 0; g < groups.size(); ++g) {
        legend.push_back({groups[g].empty() ? "(no group)" : groups[g], Colour(static_cast<int>(g)),
                          "", false, true});
      }
      for (const Box& b : taken) {  // keep the legend off the labels too
        occupied.emplace_back(b.x0, b.y0);
        occupied.emplace_back(b.x1, b.y1);
        occupied.emplace_back((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2);
      }
      DrawLegend(svg, f, legend, occupied, info);
    }
    return svg.Finish();
  };
  return WriteFile(path, RenderWithLegend(render));
}

}  // namespace graphbandit::sim
