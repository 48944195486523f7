// EK-UCB's incremental Nyström posterior with KORS dictionary growth (docs/algorithms.md §4.4-4.6,
// from "Efficient Kernel UCB for Contextual Bandits"), over any kernel and in particular over
// the Laplacian multi-user kernel (our combination of that paper with the Laplacian Kernelized
// Bandit paper).
//
// With dictionary Z (m points) and history S (t points, rewards Y), the projected ridge
// regression gives, for a point s with kz = K_Z(s) and k_ss = K(s,s):
//
//   mean(s)     = kz^T M^-1 Gamma,                 M = K_ZS K_SZ + lambda K_ZZ,  Gamma = K_ZS Y
//   variance(s) = lambda kz^T M^-1 kz + (k_ss - kz^T K_ZZ^-1 kz)
//
// which is lambda times EK's sigma~^2, i.e. the GP-posterior variance with noise variance
// lambda; with Z = S it equals the exact GP posterior. Instead of EK's explicit inverses we keep
// Cholesky factors of M, K_ZZ and the KORS matrix K_ZZ + mu W^-1, updated in O(m^2) per reward
// (rank-one update of M) and bordered when Z grows. The factors are the learned state; scoring
// reads a form derived from them, the variance as k_ss - kz^T (K_ZZ^-1 - lambda M^-1) kz kept
// current in O(m^2) per reward, so that a decision is one dense matrix product and a publish
// copies no m x m matrix (core/linalg/variance_form.h).
//
// KORS (EK eq. 41, the paper's formula, not the reference code's): an observed point joins Z
// with probability p = min(1, gamma * tau), tau = (1+eps)(k_ss - u)/(k_ss - u + mu),
// u = kz^T (K_ZZ + mu W^-1)^-1 kz, where W holds each dictionary point's weight 1/p. Two
// deliberate refinements, both documented in docs/model.md:
//  * an accepted point identical to a dictionary point (same user, same features) adds its
//    weight 1/p to that point instead of a second copy: the weighted KORS operator
//    sum_z phi_z phi_z^T / p_z is unchanged, and K_ZZ stays non-singular;
//  * an accepted point whose Nyström residual k_ss - kz^T K_ZZ^-1 kz is below
//    min_relative_residual * k_ss is not added (it would not change the span, only the
//    conditioning).
// The first observation always seeds the dictionary (EK's initialisation).
//
// Memory: the history (t points) plus O(m^2). K_ZS is not stored; the border a growth step
// needs is recomputed from the history in blocked matrix products, O(t m d) per growth batch.
// With spread_growth_scan that pass is spread over the observations that follow (a few history
// entries each, about the cost of one rank-one update), so that no single reward pays for it.
#ifndef GRAPHBANDIT_CORE_LEARNER_NYSTROM_POSTERIOR_H_
#define GRAPHBANDIT_CORE_LEARNER_NYSTROM_POSTERIOR_H_

#include <Eigen/Dense>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/base/random.h"
#include "core/kernel/multi_user_kernel.h"
#include "core/learner/history_buffer.h"
#include "core/learner/posterior.h"
#include "core/linalg/cholesky_factor.h"
#include "core/linalg/growable_columns.h"
#include "core/linalg/variance_form.h"

