// Tests for the simulation reports: Summarise, the CSV, the SVG plots (structure, escaping,
// legend, axis ticks, the band's coordinates through the axis transform, log-x placement) and
// the Markdown table.

#include "sim/report.h"

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace graphbandit::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

RunResult MakeRun(const std::string& environment, const std::string& policy, uint64_t seed,
                  std::vector<int64_t> steps, std::vector<double> regret,
                  double seconds_per_step = 1e-3) {
  RunResult run;
  run.environment = environment;
  run.policy = policy;
  run.seed = seed;
  run.steps = std::move(steps);
  run.cumulative_regret = std::move(regret);
  run.seconds_per_step = seconds_per_step;
  return run;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "report_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// ---------------------------------------------------------------- helpers for SVG checks

// Checks that the tags nest properly, every '&' starts an entity, and the document is one
// <svg> element. Returns an empty string if fine, else what is wrong.
std::string XmlProblems(const std::string& doc) {
  if (doc.rfind("<svg ", 0) != 0) return "does not start with <svg";
  std::string trimmed = doc;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  if (trimmed.size() < 6 || trimmed.compare(trimmed.size() - 6, 6, "</svg>") != 0) {
    return "does not end with </svg>";
  }
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < doc.size()) {
    const char c = doc[i];
    if (c == '&') {
      static const std::regex entity("^&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);");
      if (!std::regex_search(doc.substr(i, 12), entity)) {
        return "unescaped & at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    if (c == '>') return "stray > at " + std::to_string(i);
    if (c != '<') {
      ++i;
      continue;
    }
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = doc.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return "< inside tag: " + tag;
    // Attribute values must not contain raw '&' either: check them by the loop above.
    for (size_t k = 0; k < tag.size(); ++k) {
      if (tag[k] == '&' &&
          !std::regex_search(tag.substr(k, 12), std::regex("^&(amp|lt|gt|quot|apos);"))) {
        return "unescaped & in tag: " + tag;
      }
    }
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + ">";
      stack.pop_back();
    } else if (!tag.empty() && tag.back() == '/') {
      // self-closing
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
      if (stack.empty() && name != "svg") return "content outside <svg>";
      stack.push_back(name);
    }
    i = end + 1;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return "";
}

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

struct TextElement {
  double x = 0, y = 0;
  std::string text;
};

// <text x=".." y=".." class="<cls>" ...>text</text>
std::vector<TextElement> TextsOfClass(const std::string& svg, const std::string& cls) {
  std::vector<TextElement> out;
  const std::regex re("<text x=\"([-0-9.]+)\" y=\"([-0-9.]+)\" class=\"" + cls +
                      "\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2]), (*it)[3]});
  }
  return out;
}

// The d attributes of <path class="<cls>" d="...">, in order.
std::vector<std::string> PathData(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("<path class=\"" + cls + "\" d=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

std::vector<std::pair<double, double>> PathPoints(const std::string& d) {
  std::vector<std::pair<double, double>> out;
  const std::regex re("([-0-9.]+),([-0-9.]+)");
  for (auto it = std::sregex_iterator(d.begin(), d.end(), re); it != std::sregex_iterator(); ++it) {
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  return out;
}

double MapX(const Axis& axis, double v) {
  return PlotFrame::kLeft +
         axis.Fraction(v) * (PlotFrame::kWidth - PlotFrame::kLeft - PlotFrame::kRight);
}
double MapY(const Axis& axis, double v) {
  return PlotFrame::kTop +
         (1 - axis.Fraction(v)) * (PlotFrame::kHeight - PlotFrame::kTop - PlotFrame::kBottom);
}

// Is `v` a multiple of a step m * 10^k with m in {1, 2, 2.5, 5}, with the ticks evenly spaced?
void ExpectNiceTicks(const std::vector<double>& ticks, size_t min_count, size_t max_count) {
  ASSERT_GE(ticks.size(), min_count);
  ASSERT_LE(ticks.size(), max_count);
  const double step = ticks[1] - ticks[0];
  ASSERT_GT(step, 0);
  const double e = std::floor(std::log10(step) + 1e-9);
  const double mantissa = step / std::pow(10.0, e);
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
              std::abs(mantissa - 2.5) < 1e-9 || std::abs(mantissa - 5) < 1e-9)
      << "step " << step;
  for (size_t i = 0; i < ticks.size(); ++i) {
    const double k = ticks[i] / step;
    EXPECT_NEAR(k, std::round(k), 1e-9) << "tick " << ticks[i] << " not a multiple of " << step;
    if (i > 0) {
      EXPECT_NEAR(ticks[i] - ticks[i - 1], step, 1e-9 * step);
    }
  }
}

// ---------------------------------------------------------------- Summarise

TEST_F(ReportTest, SummariseMeanAndStandardError) {
  std::vector<RunResult> runs = {
      MakeRun("env", "pol", 1, {1, 2}, {0.5, 1.0}, 0.001),
      MakeRun("env", "pol", 2, {1, 2}, {0.5, 2.0}, 0.002),
      MakeRun("env", "pol", 3, {1, 2}, {0.5, 3.0}, 0.003),
  };
  const std::vector<Summary> s = Summarise(runs);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].environment, "env");
  EXPECT_EQ(s[0].policy, "pol");
  EXPECT_EQ(s[0].runs, 3);
  EXPECT_EQ(s[0].nan_finals, 0);
  EXPECT_EQ(s[0].final_step, 2);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 2.0);
  EXPECT_DOUBLE_EQ(s[0].final_se, 1.0 / std::sqrt(3.0));  // sd 1
  EXPECT_DOUBLE_EQ(s[0].seconds_per_step_mean, 0.002);
}

TEST_F(ReportTest, SummariseGroupsInFirstAppearanceOrder) {
  std::vector<RunResult> runs = {
      MakeRun("B", "y", 1, {1}, {1}), MakeRun("A", "x", 1, {1}, {2}),
      MakeRun("B", "x", 1, {1}, {3}), MakeRun("A", "y", 1, {1}, {4}),
      MakeRun("B", "y", 2, {1}, {5}), MakeRun("A", "x", 2, {1}, {6}),
  };
  const std::vector<Summary> s = Summarise(runs);
  ASSERT_EQ(s.size(), 4u);
  // Environments: B then A; policies in global first-appearance order: y then x.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"B", "y"}, {"B", "x"}, {"A", "y"}, {"A", "x"}};
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(std::make_pair(s[i].environment, s[i].policy), expected[i]) << i;
  }
  EXPECT_EQ(s[0].runs, 2);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 3.0);  // (1 + 5) / 2
  EXPECT_DOUBLE_EQ(s[0].final_se, 2.0);    // sd sqrt(8), / sqrt(2)
  EXPECT_EQ(s[1].runs, 1);
  EXPECT_DOUBLE_EQ(s[1].final_se, 0.0);  // a single run
  EXPECT_DOUBLE_EQ(s[3].final_mean, 4.0);
}

