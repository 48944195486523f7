#include "sim/report.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/storage/file_util.h"

namespace graphbandit::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- formatting helpers

// Shortest decimal form that reads back to the same double ("nan", "inf" for the others).
std::string ShortestDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

// Pixel coordinate, 2 decimals, no "-0.00".
std::string Px(double v) {
  std::string s = absl::StrFormat("%.2f", v);
  if (s == "-0.00") s = "0.00";
  return s;
}

// Text content or attribute value for XML: escapes the five special characters and replaces
// the control characters XML 1.0 forbids.
std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string CsvField(absl::string_view field) {
  if (field.find_first_of(",\"\r\n") == absl::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (const char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string MarkdownEscape(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// Rough width of `text` in px for a sans-serif font of `size` px (UTF-8 continuation bytes
// do not count).
double TextWidth(absl::string_view text, double size) {
  int chars = 0;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
  }
  return 0.58 * size * chars;
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return storage::OsError(errno, "open", tmp);
  absl::Status status = storage::WriteFully(fd, contents.data(), contents.size(), tmp);
  if (::close(fd) != 0 && status.ok()) status = storage::OsError(errno, "close", tmp);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = storage::OsError(errno, absl::StrCat("rename ", tmp, " to"), path);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

// ---------------------------------------------------------------- runs and groups

absl::Status ValidateRuns(const std::vector<RunResult>& runs) {
  if (runs.empty()) return absl::InvalidArgumentError("no runs to report");
  for (const RunResult& run : runs) {
    const std::string name =
        absl::StrCat("run (", run.environment, ", ", run.policy, ", seed ", run.seed, ")");
    if (run.cumulative_regret.size() != run.steps.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has ", run.cumulative_regret.size(),
                                                     " regret values for ", run.steps.size(),
                                                     " steps"));
    }
    if (!run.auxiliary.empty() && run.auxiliary.size() != run.steps.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has ", run.auxiliary.size(),
                                                     " auxiliary values for ", run.steps.size(),
                                                     " steps"));
    }
    for (size_t i = 1; i < run.steps.size(); ++i) {
      if (run.steps[i] <= run.steps[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": steps are not increasing at index ",
                                                       i, " (", run.steps[i - 1], " then ",
                                                       run.steps[i], ")"));
      }
    }
  }
  return absl::OkStatus();
}

struct Group {
  std::string environment, policy;
  int policy_index = 0;  // first appearance of the policy in the whole input: fixes its colour
  std::vector<const RunResult*> runs;
};

// Environments in first-appearance order; within one, policies in global first-appearance order.
std::vector<Group> GroupRuns(const std::vector<RunResult>& runs) {
  std::vector<std::string> environments, policies;
  std::map<std::string, int> environment_index, policy_index;
  for (const RunResult& run : runs) {
    if (environment_index.emplace(run.environment, environments.size()).second) {
      environments.push_back(run.environment);
    }
    if (policy_index.emplace(run.policy, policies.size()).second) policies.push_back(run.policy);
  }
  std::map<std::pair<int, int>, Group> groups;
  for (const RunResult& run : runs) {
    const int e = environment_index[run.environment];
    const int p = policy_index[run.policy];
    Group& group = groups[{e, p}];
    group.environment = run.environment;
    group.policy = run.policy;
    group.policy_index = p;
    group.runs.push_back(&run);
  }
  std::vector<Group> out;
  out.reserve(groups.size());
  for (auto& [key, group] : groups) out.push_back(std::move(group));
  return out;
}

enum class Field { kRegret, kAuxiliary };

const std::vector<double>& Values(const RunResult& run, Field field) {
  return field == Field::kRegret ? run.cumulative_regret : run.auxiliary;
}

