// Tests for the CSV and the Markdown table (sim/report_tables.h).

#include "sim/report_tables.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/report_test_util.h"

namespace graphbandit::sim {
namespace {

using report_test::Count;
using report_test::kNaN;
using report_test::MakeRun;
using report_test::ReadFile;
using report_test::ReportTest;
using ::testing::HasSubstr;
using ::testing::Not;

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
  // Summary: environment, policy, runs, NaN finals, steps, final mean, final SE, seconds per step.
  std::vector<Summary> summaries(7);
  summaries[0] = {"e", "inside", 3, 0, 10, 110, 5, 0.001};  // |10| <= 2 sqrt(5^2 + 10^2) = 22.4
  summaries[1] = {"e", "better", 3, 0, 10, 40, 5, 0.001};   // lower, not a match
  summaries[2] = {"e", "worse", 3, 0, 10, 130, 5, 0.001};   // 30 > 22.4
  summaries[3] = {"e", "no-ref", 3, 0, 10, 130, 5, 0.001};
  // Our own SE widens the band: 20 <= 2 sqrt(10^2 + 5^2) = 22.4, beyond 2 SE_paper = 10.
  summaries[4] = {"e", "our-spread", 3, 0, 10, 120, 10, 0.001};
  // A paper's SD over 9 runs is an SE of 30 / 3 = 10: 18 <= 22.4 ...
  summaries[5] = {"e", "sd-inside", 3, 0, 10, 118, 5, 0.001};
  // ... while 50 is beyond it, though within 2 SD = 60 (the SD is not the mean's error).
  summaries[6] = {"e", "sd-outside", 3, 0, 10, 150, 5, 0.001};
  std::map<std::pair<std::string, std::string>, Reference> refs = {
      {{"e", "inside"}, {100, 10}},       {{"e", "better"}, {100, 10}},
      {{"e", "worse"}, {100, 10}},        {{"e", "our-spread"}, {100, 5}},
      {{"e", "sd-inside"}, {100, 30, 9}}, {{"e", "sd-outside"}, {100, 30, 9}}};
  const std::string table = MarkdownTable(summaries, refs);
  const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[0],
            "| environment | policy | runs | final regret (mean ± SE) | paper | "
            "reproduces the paper's number? | time per step (ms) |");
  EXPECT_EQ(lines[2],
            "| e | inside | 3 | 110.00 ± 5.00 | 100.00 ± 10.00 SE | yes (within 2 SE of the "
            "difference) | 1.00 |");
  EXPECT_EQ(lines[3],
            "| e | better | 3 | 40.00 ± 5.00 | 100.00 ± 10.00 SE | no: 2.50x lower | 1.00 |");
  EXPECT_EQ(lines[4],
            "| e | worse | 3 | 130.00 ± 5.00 | 100.00 ± 10.00 SE | no: 1.30x higher | 1.00 |");
  EXPECT_EQ(lines[5], "| e | no-ref | 3 | 130.00 ± 5.00 | – | – | 1.00 |");
  EXPECT_EQ(lines[6],
            "| e | our-spread | 3 | 120.00 ± 10.00 | 100.00 ± 5.00 SE | yes (within 2 SE of the "
            "difference) | 1.00 |");
  EXPECT_EQ(
      lines[7],
      "| e | sd-inside | 3 | 118.00 ± 5.00 | 100.00 ± 30.00 SD (9 runs) | yes (within 2 SE of "
      "the difference) | 1.00 |");
  EXPECT_EQ(
      lines[8],
      "| e | sd-outside | 3 | 150.00 ± 5.00 | 100.00 ± 30.00 SD (9 runs) | no: 1.50x higher | "
      "1.00 |");
  // Every row has as many cells as the header.
  for (size_t i = 2; i < lines.size(); ++i) EXPECT_EQ(Count(lines[i], " | "), 6) << lines[i];
  EXPECT_EQ(lines[1], "|---|---|---:|---:|---:|---|---:|");
}

TEST(ReferenceTest, StandardErrorOfAnSdIsOverTheSquareRootOfTheRuns) {
  EXPECT_DOUBLE_EQ((Reference{5.0, 2.0}.StandardError()), 2.0);
  EXPECT_DOUBLE_EQ((Reference{5.0, 12.0, 16}.StandardError()), 3.0);
}

}  // namespace
}  // namespace graphbandit::sim