TEST_F(ReportTest, SummariseEdgeCases) {
  EXPECT_TRUE(Summarise({}).empty());

  // NaN finals are skipped and counted.
  std::vector<RunResult> runs = {
      MakeRun("e", "p", 1, {1, 2}, {1, 2}),
      MakeRun("e", "p", 2, {1, 2}, {1, kNaN}),
      MakeRun("e", "p", 3, {1, 2}, {1, 4}),
  };
  std::vector<Summary> s = Summarise(runs);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].runs, 3);
  EXPECT_EQ(s[0].nan_finals, 1);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 3.0);
  EXPECT_DOUBLE_EQ(s[0].final_se, 1.0);  // sd sqrt(2) / sqrt(2)

  // Different step grids: the common prefix decides the final step.
  runs = {
      MakeRun("e", "p", 1, {10, 20, 30}, {1, 2, 3}),
      MakeRun("e", "p", 2, {10, 20}, {1, 4}),
  };
  s = Summarise(runs);
  EXPECT_EQ(s[0].final_step, 20);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 3.0);

  // All NaN.
  runs = {MakeRun("e", "p", 1, {1}, {kNaN})};
  s = Summarise(runs);
  EXPECT_EQ(s[0].nan_finals, 1);
  EXPECT_TRUE(std::isnan(s[0].final_mean));
}

// ---------------------------------------------------------------- CSV

