#include "client/loadtest/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/loadtest/load_driver.h"
#include "google/protobuf/util/json_util.h"

namespace graphbandit::loadtest {
namespace {

// An undefined figure (NaN or infinite: an average of no rounds) stays unset, so that the JSON
// leaves it out.
template <typename Message>
void SetFinite(Message* message, void (Message::*set)(double), double value) {
  if (std::isfinite(value)) (message->*set)(value);
}

// The value of an optional figure; NaN when unset.
double OrNan(bool has, double value) { return has ? value : NAN; }

Percentiles Summarise(std::vector<double> values) {
  const LatencyStats stats = SummariseLatencies(std::move(values));
  Percentiles p;
  p.set_count(stats.count);
  if (stats.count == 0) return p;
  p.set_p50(stats.p50);
  p.set_p90(stats.p90);
  p.set_p99(stats.p99);
  p.set_max(stats.max);
  p.set_mean(stats.mean);
  return p;
}

// Average regret over the completed rounds in [begin, end).
double AverageRegret(const std::vector<Sample>& samples, int64_t begin, int64_t end) {
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t r = std::max<int64_t>(begin, 0); r < std::min<int64_t>(end, samples.size()); ++r) {
    if (!std::isnan(samples[r].regret)) {
      sum += samples[r].regret;
      ++count;
    }
  }
  return count > 0 ? sum / static_cast<double>(count) : NAN;
}

Regret RegretOf(const std::vector<Sample>& samples, int64_t played, int64_t window,
                int64_t compare_window) {
  Regret regret;
  double cumulative = 0.0;
  for (const Sample& s : samples) {
    if (!std::isnan(s.regret)) cumulative += s.regret;
  }
  regret.set_cumulative(cumulative);
  regret.set_window(window);
  for (int64_t begin = 0; begin < played; begin += window) {
    Window* w = regret.add_windows();
    w->set_start(begin);
    w->set_end(std::min(begin + window, played));
    SetFinite(w, &Window::set_average, AverageRegret(samples, w->start(), w->end()));
  }
  regret.set_compare_window(compare_window);
  const double first = AverageRegret(samples, 0, compare_window);
  const double last = AverageRegret(samples, played - compare_window, played);
  SetFinite(&regret, &Regret::set_first_average, first);
  SetFinite(&regret, &Regret::set_last_average, last);
  SetFinite(&regret, &Regret::set_last_over_first, last / first);
  return regret;
}

void PrintLatency(const char* label, const Percentiles& p) {
  std::printf("latency %-12s (ms): p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", label,
              OrNan(p.has_p50(), p.p50()), OrNan(p.has_p90(), p.p90()), OrNan(p.has_p99(), p.p99()),
              OrNan(p.has_max(), p.max()));
}

}  // namespace

Report BuildReport(const ReportSettings& settings, const RunResult& run,
                   const graphbandit::v1::ModelDescription& before,
                   const graphbandit::v1::ModelDescription& after) {
  Report report;
  report.set_target(settings.target);
  report.set_model(settings.model);
  report.set_user_prefix(settings.user_prefix);
  report.set_rounds_requested(settings.rounds);
  int64_t completed = 0;
  std::vector<double> select_ms, reward_ms;
  for (const Sample& s : run.samples) {
    if (!std::isnan(s.regret)) ++completed;
    select_ms.push_back(s.select_ms);
    reward_ms.push_back(s.reward_ms);
  }
  report.set_rounds_completed(completed);
  report.set_rounds_failed(run.played - completed);
  report.set_concurrency(settings.concurrency);
  *report.mutable_environment() = settings.environment;
  report.set_elapsed_seconds(run.seconds);
  report.mutable_throughput()->set_rounds_per_second(completed / run.seconds);
  report.mutable_throughput()->set_rpcs_per_second(2.0 * completed / run.seconds);
  *report.mutable_latency_ms()->mutable_select_arm() = Summarise(std::move(select_ms));
  *report.mutable_latency_ms()->mutable_report_reward() = Summarise(std::move(reward_ms));
  *report.mutable_regret() =
      RegretOf(run.samples, run.played, settings.window, settings.compare_window);
  ModelAfter* model_after = report.mutable_model_after();
  model_after->set_rewards_learned(after.rewards_learned());
  model_after->set_dictionary_size(after.dictionary_size());
  model_after->set_users(after.users());
  model_after->set_edges(after.edges());
  report.mutable_learned()->set_acknowledged(run.accepted);
  report.mutable_learned()->set_learned(static_cast<int64_t>(after.rewards_learned()) -
                                        static_cast<int64_t>(before.rewards_learned()));
  report.mutable_errors()->insert(run.errors.begin(), run.errors.end());
  return report;
}

