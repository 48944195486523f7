// The linear baselines of the Laplacian Kernelized Bandit comparison (docs/algorithms.md §1.9
// "Baselines", defaults from §1.10 item 16): one linear-Gaussian ridge model over per-user
// parameter vectors theta_u in R^d (d = the point dimension) with three prior structures.
//
//  * kPerUser — per-user LinUCB (Li et al. 2010, one model per user): A_u = lambda I + sum x x^T
//    over user u's observations, b_u = sum y x. A user with no data gets mean 0 and width
//    sqrt(|x|^2 / lambda).
//  * kPooled — pooled LinUCB: one A = lambda I + sum x x^T, b = sum y x shared by every user
//    (the user index, kUnknownUser included, is ignored).
//  * kGraph — Laplacian-regularised ridge in R^{nd} (GraphUCB, Yang et al. 2020): with
//    phi = e_u (x) x and L the combinatorial Laplacian of the graph (docs/algorithms.md §0.3),
//      A = lambda (L + rho I) (x) I_d + sum phi phi^T,   b = sum y phi,
//      mean = phi^T A^-1 b,   width = sqrt(phi^T A^-1 phi).
//    Users 0..n-1 of the graph given to SetGraph are coupled through L; users without edges,
//    users beyond the graph (index >= n) and kUnknownUser are isolated: their row of L is 0, so
//    their prior precision is lambda rho I_d.
//
// GoB.Lin (Cesa-Bianchi et al. 2013) is kGraph with rho = 1, lambda = 1. GoB.Lin runs LinUCB
// with ridge 1 on the whitened feature psi = S phi, S = A_(x)^{-1/2}, A_(x) = (I + L) (x) I_d.
// Since S A_(x) S = I, its matrix is M = I + sum psi psi^T = S (A_(x) + sum phi phi^T) S, so
//   psi^T M^-1 psi = phi^T (A_(x) + sum phi phi^T)^-1 phi   and   psi^T M^-1 sum y psi = the same
// expression with b: exactly kGraph's width and mean with lambda (L + rho I) = I + L. This is the
// equivalence docs/algorithms.md §1.9 quotes from the LK paper ("GoB.Lin equals GraphUCB with
// rho = 1"); tests/core/learner/linear_posterior_test.cc checks it against an explicit whitening.
//
// kGraph is also the exact GP with the linear arm kernel k_x(x,x') = <x,x'>, the Green's-function
// user kernel (L + rho I)^-1 (prior theta ~ N(0, (L + rho I)^-1 (x) I_d)) and noise variance
// lambda: the GP posterior mean equals `mean` and the GP posterior variance equals
// lambda * width^2.
//
// `stddev` returned by Score is the LinUCB confidence width sqrt(x^T A^-1 x) (the selection rule
// multiplies it by the exploration alpha), not a posterior standard deviation in reward units.
// Only when lambda is the noise variance ratio sigma^2 / sigma_0^2 (noise variance over prior
// variance scale) is the posterior standard deviation sigma * width, so that the width equals it
// for sigma = 1.
//
// State. A (and A^-1) is block diagonal over the connected components of the graph (isolated
// users, kPerUser users and the single pooled model are components of one member), so each
// component keeps its own dense inverse of size (members * d)^2 — never more than (n d)^2 — and
// singleton components are created when their user first reports a reward.
//
// Update strategy (per Observe, component of m = members * d rows): Sherman-Morrison on the
// explicit inverse, O(m^2) on its lower triangle, and the recursive-least-squares update of
// theta = A^-1 b, O(m). We keep the inverse rather than a Cholesky factor because scoring then
// needs only the d x d diagonal block (u,u) of A^-1 and the d values theta_u: O(d^2) per
// candidate, where a factor would need a triangular solve of size m per candidate. Additive
// Sherman-Morrison updates of an SPD inverse drift only slowly (measured: 1e-14 relative after
// 5,000 updates of a 60-row and of a 2,000-row component, 2e-14 after 50,000 updates of a
// 400-row one with lambda = 0.1, rho = 0.01), and the drift is reset by an exact refresh: a
// Cholesky factorisation of the explicitly assembled A (kept cheaply as the prior plus the
// per-user Gram matrices X_u^T X_u) and its inverse, O(m^3). By default a component is refreshed
// every 32 m of its updates, which keeps the refresh at a few percent of the update cost (one
// refresh costs about as much as m/2 to m updates); LinearOptions can set a fixed period or turn
// refreshes off. A refresh is done inline by Observe: at m = 2,000 that one call takes seconds,
// once every 64,000 updates of the component.
//
// Memory: the history (points, users, rewards; SetGraph rebuilds from it) plus, per component,
// m^2 doubles for the inverse and O(m d) for b, theta and the Gram blocks. Freeze() copies only
// the d x d diagonal blocks of A^-1 and theta, i.e. n (d^2 + d) doubles, and reuses the copy of
// every component that has not changed since the previous Freeze().
#ifndef GRAPHBANDIT_CORE_LEARNER_LINEAR_POSTERIOR_H_
#define GRAPHBANDIT_CORE_LEARNER_LINEAR_POSTERIOR_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/learner/posterior.h"
#include "core/linalg/growable_columns.h"

