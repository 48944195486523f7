// Tests for the SVG plots (sim/report_plots.h): structure, escaping, legend, axis ticks, the
// band's coordinates through the axis transform, log-x placement.

#include "sim/report_plots.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/report_test_util.h"

namespace graphbandit::sim {
namespace {

using report_test::Count;
using report_test::ExpectNiceTicks;
using report_test::kNaN;
using report_test::MakeRun;
using report_test::MapX;
using report_test::MapY;
using report_test::PathData;
using report_test::PathPoints;
using report_test::ReadFile;
using report_test::ReportTest;
using report_test::TextElement;
using report_test::TextsOfClass;
using report_test::XmlProblems;
using ::testing::HasSubstr;
using ::testing::Not;

// ---------------------------------------------------------------- regret plot

std::vector<RunResult> BandFixture() {
  // Policy "P0", 3 seeds; at step 3 the values are 10, 20, 30: mean 20, SE 10 / sqrt(3).
  return {
      MakeRun("env", "P0", 1, {1, 2, 3, 4, 5}, {1, 5, 10, 14, 18}),
      MakeRun("env", "P0", 2, {1, 2, 3, 4, 5}, {2, 10, 20, 28, 36}),
      MakeRun("env", "P0", 3, {1, 2, 3, 4, 5}, {3, 15, 30, 42, 54}),
      MakeRun("env", "A&B <fast> \"q\"", 1, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}),
      MakeRun("env", "A&B <fast> \"q\"", 2, {1, 2, 3, 4, 5}, {1, 3, 4, 5, 7}),
      MakeRun("other", "P0", 1, {1, 2}, {100, 200}),
  };
}

TEST_F(ReportTest, RegretPlotStructureLegendAndBand) {
  const std::vector<RunResult> runs = BandFixture();
  const std::string path = Path("regret.svg");
  ASSERT_TRUE(WriteRegretPlot(runs, "env", path, "Regret on <env> & co").ok());
  const std::string svg = ReadFile(path);
  EXPECT_EQ(XmlProblems(svg), "");
  EXPECT_EQ(Count(svg, "<g"), Count(svg, "</g>"));
  EXPECT_EQ(Count(svg, "<path"),
            Count(svg, "/>") - Count(svg, "<line") - Count(svg, "<rect") - Count(svg, "<circle"));
  EXPECT_THAT(svg, HasSubstr("Regret on &lt;env&gt; &amp; co"));
  EXPECT_THAT(svg, HasSubstr("width=\"800\" height=\"500\""));

  // One legend entry per policy of this environment, in order.
  const auto legend = TextsOfClass(svg, "legend-entry");
  ASSERT_EQ(legend.size(), 2u);
  // The policies have different numbers of seeds, so the legend says how many.
  EXPECT_EQ(legend[0].text, "P0 (3 seeds)");
  EXPECT_EQ(legend[1].text, "A&amp;B &lt;fast&gt; &quot;q&quot; (2 seeds)");
  EXPECT_THAT(svg, HasSubstr("mean over 2–3 seeds"));
  EXPECT_EQ(PathData(svg, "line").size(), 2u);
  EXPECT_EQ(PathData(svg, "band").size(), 2u);

  // The axes the plot must use: x exactly 0..5, y from 0 to a round maximum over mean + SE.
  const double se3 = 10 / std::sqrt(3.0);
  double y_hi = 0;
  for (int i = 0; i < 5; ++i) {
    const double v[3] = {runs[0].cumulative_regret[i], runs[1].cumulative_regret[i],
                         runs[2].cumulative_regret[i]};
    const double mean = (v[0] + v[1] + v[2]) / 3;
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    y_hi = std::max(y_hi, mean + std::sqrt(ss / 2) / std::sqrt(3.0));
  }
  const Axis x_axis = NiceAxis(0, 5, false);
  const Axis y_axis = NiceAxis(0, y_hi, true);

  // The tick labels are the nice ticks.
  std::vector<double> y_ticks;
  for (const TextElement& t : TextsOfClass(svg, "ytick")) y_ticks.push_back(std::stod(t.text));
  EXPECT_EQ(y_ticks, y_axis.ticks);
  ExpectNiceTicks(y_ticks, 5, 8);
  std::vector<double> x_ticks;
  for (const TextElement& t : TextsOfClass(svg, "xtick")) x_ticks.push_back(std::stod(t.text));
  EXPECT_EQ(x_ticks, x_axis.ticks);
  ExpectNiceTicks(x_ticks, 4, 8);
  EXPECT_EQ(x_ticks.front(), 0);
  EXPECT_EQ(x_ticks.back(), 5);

  // The band of P0 at step 3: mean 20 +- SE, through the axis transform.
  const auto band = PathPoints(PathData(svg, "band")[0]);
  ASSERT_EQ(band.size(), 10u);  // 5 upper + 5 lower
  const double px = MapX(x_axis, 3);
  std::vector<double> ys;
  for (const auto& [bx, by] : band) {
    if (std::abs(bx - px) < 0.006) ys.push_back(by);
  }
  ASSERT_EQ(ys.size(), 2u);
  EXPECT_NEAR(ys[0], MapY(y_axis, 20 + se3), 0.006);  // upper edge first
  EXPECT_NEAR(ys[1], MapY(y_axis, 20 - se3), 0.006);
  // And the mean line passes through the mean.
  const auto line = PathPoints(PathData(svg, "line")[0]);
  ASSERT_EQ(line.size(), 5u);
  EXPECT_NEAR(line[2].first, px, 0.006);
  EXPECT_NEAR(line[2].second, MapY(y_axis, 20), 0.006);
  EXPECT_THAT(svg, HasSubstr("fill-opacity=\"0.2\""));
  EXPECT_THAT(svg, HasSubstr("stroke-width=\"2\""));
}

TEST_F(ReportTest, RegretPlotEdgeCases) {
  // A single run: a line, no band.
  std::vector<RunResult> runs = {MakeRun("e", "solo", 1, {1, 2, 3}, {1, 2, 3})};
  ASSERT_TRUE(WriteRegretPlot(runs, "e", Path("single.svg"), "").ok());
  std::string svg = ReadFile(Path("single.svg"));
  EXPECT_EQ(XmlProblems(svg), "");
  EXPECT_EQ(PathData(svg, "band").size(), 0u);
  EXPECT_EQ(PathData(svg, "line").size(), 1u);
  EXPECT_THAT(svg, HasSubstr("no error band"));
  EXPECT_THAT(svg, HasSubstr("<title>e</title>"));  // the title defaults to the environment

  // All-zero regret: y axis 0..1, the line along the bottom.
  runs = {MakeRun("e", "p", 1, {1, 2}, {0, 0}), MakeRun("e", "p", 2, {1, 2}, {0, 0})};
  ASSERT_TRUE(WriteRegretPlot(runs, "e", Path("zero.svg"), "zero").ok());
  svg = ReadFile(Path("zero.svg"));
  EXPECT_EQ(XmlProblems(svg), "");
  const auto line = PathPoints(PathData(svg, "line")[0]);
  ASSERT_EQ(line.size(), 2u);
  EXPECT_NEAR(line[0].second, PlotFrame::kHeight - PlotFrame::kBottom, 0.006);
  std::vector<std::string> labels;
  for (const TextElement& t : TextsOfClass(svg, "ytick")) labels.push_back(t.text);
  EXPECT_EQ(labels.back(), "1");

  // NaN values are skipped and counted; no "nan" reaches the coordinates.
  runs = {MakeRun("e", "p", 1, {1, 2, 3}, {1, kNaN, 3}),
          MakeRun("e", "p", 2, {1, 2, 3}, {1, 2, kNaN}),
          MakeRun("e", "q", 1, {1, 2, 3}, {kNaN, kNaN, kNaN})};
  ASSERT_TRUE(WriteRegretPlot(runs, "e", Path("nan.svg"), "nan").ok());
  svg = ReadFile(Path("nan.svg"));
  EXPECT_EQ(XmlProblems(svg), "");
  EXPECT_THAT(svg, HasSubstr("5 NaN values skipped"));
  EXPECT_THAT(svg, Not(HasSubstr("nan,")));
  EXPECT_THAT(svg, Not(HasSubstr(",nan")));

  // Different step grids: common prefix, said in the caption.
  runs = {MakeRun("e", "p", 1, {1, 2, 3}, {1, 2, 3}), MakeRun("e", "p", 2, {1, 2}, {1, 2})};
  ASSERT_TRUE(WriteRegretPlot(runs, "e", Path("prefix.svg"), "prefix").ok());
  svg = ReadFile(Path("prefix.svg"));
  EXPECT_THAT(svg, HasSubstr("common prefix"));
  EXPECT_EQ(PathPoints(PathData(svg, "line")[0]).size(), 2u);

  // Errors, not crashes.
  EXPECT_EQ(WriteRegretPlot({}, "e", Path("x.svg"), "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteRegretPlot(runs, "nope", Path("x.svg"), "").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("x.svg")));
}

TEST_F(ReportTest, RegretPlotLegendMovesOutWhenEveryCornerHasData) {
  // Flat curves near the top and near the bottom: the legend would cover data in every corner.
  std::vector<RunResult> runs;
  for (const auto& [name, level] : {std::pair<std::string, double>{"high", 9}, {"low", 1}}) {
    std::vector<int64_t> steps;
    std::vector<double> regret;
    for (int t = 1; t <= 100; ++t) {
      steps.push_back(t);
      regret.push_back(level);
    }
    runs.push_back(MakeRun("e", name, 1, steps, regret));
  }
  ASSERT_TRUE(WriteRegretPlot(runs, "e", Path("outside.svg"), "outside").ok());
  const std::string svg = ReadFile(Path("outside.svg"));
  EXPECT_EQ(XmlProblems(svg), "");
  const std::regex clip(
      "<clipPath id=\"plot-area\"><rect x=\"([-0-9.]+)\" y=\"[-0-9.]+\" "
      "width=\"([-0-9.]+)\"");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, clip));
  const double plot_right = std::stod(m[1]) + std::stod(m[2]);
  EXPECT_LT(plot_right, PlotFrame::kWidth - PlotFrame::kRight - 50);  // narrowed
  const std::regex legend("<g class=\"legend\">\n<rect x=\"([-0-9.]+)\"");
  ASSERT_TRUE(std::regex_search(svg, m, legend));
  EXPECT_GT(std::stod(m[1]), plot_right);
  EXPECT_EQ(TextsOfClass(svg, "legend-entry").size(), 2u);

  // In the ordinary case the legend stays inside the default plot area.
  ASSERT_TRUE(WriteRegretPlot(BandFixture(), "env", Path("inside.svg"), "inside").ok());
  const std::string inside = ReadFile(Path("inside.svg"));
  ASSERT_TRUE(std::regex_search(inside, m, clip));
  EXPECT_EQ(std::stod(m[1]) + std::stod(m[2]), PlotFrame::kWidth - PlotFrame::kRight);
}

TEST_F(ReportTest, AuxiliaryPlot) {
  std::vector<RunResult> runs = BandFixture();
  runs[0].auxiliary = {1, 2, 4, 8, 8};
  runs[1].auxiliary = {1, 2, 4, 8, 16};
  runs[2].auxiliary = {1, 2, 4, 8, 12};
  ASSERT_TRUE(
      WriteAuxiliaryPlot(runs, "env", Path("aux.svg"), "dictionary", "dictionary size m").ok());
  const std::string svg = ReadFile(Path("aux.svg"));
  EXPECT_EQ(XmlProblems(svg), "");
  EXPECT_THAT(svg, HasSubstr(">dictionary size m</text>"));
  const auto legend = TextsOfClass(svg, "legend-entry");
  ASSERT_EQ(legend.size(), 1u);  // the other policy has no auxiliary series
  EXPECT_EQ(legend[0].text, "P0");
  EXPECT_EQ(WriteAuxiliaryPlot(runs, "other", Path("aux2.svg"), "", "m").code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- scatter

TEST_F(ReportTest, ScatterLogX) {
  const std::vector<ScatterPoint> points = {
      {"fast", 0.1, 50, 5},
      {"mid", std::sqrt(10.0), 30, 2},
      {"slow & exact", 10, 20, 0},
      {"broken", -1, 10, 1},  // skipped on a log axis
  };
  const std::string path = Path("scatter.svg");
  ASSERT_TRUE(
      WriteScatterPlot(points, path, "speed vs regret", "time per step (ms)", "final regret", true)
          .ok());
  const std::string svg = ReadFile(path);
  EXPECT_EQ(XmlProblems(svg), "");
  EXPECT_THAT(svg, HasSubstr("1 point skipped"));
  EXPECT_THAT(svg, HasSubstr("slow &amp; exact"));

  std::vector<double> cx;
  const std::regex re("<circle class=\"marker\" cx=\"([-0-9.]+)\" cy=\"([-0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    cx.push_back(std::stod((*it)[1]));
  }
  ASSERT_EQ(cx.size(), 3u);
  // Each decade point sits on its tick ("0.1", "10"), the decades are equally wide...
  std::map<std::string, double> tick_x;
  for (const TextElement& t : TextsOfClass(svg, "xtick")) tick_x[t.text] = t.x;
  ASSERT_TRUE(tick_x.count("0.1") && tick_x.count("1") && tick_x.count("10")) << svg;
  EXPECT_NEAR(cx[0], tick_x["0.1"], 0.011);
  EXPECT_NEAR(cx[2], tick_x["10"], 0.011);
  const double decade = tick_x["10"] - tick_x["1"];
  EXPECT_GT(decade, 100);
  EXPECT_NEAR(tick_x["1"] - tick_x["0.1"], decade, 0.011);
  // ...and sqrt(10) sits halfway between 1 and 10, 1.5 decades right of 0.1.
  EXPECT_NEAR(cx[1] - tick_x["1"], decade / 2, 0.011);
  EXPECT_NEAR(cx[1] - cx[0], 1.5 * decade, 0.011);
  // Decade ticks only (3 decades or more on this axis).
  for (const auto& [label, x] : tick_x) {
    double v = 0;
    ASSERT_TRUE(absl::SimpleAtod(label, &v)) << label;
    const double e = std::log10(v);
    EXPECT_NEAR(e, std::round(e), 1e-9) << label;
  }
  EXPECT_EQ(WriteScatterPlot({{"x", 0, 1, 0}}, Path("none.svg"), "", "", "", true).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ReportTest, ScatterLinearWithGroups) {
  const std::vector<ScatterPoint> points = {
      {"m=16", 1, 40, 3, "LK-GP-UCB"},
      {"m=64", 2, 30, 3, "LK-GP-UCB"},
      {"exact", 4, 25, 2, "GP-UCB"},
  };
  ASSERT_TRUE(WriteScatterPlot(points, Path("lin.svg"), "t", "x", "y", false).ok());
  const std::string svg = ReadFile(Path("lin.svg"));
  EXPECT_EQ(XmlProblems(svg), "");
  const auto legend = TextsOfClass(svg, "legend-entry");
  ASSERT_EQ(legend.size(), 2u);
  EXPECT_EQ(legend[0].text, "LK-GP-UCB");
  EXPECT_EQ(legend[1].text, "GP-UCB");
  // Linear x from 0: the marker at x = 1 sits on the tick labelled "1", one tick step from "0".
  std::map<std::string, double> tick_x;
  for (const TextElement& t : TextsOfClass(svg, "xtick")) tick_x[t.text] = t.x;
  ASSERT_TRUE(tick_x.count("0") && tick_x.count("1")) << svg;
  const std::regex re("<circle class=\"marker\" cx=\"([-0-9.]+)\" cy=\"([-0-9.]+)\"");
  std::vector<double> cx;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    cx.push_back(std::stod((*it)[1]));
  }
  ASSERT_EQ(cx.size(), 3u);
  EXPECT_NEAR(cx[0], tick_x["1"], 0.011);
  EXPECT_NEAR(cx[1] - tick_x["0"], 2 * (tick_x["1"] - tick_x["0"]), 0.011);
  EXPECT_EQ(tick_x.begin()->second, PlotFrame::kLeft);  // "0" at the left edge
}

}  // namespace
}  // namespace graphbandit::sim