// RFC 4180 parser for the test: fields may be quoted, "" inside quotes is a quote.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, in_field = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      in_field = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
      in_field = true;
    } else if (c == '\n') {
      row.push_back(field);
      rows.push_back(row);
      row.clear();
      field.clear();
      in_field = false;
    } else {
      field += c;
      in_field = true;
    }
  }
  if (in_field) {
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

TEST_F(ReportTest, CsvRoundTrip) {
  const std::string tricky = "Kernel, \"fast\" UCB";
  std::vector<RunResult> runs = {
      MakeRun("medium GP-draw ER n=20", tricky, 7, {1, 10, 100}, {0.1, 2.5, 1.0 / 3}),
      MakeRun("medium GP-draw ER n=20", "LK-GP-UCB", 18446744073709551615ull, {1, 10, 100},
              {0, 3, 12345.678}),
  };
  runs[1].auxiliary = {1, 5, 64};
  const std::string path = Path("regret.csv");
  ASSERT_TRUE(WriteRegretCsv(runs, path).ok());
  const std::string text = ReadFile(path);
  EXPECT_EQ(Count(text, "\n"), 7);  // header + 6 rows
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const auto rows = ParseCsv(text);
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"environment", "policy", "seed", "step",
                                               "cumulative_regret", "auxiliary"}));
  size_t r = 1;
  for (const RunResult& run : runs) {
    for (size_t i = 0; i < run.steps.size(); ++i, ++r) {
      ASSERT_EQ(rows[r].size(), 6u) << r;
      EXPECT_EQ(rows[r][0], run.environment);
      EXPECT_EQ(rows[r][1], run.policy);
      uint64_t seed = 0;
      ASSERT_TRUE(absl::SimpleAtoi(rows[r][2], &seed));
      EXPECT_EQ(seed, run.seed);
      int64_t step = 0;
      ASSERT_TRUE(absl::SimpleAtoi(rows[r][3], &step));
      EXPECT_EQ(step, run.steps[i]);
      double regret = 0;
      ASSERT_TRUE(absl::SimpleAtod(rows[r][4], &regret));
      EXPECT_EQ(regret, run.cumulative_regret[i]);  // exact: shortest round-trip form
      if (run.auxiliary.empty()) {
        EXPECT_EQ(rows[r][5], "");
      } else {
        double aux = 0;
        ASSERT_TRUE(absl::SimpleAtod(rows[r][5], &aux));
        EXPECT_EQ(aux, run.auxiliary[i]);
      }
    }
  }
  // The tricky name is quoted on disk.
  EXPECT_THAT(text, HasSubstr("\"Kernel, \"\"fast\"\" UCB\""));
}

TEST_F(ReportTest, CsvWithoutAuxiliaryHasFiveColumns) {
  std::vector<RunResult> runs = {MakeRun("e", "p", 1, {1, 2}, {0, kNaN})};
  const std::string path = Path("plain.csv");
  ASSERT_TRUE(WriteRegretCsv(runs, path).ok());
  EXPECT_EQ(ReadFile(path),
            "environment,policy,seed,step,cumulative_regret\ne,p,1,1,0\ne,p,1,2,nan\n");
}

TEST_F(ReportTest, CsvErrors) {
  EXPECT_EQ(WriteRegretCsv({}, Path("x.csv")).code(), absl::StatusCode::kInvalidArgument);
  std::vector<RunResult> bad = {MakeRun("e", "p", 1, {1, 2}, {0})};
  EXPECT_EQ(WriteRegretCsv(bad, Path("x.csv")).code(), absl::StatusCode::kInvalidArgument);
  bad = {MakeRun("e", "p", 1, {2, 1}, {0, 1})};
  EXPECT_EQ(WriteRegretCsv(bad, Path("x.csv")).code(), absl::StatusCode::kInvalidArgument);
  bad = {MakeRun("e", "p", 1, {1}, {0})};
  bad[0].auxiliary = {1, 2};
  EXPECT_EQ(WriteRegretCsv(bad, Path("x.csv")).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status status =
      WriteRegretCsv({MakeRun("e", "p", 1, {1}, {0})}, Path("missing-dir/x.csv"));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

// ---------------------------------------------------------------- axes

TEST(AxisTest, NiceAxisExtended) {
  Axis a = NiceAxis(0, 2810, true);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 3000);
  EXPECT_EQ(a.ticks, (std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000}));
  a = NiceAxis(0, 1, true);
  EXPECT_EQ(a.hi, 1);
  ExpectNiceTicks(a.ticks, 5, 8);
  a = NiceAxis(0, 0, true);  // all-zero regret
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 1);
  a = NiceAxis(-3, 47, true);
  EXPECT_LE(a.lo, -3);
  EXPECT_GE(a.hi, 47);
  ExpectNiceTicks(a.ticks, 5, 8);
  // A sweep over magnitudes: always 5 to 8 nice ticks covering the data, from 0.
  for (double hi = 1e-3; hi < 1e9; hi *= 1.37) {
    a = NiceAxis(0, hi, true);
    SCOPED_TRACE(hi);
    EXPECT_EQ(a.lo, 0);
    EXPECT_GE(a.hi, hi);
    EXPECT_EQ(a.ticks.front(), a.lo);
    EXPECT_EQ(a.ticks.back(), a.hi);
    ExpectNiceTicks(a.ticks, 5, 8);
  }
}

TEST(AxisTest, NiceAxisExact) {
  Axis a = NiceAxis(0, 3000, false);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 3000);
  EXPECT_EQ(a.ticks, (std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000}));
  a = NiceAxis(0, 100000, false);
  EXPECT_EQ(a.ticks.back(), 100000);
  for (double hi = 3; hi < 1e8; hi *= 1.29) {
    a = NiceAxis(0, std::round(hi), false);
    SCOPED_TRACE(hi);
    EXPECT_EQ(a.hi, std::round(hi));
    EXPECT_LE(a.ticks.back(), a.hi);
    ExpectNiceTicks(a.ticks, 4, 8);
  }
}

