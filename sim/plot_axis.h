// Plot geometry of the simulator's SVG reports: the canvas and plot area (PlotFrame), and the
// axes: round tick values (1, 2, 2.5, 5 x 10^k) on linear axes, whole decades on log axes, and
// compact tick labels (2.5k, 1M). Exposed for tests and for callers that want to reproduce the
// mapping from data to pixels.
//
// Thread-safe: pure functions and constants.
#ifndef GRAPHBANDIT_SIM_PLOT_AXIS_H_
#define GRAPHBANDIT_SIM_PLOT_AXIS_H_

#include <string>
#include <vector>

namespace graphbandit::sim {

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

#endif  // GRAPHBANDIT_SIM_PLOT_AXIS_H_
