#include "core/policy/combinatorial.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/policy/selection.h"

namespace graphbandit {
namespace {

constexpr double kSqrtTwoPi = 2.5066282746310002;
constexpr double kSmallestEta = 1e-300;

// Phi^-1(p) for p in (0, 1/2]: Acklam's approximation (relative error 1.15e-9), then one Halley
// step on the exact CDF. Restricting to the lower half keeps the small tail probabilities
// BayesUCB uses exact (1 - p would round them away).
double LowerQuantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  }
  // Halley: e = Phi(x) - p, u = e / phi(x).
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * kSqrtTwoPi * std::exp(0.5 * x * x);
  if (std::isfinite(u)) x -= u / (1.0 + 0.5 * x * u);
  return x;
}

}  // namespace

double NormalQuantile(double p) {
  if (!(p > 0.0)) return -std::numeric_limits<double>::infinity();
  if (!(p < 1.0)) return std::numeric_limits<double>::infinity();
  return p <= 0.5 ? LowerQuantile(p) : -LowerQuantile(1.0 - p);
}

double GpUcbBeta(double arm_count, double t) {
  return std::max(0.0, 2.0 * std::log(std::max(arm_count, 1.0) * t * t / kSqrtTwoPi));
}

double BayesUcbEta(const IndexSchedule& schedule, double t) {
  t = std::max(t, 1.0);
  double eta;
  if (schedule.inverse_t_level) {
    eta = 1.0 / t;
  } else {
    // In logs: the powers overflow for large |A| or t.
    const double log_eta = 0.5 * schedule.omega * std::log(2.0 * M_PI) - std::log(2.0) -
                           schedule.omega * std::log(std::max(schedule.arm_count, 1.0)) -
                           schedule.xi * std::log(t);
    eta = std::exp(log_eta);
  }
  return std::clamp(eta, kSmallestEta, 0.5);
}

double IndexWidth(IndexRule rule, const IndexSchedule& schedule, double t) {
  if (rule == IndexRule::kBayesUcb) {
    // Phi^-1(1 - eta) = -Phi^-1(eta), exact for tiny eta.
    return std::max(0.0, -NormalQuantile(BayesUcbEta(schedule, t)));
  }
  return std::sqrt(GpUcbBeta(schedule.arm_count, t));
}

double RectifiedNormalMean(double mean, double s) {
  if (!(s > 0.0)) return std::max(0.0, mean);
  const double z = mean / s;
  const double density = std::exp(-0.5 * z * z) / kSqrtTwoPi;
  return mean * NormalCdf(z) + s * density;
}

Eigen::VectorXd BaseArmIndices(IndexRule rule, double width, const Eigen::VectorXd& mean,
                               const Eigen::VectorXd& stddev, bool minimise, Rng& rng) {
  Eigen::VectorXd index(mean.size());
  const double sign = minimise ? -1.0 : 1.0;
  for (Eigen::Index i = 0; i < mean.size(); ++i) {
    index(i) = rule == IndexRule::kThompson ? mean(i) + stddev(i) * rng.Normal()
                                            : mean(i) + sign * width * stddev(i);
  }
  return index;
}

absl::StatusOr<std::vector<int>> TopKOracle::Select(const Eigen::VectorXd& index, Rng& rng) const {
  if (k_ < 1 || k_ > index.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a slate of %d needs between 1 and %d base arms", k_, index.size()));
  }
  if (!index.allFinite()) return absl::InvalidArgumentError("a base-arm index is not finite");
  std::vector<int> order = RankDescending(index, rng);
  order.resize(static_cast<size_t>(k_));
  return order;
}

absl::StatusOr<std::vector<int>> ShortestPathOracle::Select(const Eigen::VectorXd& index,
                                                            Rng& /*rng*/) const {
  const int n = segments();
  if (index.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d indices for a network of %d segments", index.size(), n));
  }
  for (int e = 0; e < n; ++e) {
    if (!std::isfinite(index(e)) || index(e) < 0.0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "segment %d has cost %g: Dijkstra needs finite costs >= 0 (rectify them)", e, index(e)));
    }
  }
  if (source_ < 0 || source_ >= n || goal_ < 0 || goal_ >= n) {
    return absl::InvalidArgumentError("source or goal segment out of range");
  }
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  std::vector<int> previous(n, -1);
  std::vector<char> settled(n, 0);
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  dist[source_] = index(source_);
  queue.emplace(dist[source_], source_);
  while (!queue.empty()) {
    const auto [d, e] = queue.top();
    queue.pop();
    if (settled[e]) continue;
    settled[e] = 1;
    if (e == goal_) break;
    for (int next : successors_[e]) {
      const double candidate = d + index(next);
      if (candidate < dist[next]) {
        dist[next] = candidate;
        previous[next] = e;
        queue.emplace(candidate, next);
      }
    }
  }
  if (!settled[goal_]) {
    return absl::FailedPreconditionError(
        absl::StrFormat("segment %d cannot be reached from segment %d", goal_, source_));
  }
  std::vector<int> route;
  for (int e = goal_; e != -1; e = previous[e]) route.push_back(e);
  std::reverse(route.begin(), route.end());
  return route;
}

absl::StatusOr<std::vector<int>> CheapestRouteAnyCosts(
    const std::vector<std::vector<int>>& successors, int source, int goal,
    const Eigen::VectorXd& cost) {
  const int n = static_cast<int>(successors.size());
  if (cost.size() != n || source < 0 || source >= n || goal < 0 || goal >= n) {
    return absl::InvalidArgumentError("costs, source or goal do not fit the network");
  }
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  std::vector<int> previous(n, -1);
  dist[source] = cost(source);
  bool changed = true;
  for (int pass = 0; pass < n && changed; ++pass) {
    changed = false;
    for (int e = 0; e < n; ++e) {
      if (!std::isfinite(dist[e])) continue;
      for (int next : successors[e]) {
        if (dist[e] + cost(next) < dist[next]) {
          dist[next] = dist[e] + cost(next);
          previous[next] = e;
          changed = true;
        }
      }
    }
  }
  if (changed) {
    return absl::FailedPreconditionError("a cycle of negative cost is reachable from the source");
  }
  if (!std::isfinite(dist[goal])) {
    return absl::FailedPreconditionError(
        absl::StrFormat("segment %d cannot be reached from segment %d", goal, source));
  }
  std::vector<int> route;
  for (int e = goal; e != -1; e = previous[e]) {
    route.push_back(e);
    if (static_cast<int>(route.size()) > n) return absl::InternalError("route does not end");
  }
  std::reverse(route.begin(), route.end());
  return route;
}

}  // namespace graphbandit
