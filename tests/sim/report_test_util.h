// Shared by the tests of the simulation reports (report_*_test.cc, plot_axis_test.cc): a run
// builder, a fixture with a temporary directory, and checks on the SVG text (well-formedness,
// text elements, path data, the data-to-pixel mapping of sim/plot_axis.h, round ticks).
#ifndef GRAPHBANDIT_TESTS_SIM_REPORT_TEST_UTIL_H_
#define GRAPHBANDIT_TESTS_SIM_REPORT_TEST_UTIL_H_

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sim/report.h"

namespace graphbandit::sim::report_test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline RunResult MakeRun(const std::string& environment, const std::string& policy, uint64_t seed,
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

inline std::string ReadFile(const std::string& path) {
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
inline std::string XmlProblems(const std::string& doc) {
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

inline int Count(const std::string& haystack, const std::string& needle) {
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
inline std::vector<TextElement> TextsOfClass(const std::string& svg, const std::string& cls) {
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
inline std::vector<std::string> PathData(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("<path class=\"" + cls + "\" d=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

inline std::vector<std::pair<double, double>> PathPoints(const std::string& d) {
  std::vector<std::pair<double, double>> out;
  const std::regex re("([-0-9.]+),([-0-9.]+)");
  for (auto it = std::sregex_iterator(d.begin(), d.end(), re); it != std::sregex_iterator(); ++it) {
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  return out;
}

inline double MapX(const Axis& axis, double v) {
  return PlotFrame::kLeft +
         axis.Fraction(v) * (PlotFrame::kWidth - PlotFrame::kLeft - PlotFrame::kRight);
}
inline double MapY(const Axis& axis, double v) {
  return PlotFrame::kTop +
         (1 - axis.Fraction(v)) * (PlotFrame::kHeight - PlotFrame::kTop - PlotFrame::kBottom);
}

// Is `v` a multiple of a step m * 10^k with m in {1, 2, 2.5, 5}, with the ticks evenly spaced?
inline void ExpectNiceTicks(const std::vector<double>& ticks, size_t min_count, size_t max_count) {
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

}  // namespace graphbandit::sim::report_test

#endif  // GRAPHBANDIT_TESTS_SIM_REPORT_TEST_UTIL_H_
