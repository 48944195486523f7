#include "sim/report_tables.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/report_format.h"

namespace graphbandit::sim {
namespace {

using report_internal::CsvField;
using report_internal::MarkdownEscape;
using report_internal::ShortestDouble;
using report_internal::ValidateRuns;
using report_internal::WriteFile;

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

double Reference::StandardError() const {
  return runs > 0 ? spread / std::sqrt(static_cast<double>(runs)) : spread;
}

std::string MarkdownTable(
    const std::vector<Summary>& summaries,
    const std::map<std::pair<std::string, std::string>, Reference>& references) {
  const bool with_refs = !references.empty();
  std::string out = "| environment | policy | runs | final regret (mean ± SE) |";
  if (with_refs) out += " paper | reproduces the paper's number? |";
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
        const double band = 2 * std::hypot(s.final_se, ref.StandardError());
        std::string verdict;
        if (!std::isfinite(s.final_mean) || !std::isfinite(ref.mean)) {
          verdict = "n/a";
        } else if (std::abs(s.final_mean - ref.mean) <= band) {
          verdict = "yes (within 2 SE of the difference)";
        } else if (s.final_mean > 0.0 && ref.mean > 0.0) {
          // A number that differs is a mismatch whichever way it differs: lower regret than
          // the paper is not a reproduction of the paper either.
          verdict = s.final_mean < ref.mean
                        ? absl::StrFormat("no: %.2fx lower", ref.mean / s.final_mean)
                        : absl::StrFormat("no: %.2fx higher", s.final_mean / ref.mean);
        } else {
          verdict = s.final_mean < ref.mean ? "no: lower" : "no: higher";
        }
        const std::string spread =
            ref.runs > 0 ? absl::StrFormat(" SD (%d runs)", ref.runs) : std::string(" SE");
        absl::StrAppend(&out, " ", FormatMeanSe(ref.mean, ref.spread), spread, " | ", verdict,
                        " |");
      }
    }
    absl::StrAppend(&out, " ", FormatMilliseconds(s.seconds_per_step_mean), " |\n");
  }
  return out;
}

}  // namespace graphbandit::sim
