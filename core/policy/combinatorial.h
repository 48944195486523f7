// Combinatorial semi-bandits (the CGP paper, docs/algorithms.md §2): a round offers a set of base
// arms, the policy computes one index per base arm from a posterior (mean, standard deviation),
// and an oracle turns the indices into a super arm, a feasible set of base arms. Every base arm
// of the super arm is then rewarded on its own (semi-bandit feedback) and the learner learns
// each reward as a single observation.
//
// Two oracles:
//  * TopKOracle: a slate of k items with additive value, the k largest indices (exact for
//    additive value; what SelectArm does with slate_size k);
//  * ShortestPathOracle: a route through a road network whose base arms are its directed road
//    segments, minimising the summed indices with Dijkstra's algorithm over the line graph
//    (segment -> segment when the turn is allowed). Dijkstra needs non-negative weights, so a
//    minimising policy rectifies its indices first (CGP Algorithm 2).
//
// Index rules (CGP paper; docs/algorithms.md §2.4): GP-UCB (mean + sqrt(beta_t) stddev, beta_t from
// Theorem 3.1), GP-BayesUCB (the 1 - eta_t quantile of the posterior, eta_t from Theorem 3.1
// clamped to at most 1/2, or the level 1/t of Algorithm 2), and GP-TS (a posterior draw per base
// arm; the paper's experiments also draw edges independently). For a minimisation the optimistic
// side is the lower one: mean - width * stddev.
#ifndef GRAPHBANDIT_CORE_POLICY_COMBINATORIAL_H_
#define GRAPHBANDIT_CORE_POLICY_COMBINATORIAL_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/random.h"

namespace graphbandit {

enum class IndexRule { kUcb, kBayesUcb, kThompson };

// The schedules of CGP Theorem 3.1 for a finite set of `arm_count` base arms (|A|; in the
// contextual case a configured count, docs/algorithms.md §2.11 item 3). `t` is the round, from 1.
struct IndexSchedule {
  double arm_count = 1000.0;
  // GP-BayesUCB: eta_t = (2 pi)^(omega / 2) / (2 |A|^omega t^xi); the paper's experiments use
  // omega = xi = 1 (outside its theorem, which wants xi > omega > 1).
  double omega = 1.0;
  double xi = 1.0;
  // GP-BayesUCB: the fixed level eta_t = 1 / t of CGP Algorithm 2 instead of the formula.
  bool inverse_t_level = false;
};

// beta_t = 2 log(|A| t^2 / sqrt(2 pi)), at least 0.
double GpUcbBeta(double arm_count, double t);
// eta_t of GP-BayesUCB, clamped into [1e-300, 1/2] (docs/algorithms.md §2.11 item 4: the formula
// exceeds 1/2 when |A| t is small, which would make the quantile fall below the mean).
double BayesUcbEta(const IndexSchedule& schedule, double t);
// What multiplies the standard deviation in round t: sqrt(beta_t) for kUcb (and kThompson,
// which does not use it), Phi^-1(1 - eta_t) for kBayesUcb (the identity
// beta_t = 2 erfinv(1 - 2 eta_t)^2 of §2.4). Always >= 0 and finite. The paper's "beta_t x 0.5"
// variant is an exploration scale of sqrt(0.5) on top.
double IndexWidth(IndexRule rule, const IndexSchedule& schedule, double t);

// The standard normal quantile Phi^-1(p) for p in (0, 1) (Acklam's rational approximation and
// one Halley step on erfc: relative error near machine precision). +-infinity at 0 and 1.
double NormalQuantile(double p);

// E[max(0, Z)] for Z ~ N(mean, s^2): mean Phi(mean / s) + s phi(mean / s); max(0, mean) at
// s = 0. The rectified weight of CGP Algorithm 2 (docs/algorithms.md §0.6).
double RectifiedNormalMean(double mean, double s);

// One index per base arm. kUcb / kBayesUcb: mean +- width * stddev (minus when minimising);
// kThompson: mean + stddev * z with an independent z ~ N(0, 1) per arm from `rng` (width is
// not used). Consumes rng only for kThompson.
Eigen::VectorXd BaseArmIndices(IndexRule rule, double width, const Eigen::VectorXd& mean,
                               const Eigen::VectorXd& stddev, bool minimise, Rng& rng);

// Chooses a super arm from per-base-arm indices.
class SuperArmOracle {
 public:
  virtual ~SuperArmOracle() = default;
  // True when the super arm minimises the summed indices (costs), false when it maximises.
  virtual bool minimises() const = 0;
  // The base arms of the best feasible super arm (indices into `index`). Fails with
  // INVALID_ARGUMENT when the indices do not suit the oracle (wrong size, non-finite, negative
  // costs) and FAILED_PRECONDITION when no super arm is feasible.
  virtual absl::StatusOr<std::vector<int>> Select(const Eigen::VectorXd& index, Rng& rng) const = 0;
};

// The k largest indices, best first; exact ties in random order (from `rng`).
class TopKOracle final : public SuperArmOracle {
 public:
  explicit TopKOracle(int k) : k_(k) {}
  bool minimises() const override { return false; }
  absl::StatusOr<std::vector<int>> Select(const Eigen::VectorXd& index, Rng& rng) const override;

 private:
  int k_;
};

// A cheapest route from segment `source` to segment `goal` of a directed road network given
// as its line graph: successors[e] lists the segments a vehicle may enter from segment e. The
// route is the list of segments from source to goal inclusive, and its cost is the sum of
// their indices (source and goal included), which must be >= 0. Among equally cheap routes the
// one Dijkstra settles first (deterministic; `rng` is not used).
class ShortestPathOracle final : public SuperArmOracle {
 public:
  ShortestPathOracle(std::vector<std::vector<int>> successors, int source, int goal)
      : successors_(std::move(successors)), source_(source), goal_(goal) {}
  bool minimises() const override { return true; }
  absl::StatusOr<std::vector<int>> Select(const Eigen::VectorXd& index, Rng& rng) const override;

  int segments() const { return static_cast<int>(successors_.size()); }

 private:
  std::vector<std::vector<int>> successors_;
  int source_, goal_;
};

// Shortest route by Bellman-Ford, for costs that may be negative (a true energy model with
// recuperation): the least-cost walk from source to goal, or FAILED_PRECONDITION when a cycle
// of negative cost is reachable (no least-cost route exists). O(segments * turns).
absl::StatusOr<std::vector<int>> CheapestRouteAnyCosts(
    const std::vector<std::vector<int>>& successors, int source, int goal,
    const Eigen::VectorXd& cost);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_POLICY_COMBINATORIAL_H_
