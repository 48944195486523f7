#include "client/loadtest/loadgen_report.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit::loadtest {

double LoadgenReport::cpu_ratio() const {
  const bool closed_baseline = !(baseline_rate > 0);
  const double health = health_cpu_per_call();
  return closed_baseline && health > 0 ? learned_cpu_per_select() / health : NAN;
}

double ProductRate(int m, int c) {
  using Clock = std::chrono::steady_clock;
  const Eigen::MatrixXd a = Eigen::MatrixXd::Random(m, m), b = Eigen::MatrixXd::Random(m, c);
  Eigen::MatrixXd out(m, c);
  double best = INFINITY;
  const auto until = Clock::now() + std::chrono::milliseconds(600);
  int reps = 0;
  while (Clock::now() < until || reps < 5) {
    const auto t0 = Clock::now();
    out.noalias() = a * b;
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    ++reps;
  }
  return 2.0 * m * m * c / best;
}

void AddRoofline(bool measure, LoadgenReport* report) {
  LoadgenReport& r = *report;
  const int c = r.c, d = r.d;
  const int64_t m = r.m;
  r.flops = 2.0 * c * static_cast<double>(m * m) + 2.0 * c * static_cast<double>(m) * d;
  r.product = measure && m > 0 ? ProductRate(static_cast<int>(m), c) : NAN;
  // The roofline's ceiling is the closed-loop health rate; an open-loop baseline has none.
  r.q0 = r.baseline_rate > 0 ? 0 : r.baseline.throughput;
  r.roofline = (r.q0 > 0 && r.product > 0) ? 1.0 / (1.0 / r.q0 + r.flops / r.product) : NAN;
}

void PrintLoadgenReport(const LoadgenReport& r) {
  std::printf(
      "graphbandit-loadgen: %s loop, %s, %d channel(s), C = %d, d = %d (%s features), slate %d, "
      "reward ratio %.2f after %.0f ms; model \"%s\" (%s), dictionary m = %lld "
      "(%lld at the start of the measured interval)\n",
      r.mode.c_str(),
      r.mode == "open"
          ? absl::StrFormat("%.0f requests/s, at most %d in flight", r.rate, r.concurrency).c_str()
          : absl::StrFormat("%d callers", r.concurrency).c_str(),
      r.channels, r.c, r.d, r.features.c_str(), r.slate_size, r.reward_ratio, r.reward_delay_ms,
      r.model.c_str(), r.policy.c_str(), static_cast<long long>(r.m),
      static_cast<long long>(r.m_start));
  const Summary& baseline = r.baseline;
  if (baseline.calls > 0) {
    PrintSummary(baseline);
    if (r.baseline_rate > 0) {
      absl::PrintF(
          "    open loop at %.0f calls/s; sent more than 1 ms after their scheduled time: %d\n",
          r.baseline_rate, baseline.late_sends);
    }
    absl::PrintF("    CPU per health call: server %s ms, load generator %.4f ms\n",
                 std::isfinite(r.baseline_server_cpu)
                     ? absl::StrFormat("%.4f", 1e3 * r.baseline_server_cpu /
                                                   static_cast<double>(baseline.calls))
                     : "-",
                 1e3 * r.baseline_own_cpu / static_cast<double>(baseline.calls));
  }
  PrintSummary(r.select);
  if (r.mode == "open") {
    std::printf("    sent more than 1 ms after their scheduled time: %lld\n",
                static_cast<long long>(r.select.late_sends));
  }
  if (r.rewards.calls > 0) PrintSummary(r.rewards);
  std::string outcome_text;
  for (const auto& [name, n] : r.outcomes) {
    absl::StrAppend(&outcome_text, outcome_text.empty() ? "" : ", ", name, " ", n);
  }
  std::printf("reward outcomes (warm-up included): %s\n",
              outcome_text.empty() ? "none" : outcome_text.c_str());
  std::printf("learned: %lld of %lld accepted rewards (waited %.2f s after the run)%s\n",
              static_cast<long long>(r.learned), static_cast<long long>(r.accepted), r.learn_wait,
              r.learned >= r.accepted ? "" : "  <-- NOT ALL LEARNED");
  if (std::isfinite(r.fresh_p99) || r.fresh_count > 0) {
    std::printf("freshness (server histogram, measured interval): %.0f rewards, p99 <= %g s\n",
                r.fresh_count, r.fresh_p99);
  }
  const double server_cpu_per_select = r.server_cpu_per_select();
  if (r.select.calls > 0) {
    absl::PrintF(
        "CPU per SelectArm (with its rewards), measured interval: server %s ms, load generator "
        "%.3f ms (%s s and %.2f s in %.2f s)\n",
        std::isfinite(server_cpu_per_select) ? absl::StrFormat("%.3f", 1e3 * server_cpu_per_select)
                                             : "-",
        1e3 * r.own_cpu_per_select(),
        std::isfinite(r.server_cpu) ? absl::StrFormat("%.2f", r.server_cpu) : "-", r.own_cpu,
        r.select.seconds);
  }
  if (const double cpu_ratio = r.cpu_ratio(); std::isfinite(cpu_ratio)) {
    absl::PrintF(
        "server CPU per SelectArm through the learning of its rewards %.3f ms (window closed "
        "after the wait) / per health call %.4f ms = %.1fx\n",
        1e3 * r.learned_cpu_per_select(), 1e3 * r.health_cpu_per_call(), cpu_ratio);
  }
  if (r.q0 > 0) {
    std::printf("SelectArm / health throughput: %.3f\n", r.select.throughput / r.q0);
  }
  if (std::isfinite(r.roofline)) {
    std::printf(
        "roofline: Q0 %.0f RPC/s, F %.3g flops per request (2Cm^2 + 2Cmd), P %.2f GFLOP/s "
        "(Eigen product, one core) -> R = %.0f RPC/s; SelectArm / R = %.3f\n",
        r.q0, r.flops, r.product / 1e9, r.roofline, r.select.throughput / r.roofline);
  }
}