// The common prefix of the runs' step grids: the largest k such that every run has at least k
// values and the same first k steps as the first run. `truncated` tells whether some run had
// more.
size_t CommonPrefix(const std::vector<const RunResult*>& runs, Field field, bool* truncated) {
  if (runs.empty()) return 0;
  size_t len = std::numeric_limits<size_t>::max();
  size_t longest = 0;
  for (const RunResult* run : runs) {
    const size_t n = std::min(run->steps.size(), Values(*run, field).size());
    len = std::min(len, n);
    longest = std::max(longest, n);
  }
  const std::vector<int64_t>& first = runs.front()->steps;
  for (size_t i = 0; i < len; ++i) {
    for (const RunResult* run : runs) {
      if (run->steps[i] != first[i]) {
        len = i;
        break;
      }
    }
  }
  if (truncated != nullptr) *truncated = longest > len;
  return len;
}

struct MeanSe {
  double mean = kNaN, se = 0;
  int n = 0;        // finite values used
  int skipped = 0;  // NaN (or infinite) values skipped
};

MeanSe MeanAndSe(const std::vector<double>& values) {
  MeanSe out;
  double sum = 0;
  for (const double v : values) {
    if (std::isfinite(v)) {
      sum += v;
      ++out.n;
    } else {
      ++out.skipped;
    }
  }
  if (out.n == 0) return out;
  out.mean = sum / out.n;
  if (out.n >= 2) {
    double ss = 0;
    for (const double v : values) {
      if (std::isfinite(v)) ss += (v - out.mean) * (v - out.mean);
    }
    out.se = std::sqrt(ss / (out.n - 1)) / std::sqrt(static_cast<double>(out.n));
  }
  return out;
}

// Mean and SE across the runs of one group at each step of their common prefix.
struct Aggregate {
  std::vector<int64_t> steps;
  std::vector<double> mean, se;
  std::vector<int> count;  // finite values behind each mean
  int runs = 0;
  int skipped = 0;         // non-finite values skipped
  bool truncated = false;  // some run went beyond the common prefix
};

Aggregate AggregateRuns(const std::vector<const RunResult*>& runs, Field field) {
  Aggregate out;
  out.runs = static_cast<int>(runs.size());
  const size_t len = CommonPrefix(runs, field, &out.truncated);
  std::vector<double> values(runs.size());
  for (size_t i = 0; i < len; ++i) {
    for (size_t r = 0; r < runs.size(); ++r) values[r] = Values(*runs[r], field)[i];
    const MeanSe stats = MeanAndSe(values);
    out.steps.push_back(runs.front()->steps[i]);
    out.mean.push_back(stats.mean);
    out.se.push_back(stats.se);
    out.count.push_back(stats.n);
    out.skipped += stats.skipped;
  }
  return out;
}

// ---------------------------------------------------------------- SVG drawing

// Okabe & Ito (2008), ordered for contrast on white; the yellow comes last.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#E69F00",
                                    "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr const char* kDashes[] = {"", "8 4", "2 3", "8 3 2 3"};  // once the colours run out

const char* Colour(int index) { return kPalette[index % kPaletteSize]; }
const char* Dash(int index) { return kDashes[(index / kPaletteSize) % 4]; }

// The plot area in px: PlotFrame's, or narrower when the legend has to go to its right.
struct Frame {
  double left = PlotFrame::kLeft;
  double top = PlotFrame::kTop;
  double right = PlotFrame::kWidth - PlotFrame::kRight;
  double bottom = PlotFrame::kHeight - PlotFrame::kBottom;
  bool legend_outside = false;
};

double MapX(const Frame& f, const Axis& axis, double v) {
  return f.left + axis.Fraction(v) * (f.right - f.left);
}
double MapY(const Frame& f, const Axis& axis, double v) {
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

constexpr double kLegendRow = 18, kLegendPad = 8, kLegendSwatch = 26, kLegendFont = 12;

// Inside the plot area (unless f.legend_outside): the corner box that covers the fewest of
// `occupied` (data points in px), preferring top-left, top-right, bottom-right, bottom-left on
// ties. Outside: at the top right of the canvas, to the right of the plot area.
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
                double y1) {
  const double len = std::hypot(x1 - x0, y1 - y0);
  const int n = std::max(1, static_cast<int>(len / 4));
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    occupied.emplace_back(x0 + t * (x1 - x0), y0 + t * (y1 - y0));
  }
}

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

// ---------------------------------------------------------------- axes

double Axis::Fraction(double v) const {
  if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  return (v - lo) / (hi - lo);
}

