#include "sim/report_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace graphbandit::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

namespace report_internal {

absl::Status ValidateRuns(const std::vector<RunResult>& runs) {
  if (runs.empty()) return absl::InvalidArgumentError("no runs to report");
  for (const RunResult& run : runs) {
    const std::string name =
        absl::StrCat("run (", run.environment, ", ", run.policy, ", seed ", run.seed, ")");
    if (run.cumulative_regret.size() != run.steps.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has ", run.cumulative_regret.size(),
                                                     " regret values for ", run.steps.size(),
                                                     " steps"));
    }
    if (!run.auxiliary.empty() && run.auxiliary.size() != run.steps.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has ", run.auxiliary.size(),
                                                     " auxiliary values for ", run.steps.size(),
                                                     " steps"));
    }
    for (size_t i = 1; i < run.steps.size(); ++i) {
      if (run.steps[i] <= run.steps[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": steps are not increasing at index ",
                                                       i, " (", run.steps[i - 1], " then ",
                                                       run.steps[i], ")"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<Group> GroupRuns(const std::vector<RunResult>& runs) {
  std::vector<std::string> environments, policies;
  std::map<std::string, int> environment_index, policy_index;
  for (const RunResult& run : runs) {
    if (environment_index.emplace(run.environment, environments.size()).second) {
      environments.push_back(run.environment);
    }
    if (policy_index.emplace(run.policy, policies.size()).second) policies.push_back(run.policy);
  }
  std::map<std::pair<int, int>, Group> groups;
  for (const RunResult& run : runs) {
    const int e = environment_index[run.environment];
    const int p = policy_index[run.policy];
    Group& group = groups[{e, p}];
    group.environment = run.environment;
    group.policy = run.policy;
    group.policy_index = p;
    group.runs.push_back(&run);
  }
  std::vector<Group> out;
  out.reserve(groups.size());
  for (auto& [key, group] : groups) out.push_back(std::move(group));
  return out;
}

const std::vector<double>& Values(const RunResult& run, Field field) {
  return field == Field::kRegret ? run.cumulative_regret : run.auxiliary;
}

size_t CommonPrefix(const std::vector<const RunResult*>& runs, Field field, bool* truncated) {
  if (runs.empty()) return 0;
  size_t len = std::numeric_limits<size_t>::max();
  size_t longest = 0;
  for (const RunResult* run : runs) {
    const size_t n = std::min(run->steps.size(), Values(*run, field).size());
    len = std::min(len, n);
    longest = std::max(longest, n);
  }
  const std::vector<int64_t>& first = runs.front()->steps;
  for (size_t i = 0; i < len; ++i) {
    for (const RunResult* run : runs) {
      if (run->steps[i] != first[i]) {
        len = i;
        break;
      }
    }
  }
  if (truncated != nullptr) *truncated = longest > len;
  return len;
}

MeanSe MeanAndSe(const std::vector<double>& values) {
  MeanSe out;
  double sum = 0;
  for (const double v : values) {
    if (std::isfinite(v)) {
      sum += v;
      ++out.n;
    } else {
      ++out.skipped;
    }
  }
  if (out.n == 0) return out;
  out.mean = sum / out.n;
  if (out.n >= 2) {
    double ss = 0;
    for (const double v : values) {
      if (std::isfinite(v)) ss += (v - out.mean) * (v - out.mean);
    }
    out.se = std::sqrt(ss / (out.n - 1)) / std::sqrt(static_cast<double>(out.n));
  }
  return out;
}

Aggregate AggregateRuns(const std::vector<const RunResult*>& runs, Field field) {
  Aggregate out;
  out.runs = static_cast<int>(runs.size());
  const size_t len = CommonPrefix(runs, field, &out.truncated);
  std::vector<double> values(runs.size());
  for (size_t i = 0; i < len; ++i) {
    for (size_t r = 0; r < runs.size(); ++r) values[r] = Values(*runs[r], field)[i];
    const MeanSe stats = MeanAndSe(values);
    out.steps.push_back(runs.front()->steps[i]);
    out.mean.push_back(stats.mean);
    out.se.push_back(stats.se);
    out.count.push_back(stats.n);
    out.skipped += stats.skipped;
  }
  return out;
}

}  // namespace report_internal

using report_internal::CommonPrefix;
using report_internal::Field;
using report_internal::Group;
using report_internal::GroupRuns;
using report_internal::MeanAndSe;
using report_internal::MeanSe;

std::vector<Summary> Summarise(const std::vector<RunResult>& runs) {
  std::vector<Summary> out;
  for (const Group& group : GroupRuns(runs)) {
    Summary s;
    s.environment = group.environment;
    s.policy = group.policy;
    s.runs = static_cast<int>(group.runs.size());
    const size_t len = CommonPrefix(group.runs, Field::kRegret, nullptr);
    std::vector<double> finals, times;
    for (const RunResult* run : group.runs) {
      finals.push_back(len > 0 ? run->cumulative_regret[len - 1] : kNaN);
      times.push_back(run->seconds_per_step);
    }
    const MeanSe final_stats = MeanAndSe(finals);
    s.final_step = len > 0 ? group.runs.front()->steps[len - 1] : 0;
    s.final_mean = final_stats.mean;
    s.final_se = final_stats.se;
    s.nan_finals = final_stats.skipped;
    s.seconds_per_step_mean = MeanAndSe(times).mean;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace graphbandit::sim
