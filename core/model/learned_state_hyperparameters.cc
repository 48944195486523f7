// LearnedState: switching to new hyper-parameters (a logged fit or a coarser KORS mu), the
// refits the learner spreads over later observations, and the values the configuration fixes.
#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/learner/learner_factory.h"
#include "core/model/learned_state.h"

namespace graphbandit {

absl::Status LearnedState::CompletePendingRefit() {
  if (!pending_.has_value()) return absl::OkStatus();
  absl::Status status = learner_->CompleteRefit();
  SyncRefit();
  return status;
}

void LearnedState::SyncRefit() {
  if (!pending_.has_value() || learner_->RefitPending()) return;
  PendingSwitch pending = *std::move(pending_);
  pending_.reset();
  if (!learner_->LastRefitApplied()) {
    LogWarning(absl::StrFormat(
        "model \"%s\": fitted hyper-parameters not applied (the rebuild under them was not "
        "numerically positive definite); keeping %s",
        options_.name, hyper_.DebugString()));
    return;
  }
  // Staged points were scaled with the old length-scales: rescaled as the learner's history
  // was, so that they join it as the ones scaled with the new values.
  const Eigen::VectorXd& rescale = pending.prepared.refit.rescale;
  if (rescale.size() > 0) {
    for (Staged& staged : staged_) staged.point.head(rescale.size()).array() *= rescale.array();
  }
  scaling_ = std::move(pending.prepared.scaling);
  user_kernel_ = std::move(pending.prepared.user_kernel);
  hyper_ = std::move(pending.values);
  kors_mu_factor_ = pending.kors_mu_factor;
  ++learner_changes_;
}

absl::Status LearnedState::ApplyHyperparameters(const HyperparametersOp& op) {
  // The configuration always wins: a value it fixes now replaces the logged one (the log may
  // have been written under another configuration).
  if (absl::Status s = SwitchHyperparameters(WithConfiguredValues(op.values), op.kors_mu_factor);
      !s.ok()) {
    return s;
  }
  if (op.reason == HyperparametersOp::Reason::kDictionaryFull) {
    ++coarsenings_;
    return absl::OkStatus();
  }
  ++fits_applied_;
  last_fit_rewards_ = op.fitted_at;
  last_fit_points_ = op.points;
  last_fit_log_likelihood_ = op.log_likelihood;
  next_fit_at_ = std::max(next_fit_at_, NextFitAfter(op.fitted_at, options_.refit));
  return absl::OkStatus();
}

absl::Status LearnedState::SwitchHyperparameters(const Hyperparameters& values,
                                                 double kors_mu_factor) {
  if (learner_ == nullptr || !learner_->SupportsRefit()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": hyper-parameters for a model whose policy has none to fit", options_.name));
  }
  ++learner_changes_;
  if (absl::Status s = CompletePendingRefit(); !s.ok()) return s;
  auto prepared = PrepareHyperparameters(values, CurrentShape(), kors_mu_factor, graph_, scaling_,
                                         user_kernel_);
  if (!prepared.ok()) {
    return absl::InternalError(
        absl::StrFormat("model \"%s\": fitted hyper-parameters not applied (%s); keeping %s",
                        options_.name, prepared.status().message(), hyper_.DebugString()));
  }
  // The rebuild can only fail on a numerical breakdown; keep the learner's state to fall back.
  storage::Encoder backup;
  learner_->SaveState(&backup);
  prepared->refit.may_spread = true;
  absl::Status status = learner_->Refit(prepared->refit);
  if (!status.ok()) {
    auto restored = NewLearner();
    if (restored.ok()) {
      const std::string bytes = backup.Release();
      storage::Decoder in(bytes);
      if ((*restored)->LoadState(&in).ok()) learner_ = *std::move(restored);
    }
    return absl::InternalError(
        absl::StrFormat("model \"%s\": fitted hyper-parameters not applied (%s); keeping %s",
                        options_.name, status.message(), hyper_.DebugString()));
  }
  pending_ = PendingSwitch{values, kors_mu_factor, *std::move(prepared)};
  SyncRefit();  // at once unless the learner spreads the rebuild
  return absl::OkStatus();
}

Hyperparameters LearnedState::WithConfiguredValues(Hyperparameters h) const {
  const bool fits = options_.refits_hyperparameters();
  const RefitOptions& r = options_.refit;
  if (!fits || !r.fit_signal_variance) h.signal_variance = options_.kernel_variance;
  if (!fits || !r.fit_offset_variance) h.offset_variance = 0.0;
  if (!fits || !r.fit_linear_variance || options_.kernel == KernelType::kLinear) {
    h.linear_variance = 0.0;
  }
  if (!fits || !r.fit_user_variance) h.user_variance = 0.0;
  if (!fits || !r.fit_noise_variance) h.noise_variance = options_.ridge;
  if (!fits || !r.fit_rho) h.rho = options_.rho;
  if (!fits || !MakeFitSpec(r, CurrentShape()).fit_community_variance) h.community_variance = 0.0;
  if (!fits || !r.fit_prior_mean) h.prior_mean = options_.prior_mean;
  for (Eigen::Index d = 0; d < h.lengthscales.size(); ++d) {
    const bool context = d < scaling_.context_dim;
    if (!fits || !(context ? r.fit_context_lengthscale : r.fit_arm_lengthscale)) {
      h.lengthscales(d) = context ? options_.context_lengthscale : options_.arm_lengthscale;
    }
  }
  return h;
}

absl::StatusOr<std::unique_ptr<Learner>> LearnedState::NewLearner() const {
  return MakeLearner(options_, scaling_.joint_dim() + (options_.intercept() ? 1 : 0), graph_,
                     user_kernel_, &hyper_, kors_mu_factor_);
}

UserKernelOptions LearnedState::CurrentUserKernelOptions() const {
  UserKernelOptions o = options_.user_kernel_options();
  o.rho = hyper_.rho;
  o.community_variance = hyper_.community_variance;
  return o;
}

KernelShape LearnedState::CurrentShape() const {
  KernelShape shape;
  shape.kernel = options_.kernel;
  shape.user_kernel = CurrentUserKernelOptions();
  shape.context_dim = scaling_.context_dim;
  shape.arm_dim = scaling_.arm_dim;
  shape.fixed_kors_mu = options_.kors_mu;
  return shape;
}

}  // namespace graphbandit