Axis NiceAxis(double lo, double hi, bool extend) {
  if (!std::isfinite(lo)) lo = 0;
  if (!std::isfinite(hi)) hi = lo + 1;
  if (!(hi > lo)) hi = lo + std::max(1.0, std::abs(lo));
  constexpr double kEps = 1e-9;
  const int e_start = static_cast<int>(std::floor(std::log10(hi - lo))) - 2;
  static constexpr double kMantissas[] = {1, 2, 2.5, 5};
  Axis axis;
  for (int e = e_start;; ++e) {
    for (const double m : kMantissas) {
      // step = m * 10^e, kept as m and 10^|e| so that tick values come out as exact as possible.
      const double scale = std::pow(10.0, std::abs(e));
      const double step = e >= 0 ? m * scale : m / scale;
      if (std::max(std::abs(lo), std::abs(hi)) / step > 1e15) continue;  // tick indices overflow
      auto value = [&](int64_t k) { return e >= 0 ? k * m * scale : k * m / scale; };
      int64_t k0, k1;
      if (extend) {
        k0 = static_cast<int64_t>(std::floor(lo / step + kEps));
        k1 = static_cast<int64_t>(std::ceil(hi / step - kEps));
        if (k1 - k0 > 7) continue;
        axis.lo = value(k0);
        axis.hi = value(k1);
      } else {
        k0 = static_cast<int64_t>(std::ceil(lo / step - kEps));
        k1 = static_cast<int64_t>(std::floor(hi / step + kEps));
        if (k1 - k0 > 7) continue;
        axis.lo = lo;
        axis.hi = hi;
      }
      for (int64_t k = k0; k <= k1; ++k) axis.ticks.push_back(value(k));
      return axis;
    }
  }
}

Axis LogAxis(double lo, double hi) {
  Axis axis;
  axis.log = true;
  if (!(lo > 0) || !std::isfinite(lo)) lo = 1;
  if (!(hi >= lo) || !std::isfinite(hi)) hi = lo;
  int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  if (e1 <= e0) {
    --e0;
    ++e1;
  }
  axis.lo = std::pow(10.0, e0);
  axis.hi = std::pow(10.0, e1);
  const int decades = e1 - e0;
  const int stride = decades > 8 ? (decades + 6) / 7 : 1;
  for (int e = e0; e <= e1; ++e) {
    if ((e - e0) % stride == 0) axis.ticks.push_back(std::pow(10.0, e));
    if (decades <= 2 && e < e1) {
      const double scale = std::pow(10.0, std::abs(e));
      axis.ticks.push_back(e >= 0 ? 2 * scale : 2 / scale);
      axis.ticks.push_back(e >= 0 ? 5 * scale : 5 / scale);
    }
  }
  return axis;
}

std::string FormatTick(double v) {
  if (v == 0) return "0";
  if (!std::isfinite(v)) return ShortestDouble(v);
  const double a = std::abs(v);
  if (a < 1e-4 || a >= 1e15) return absl::StrFormat("%.3g", v);
  struct Suffix {
    double scale;
    const char* suffix;
  };
  static constexpr Suffix kSuffixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const Suffix& s : kSuffixes) {
    if (a >= s.scale) return absl::StrFormat("%.10g%s", v / s.scale, s.suffix);
  }
  return absl::StrFormat("%.10g", v);
}

// ---------------------------------------------------------------- public API

std::vector<Summary> Summarise(const std::vector<RunResult>& runs) {
  std::vector<Summary> out;
  for (const Group& group : GroupRuns(runs)) {
    Summary s;
    s.environment = group.environment;
    s.policy = group.policy;
    s.runs = static_cast<int>(group.runs.size());
    const size_t len = CommonPrefix(group.runs, Field::kRegret, nullptr);
    std::vector<double> finals, times;
    for (const RunResult* run : group.runs) {
      finals.push_back(len > 0 ? run->cumulative_regret[len - 1] : kNaN);
      times.push_back(run->seconds_per_step);
    }
    const MeanSe final_stats = MeanAndSe(finals);
    s.final_step = len > 0 ? group.runs.front()->steps[len - 1] : 0;
    s.final_mean = final_stats.mean;
    s.final_se = final_stats.se;
    s.nan_finals = final_stats.skipped;
    s.seconds_per_step_mean = MeanAndSe(times).mean;
    out.push_back(std::move(s));
  }
  return out;
}