namespace graphbandit {

// KORS's estimate of a point's ridge leverage score, from its residual variance against the
// KORS dictionary (k_ss - u, clamped at 0 by the caller): (1 + epsilon) r / (r + mu), EK eq. 41
// in closed form (docs/algorithms.md §4.5). The one place the formula is written.
inline double KorsLeverage(double residual, double epsilon, double mu) {
  return (1.0 + epsilon) * residual / (residual + mu);
}

struct NystromOptions {
  double ridge = 0.1;         // lambda
  double kors_mu = 0.1;       // mu
  double kors_epsilon = 0.5;  // eps
  double kors_gamma = 1.0;    // gamma
  int max_dictionary_size = 1000;
  double min_relative_residual = 1e-8;
  uint64_t seed = 1;  // KORS coin flips
  // Bounded memory: keep only the last max_history observations (0 = all). They are what a
  // growing dictionary's new row is computed from. Evicted observations either stay in the
  // regression as they were (a new dictionary point never sees them, unless a spread growth pass
  // had counted them before they left: they count with zeros in
  // its coordinates), or, with forget_evicted, are removed from it exactly (rank-one downdate),
  // which makes the posterior a sliding-window regression for drifting rewards.
  int64_t max_history = 0;
  bool forget_evicted = false;
  // Constant prior mean of the rewards: the posterior models reward - prior_mean (set by
  // hyper-parameter refits; 0 reproduces the papers).
  double prior_mean = 0.0;
  // Batched dictionary growth: an accepted point joins K_ZZ and the KORS matrix at once (so
  // later leverage scores see it), but its rows of M and Gamma, which need a pass over the whole
  // retained history (O(t m d)), are computed for a batch of points at once, when
  // max(1, m / growth_batch_divisor) points are pending (at most kMaxGrowthBatch). Exact: M's
  // rows do not depend on when they are computed; until then the pending points' observations
  // are learned on the dictionary without them. 0: every point at once (EK Algorithm 2, the
  // papers' presets).
  int growth_batch_divisor = 0;
  // Scoring may use single precision where it agrees with double precision on the state's
  // probe points (core/linalg/variance_form.h); false: always double (the papers' presets and
  // the identities the tests check). Served models turn it on (ResearchOptions).
  bool single_precision = false;
  // Spread each batch's pass over the history across the observations that follow: a pending
  // batch scans the history retained when it filled, ScanStep() entries per observation, and
  // adds each later observation's terms as it arrives, then joins the regression. The result is
  // the same projected regression (in exact arithmetic) over the observations the batch saw;
  // with forget_evicted, those evicted meanwhile are taken out again. Should the next batch
  // fill first, the scan is finished at once. Also: a pending point that round-off keeps out of
  // M is dropped with the points pending after it (instead of rebuilding the state from the
  // history, O(t m^2)), and admission then refuses points that close to the span. false: the
  // whole pass when the batch fills, and a rebuild (the papers' presets).
  bool spread_growth_scan = false;
  // History entries a spread pass visits per observation; 0: ScanStep()'s cost-based choice.
  int64_t growth_scan_step = 0;
  // A refit that may be spread (LearnerRefit::may_spread, the served models) and whose rebuild
  // costs at least this many multiply-adds (retained history x m^2) is spread over the
  // observations that follow (RefitPending) when spread_growth_scan is on and forget_evicted is
  // off: the new dictionary and its factors are formed at once (O(m^3)), and M and Gamma under
  // the new kernel accumulate the retained history RefitScanStep() entries per observation
  // (plus each new observation as it comes) while the old state goes on serving. Negative:
  // never spread.
  double spread_refit_work = kDefaultSpreadRefitWork;
  static constexpr double kDefaultSpreadRefitWork = 4e9;
  // ObserveBatch learns a batch on the block of the dictionary points its users share kernel
  // entries with, when that block is at most half the dictionary and the factors separate it
  // (exact: the same posterior up to round-off). For tests and benchmarks only: false always
  // learns on the whole factors, to compare the two.
  bool learn_on_support = true;
};

inline constexpr int kMaxGrowthBatch = 16;
// A spread scan visits at least this many history entries per observation.
inline constexpr int64_t kMinGrowthScanStep = 16;
inline constexpr double kMaxReadmitGuard = 1e-2;
// A spread refit visits at least this many history entries per observation, and finishes
// within kRefitScanObservations observations whatever the history's length.
inline constexpr int64_t kMinRefitScanStep = 4;
inline constexpr int64_t kRefitScanObservations = 2048;
// Folds of the scoring form between two checks of single precision (see CheckSinglePrecision).
inline constexpr uint64_t kSingleCheckEvery = 8;

// Counters describing how the dictionary evolved.
struct NystromStats {
  int64_t kors_accepted = 0;      // coin flips that came up "add"
  int64_t merged_duplicates = 0;  // accepted points merged into an identical dictionary point
  int64_t skipped_dependent = 0;  // accepted points refused by the residual guard
  int64_t skipped_full = 0;       // accepted points refused because Z was at its cap
  int64_t evicted = 0;            // observations dropped from the retained history
  int64_t downdate_failures = 0;  // forgetting fell back to refactoring from the history
  int64_t thinned = 0;            // dictionary points dropped by a refit's KORS re-admission
  int64_t refits = 0;             // hyper-parameter refits applied
  // A pending point could not join M (round-off made it dependent on the points M has)...
  int64_t growth_rebuilds = 0;   // ...and the state was rebuilt from the history without it
  int64_t dropped_pending = 0;   // ...and it and the points pending after it were dropped
  int64_t batches = 0;           // batches learned by ObserveBatch's rank-k path
  int64_t support_batches = 0;   // ...of them learned on their support's block alone
  int64_t refits_spread = 0;     // refits whose rebuild was spread over later observations
  int64_t refits_abandoned = 0;  // ...and whose new M was then not positive definite
  double single_error = 0.0;     // the last single-precision check's largest stddev error
};

class NystromPosterior final : public Learner {
 public:
  NystromPosterior(int dim, const ArmKernel& arm, std::shared_ptr<const UserKernel> users,
                   const NystromOptions& options, double user_variance = 0.0);

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  void Mean(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
            Eigen::VectorXd* mean) const override;
  // One kernel product for the whole batch.
  void MeanBatch(const std::vector<int32_t>& users, const Eigen::Ref<const Eigen::MatrixXd>& points,
                 Eigen::VectorXd* mean) const override;
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  // A batch of k observations: the KORS draws on the dictionary as it was before the batch (one
  // triangular solve with k right-hand sides), then one rank-k update of M's factor
  // (CholeskyFactor::RankUpdate), of Gamma and of the scoring form (VarianceForm::RankUpdate,
  // from X = M^-1 V solved for the k columns at once), then the accepted points join the
  // dictionary in order. In exact arithmetic the posterior equals k calls of Observe; the KORS
  // probabilities differ only in not seeing points the same batch added or merged. A batch of
  // one, or one that must forget evicted observations (forget_evicted) or seed an empty
  // dictionary, is learned one Observe at a time. When each of the batch's users shares kernel
  // entries with at most half of the dictionary's points (users in small graph components, or
  // without edges), the rewards are grouped into disjoint blocks of the points they reach
  // (BatchBlocks); when that saves at least three quarters of the work and the factors separate
  // every block from the rest (CholeskyFactor::Separates), the solves and the update run block
  // by block: O(sum s^2 k) instead of O(m^2 k), the same posterior up to round-off.
  absl::Status ObserveBatch(const std::vector<int32_t>& users,
                            const Eigen::Ref<const Eigen::MatrixXd>& points,
                            const Eigen::Ref<const Eigen::VectorXd>& rewards) override;
  bool LearnsInBatches() const override { return true; }
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> users) override;
  std::shared_ptr<const Scorer> Freeze() const override;
  // A refit rescales the stored points, switches to the new kernel, ridge, KORS mu and prior
  // mean, re-admits the dictionary in order with KORS under the new values (a point is kept
  // with probability min(1, gamma * tau), its weight divided by that probability, and points
  // that became numerically dependent are dropped), and rebuilds M and Gamma from the retained
  // history: O(m^3 + t m^2). Observations evicted from the retained history are not in the
  // rebuilt posterior (as after a graph edit). With refit.may_spread and a rebuild of at least
  // options().spread_refit_work, only the O(m^3) part runs now and the O(t m^2) pass is spread
  // (RefitPending): the switch drops points the old dictionary admitted meanwhile.
  // log det(I + K_SZ K_ZZ^-1 K_ZS / lambda) = log det M - m log lambda - log det K_ZZ, and
  // w^T K_ZZ w for the mean function sum_z w_z k(z, .), w = M^-1 Gamma.
  double InformationGain() const override;
  double MeanNormSquared() const override;
  bool SupportsRefit() const override { return true; }
  FitData SpreadObservations(int64_t max) const override;
  absl::Status Refit(const LearnerRefit& refit) override;
  bool RefitPending() const override { return refit_ != nullptr; }
  absl::Status CompleteRefit() override;
  bool LastRefitApplied() const override { return last_refit_applied_; }
  absl::Status ResumeRefit(const LearnerRefit& refit) override;
  // History entries the pending refit has still to visit (0: none pending).
  int64_t refit_remaining() const;
  void SaveState(storage::Encoder* out) const override;
  absl::Status LoadState(storage::Decoder* in) override;

