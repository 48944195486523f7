// Reporting for the simulation harness: per-run cumulative-regret series go in, and out come
//   * a long-format CSV of every run (WriteRegretCsv),
//   * per environment, an SVG of mean cumulative regret against round with a shaded +-1
//     standard-error band per policy (WriteRegretPlot), and optionally the same for an
//     auxiliary series such as the Nystrom dictionary size (WriteAuxiliaryPlot),
//   * a Markdown table of final regret mean +- SE and time per step, optionally beside a
//     paper's numbers (Summarise, MarkdownTable),
//   * an SVG scatter of final regret against time per step, optionally with a log x axis
//     (WriteScatterPlot).
// The SVGs are self-contained SVG 1.1 written by hand (no plotting library): 800 x 500 px,
// Okabe-Ito colours (colour-blind safe; dashes are added once the 8 colours run out), round
// tick values (1, 2, 2.5, 5 x 10^k) with compact labels (2.5k, 1M), a title, axis labels and
// a legend placed in the emptiest corner of the plot area.
//
// Aggregation over seeds: within one (environment, policy), the mean and the standard error
// (sample sd / sqrt(n), 0 for n = 1) are taken across runs at the same step index. Runs whose
// step grids differ are only aggregated over their common prefix (the longest prefix of steps
// shared by every run of the group); the plots say so in their caption. NaN values are skipped
// and counted (Summary::nan_finals, the plots' captions). A group with a single run has no
// band. Files are written to `<path>.tmp` and renamed into place.
//
// Thread-compatible: the functions are pure apart from writing their output file.
#ifndef GRAPHBANDIT_SIM_REPORT_H_
#define GRAPHBANDIT_SIM_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace graphbandit::sim {

struct RunResult {
  std::string environment;  // e.g. "medium GP-draw ER n=20"
  std::string policy;       // e.g. "LK-GP-UCB"
  uint64_t seed = 0;
  std::vector<int64_t> steps;  // rounds at which the series are sampled (1-based, increasing)
  std::vector<double> cumulative_regret;  // at those steps
  std::vector<double> auxiliary;  // optional (e.g. dictionary size): empty or same length as steps
  double seconds_per_step = 0.0;  // mean wall time per round of this run
};

// Over the seeds of one (environment, policy).
struct Summary {
  std::string environment, policy;
  int runs = 0;            // runs in the group, including those with a NaN final regret
  int nan_finals = 0;      // runs whose final regret is NaN (or that have no steps): excluded
  int64_t final_step = 0;  // the last step of the group's common prefix
  double final_mean = 0;   // final cumulative regret at final_step; NaN if no run has one
  double final_se = 0;     // sample sd / sqrt(n) over the finite finals; 0 for n <= 1
  double seconds_per_step_mean = 0;  // over the runs with a finite seconds_per_step
};

// Grouped by (environment, policy): environments in first-appearance order, and within an
// environment, policies in their first appearance order in the whole input (so the order is the
// same in every environment). Empty input gives an empty vector. Series longer than their
// steps (or vice versa) are cut to the shorter length.
std::vector<Summary> Summarise(const std::vector<RunResult>& runs);

// Long format, one line per (run, step):
//   environment,policy,seed,step,cumulative_regret[,auxiliary]
// The auxiliary column appears when any run has an auxiliary series (empty for runs without).
// Fields containing commas, quotes or line breaks are quoted as in RFC 4180; numbers are written
// in the shortest form that reads back exactly ("nan" for NaN). Lines end in "\n".
// Errors: InvalidArgument for empty input or a run whose series lengths differ from its steps;
// the errno-derived status if the file cannot be written.
absl::Status WriteRegretCsv(const std::vector<RunResult>& runs, const std::string& path);

// (b) Mean cumulative regret against round for every policy run on `environment`, with a
// shaded +-1 SE band. x from 0 to the last step, y from 0 (or below, if a band dips below 0)
// to a round maximum. An empty `title` defaults to the environment name.
// Errors: InvalidArgument for empty input, malformed runs or an environment with no runs.
absl::Status WriteRegretPlot(const std::vector<RunResult>& runs, const std::string& environment,
                             const std::string& path, const std::string& title);

// (e) The same for the auxiliary series; policies whose runs have no auxiliary series are left
// out. Errors as WriteRegretPlot, plus InvalidArgument if no run of `environment` has one.
absl::Status WriteAuxiliaryPlot(const std::vector<RunResult>& runs, const std::string& environment,
                                const std::string& path, const std::string& title,
                                const std::string& y_label);

