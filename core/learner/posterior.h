// Interfaces between the posterior states and their users (the model, the simulator).
//
// A Learner owns the mutable state and is driven by a single writer. Freeze() hands out an
// immutable Scorer that any number of threads may use while the learner moves on; this is how
// decisions never wait for learning. Points are scaled joint inputs (see FeatureScaling), one
// per column; all points of one Score call belong to the same user.
#ifndef GRAPHBANDIT_CORE_LEARNER_POSTERIOR_H_
#define GRAPHBANDIT_CORE_LEARNER_POSTERIOR_H_

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/base/random.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/mean_explanation.h"
#include "core/storage/coding.h"

namespace graphbandit {

// What every learner's Observe checks first: a registered user, a point of the learner's
// dimension, finite values.
inline absl::Status CheckObservation(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                                     double reward, int64_t dim) {
  if (user < 0) return absl::InvalidArgumentError("observations need a registered user");
  if (point.size() != dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("point has %d values, the posterior expects %d", point.size(), dim));
  }
  if (!point.allFinite() || !std::isfinite(reward)) {
    return absl::InvalidArgumentError("observation contains a non-finite value");
  }
  return absl::OkStatus();
}

// Which of t observations (0 = oldest) a fit of at most `max` of them uses: all when t <= max,
// else `max` indices spread evenly from the oldest to the most recent, both included. A fit on
// the most recent observations alone would see little but the arms the policy now prefers (a
// bandit's recent choices concentrate near the optimum), which leaves the length-scales of the
// arm features unidentified; the early, exploratory rounds pin them down.
inline std::vector<int64_t> SpreadIndices(int64_t t, int64_t max) {
  std::vector<int64_t> indices;
  if (t <= 0 || max <= 0) return indices;
  if (t <= max) {
    for (int64_t i = 0; i < t; ++i) indices.push_back(i);
    return indices;
  }
  if (max == 1) return {t - 1};
  for (int64_t k = 0; k < max; ++k) {
    // Exact in integers: strictly increasing because t > max.
    indices.push_back(k * (t - 1) / (max - 1));
  }
  return indices;
}

// New hyper-parameters for a kernel learner (a refit, core/fit/hyperparameter_fit.h).
struct LearnerRefit {
  ArmKernel arm{KernelType::kRbf, 1.0};
  std::shared_ptr<const UserKernel> users;  // with the new rho, or the current kernel
  double user_variance = 0.0;               // eta of MultiUserKernel
  double ridge = 0.1;                       // lambda, the noise variance
  double kors_mu = 0.1;                     // Nystrom learners: KORS regulariser
  double prior_mean = 0.0;
  // Every stored point is multiplied by this, coordinate by coordinate: old length-scale over
  // new, so that stored points are scaled as new requests will be. Empty: unchanged.
  Eigen::VectorXd rescale;
  // The learner may leave the rebuild pending and spread it over the observations that follow
  // (Learner::RefitPending); false: the refit is complete when Refit returns.
  bool may_spread = false;
};

// What a kernel learner's Refit checks before changing anything, in this order: a user kernel;
// ridge > 0 and a finite prior mean, and for the Nystrom learners (`kors`) KORS mu > 0, for the
// others a finite ridge; a rescale that is empty or one positive, finite factor per dimension.
inline absl::Status CheckRefit(const LearnerRefit& refit, int64_t dim, bool kors) {
  if (refit.users == nullptr) return absl::InvalidArgumentError("refit without a user kernel");
  if (kors) {
    if (!(refit.ridge > 0.0) || !(refit.kors_mu > 0.0) || !std::isfinite(refit.prior_mean)) {
      return absl::InvalidArgumentError("refit needs ridge > 0, KORS mu > 0 and a finite mean");
    }
  } else if (!(refit.ridge > 0.0) || !std::isfinite(refit.ridge) ||
             !std::isfinite(refit.prior_mean)) {
    return absl::InvalidArgumentError("refit needs ridge > 0 and a finite mean");
  }
  if (refit.rescale.size() > 0 &&
      (refit.rescale.size() != dim || !(refit.rescale.array() > 0.0).all() ||
       !refit.rescale.allFinite())) {
    return absl::InvalidArgumentError("refit rescale needs one positive factor per dimension");
  }
  return absl::OkStatus();
}