TEST(AxisTest, LogAxis) {
  Axis a = LogAxis(0.03, 40);
  EXPECT_EQ(a.lo, 0.01);
  EXPECT_EQ(a.hi, 100);
  EXPECT_EQ(a.ticks, (std::vector<double>{0.01, 0.1, 1, 10, 100}));
  EXPECT_DOUBLE_EQ(a.Fraction(1), 0.5);
  EXPECT_DOUBLE_EQ(a.Fraction(10), 0.75);
  a = LogAxis(0.2, 0.8);  // one decade: 2 and 5 labelled too
  EXPECT_EQ(a.ticks, (std::vector<double>{0.1, 0.2, 0.5, 1}));
  a = LogAxis(1, 1);
  EXPECT_EQ(a.lo, 0.1);
  EXPECT_EQ(a.hi, 10);
}

TEST(AxisTest, FormatTick) {
  EXPECT_EQ(FormatTick(0), "0");
  EXPECT_EQ(FormatTick(0.25), "0.25");
  EXPECT_EQ(FormatTick(0.1 + 0.2), "0.3");
  EXPECT_EQ(FormatTick(500), "500");
  EXPECT_EQ(FormatTick(1000), "1k");
  EXPECT_EQ(FormatTick(2500), "2.5k");
  EXPECT_EQ(FormatTick(10000), "10k");
  EXPECT_EQ(FormatTick(1e6), "1M");
  EXPECT_EQ(FormatTick(1.5e6), "1.5M");
  EXPECT_EQ(FormatTick(-2000), "-2k");
  EXPECT_EQ(FormatTick(1e-5), "1e-05");
}

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
  const std::regex clip("<clipPath id=\"plot-area\"><rect x=\"([-0-9.]+)\" y=\"[-0-9.]+\" "
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

// ---------------------------------------------------------------- Markdown

TEST(MarkdownTest, TableWithoutReferences) {
  std::vector<Summary> summaries(2);
  summaries[0] = {"env", "LK-GP-UCB", 5, 0, 20, 627.2249, 32.981, 0.000412};
  summaries[1] = {"env", "a|b", 4, 1, 20, 1.5, 0.0004, 0.0125};
  const std::string table = MarkdownTable(summaries);
  const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "| environment | policy | runs | final regret (mean ± SE) | time per step (ms) |");
  EXPECT_EQ(lines[1], "|---|---|---:|---:|---:|");
  EXPECT_EQ(lines[2], "| env | LK-GP-UCB | 5 | 627.22 ± 32.98 | 0.412 |");
  EXPECT_EQ(lines[3], "| env | a\\|b | 4 (1 NaN) | 1.50000 ± 0.00040 | 12.5 |");
  EXPECT_THAT(table, Not(HasSubstr("paper")));
}

TEST(MarkdownTest, ReferenceVerdicts) {
  std::vector<Summary> summaries(4);
  summaries[0] = {"e", "inside", 3, 0, 10, 110, 5, 0.001};  // 100 + 2 * 10 = 120 >= 110
  summaries[1] = {"e", "better", 3, 0, 10, 70, 5, 0.001};   // below 80
  summaries[2] = {"e", "worse", 3, 0, 10, 130, 5, 0.001};   // above 120
  summaries[3] = {"e", "no-ref", 3, 0, 10, 130, 5, 0.001};
  std::map<std::pair<std::string, std::string>, Reference> refs = {
      {{"e", "inside"}, {100, 10}}, {{"e", "better"}, {100, 10}}, {{"e", "worse"}, {100, 10}}};
  const std::string table = MarkdownTable(summaries, refs);
  const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0],
            "| environment | policy | runs | final regret (mean ± SE) | paper (mean ± SE) | within "
            "paper mean ± 2 SE or better? | time per step (ms) |");
  EXPECT_EQ(lines[2], "| e | inside | 3 | 110.00 ± 5.00 | 100.00 ± 10.00 | yes (within) | 1.00 |");
  EXPECT_EQ(lines[3], "| e | better | 3 | 70.00 ± 5.00 | 100.00 ± 10.00 | yes (better) | 1.00 |");
  EXPECT_EQ(lines[4], "| e | worse | 3 | 130.00 ± 5.00 | 100.00 ± 10.00 | no (worse) | 1.00 |");
  EXPECT_EQ(lines[5], "| e | no-ref | 3 | 130.00 ± 5.00 | – | – | 1.00 |");
  // Every row has as many cells as the header.
  for (size_t i = 2; i < lines.size(); ++i) EXPECT_EQ(Count(lines[i], " | "), 6) << lines[i];
  EXPECT_EQ(lines[1], "|---|---|---:|---:|---:|---|---:|");
}

}  // namespace
}  // namespace graphbandit::sim