void WriteLoadgenJson(const std::string& path, const LoadgenReport& r, const json::Value& http) {
  std::ofstream out(path);
  const Summary& baseline = r.baseline;
  const auto num = json::Number;
  const auto per_baseline_call = [&baseline](double seconds) {
    return baseline.calls > 0 ? 1e3 * seconds / static_cast<double>(baseline.calls) : NAN;
  };
  const json::Value report = json::Object({
      {"mode", json::Text(r.mode)},
      {"concurrency", json::Integer(r.concurrency)},
      {"rate", num(r.rate)},
      {"baseline_rate", num(r.baseline_rate)},
      {"channels", json::Integer(r.channels)},
      {"candidates", json::Integer(r.c)},
      {"dim", json::Integer(r.d)},
      {"slate_size", json::Integer(r.slate_size)},
      {"reward_ratio", num(r.reward_ratio)},
      {"reward_delay_ms", num(r.reward_delay_ms)},
      {"model", json::Text(r.model)},
      {"policy", json::Text(r.policy)},
      {"dictionary_size", json::Integer(r.m)},
      {"baseline", baseline.calls > 0 ? JsonSummary(baseline) : json::Null()},
      {"select", JsonSummary(r.select)},
      {"reward", r.rewards.calls > 0 ? JsonSummary(r.rewards) : json::Null()},
      {"accepted_rewards", json::Integer(r.accepted)},
      {"learned_rewards", json::Integer(r.learned)},
      {"freshness_p99_seconds_at_most", num(r.fresh_p99)},
      {"select_over_health", num(r.q0 > 0 ? r.select.throughput / r.q0 : NAN)},
      {"flops_per_request", num(r.flops)},
      {"product_flops_per_second", num(r.product)},
      {"roofline_rpc_per_second", num(r.roofline)},
      {"select_over_roofline",
       num(std::isfinite(r.roofline) ? r.select.throughput / r.roofline : NAN)},
      {"server_cpu_seconds", num(r.server_cpu)},
      {"loadgen_cpu_seconds", num(r.own_cpu)},
      {"server_cpu_ms_per_select", num(1e3 * r.server_cpu_per_select())},
      {"loadgen_cpu_ms_per_select", num(1e3 * r.own_cpu_per_select())},
      {"baseline_server_cpu_ms_per_call", num(per_baseline_call(r.baseline_server_cpu))},
      {"baseline_loadgen_cpu_ms_per_call", num(per_baseline_call(r.baseline_own_cpu))},
      {"server_cpu_ms_per_select_learned", num(1e3 * r.learned_cpu_per_select())},
      {"server_cpu_select_over_health", num(r.cpu_ratio())},
      {"http", http},
  });
  out << json::Print(report) << '\n';
}

void WriteLoadgenCsv(const std::string& path, const LoadgenReport& r) {
  std::ofstream out(path);
  out << "rpc,mode,concurrency,rate,candidates,dim,dictionary_size,seconds,calls,errors,"
         "throughput_per_second,p50_ms,p90_ms,p99_ms,p99_9_ms,max_ms,ratio_to_health,"
         "ratio_to_roofline\n";
  for (const Summary* s :
       std::initializer_list<const Summary*>{&r.baseline, &r.select, &r.rewards}) {
    if (s->calls == 0) continue;
    const bool is_select = s == &r.select;
    const bool is_baseline = s == &r.baseline;
    const double baseline_rate = r.baseline_rate;
    out << absl::StrFormat(
        "%s,%s,%d,%g,%d,%d,%d,%.3f,%d,%d,%.1f,%s,%s,%s,%s,%s,%s,%s\n", s->rpc,
        is_baseline ? (baseline_rate > 0 ? "open" : "closed") : r.mode, r.concurrency,
        is_baseline ? baseline_rate : r.rate, r.c, r.d, r.m, s->seconds, s->calls, s->errors,
        s->throughput, Ms(s->p50), Ms(s->p90), Ms(s->p99), Ms(s->p999), Ms(s->max),
        is_select && r.q0 > 0 ? absl::StrFormat("%.4f", s->throughput / r.q0) : "",
        is_select && std::isfinite(r.roofline) ? absl::StrFormat("%.4f", s->throughput / r.roofline)
                                               : "");
  }
}

}  // namespace graphbandit::loadtest
