#include "core/policy/selection.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>

namespace graphbandit {

double ExplorationWidthFor(ExplorationWidth width, const WidthInputs& in) {
  const double t = 1.0 + static_cast<double>(std::max<int64_t>(in.rewards_learned, 0));
  switch (width) {
    case ExplorationWidth::kStddev:
      return 1.0;
    case ExplorationWidth::kAmm:
      return std::sqrt(std::max(in.information_gain, 0.0) + 2.0 * std::log(1.0 / kAmmDelta) +
                       std::max(in.mean_norm_squared, 0.0));
    case ExplorationWidth::kGpUcbTheorem:
      return IndexWidth(IndexRule::kUcb, in.schedule, t);
    case ExplorationWidth::kBayesUcb:
      return IndexWidth(IndexRule::kBayesUcb, in.schedule, t);
  }
  return 1.0;
}
// Equal scores end up in random order because the stable sort runs on a shuffled permutation.
std::vector<int> RankDescending(const Eigen::VectorXd& score, Rng& rng) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  for (int i = static_cast<int>(order.size()) - 1; i > 0; --i) {
    std::swap(order[i], order[rng.UniformInt(i + 1)]);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&score](int a, int b) { return score(a) > score(b); });
  return order;
}

TopKInclusion::TopKInclusion(Eigen::VectorXd score, int k) : score_(std::move(score)) {
  std::vector<double> sorted(score_.data(), score_.data() + score_.size());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<double>());
  boundary_ = sorted[k - 1];
  int above = 0, tied = 0;
  for (Eigen::Index j = 0; j < score_.size(); ++j) {
    if (score_(j) > boundary_) ++above;
    if (score_(j) == boundary_) ++tied;
  }
  tie_share_ = static_cast<double>(k - above) / static_cast<double>(tied);
}

double TopKInclusion::operator()(int candidate) const {
  const double s = score_(candidate);
  return s > boundary_ ? 1.0 : s == boundary_ ? tie_share_ : 0.0;
}

