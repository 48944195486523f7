// SemiGraphTS and its linear baselines (Thompson sampling on per-user preference vectors; the
// SG paper, docs/algorithms.md §5).
//
// Rewards are r = nu_j(t) + b^T mu_j + noise, where the baseline nu_j(t) is the same for every
// arm shown to user j at time t and may change arbitrarily (time of day, a campaign, the page).
// A decision draws theta ~ N(mu_hat_j, v^2 Gamma_j^-1) and ranks candidates by b^T theta.
//
//  * Centred (semi-parametric) learning, SG eq. 5-6: with pi_i the probability that the policy
//    picks candidate i, b_bar = sum_i pi_i b_i and X = b_chosen - b_bar,
//      B_j += X X^T + sum_i pi_i (b_i - b_bar)(b_i - b_bar)^T,   y_j += 2 X r.
//    E[X | past] = 0, so the unknown baseline only adds a martingale term: the estimate
//    mu_bar_j = B_j^-1 y_j is not biased by it. The probabilities must be those of the decision
//    itself, which is why this learner learns only through ObserveDecision.
//  * With the graph (SemiGraphTS, SG eq. 7-8), on the random-walk Laplacian l_jj = 1,
//    l_jk = -w_jk / deg_j:
//      mu_hat_j = mu_bar_j - lambda B_j^-1 sum_{k != j} l_jk mu_bar_k,
//      Gamma_j  = B_j + lambda^2 sum_{k != j} l_jk^2 B_k^-1   (+ lambda I with code_gamma).
//    Without it (SemiTS-Ind; SemiTS-Sin is the same learner with every user served as one),
//    mu_hat_j = mu_bar_j and Gamma_j = B_j. A user without neighbours is a user without it.
//  * Uncentred (LinTS, Agrawal & Goyal 2013): B_j += b b^T, y_j += r b on the chosen point only;
//    Observe works. LinTS does not use the graph.
//  * Uncentred with the graph terms is GraphUCB-Local (Yang et al. 2020, the local version of
//    Laplacian-regularised LinUCB that the SG paper compares with, docs/algorithms.md §5.8),
//    chosen by UCB on Score rather than by sampling. Its mean is one Jacobi step of the
//    regularised normal equations: with G_j = sum b b^T and B_j = lambda I + G_j,
//      mu_hat_j = B_j^-1 (y_j + lambda sum_{k != j} (w_jk / deg_j) mu_bar_k),
//    the user's ridge solution pulled towards the average of its neighbours' estimates (the
//    formula above, since l_jj = 1 makes lambda I the diagonal of lambda L). Its width is
//    sqrt(b^T Gamma_j^-1 b) with Gamma_j including the extra lambda I (code_gamma): Yang et al.'s
//    local confidence matrix G_j + 2 lambda l_jj I + lambda^2 sum_{k != j} l_jk^2 B_k^-1, where
//    their code uses a separate small ridge for the neighbours' inverses. The confidence
//    multiplier is the policy's exploration constant, tuned like LinUCB's, not their
//    data-dependent beta.
//
// Every B_j starts at lambda I. A new user with friends starts from their estimates (the graph
// term); one without starts from 0 with spread v^2 / lambda.
//
// Numerics: B_j, y_j are accumulated; B_j^-1 and mu_bar_j are recomputed from them by a fresh
// Cholesky factorisation after each update (O(d^3), d the point dimension), so that a learner
// restored from a snapshot (which stores B_j and y_j) is bit-identical to the one that wrote it.
// Per-user state is shared between the learner and every frozen scorer until the user's next
// update (copy-on-write), so Freeze() costs O(users) pointer copies.
#ifndef GRAPHBANDIT_CORE_LEARNER_SEMI_PARAMETRIC_TS_H_
#define GRAPHBANDIT_CORE_LEARNER_SEMI_PARAMETRIC_TS_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/learner/posterior.h"

namespace graphbandit {

struct SemiParametricOptions {
  bool centred = true;  // false: LinTS
  bool graph = true;    // the graph terms (SemiGraphTS centred, GraphUCB-Local uncentred)
  double lambda = 1.0;  // B_j(1) = lambda I; the graph terms' weight
  // Gamma_j gets an extra lambda I, as the SG authors' code computes it (docs/algorithms.md §5.4).
  bool code_gamma = false;

  absl::Status Validate() const;  // lambda > 0 and finite
};

class SemiParametricTs final : public Learner {
 public:
  SemiParametricTs(int dim, const SemiParametricOptions& options);
  ~SemiParametricTs() override;

  // mean = b^T mu_hat_j, stddev = sqrt(b^T Gamma_j^-1 b) (the spread of b^T theta per unit v).
  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  bool SamplesParameters() const override { return true; }
  void SampleValues(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, double scale,
                    int draws, Rng& rng, Eigen::MatrixXd* values) const override;

  // LinTS only; the centred learners fail with FailedPrecondition.
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  bool LearnsFromDecisions() const override { return options_.centred; }
  absl::Status ObserveDecision(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                               const Eigen::Ref<const Eigen::VectorXd>& probabilities, int chosen,
                               double reward) override;
  // Keeps the graph's neighbour weights (the per-user statistics do not depend on the graph).
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> kernel) override;
  std::shared_ptr<const Scorer> Freeze() const override;
  void SaveState(storage::Encoder* out) const override;
  absl::Status LoadState(storage::Decoder* in) override;

  int64_t history_size() const override { return observations_; }
  int64_t dictionary_size() const override { return 0; }

  const SemiParametricOptions& options() const { return options_; }

  struct UserStats {
    Eigen::MatrixXd b;          // B_j
    Eigen::VectorXd y;          // y_j
    Eigen::MatrixXd b_inverse;  // B_j^-1
    Eigen::VectorXd mu_bar;     // B_j^-1 y_j
    int64_t observations = 0;
  };
  // Random-walk weights w_jk / deg_j of each user's neighbours (sorted by neighbour).
  using Neighbours = std::vector<std::vector<std::pair<int32_t, double>>>;

 private:
  class FrozenScorer;
  std::shared_ptr<const UserStats> Fresh() const;
  // Applies B += db, y += dy to `user` and refactors.
  absl::Status Update(int32_t user, const Eigen::MatrixXd& db, const Eigen::VectorXd& dy);

  int dim_;
  SemiParametricOptions options_;
  std::shared_ptr<const UserStats> prior_;  // lambda I, shared by users without data
  std::vector<std::shared_ptr<const UserStats>> users_;
  std::shared_ptr<const Neighbours> neighbours_;
  int64_t observations_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_SEMI_PARAMETRIC_TS_H_