class Scorer {
 public:
  virtual ~Scorer() = default;
  // Posterior mean and standard deviation of f(point, user) for every column of `points`.
  // `user` may be kUnknownUser (a user with no data and no edges: the prior).
  virtual void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                     Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const = 0;
  // The posterior mean alone, equal to Score's `mean` bit for bit. Learning asks for it (a reward
  // baseline's prediction); scorers whose variance costs more than their mean override it.
  virtual void Mean(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                    Eigen::VectorXd* mean) const {
    Eigen::VectorXd stddev;
    Score(user, points, mean, &stddev);
  }

  // The means at points of several users (column i for users[i]), as Mean gives them one at a
  // time (up to rounding: a scorer may compute them together). Learning a batch asks for them
  // (its rewards' baseline predictions).
  virtual void MeanBatch(const std::vector<int32_t>& users,
                         const Eigen::Ref<const Eigen::MatrixXd>& points,
                         Eigen::VectorXd* mean) const {
    mean->resize(points.cols());
    Eigen::VectorXd one;
    for (Eigen::Index i = 0; i < points.cols(); ++i) {
      Mean(users[i], points.col(i), &one);
      (*mean)(i) = one(0);
    }
  }

  // Splits the posterior mean at one point into what the user's own rewards, other users'
  // (through the user kernel) and the prior contribute, with the `top` points and users that
  // weigh most (core/learner/mean_explanation.h). The parts add up to Score's mean up to
  // rounding. Scorers whose mean is not a sum over past decisions return false.
  virtual bool ExplainMean(int32_t /*user*/, const Eigen::Ref<const Eigen::VectorXd>& /*point*/,
                           int /*top*/, MeanExplanation* /*out*/) const {
    return false;
  }

  // Policies that draw a whole parameter vector per decision (SemiGraphTS and its linear
  // baselines, core/learner/semi_parametric_ts.h) rather than perturbing each candidate alone.
  // SampleValues writes `draws` joint draws of the candidates' values, one row per draw and one
  // column per point: row r = points^T theta_r, theta_r ~ N(centre, scale^2 * spread), consuming
  // `rng` in a fixed order. Other scorers return false and leave `values` alone.
  virtual bool SamplesParameters() const { return false; }
  virtual void SampleValues(int32_t /*user*/, const Eigen::Ref<const Eigen::MatrixXd>& /*points*/,
                            double /*scale*/, int /*draws*/, Rng& /*rng*/,
                            Eigen::MatrixXd* /*values*/) const {}
};