absl::Status WriteRegretCsv(const std::vector<RunResult>& runs, const std::string& path) {
  if (absl::Status status = ValidateRuns(runs); !status.ok()) return status;
  const bool auxiliary = std::any_of(runs.begin(), runs.end(),
                                     [](const RunResult& r) { return !r.auxiliary.empty(); });
  std::string out = "environment,policy,seed,step,cumulative_regret";
  out += auxiliary ? ",auxiliary\n" : "\n";
  for (const RunResult& run : runs) {
    const std::string prefix =
        absl::StrCat(CsvField(run.environment), ",", CsvField(run.policy), ",", run.seed, ",");
    for (size_t i = 0; i < run.steps.size(); ++i) {
      absl::StrAppend(&out, prefix, run.steps[i], ",", ShortestDouble(run.cumulative_regret[i]));
      if (auxiliary) {
        out += ',';
        if (!run.auxiliary.empty()) out += ShortestDouble(run.auxiliary[i]);
      }
      out += '\n';
    }
  }
  return WriteFile(path, out);
}

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

namespace {

std::string FormatMeanSe(double mean, double se) {
  if (!std::isfinite(mean)) return "n/a";
  int decimals = 2;
  if (std::isfinite(se) && se > 0) {
    decimals = std::clamp(1 - static_cast<int>(std::floor(std::log10(se))), 2, 8);
  }
  return absl::StrFormat("%.*f ± %.*f", decimals, mean, decimals, std::isfinite(se) ? se : 0.0);
}

std::string FormatMilliseconds(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  const double ms = seconds * 1e3;
  const double a = std::abs(ms);
  if (a == 0) return "0";
  if (a >= 100) return absl::StrFormat("%.0f", ms);
  if (a >= 10) return absl::StrFormat("%.1f", ms);
  if (a >= 1) return absl::StrFormat("%.2f", ms);
  return absl::StrFormat("%.3g", ms);
}

}  // namespace

std::string MarkdownTable(
    const std::vector<Summary>& summaries,
    const std::map<std::pair<std::string, std::string>, Reference>& references) {
  const bool with_refs = !references.empty();
  std::string out = "| environment | policy | runs | final regret (mean ± SE) |";
  if (with_refs) out += " paper (mean ± SE) | within paper mean ± 2 SE or better? |";
  out += " time per step (ms) |\n|---|---|---:|---:|";
  if (with_refs) out += "---:|---|";
  out += "---:|\n";
  for (const Summary& s : summaries) {
    std::string runs = absl::StrCat(s.runs);
    if (s.nan_finals > 0) absl::StrAppend(&runs, " (", s.nan_finals, " NaN)");
    absl::StrAppend(&out, "| ", MarkdownEscape(s.environment), " | ", MarkdownEscape(s.policy),
                    " | ", runs, " | ", FormatMeanSe(s.final_mean, s.final_se), " |");
    if (with_refs) {
      const auto it = references.find({s.environment, s.policy});
      if (it == references.end()) {
        out += " – | – |";
      } else {
        const Reference& ref = it->second;
        const double band = 2 * std::abs(ref.se);
        std::string verdict;
        if (!std::isfinite(s.final_mean) || !std::isfinite(ref.mean)) {
          verdict = "n/a";
        } else if (s.final_mean > ref.mean + band) {
          verdict = "no (worse)";
        } else if (s.final_mean < ref.mean - band) {
          verdict = "yes (better)";
        } else {
          verdict = "yes (within)";
        }
        absl::StrAppend(&out, " ", FormatMeanSe(ref.mean, ref.se), " | ", verdict, " |");
      }
    }
    absl::StrAppend(&out, " ", FormatMilliseconds(s.seconds_per_step_mean), " |\n");
  }
  return out;
}

}  // namespace graphbandit::sim