struct ScatterPoint {
  ScatterPoint() = default;
  // Brace-initialisable with or without a group, without -Wmissing-field-initializers noise.
  ScatterPoint(std::string label, double x, double y, double y_err, std::string group = "")
      : label(std::move(label)), x(x), y(y), y_err(y_err), group(std::move(group)) {}

  std::string label;  // written next to the point, e.g. "LK-GP-UCB m=64"
  double x = 0;       // e.g. time per step (ms)
  double y = 0;       // e.g. final regret mean
  double y_err = 0;   // half-length of the vertical error bar (e.g. SE); 0 for none
  std::string group;  // optional: points of one group share a colour and a legend entry
};

// (d) One marker per point with a vertical error bar and its label beside it. Points with a
// non-finite coordinate (or x <= 0 on a log axis) are skipped and counted in the caption.
// Axes: y from 0 (lower if an error bar dips below 0) to a round value; x from 0 on a linear
// axis, or log_x: whole decades (LogAxis), with decade ticks and, when the axis spans at most two
// decades, 2 and 5 x 10^k ticks too. Both are padded by 5% of the data range (x: a factor 1.05)
// so that no marker sits on the frame. Colours follow `group` (with a legend of the groups) when
// any point has one, else each point has its own colour.
// Errors: InvalidArgument when there is no point to draw.
absl::Status WriteScatterPlot(const std::vector<ScatterPoint>& points, const std::string& path,
                              const std::string& title, const std::string& x_label,
                              const std::string& y_label, bool log_x);

struct Reference {  // e.g. the paper's number
  double mean = 0;
  double se = 0;
};

// (c) A GitHub-flavoured Markdown table, one row per summary (in the given order):
//   environment | policy | runs | final regret (mean ± SE) | time per step (ms)
// With references (keyed by (environment, policy)), two columns go before the time column:
//   paper (mean ± SE) | within paper mean ± 2 SE or better?
// where the verdict is "yes (within)" if |ours - paper| <= 2 SE_paper, "yes (better)" if ours is
// below paper - 2 SE_paper (regret: lower is better), "no (worse)" above paper + 2 SE_paper, and
// "–" for rows without a reference. Mean and SE share a number of decimals (at least 2, enough
// to show the SE to two significant digits): "627.22 ± 32.98". Runs with a NaN final show as
// "5 (1 NaN)" in the runs column. '|' in names is escaped. Ends with a newline.
std::string MarkdownTable(
    const std::vector<Summary>& summaries,
    const std::map<std::pair<std::string, std::string>, Reference>& references = {});

// ---- Plot geometry, exposed for tests and for callers that want to reproduce the mapping ----

// The SVG canvas and the plot area inside it: data point (x, y) is drawn at
//   px = kLeft + x_axis.Fraction(x) * (kWidth - kLeft - kRight)
//   py = kTop + (1 - y_axis.Fraction(y)) * (kHeight - kTop - kBottom)
// with coordinates rounded to 2 decimals. Exception: when the legend would cover data in every
// corner of the plot area, the plot area is narrowed (kRight grows) and the legend goes to its
// right, outside.
struct PlotFrame {
  static constexpr double kWidth = 800;
  static constexpr double kHeight = 500;
  static constexpr double kLeft = 76;
  static constexpr double kRight = 24;
  static constexpr double kTop = 60;
  static constexpr double kBottom = 56;
};

struct Axis {
  double lo = 0, hi = 1;  // the drawn range (for a log axis, positive)
  bool log = false;
  std::vector<double> ticks;  // labelled tick values, increasing, within [lo, hi]
  // 0 at lo, 1 at hi; linear, or linear in log10 for a log axis.
  double Fraction(double v) const;
};

// A linear axis with 5 to 8 ticks at multiples of a round step (1, 2, 2.5 or 5 x 10^k).
// extend = true: lo and hi are widened to multiples of the step (the y axes: "0 to a round
// maximum"); false: the range is exactly [lo, hi] and the ticks are the multiples inside it
// (the round axes: "0 to the last step"; 4 to 8 ticks). hi <= lo is widened to a unit range.
Axis NiceAxis(double lo, double hi, bool extend);

// A log axis from the decade at or below lo to the decade at or above hi; if that is no range
// (lo = hi = 10^k), from 10^(k-1) to 10^(k+1). Ticks at every decade (every 2nd, 3rd, ... beyond
// 8 decades), plus 2 and 5 x 10^k when the axis spans at most two decades. lo and hi must be
// positive.
Axis LogAxis(double lo, double hi);

// Tick label: 0, 0.25, 12, 2.5k, 10k, 1.5M, 2G; tiny or huge values in e notation (1e-05).
std::string FormatTick(double v);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_REPORT_H_
