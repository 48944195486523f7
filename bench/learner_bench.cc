#include "bench/learner_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/base/random.h"
#include "core/fit/refit.h"
#include "core/graph/green_function.h"
#include "core/learner/learner_factory.h"
#include "core/learner/nystrom_posterior.h"
#include "core/model/model_options.h"

namespace graphbandit {
namespace {

using Clock = std::chrono::steady_clock;

// Peak resident set of the process so far, in KiB.
long PeakRssKb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// The server's EK_UCB learner over 16 features and 3 friends, with rewards of RefitCost's kind;
// `spread` chooses the served growth (spread_growth_scan) or the papers' (whole pass, rebuild).
struct GrowthRow {
  int64_t m = 0;
  double mean_us = 0, p99_us = 0, max_ms = 0;
  // So far: points refused as dependent, rebuilds from the history, pending points dropped.
  int64_t dependent = 0, rebuilds = 0, dropped = 0;
};
std::vector<GrowthRow> GrowthRun(bool spread, int64_t events, int64_t window, int dictionary) {
  constexpr int kDim = 16, kUsers = 3;
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  for (int u = 0; u < kUsers; ++u) graph.SetEdge(u, (u + 1) % kUsers, 1.0);
  ModelOptions model;
  std::shared_ptr<const UserKernel> users = *GreenFunction::Build(graph, model.rho);
  NystromOptions options;
  options.ridge = options.kors_mu = model.ridge;
  options.max_dictionary_size = dictionary;
  options.growth_batch_divisor = kServedGrowthBatchDivisor;
  options.spread_growth_scan = spread;
  // Features on a 3-dimensional subspace, at length-scale 6.
  NystromPosterior learner(kDim, ArmKernel(KernelType::kRbf, 1.0), users, options);
  Rng rng(11);
  Eigen::MatrixXd basis(kDim, 3);
  for (int d = 0; d < kDim; ++d) {
    for (int k = 0; k < 3; ++k) basis(d, k) = rng.Normal() / std::sqrt(3.0);
  }
  Eigen::MatrixXd units(kDim, 8), weights(3, 8);
  for (int k = 0; k < 8; ++k) {
    for (int d = 0; d < kDim; ++d) units(d, k) = rng.Normal() * 0.3;
    for (int g = 0; g < 3; ++g) weights(g, k) = rng.Normal();
  }
  std::vector<GrowthRow> rows;
  std::vector<double> times;
  times.reserve(window);
  Eigen::VectorXd x(kDim), z(3);
  for (int64_t i = 1; i <= events; ++i) {
    for (int k = 0; k < 3; ++k) z(k) = rng.Normal();
    x = basis * z / 6.0;
    const int32_t user = static_cast<int32_t>(rng.UniformInt(kUsers));
    const Eigen::VectorXd hidden = (units.transpose() * x).array().tanh().matrix();
    const double reward = weights.row(user).dot(hidden) + 0.3 * rng.Normal();
    const auto started = Clock::now();
    if (absl::Status s = learner.Observe(user, x, reward); !s.ok()) {
      std::fprintf(stderr, "observe: %s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - started).count());
    if (i % window == 0 || i == events) {
      GrowthRow row;
      row.m = learner.dictionary_size();
      row.dependent = learner.stats().skipped_dependent;
      row.rebuilds = learner.stats().growth_rebuilds;
      row.dropped = learner.stats().dropped_pending;
      double sum = 0;
      for (double t : times) sum += t;
      row.mean_us = sum / static_cast<double>(times.size());
      std::sort(times.begin(), times.end());
      row.p99_us = times[static_cast<size_t>(0.99 * static_cast<double>(times.size() - 1))];
      row.max_ms = times.back() / 1000.0;
      rows.push_back(row);
      times.clear();
    }
  }
  return rows;
}

}  // namespace

// A learner as the server builds one for EK_UCB (8 arm features, 30 users in 3 groups of
// friends, cap 1,000), fed `history` rewards of a smooth function with noise; then one fit with
// the default options and the rebuild with its values, each timed.
void RefitCost(const std::string& refit_history) {
  constexpr int kDim = 8, kUsers = 30;
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  for (int u = 0; u < kUsers; ++u) graph.SetEdge(u, (u + 3) % kUsers, 1.0);  // 3 rings of 10
  std::printf(
      "# refit cost: EK_UCB learner, %d features, %d users, dictionary cap 1000, fit on "
      "up to %d points\n",
      kDim, kUsers, RefitOptions().max_points);
  std::printf("%9s %6s %10s %12s %13s %12s %10s\n", "history", "m", "fit s", "evaluations",
              "fit MB (RSS)", "rebuild s", "applied");
  for (absl::string_view text : absl::StrSplit(refit_history, ',')) {
    int history = 0;
    if (!absl::SimpleAtoi(text, &history) || history < 2) {
      std::fprintf(stderr, "bad --refit_history entry \"%s\"\n", std::string(text).c_str());
      std::exit(2);
    }
    ModelOptions model;
    RefitOptions refit = ModelOptions::DefaultRefit();
    KernelShape shape;
    shape.arm_dim = kDim;
    std::shared_ptr<const UserKernel> users = *GreenFunction::Build(graph, model.rho);
    NystromOptions options;
    options.ridge = options.kors_mu = model.ridge;
    options.growth_batch_divisor = kServedGrowthBatchDivisor;
    options.spread_growth_scan = ResearchOptions().spread_growth_scan;
    NystromPosterior learner(kDim, ArmKernel(KernelType::kRbf, 1.0), users, options);
    FeatureScaling scaling{0, kDim, 1.0, 1.0, Eigen::VectorXd()};
    Rng rng(7);
    // The reward: 8 tanh units of all features, weighted per group of friends (the
    // robustness preset's kind of task, which fills the dictionary within a few thousand).
    Eigen::MatrixXd units(kDim, 8), weights(3, 8);
    for (int k = 0; k < 8; ++k) {
      for (int d = 0; d < kDim; ++d) units(d, k) = rng.Normal() * 0.5;
      for (int g = 0; g < 3; ++g) weights(g, k) = rng.Normal();
    }
    for (int i = 0; i < history; ++i) {
      Eigen::VectorXd x(kDim);
      for (int d = 0; d < kDim; ++d) x(d) = rng.Normal();
      const int32_t user = static_cast<int32_t>(rng.UniformInt(kUsers));
      const Eigen::VectorXd hidden = (units.transpose() * x).array().tanh().matrix();
      const double reward = weights.row(user % 3).dot(hidden) + 0.3 * rng.Normal();
      if (absl::Status s = learner.Observe(user, x, reward); !s.ok()) {
        std::fprintf(stderr, "observe: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
    }
    const Hyperparameters start =
        InitialHyperparameters(shape, model.kernel_variance, scaling, model.ridge);
    const FitData data = SpreadRawObservations(learner, scaling, refit.max_points);
    const long rss_before = PeakRssKb();
    const auto fit_started = Clock::now();
    auto fit = FitHyperparameters(data, MakeFitUsers(shape, refit, graph, users), start,
                                  MakeFitSpec(refit, shape));
    const double fit_seconds = std::chrono::duration<double>(Clock::now() - fit_started).count();
    if (!fit.ok()) {
      std::fprintf(stderr, "fit: %s\n", std::string(fit.status().message()).c_str());
      std::exit(1);
    }
    const long rss_after = PeakRssKb();
    // As the writer does (Model::SwitchHyperparameters): a backup of the learner's state, then
    // the rebuild.
    const auto rebuild_started = Clock::now();
    storage::Encoder backup;
    learner.SaveState(&backup);
    if (absl::Status s =
            ApplyHyperparameters(fit->values, shape, 1.0, graph, &scaling, &users, &learner);
        !s.ok()) {
      std::fprintf(stderr, "rebuild: %s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
    const double rebuild_seconds =
        std::chrono::duration<double>(Clock::now() - rebuild_started).count();
    std::printf(
        "%9d %6lld %10.2f %12d %13.0f %12.2f %10s\n", history,
        static_cast<long long>(learner.dictionary_size()), fit_seconds, fit->evaluations,
        (rss_after - rss_before) / 1024.0, rebuild_seconds,
        FitImproves(*fit, refit) && MateriallyDifferent(start, fit->values, refit.min_change)
            ? "yes"
            : "no");
    std::fflush(stdout);
  }
  std::printf(
      "(fit MB: growth of the peak resident set during the fit; 0 when an earlier, "
      "larger row already reached it. rebuild s: the writer's pause, timed as if the fit "
      "were applied; applied: whether the server would apply it)\n\n");
}

void GrowthCost(int64_t events, int64_t window, int dictionary) {
  if (events < 1 || window < 1 || dictionary < 1) {
    std::fprintf(stderr, "--growth_events, --growth_window and --growth_dictionary must be >= 1\n");
    std::exit(2);
  }
  std::printf(
      "# growth cost: EK_UCB learner, 16 features (on a 3-dimensional subspace), 3 users, "
      "dictionary cap %d, history "
      "unbounded, batches of m/%d; time of one Observe (the writer's work for a reward)\n",
      dictionary, kServedGrowthBatchDivisor);
  const auto whole_started = Clock::now();
  const std::vector<GrowthRow> whole = GrowthRun(false, events, window, dictionary);
  const double whole_s = std::chrono::duration<double>(Clock::now() - whole_started).count();
  const auto spread_started = Clock::now();
  const std::vector<GrowthRow> spread = GrowthRun(true, events, window, dictionary);
  const double spread_s = std::chrono::duration<double>(Clock::now() - spread_started).count();
  std::printf("%9s | %6s %9s %9s %9s | %6s %9s %9s %9s\n", "rewards", "m", "mean us", "p99 us",
              "max ms", "m", "mean us", "p99 us", "max ms");
  std::printf("%9s | %36s | %36s\n", "", "whole pass when a batch fills",
              "pass spread over rewards");
  for (size_t r = 0; r < whole.size() && r < spread.size(); ++r) {
    const int64_t at = std::min<int64_t>(static_cast<int64_t>(r + 1) * window, events);
    std::printf("%9lld | %6lld %9.1f %9.1f %9.2f | %6lld %9.1f %9.1f %9.2f\n",
                static_cast<long long>(at), static_cast<long long>(whole[r].m), whole[r].mean_us,
                whole[r].p99_us, whole[r].max_ms, static_cast<long long>(spread[r].m),
                spread[r].mean_us, spread[r].p99_us, spread[r].max_ms);
  }
  std::printf(
      "total: whole pass %.2f s, spread %.2f s; points refused as dependent %lld and %lld; a "
      "pending point M could not take: rebuilds from the history %lld and %lld, pending "
      "points dropped %lld and %lld\n\n",
      whole_s, spread_s, static_cast<long long>(whole.back().dependent),
      static_cast<long long>(spread.back().dependent),
      static_cast<long long>(whole.back().rebuilds), static_cast<long long>(spread.back().rebuilds),
      static_cast<long long>(whole.back().dropped), static_cast<long long>(spread.back().dropped));
  std::fflush(stdout);
}

}  // namespace graphbandit