Eigen::VectorXd ThompsonSlateInclusion(const Eigen::VectorXd& mean, const Eigen::VectorXd& spread,
                                       int k, Rng& rng) {
  const Eigen::Index n = mean.size();
  Eigen::VectorXd hits = Eigen::VectorXd::Zero(n);
  Eigen::VectorXd draw(n);
  std::vector<int> index(n);
  for (int d = 0; d < kSlateProbabilityDraws; ++d) {
    for (Eigen::Index j = 0; j < n; ++j) draw(j) = mean(j) + spread(j) * rng.Normal();
    std::iota(index.begin(), index.end(), 0);
    std::nth_element(index.begin(), index.begin() + (k - 1), index.end(),
                     [&draw](int a, int b) { return draw(a) > draw(b); });
    for (int r = 0; r < k; ++r) hits(index[r]) += 1.0;
  }
  return hits / static_cast<double>(kSlateProbabilityDraws);
}

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double ProbabilityOfMaximum(int i, const Eigen::VectorXd& mean, const Eigen::VectorXd& spread) {
  const Eigen::Index n = mean.size();
  if (spread(i) <= 0.0) {
    // A fixed value wins if every random rival falls below it and no fixed rival is above it.
    double p = 1.0;
    int ties = 1;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (j == i) continue;
      if (spread(j) > 0.0) {
        p *= NormalCdf((mean(i) - mean(j)) / spread(j));
      } else if (mean(j) > mean(i)) {
        return 0.0;
      } else if (mean(j) == mean(i)) {
        ++ties;
      }
    }
    return p / ties;
  }
  // Integrate over z, the standard score of candidate i (its value is mean_i + spread_i z), on
  // [lo, 8.5]. Deterministic rivals make the integrand exactly zero below the largest of them,
  // so the range starts there and the integrand is smooth on it; rivals much narrower than i
  // switch on sharply around their mean, so their transition gets panels of its own.
  constexpr double kHalfWidth = 8.5;
  double lo = -kHalfWidth;
  const double hi = kHalfWidth;
  std::vector<Eigen::Index> rivals;
  std::vector<double> breaks;
  for (Eigen::Index j = 0; j < n; ++j) {
    if (j == i) continue;
    const double centre = (mean(j) - mean(i)) / spread(i);
    if (spread(j) <= 0.0) {
      lo = std::max(lo, centre);
      continue;
    }
    const double width = spread(j) / spread(i);
    if (centre - 9.0 * width >= hi) return 0.0;  // beats i over the whole range
    if (centre + 9.0 * width <= lo) continue;    // always below i
    rivals.push_back(j);
    if (width < 0.05) {
      for (double k : {-9.0, -3.0, -1.0, 0.0, 1.0, 3.0, 9.0}) breaks.push_back(centre + k * width);
    }
  }
  if (lo >= hi) return 0.0;
  constexpr int kPanels = 256;
  for (int k = 0; k <= kPanels; ++k) breaks.push_back(lo + (hi - lo) * k / kPanels);
  std::sort(breaks.begin(), breaks.end());

  // 8-point Gauss-Legendre nodes and weights on [-1, 1].
  static constexpr double kNode[4] = {0.1834346424956498, 0.5255324099163290, 0.7966664774136267,
                                      0.9602898564975363};
  static constexpr double kWeight[4] = {0.3626837833783620, 0.3137066458778873, 0.2223810344533745,
                                        0.1012285362903763};
  auto integrand = [&](double z) {
    const double value = mean(i) + spread(i) * z;
    double log_density = -0.5 * z * z;
    for (Eigen::Index j : rivals) {
      log_density += std::log(NormalCdf((value - mean(j)) / spread(j)));
    }
    return std::exp(log_density);
  };
  double total = 0.0;
  for (size_t k = 0; k + 1 < breaks.size(); ++k) {
    const double a = std::max(breaks[k], lo), b = std::min(breaks[k + 1], hi);
    if (b <= a) continue;
    const double half = 0.5 * (b - a), mid = 0.5 * (a + b);
    double panel = 0.0;
    for (int q = 0; q < 4; ++q) {
      panel += kWeight[q] * (integrand(mid - half * kNode[q]) + integrand(mid + half * kNode[q]));
    }
    total += half * panel;
  }
  return std::clamp(total / std::sqrt(2.0 * M_PI), 0.0, 1.0);
}

std::vector<RankedChoice> SelectSlate(SelectionRule rule, double exploration,
                                      const Eigen::VectorXd& mean, const Eigen::VectorXd& stddev,
                                      int slate_size, Rng& rng, bool probabilities) {
  const Eigen::Index n = mean.size();
  const Eigen::VectorXd spread = exploration * stddev;
  Eigen::VectorXd score(n);
  if (rule == SelectionRule::kUcb) {
    score = mean + spread;
  } else {
    for (Eigen::Index j = 0; j < n; ++j) score(j) = mean(j) + spread(j) * rng.Normal();
  }
  // The super arm: the top slate_size indices (the CGP paper's oracle for an additive slate
  // value). REQUIRES 1 <= slate_size <= candidates (DecideSlate checks it, and that the
  // posterior is finite); should a score still overflow, the plain ranking returns the slate.
  auto top = TopKOracle(slate_size).Select(score, rng);
  const std::vector<int> order = top.ok() ? *std::move(top) : RankDescending(score, rng);
  std::vector<RankedChoice> slate(slate_size);
  for (int r = 0; r < slate_size; ++r) slate[r] = {order[r], score(order[r]), std::nullopt};

  if (!probabilities) return slate;
  const bool random_rule = rule == SelectionRule::kThompson && (spread.array() > 0.0).any();
  if (!random_rule) {
    const TopKInclusion inclusion(mean + spread, slate_size);
    for (RankedChoice& choice : slate) choice.probability = inclusion(choice.candidate);
  } else if (slate_size == 1) {
    slate[0].probability = ProbabilityOfMaximum(slate[0].candidate, mean, spread);
  } else {
    const Eigen::VectorXd inclusion = ThompsonSlateInclusion(mean, spread, slate_size, rng);
    for (RankedChoice& choice : slate) choice.probability = inclusion(choice.candidate);
  }
  return slate;
}

}  // namespace graphbandit