  int64_t history_size() const override { return history_.size(); }
  // Observations learned in total (history_size() counts only the retained ones).
  int64_t observations() const { return history_.total(); }
  int64_t dictionary_size() const override { return basis_x_.cols(); }
  int64_t dictionary_points_refused() const override { return stats_.skipped_full; }
  double kors_mu() const override { return options_.kors_mu; }
  // Dictionary points the regression covers (dictionary_size() minus the pending ones).
  int regression_size() const { return chol_m_.size(); }
  // Computes the pending points' rows of M and Gamma now (with spread_growth_scan, points that
  // round-off keeps out of M are dropped instead).
  absl::Status FlushPendingDictionary();
  // Pending points whose spread pass over the history is under way (0: none), and the history
  // entries that pass has still to visit.
  int scanning() const { return scan_.count; }
  int64_t scan_remaining() const { return scan_.count > 0 ? scan_.end - scan_.next : 0; }
  // For tests: the relative residual a point needs to join the dictionary now.
  double admission_guard() const { return std::max(options_.min_relative_residual, admit_guard_); }
  const NystromStats& stats() const { return stats_; }
  const NystromOptions& options() const { return options_; }
  const MultiUserKernel& kernel() const { return kernel_; }

  // For tests: the leverage estimate tau (before gamma and the cap at 1) that KORS would give
  // `point` now (KorsLeverage of its residual).
  double KorsScore(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point) const;
  // Dictionary contents, for tests and introspection.
  Eigen::MatrixXd dictionary_points() const { return basis_x_.view(); }
  const std::vector<int32_t>& dictionary_users() const { return basis_users_; }
  const std::vector<double>& dictionary_weights() const { return basis_weights_; }