class Learner : public Scorer {
 public:
  // Learns reward y at (point, user); user must be a registered index (>= 0).
  virtual absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                               double reward) = 0;
  // Learns the rewards of several observations (column i of `points` for users[i]) in this
  // order. The default calls Observe for each; a learner that LearnsInBatches does the batch's
  // work together (fewer passes over its state, matrix products instead of vector ones), which
  // may round differently from one Observe per reward but depends only on the batch. Checks
  // the shape first; an observation that fails (invalid, or a numerical breakdown) does not stop
  // the others from being learned, and the first failure is returned. A learner that
  // LearnsInBatches checks every observation first and learns none when one is invalid.
  virtual absl::Status ObserveBatch(const std::vector<int32_t>& users,
                                    const Eigen::Ref<const Eigen::MatrixXd>& points,
                                    const Eigen::Ref<const Eigen::VectorXd>& rewards) {
    if (static_cast<Eigen::Index>(users.size()) != points.cols() ||
        rewards.size() != points.cols()) {
      return absl::InvalidArgumentError("a batch needs one user and one reward per point");
    }
    absl::Status status;
    for (Eigen::Index i = 0; i < points.cols(); ++i) {
      absl::Status s = Observe(users[i], points.col(i), rewards(i));
      if (status.ok()) status = s;
    }
    return status;
  }
  // Whether ObserveBatch is cheaper per reward than Observe (the model then learns rewards in
  // batches: core/model/learned_state.h).
  virtual bool LearnsInBatches() const { return false; }
  // Whether learning needs the whole decision (every candidate's point and the probability with
  // which the policy would have chosen it) rather than the chosen point alone. Such a learner
  // learns through ObserveDecision only; its Observe fails with FailedPrecondition.
  virtual bool LearnsFromDecisions() const { return false; }
  // Learns `reward` for candidate `chosen` of a decision among the columns of `points`, chosen
  // with `probabilities` (one per column, summing to 1). The default learns the chosen point.
  virtual absl::Status ObserveDecision(int32_t user,
                                       const Eigen::Ref<const Eigen::MatrixXd>& points,
                                       const Eigen::Ref<const Eigen::VectorXd>& probabilities,
                                       int chosen, double reward) {
    if (chosen < 0 || chosen >= points.cols() || probabilities.size() != points.cols()) {
      return absl::InvalidArgumentError("the chosen candidate is not one of the decision's");
    }
    return Observe(user, points.col(chosen), reward);
  }
  // Switches to a new user graph and its user kernel (after a graph edit) and recomputes every
  // cached quantity from the stored history. The result depends only on the history, the graph
  // and the kernel. Kernel learners use `kernel`; linear graph learners use `graph`.
  virtual absl::Status SetGraph(const UserGraph& graph,
                                std::shared_ptr<const UserKernel> kernel) = 0;
  // An immutable copy of what scoring needs, safe to share across threads.
  virtual std::shared_ptr<const Scorer> Freeze() const = 0;

  virtual int64_t history_size() const = 0;
  virtual int64_t dictionary_size() const = 0;
  // Points the dictionary would have taken but could not because it was at its cap.
  virtual int64_t dictionary_points_refused() const { return 0; }
  // KORS's mu (Nystrom learners with KORS; 0 otherwise), as the learner uses it.
  virtual double kors_mu() const { return 0.0; }

  // What the theory-shaped confidence width needs (kernel learners; 0 otherwise): the
  // information gain log det(I + K_t / lambda) of the observations (on the Nystrom
  // representation for Nystrom learners), and the squared RKHS norm of the posterior mean
  // function, a plug-in estimate of the unknown norm bound B^2.
  virtual double InformationGain() const { return 0.0; }
  virtual double MeanNormSquared() const { return 0.0; }

  // Hyper-parameter refits. A learner that supports them can hand out up to `max` of its
  // retained observations spread evenly over its history (SpreadIndices; points as stored, i.e.
  // scaled; oldest first) and rebuild itself under new hyper-parameters from its retained
  // history. The rebuild is a deterministic function of the
  // learner's state and `refit`, so replaying a logged refit reproduces it bit for bit.
  virtual bool SupportsRefit() const { return false; }
  virtual FitData SpreadObservations(int64_t /*max*/) const { return {}; }
  virtual absl::Status Refit(const LearnerRefit& /*refit*/) {
    return absl::UnimplementedError("this learner has no hyper-parameters to refit");
  }
  // A refit with may_spread can be left pending (NystromPosterior, on a long history): the
  // learner then goes on learning and scoring with the old values, and the new ones apply from
  // the observation that completes the rebuild, at the same observation live and in replay.
  virtual bool RefitPending() const { return false; }
  // Completes a pending refit now (before a graph edit, another refit or a snapshot that needs
  // the new values).
  virtual absl::Status CompleteRefit() { return absl::OkStatus(); }
  // False when the last refit, spread, ended in a numerical breakdown: the learner kept the old
  // values (a refit that is not spread fails from Refit instead).
  virtual bool LastRefitApplied() const { return true; }
  // After LoadState restored a pending refit: the refit it was started with (whose kernel the
  // state does not hold). DATA_LOSS when it is not the one the state was built for.
  virtual absl::Status ResumeRefit(const LearnerRefit& /*refit*/) {
    return absl::FailedPreconditionError("this learner has no pending refit to resume");
  }

  // Snapshots: exact state serialisation (framing and pieces in core/storage/state_coding.h). A
  // learner restored from SaveState's bytes scores bit-identically to the one that wrote them and
  // keeps learning identically (random draws, dictionary growth, refresh schedules).
  //
  // Learners without SaveState/LoadState (LK-GP for now) keep the defaults: SaveState writes a
  // frame tagged "unsupported" that no LoadState accepts, and LoadState returns Unimplemented.
  // Appends the complete learning state (not the kernel or options, which the owner restores
  // by constructing the learner the same way) to `out`.
  virtual void SaveState(storage::Encoder* out) const { out->PutU8(0); }
  // Restores a state written by SaveState of a learner constructed with the same options and
  // kernel. On malformed input returns DataLoss and leaves the learner unusable (the caller
  // discards it).
  virtual absl::Status LoadState(storage::Decoder* /*in*/) {
    return absl::UnimplementedError("this learner does not support state snapshots");
  }
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_POSTERIOR_H_