namespace graphbandit {

struct LinearOptions {
  enum class Prior { kPerUser, kPooled, kGraph };
  Prior prior = Prior::kGraph;
  double lambda = 1.0;  // ridge: prior precision scale
  double rho = 0.1;     // kGraph: Laplacian regulariser (GraphUCB 0.1; GoB.Lin rho = lambda = 1)
  // Exact recomputation of a component's inverse after this many of its Sherman-Morrison
  // updates; 0 = automatic (32 m updates, m = the component's rows); negative = never.
  int64_t refresh_interval = 0;
  // kGraph: coupled users share one dense (members * d)^2 inverse; SetGraph refuses a graph
  // whose largest connected component would exceed this many rows.
  int max_block_rows = 8192;

  // lambda > 0 and, for kGraph, rho > 0 (finite).
  absl::Status Validate() const;
};

absl::string_view LinearPriorName(LinearOptions::Prior prior);  // per_user, pooled, graph
absl::StatusOr<LinearOptions::Prior> ParseLinearPrior(absl::string_view name);

class LinearUcbPosterior final : public Learner {
 public:
  // `options` must be valid (LinearOptions::Validate). The learner starts without a graph (every
  // user isolated); SetGraph installs one.
  LinearUcbPosterior(int dim, const LinearOptions& options);
  ~LinearUcbPosterior() override;

  // Mean and LinUCB width (see the header comment) of every column of `points` (dim rows).
  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  // kGraph: couples users 0..graph.num_users()-1 through the graph's Laplacian and rebuilds every
  // component from the stored history. kPerUser and kPooled ignore the graph. `kernel` is unused.
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> kernel) override;
  std::shared_ptr<const Scorer> Freeze() const override;
  void SaveState(storage::Encoder* out) const override;
  absl::Status LoadState(storage::Decoder* in) override;

  int64_t history_size() const override { return history_x_.cols(); }
  int64_t dictionary_size() const override { return 0; }

  const LinearOptions& options() const { return options_; }
  // Exact refreshes of component inverses so far (SetGraph rebuilds not included).
  int64_t refreshes() const { return refreshes_; }
  // Number of components (dense inverse blocks) currently held.
  int num_components() const;

 private:
  struct Component;
  struct Snapshot;
  class FrozenScorer;

  // Component index and member slot of `user`, or -1 when the user has no component yet.
  int32_t ComponentOf(int32_t user, int32_t* member) const;
  // A singleton component for a user without one (prior precision lambda or lambda rho).
  int32_t AddSingleton(int32_t user);
  void Update(Component& component, int member, const Eigen::Ref<const Eigen::VectorXd>& x,
              double y);
  std::shared_ptr<const Snapshot> SnapshotOf(const Component& component) const;
  double PriorVariance() const;  // width^2 / |x|^2 of a user with no component

  int dim_;
  LinearOptions options_;
  GrowableColumns history_x_;
  std::vector<int32_t> history_users_;
  std::vector<double> history_rewards_;

  std::vector<Component> components_;
  std::vector<int32_t> component_of_;  // user -> component, or -1 (not used by kPooled)
  std::vector<int32_t> member_of_;     // user -> member slot within its component
  int64_t refreshes_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_LINEAR_POSTERIOR_H_