  // Forces the next Observe to add its point to the dictionary with probability p = 1 (used by
  // tests that need a full dictionary).
  void set_force_accept(bool force) { force_accept_ = force; }

 private:
  // SaveState's payload; the frame around it is PutStateFrameOf's.
  void EncodeState(storage::Encoder* into) const;
  struct Basis;  // immutable dictionary snapshot shared with frozen scorers
  class FrozenScorer;

  // A batch's rewards grouped by the dictionary points their users' kernel entries reach
  // (for the shipped user kernels, the points of their graph component's users): each group is
  // learned on that block of the factors.
  struct BatchBlock {
    std::vector<int> support;        // dictionary points (of the first m), in order
    std::vector<int> support_r;      // those in the regression
    std::vector<Eigen::Index> cols;  // the batch's columns
  };
  // The groups of a batch, by the user-kernel entries of `users` that are not zero: users with
  // the same points in one group, and groups whose points overlap merged, so that the blocks
  // are disjoint. False when a user's (or a merged block's) points are more than half of m,
  // when learning block by block would not save at least three quarters of the whole factors'
  // work (the blocks' s^2 k against m^2 k), or when learn_on_support is off.
  bool BatchBlocks(const std::vector<int32_t>& users, int m, int mr,
                   std::vector<BatchBlock>* blocks) const;
  // Observe without the single-precision check (Observe and ObserveBatch check once).
  absl::Status ObserveOne(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                          double reward);
  // ObserveOne without the pending refit's step.
  absl::Status LearnOne(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                        double reward);
  // K_Z(s) for one point.
  Eigen::VectorXd DictionaryColumn(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                                   double* k_ss) const;
  // An observation KORS accepted: merged into an identical dictionary point, refused, or
  // admitted (AdmitPending).
  absl::Status AdmitAccepted(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                             const Eigen::VectorXd& kz, double k_ss, double p);
  // Adds `point` (just appended to the history) to the dictionary with weight 1/p, pending
  // until the batch is full.
  absl::Status AdmitPending(const Eigen::VectorXd& point, int32_t user, const Eigen::VectorXd& kz,
                            double k_ss, double p);
  int GrowthBatch() const;
  // The spread pass over the history for the oldest pending points (GrowthScan below).
  void StartScan();
  void AdvanceScan(int64_t entries);
  void ScanObservation(const Eigen::Ref<const Eigen::VectorXd>& kz, double reward, double sign);
  int64_t ScanStep() const;
  absl::Status FinishScan();
  // Removes dictionary points [index, m), all pending, from the dictionary and its factors.
  void DropPendingFrom(int index);
  // M = K_ZS K_SZ + lambda K_ZZ and Gamma = K_ZS (Y - prior mean) over the retained history.
  absl::Status RefactorFromHistory(const Eigen::MatrixXd& kzz);
  // Re-admits the dictionary in order under the current kernel (dropping points whose residual
  // is below guard * k_ss; with `thin`, also by KORS under the current mu) and refactors from
  // the history. When M = K_ZS K_SZ + lambda K_ZZ is then not numerically positive definite
  // (its condition number is about that of K_ZZ squared), re-admits again with a guard 100
  // times larger, up to kMaxReadmitGuard: nearly dependent points add conditioning problems,
  // not span.
  absl::Status Readmit(bool thin, double guard);
  absl::Status Readmit(bool thin) { return Readmit(thin, options_.min_relative_residual); }
  // Which dictionary points a re-admission keeps under the kernel whose Gram matrix over them is
  // kzz_all (Readmit's selection: in order, dropping dependent points, and with `thin` by KORS
  // under kors_mu), with their weights and the factor of K_ZZ over the kept ones.
  struct Readmission {
    std::vector<int> kept;
    std::vector<double> weights;
    CholeskyFactor chol_zz;
  };
  absl::StatusOr<Readmission> SelectReadmitted(const Eigen::MatrixXd& kzz_all, bool thin,
                                               double guard, double kors_mu);
  // The spread refit (PendingRefit below).
  absl::Status StartRefit(const LearnerRefit& refit);
  void AdvanceRefit(int64_t entries);
  // Adds observations (points as the old state stores them) to the pending refit's M and Gamma.
  void RefitObservations(const Eigen::Ref<const Eigen::MatrixXd>& points, const int32_t* users,
                         const double* rewards);
  int64_t RefitScanStep() const;
  // After k observations were learned: the refit's step over the history, and the switch when
  // the pass is over.
  absl::Status StepRefit(int64_t k);
  absl::Status FinishRefit();
  void RebuildHashIndex();
  int FindDuplicate(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point) const;
  uint64_t PointHash(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point) const;
  const Eigen::VectorXd& Weights() const;  // M^-1 Gamma, cached
  std::shared_ptr<const Basis> BasisSnapshot() const;
  // The scoring form (core/linalg/variance_form.h): formed again from the factors, or told of
  // M <- M + sign v v^T before the factor changes (false: it must be formed again).
  void RebuildForm();
  bool TrackRankOne(const Eigen::Ref<const Eigen::VectorXd>& v, double sign);
  // After a change: when the form has a new B0, scores the probe points (dictionary points
  // spread over it, where the variance cancels most) in both precisions and lets snapshots
  // score in single precision only if they agree (VarianceForm::kSingleTolerance).
  void CheckSinglePrecision();

