// The simulator's tables: a long-format CSV of every run (WriteRegretCsv), and a Markdown table
// of final regret mean +- SE and time per step per (environment, policy), optionally beside a
// paper's numbers (MarkdownTable, over the summaries of sim/report_stats.h).
//
// Thread-compatible: the functions are pure apart from writing their output file.
#ifndef GRAPHBANDIT_SIM_REPORT_TABLES_H_
#define GRAPHBANDIT_SIM_REPORT_TABLES_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sim/report_stats.h"

namespace graphbandit::sim {

// Long format, one line per (run, step):
//   environment,policy,seed,step,cumulative_regret[,auxiliary]
// The auxiliary column appears when any run has an auxiliary series (empty for runs without).
// Fields containing commas, quotes or line breaks are quoted as in RFC 4180; numbers are written
// in the shortest form that reads back exactly ("nan" for NaN). Lines end in "\n".
// Errors: InvalidArgument for empty input or a run whose series lengths differ from its steps;
// the errno-derived status if the file cannot be written.
absl::Status WriteRegretCsv(const std::vector<RunResult>& runs, const std::string& path);

struct Reference {  // e.g. the paper's number
  double mean = 0;
  // The paper's spread: the standard error of its mean, or (runs > 0) the standard deviation of
  // its `runs` repetitions, whose mean then has the standard error sd / sqrt(runs).
  double spread = 0;
  int runs = 0;  // 0: `spread` is a standard error
  double StandardError() const;
};

// (c) A GitHub-flavoured Markdown table, one row per summary (in the given order):
//   environment | policy | runs | final regret (mean ± SE) | time per step (ms)
// With references (keyed by (environment, policy)), two columns go before the time column:
//   paper | reproduces the paper's number?
// The paper's cell says which spread it gives: "627.22 ± 32.98 SE" or "32.20 ± 20.90 SD (10
// runs)". The verdict compares the two means by the standard error of their difference,
// SE_diff = sqrt(SE_ours^2 + SE_paper^2) (SE_paper = SD / sqrt(runs) for an SD): "yes (within
// 2 SE of the difference)" if |ours - paper| <= 2 SE_diff, else a mismatch with its ratio,
// "no: 2.50x lower" or "no: 1.30x higher" (a lower regret than the paper's is not a
// reproduction of its number either), and "–" for rows without a reference. Mean and SE share
// a number of decimals (at least 2, enough to show the SE to two significant digits): "627.22
// ± 32.98". Runs with a NaN final show as "5 (1 NaN)" in the runs column. '|' in names is escaped.
// Ends with a newline.
std::string MarkdownTable(
    const std::vector<Summary>& summaries,
    const std::map<std::pair<std::string, std::string>, Reference>& references = {});

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_REPORT_TABLES_H_