void PrintReport(const Report& report) {
  std::printf("rounds: %lld completed of %lld requested, %lld failed, concurrency %d, %.2f s\n",
              static_cast<long long>(report.rounds_completed()),
              static_cast<long long>(report.rounds_requested()),
              static_cast<long long>(report.rounds_failed()), report.concurrency(),
              report.elapsed_seconds());
  std::printf("throughput: %.1f rounds/s (%.1f RPC/s)\n", report.throughput().rounds_per_second(),
              report.throughput().rpcs_per_second());
  PrintLatency("SelectArm", report.latency_ms().select_arm());
  PrintLatency("ReportReward", report.latency_ms().report_reward());
  const Regret& regret = report.regret();
  std::printf("cumulative regret: %.4f\n", regret.cumulative());
  std::printf("average regret per window of %lld rounds:\n",
              static_cast<long long>(regret.window()));
  for (const Window& w : regret.windows()) {
    std::printf("  rounds %6lld-%-6lld %.5f\n", static_cast<long long>(w.start()),
                static_cast<long long>(w.end() - 1), OrNan(w.has_average(), w.average()));
  }
  std::printf("average regret: first %lld rounds %.5f, last %lld rounds %.5f, last/first %.3f\n",
              static_cast<long long>(regret.compare_window()),
              OrNan(regret.has_first_average(), regret.first_average()),
              static_cast<long long>(regret.compare_window()),
              OrNan(regret.has_last_average(), regret.last_average()),
              OrNan(regret.has_last_over_first(), regret.last_over_first()));
  const ModelAfter& after = report.model_after();
  std::printf("model after the run: %llu rewards learned, dictionary size %llu, %llu users\n",
              static_cast<unsigned long long>(after.rewards_learned()),
              static_cast<unsigned long long>(after.dictionary_size()),
              static_cast<unsigned long long>(after.users()));
  const Learned& learned = report.learned();
  std::printf("learned during the run: %lld of %lld acknowledged rewards%s\n",
              static_cast<long long>(learned.learned()),
              static_cast<long long>(learned.acknowledged()),
              learned.learned() >= learned.acknowledged() ? "" : " (NOT ALL LEARNED)");
  // In key order, as before (a proto map has none).
  std::map<std::string, int64_t> errors(report.errors().begin(), report.errors().end());
  for (const auto& [key, count] : errors) {
    std::printf("errors: %s x %lld\n", key.c_str(), static_cast<long long>(count));
  }
}

absl::StatusOr<std::string> ReportJson(const Report& report) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;  // zeros too (rounds_failed: 0)
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(report, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print the report as JSON: ", status.ToString()));
  }
  return json;
}

absl::Status WriteReportJson(const Report& report, const std::string& path) {
  absl::StatusOr<std::string> json = ReportJson(report);
  if (!json.ok()) return json.status();
  std::ofstream out(path);
  out << *json;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

int ExitCode(const Report& report) {
  if (report.learned().learned() < report.learned().acknowledged()) return 4;
  return report.rounds_completed() == report.rounds_requested() ? 0 : 3;
}

}  // namespace graphbandit::loadtest
