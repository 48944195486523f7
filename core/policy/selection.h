// Turning posterior means and standard deviations into a ranked slate.
//
// UCB ranks by mean + beta * stddev (LK eq. 6; EK's index with beta expressed on the GP scale).
// Thompson sampling ranks by mean + nu * stddev * z with an independent z ~ N(0,1) per
// candidate (LK eq. 7: marginal, not joint, perturbations). A slate of k arms is the top k by
// index, which is the exact optimum for additive slate value (docs/algorithms.md §2.2). Exact ties
// are broken uniformly at random with the caller's stream.
#ifndef GRAPHBANDIT_CORE_POLICY_SELECTION_H_
#define GRAPHBANDIT_CORE_POLICY_SELECTION_H_

#include <Eigen/Dense>
#include <optional>
#include <vector>

#include "core/base/random.h"
#include "core/policy/combinatorial.h"

namespace graphbandit {

// kSampledParameter: the scorer draws whole parameter vectors (Scorer::SampleValues; SemiGraphTS
// and its linear baselines) and the decision step records every candidate's probability of
// being chosen (core/policy/decision_step.h).
enum class SelectionRule { kUcb, kThompson, kSampledParameter };

// How a kSampledParameter decision picks its arm and estimates the probabilities its learner
// needs, from M draws of the parameter (SG paper, docs/algorithms.md §5.3-5.4):
//  * kMultinomial (SemiGraphTS-MC, Algorithm 2): pi_hat = how often each candidate wins among
//    the M draws, and the arm is drawn from pi_hat itself, so pi_hat is exactly the law the arm
//    was chosen by;
//  * kOwnDraw (Algorithm 1 as the SG authors run it): one more draw picks the arm (the argmax of
//    its values) and pi_hat from M other draws estimates that draw's law.
enum class PropensityRule { kMultinomial, kOwnDraw };

inline constexpr int kDefaultPropensityDraws = 1000;

// How the width multiplying `exploration` is set.
//  * kStddev: 1, i.e. the index is mean + exploration * stddev with stddev the posterior standard
//    deviation under the (fitted) kernel and noise;
//  * kAmm: the Kernel AMM-UCB radius of the tighter-confidence-bounds paper (docs/algorithms.md
//    §3.5) with alpha = lambda (c = 1, the fitted noise variance as sigma^2):
//    sqrt(log det(I + K_t / lambda) + 2 log(1/delta) + B^2), delta = 0.01, with the posterior
//    mean's squared RKHS norm as a plug-in for the unknown bound B^2. It grows like
//    sqrt(information gain) as data arrive.
//  * kGpUcbTheorem: sqrt(beta_t) of the CGP paper's Theorem 3.1 for |A| base arms
//    (core/policy/combinatorial.h), t = 1 + the rewards learned so far (the paper's t counts
//    rounds; a slate of k rewards advances this t by k);
//  * kBayesUcb: Phi^-1(1 - eta_t), so that at exploration 1 mean + width * stddev is the
//    posterior's 1 - eta_t quantile (GP-BayesUCB; docs/algorithms.md §2.4), same t.
// Both are UCB indices: ModelOptions validation refuses them for Thompson sampling and with a
// provable confidence bound.
enum class ExplorationWidth { kStddev, kAmm, kGpUcbTheorem, kBayesUcb };

inline constexpr double kAmmDelta = 0.01;

// What a width depends on: the learner's information gain and mean norm (kAmm), the CGP
// schedule and the number of rewards learned (kGpUcbTheorem, kBayesUcb).
struct WidthInputs {
  double information_gain = 0.0;
  double mean_norm_squared = 0.0;
  IndexSchedule schedule;
  int64_t rewards_learned = 0;
};

double ExplorationWidthFor(ExplorationWidth width, const WidthInputs& inputs);

struct RankedChoice {
  int candidate = 0;   // index into the scored candidates
  double score = 0.0;  // the index it was ranked by
  // Probability that the rule, in this state, puts this candidate in the slate.
  std::optional<double> probability;
};

// Number of Monte Carlo draws behind Thompson-sampling inclusion probabilities of slates.
inline constexpr int kSlateProbabilityDraws = 1000;

// Chooses slate_size (1..mean.size()) candidates, best first. Consumes `rng` for the tie-break
// shuffle, the Thompson draws and (Thompson slates only) the probability estimate. Without
// `probabilities` the choices are the same and carry no probability (simulations skip the cost).
std::vector<RankedChoice> SelectSlate(SelectionRule rule, double exploration,
                                      const Eigen::VectorXd& mean, const Eigen::VectorXd& stddev,
                                      int slate_size, Rng& rng, bool probabilities = true);

// P(candidate `i` has the largest value) when value j ~ N(mean_j, spread_j^2) independently
// (spread 0 = deterministic; deterministic ties split evenly). Exposed for tests.
double ProbabilityOfMaximum(int i, const Eigen::VectorXd& mean, const Eigen::VectorXd& spread);

// Inclusion probabilities of a deterministic top-k with a uniform tie-break (the UCB rule's
// slate): 1 above the k-th largest score, 0 below it, and the tie group at it shares the slots
// left. Keeps a copy of the scores. REQUIRES 1 <= k <= score.size().
class TopKInclusion {
 public:
  TopKInclusion(Eigen::VectorXd score, int k);
  double operator()(int candidate) const;

 private:
  Eigen::VectorXd score_;
  double boundary_ = 0.0;  // the k-th largest score
  double tie_share_ = 0.0;
};

// Every candidate's frequency in the top k of kSlateProbabilityDraws draws of
// mean + spread * N(0, 1) (a Thompson slate's inclusion probabilities, which have no convenient
// closed form). Consumes `rng`.
Eigen::VectorXd ThompsonSlateInclusion(const Eigen::VectorXd& mean, const Eigen::VectorXd& spread,
                                       int k, Rng& rng);

// Every index of `score`, by descending score; exact ties in random order (consumes `rng`).
std::vector<int> RankDescending(const Eigen::VectorXd& score, Rng& rng);

// Standard normal CDF.
double NormalCdf(double x);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_POLICY_SELECTION_H_
