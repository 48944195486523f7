// Reporting for the simulation harness, one include for the simulator: per-run
// cumulative-regret series (RunResult) go in, and out come
//   * the statistics over seeds (Summarise; sim/report_stats.h),
//   * a long-format CSV of every run and a Markdown table of final regret mean +- SE and time
//     per step, optionally beside a paper's numbers (WriteRegretCsv, MarkdownTable;
//     sim/report_tables.h),
//   * SVG plots of mean cumulative regret (or an auxiliary series) against round with +-1
//     standard-error bands, and scatters of final regret against time per step
//     (WriteRegretPlot, WriteAuxiliaryPlot, WriteScatterPlot; sim/report_plots.h), on the
//     plot geometry of sim/plot_axis.h.
// Each header states its own contract.
#ifndef GRAPHBANDIT_SIM_REPORT_H_
#define GRAPHBANDIT_SIM_REPORT_H_

#include "sim/plot_axis.h"
#include "sim/report_plots.h"
#include "sim/report_stats.h"
#include "sim/report_tables.h"

#endif  // GRAPHBANDIT_SIM_REPORT_H_