  int dim_;
  MultiUserKernel kernel_;
  NystromOptions options_;
  Rng rng_;
  bool force_accept_ = false;
  NystromStats stats_;

  HistoryBuffer history_;

  GrowableColumns basis_x_;
  std::vector<int32_t> basis_users_;
  std::vector<double> basis_weights_;  // W: sum of 1/p over merged KORS acceptances
  absl::flat_hash_map<uint64_t, std::vector<int>> basis_by_hash_;

  CholeskyFactor chol_m_;     // M = K_ZS K_SZ + lambda K_ZZ
  CholeskyFactor chol_zz_;    // K_ZZ
  CholeskyFactor chol_kors_;  // K_ZZ + mu W^-1
  Eigen::VectorXd gamma_;     // K_ZS Y

  // Pending dictionary points [mr, mr + count) whose rows of M and Gamma are being computed:
  // the retained history in [next, end) (absolute observation indices) is still to be visited;
  // observations from `end` on were added as they arrived. Other pending points wait for it.
  struct GrowthScan {
    int count = 0;
    int64_t next = 0;
    int64_t end = 0;
    Eigen::MatrixXd rows;   // count x (mr + count): their rows of K_ZS K_SZ so far
    Eigen::VectorXd gamma;  // count: their entries of K_ZS (Y - m0) so far
  };
  GrowthScan scan_;
  // A refit spread over later observations: the new kernel and values, the re-admitted
  // dictionary (stored points rescaled) with its K_ZZ and KORS factors, formed when it started,
  // and M = lambda K_ZZ + K_ZS K_SZ (lower triangle) and Gamma = K_ZS (Y - m0) under them over
  // the retained history in [next, end) visited so far (absolute indices) and every
  // observation from `end` on. The old state serves until the pass ends.
  struct PendingRefit {
    std::optional<MultiUserKernel> kernel;  // unset between LoadState and ResumeRefit
    double ridge = 0.0, kors_mu = 0.0, prior_mean = 0.0, user_variance = 0.0;
    Eigen::VectorXd rescale;  // empty: none
    GrowableColumns x;
    std::vector<int32_t> users;
    std::vector<double> weights;
    CholeskyFactor chol_zz, chol_kors;
    Eigen::MatrixXd m;
    Eigen::VectorXd gamma;
    int64_t next = 0, end = 0, step = 0;
  };
  std::unique_ptr<PendingRefit> refit_;
  bool last_refit_applied_ = true;
  // Relative residual below which admission refuses a point (at least min_relative_residual):
  // raised above the residual of each pending point M could not take (spread_growth_scan).
  double admit_guard_ = 0.0;

  mutable Eigen::VectorXd weights_;
  mutable bool weights_dirty_ = true;
  mutable std::shared_ptr<const Basis> basis_snapshot_;
  VarianceForm form_;  // B = K_ZZ^-1 - lambda M^-1 over the regression's points
  // The form's versions CheckSinglePrecision last probed.
  uint64_t checked_base_ = 0;
  uint64_t checked_rebuild_ = ~uint64_t{0};
  mutable std::shared_ptr<const Scorer> frozen_;  // Freeze()'s result until the state changes
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_NYSTROM_POSTERIOR_H_
