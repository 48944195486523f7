// The contextual batched BKB baseline of the Efficient-Kernel-UCB paper (CBBKB; CBKB is the
// threshold-1 case), docs/algorithms.md §4.9: the Nystrom dictionary is re-drawn from the whole
// history — each past point kept independently with probability min(1, q * sigma~^2(s)), the
// current approximate posterior variance (over lambda) times an oversampling factor — and the
// posterior is then recomputed from scratch (O(t m^2)). Between two re-draws the posterior is
// frozen: decisions use it unchanged while the variance of the chosen points accumulates, and a
// re-draw happens once that sum exceeds the threshold C. Larger C means fewer, cheaper updates
// and staler decisions. EK-UCB's incremental KORS state (nystrom_posterior.h) avoids exactly
// this periodic O(t m^2) recomputation.
//
// Decisions use the same projected regression as EK-UCB (nystrom_math.h); before the first
// re-draw the posterior is the prior.
#ifndef GRAPHBANDIT_CORE_LEARNER_BATCHED_NYSTROM_POSTERIOR_H_
#define GRAPHBANDIT_CORE_LEARNER_BATCHED_NYSTROM_POSTERIOR_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/base/random.h"
#include "core/kernel/multi_user_kernel.h"
#include "core/learner/history_buffer.h"
#include "core/learner/posterior.h"
#include "core/linalg/cholesky_factor.h"
#include "core/linalg/growable_columns.h"

namespace graphbandit {

struct BatchedNystromOptions {
  double ridge = 1.0;          // lambda
  double threshold = 10.0;     // C: accumulated sigma~^2 that triggers a re-draw
  double oversampling = 10.0;  // q
  double min_relative_residual = 1e-8;
  uint64_t seed = 1;
  // Bounds for serving (0 = off: the paper's algorithm, as the simulator runs it). A re-draw
  // costs O(t m^2) and, with a threshold small against the posterior variance (a kernel whose
  // variance is large against the ridge), the paper's rule re-draws after nearly every
  // observation, so that learning falls ever further behind. With min_growth > 0 a re-draw also
  // waits until the history has grown by that fraction since the previous one (the amortised
  // cost per observation is then O(m^2 / min_growth)); with max_dictionary_size > 0 the
  // re-drawn dictionary keeps at most that many points (a uniformly random subset of the drawn
  // ones).
  double min_growth = 0.0;
  int max_dictionary_size = 0;
};

class BatchedNystromPosterior final : public Learner {
 public:
  BatchedNystromPosterior(int dim, const ArmKernel& arm, std::shared_ptr<const UserKernel> users,
                          const BatchedNystromOptions& options);

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> users) override;
  std::shared_ptr<const Scorer> Freeze() const override;
  void SaveState(storage::Encoder* out) const override;
  absl::Status LoadState(storage::Decoder* in) override;

  int64_t history_size() const override { return history_.size(); }
  int64_t dictionary_size() const override { return basis_x_.cols(); }
  int64_t redraws() const { return redraws_; }
  // Refactorisations that needed a diagonal jitter (round-off; see Recompute).
  int64_t jittered() const { return jittered_; }

  // Re-draws the dictionary and recomputes the posterior now (also used by tests).
  absl::Status Resparsify();

 private:
  // The approximate posterior variance over lambda at history point i.
  double VarianceOverRidge(int64_t i) const;
  // The same for every history point, in blocks.
  Eigen::VectorXd HistoryVariancesOverRidge() const;
  absl::Status Recompute();

  int dim_;
  MultiUserKernel kernel_;
  BatchedNystromOptions options_;
  Rng rng_;
  HistoryBuffer history_;
  double accumulated_ = 0.0;
  int64_t redraws_ = 0;
  int64_t last_redraw_size_ = 0;  // history size at the last re-draw
  int64_t jittered_ = 0;

  GrowableColumns basis_x_;
  std::vector<int32_t> basis_users_;
  CholeskyFactor chol_m_;
  CholeskyFactor chol_zz_;
  Eigen::VectorXd weights_;  // M^-1 Gamma
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_BATCHED_NYSTROM_POSTERIOR_H_
