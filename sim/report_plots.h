// The simulator's SVG plots: per environment, mean cumulative regret against round with a
// shaded +-1 standard-error band per policy (WriteRegretPlot), the same for an auxiliary series
// such as the Nystrom dictionary size (WriteAuxiliaryPlot), and a scatter of e.g. final regret
// against time per step, optionally with a log x axis (WriteScatterPlot).
//
// The SVGs are self-contained SVG 1.1 written by hand (no plotting library; sim/svg_canvas.h):
// 800 x 500 px, Okabe-Ito colours (colour-blind safe; dashes are added once the 8 colours run
// out), round tick values (1, 2, 2.5, 5 x 10^k) with compact labels (2.5k, 1M; sim/plot_axis.h),
// a title, axis labels and a legend placed in the emptiest corner of the plot area.
//
// Series are aggregated over seeds as in sim/report_stats.h; runs whose step grids differ are
// only drawn over their common prefix, and the plots say so in their caption, as they do the
// NaN values skipped. A group with a single run has no band. Files are written to `<path>.tmp`
// and renamed into place.
//
// Thread-compatible: the functions are pure apart from writing their output file.
#ifndef GRAPHBANDIT_SIM_REPORT_PLOTS_H_
#define GRAPHBANDIT_SIM_REPORT_PLOTS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sim/plot_axis.h"
#include "sim/report_stats.h"

namespace graphbandit::sim {

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

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_REPORT_PLOTS_H_
