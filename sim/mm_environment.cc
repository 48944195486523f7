#include "sim/mm_environment.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace graphbandit::sim {
namespace {

enum Stream : uint64_t { kFunction = 41, kRounds = 42 };

}  // namespace

absl::StatusOr<MmEnvironment> MmEnvironment::Create(const MmOptions& options) {
  if (options.dim < 1 || options.actions < 1 || options.inducing < 1 ||
      !(options.lengthscale > 0.0) || !(options.norm > 0.0) || !(options.noise_std >= 0.0) ||
      options.kernel == KernelType::kLinear) {
    return absl::InvalidArgumentError(
        "the MM environment needs dim, actions, inducing >= 1, a stationary kernel, l > 0 and "
        "B > 0");
  }
  MmEnvironment env;
  env.options_ = options;
  Rng rng = StreamRng(options.seed, kFunction);
  env.z_.resize(options.dim, options.inducing);
  for (int j = 0; j < options.inducing; ++j) {
    for (int i = 0; i < options.dim; ++i) env.z_(i, j) = rng.Uniform() / options.lengthscale;
  }
  Eigen::VectorXd w(options.inducing);
  for (int j = 0; j < options.inducing; ++j) w(j) = rng.Normal();
  const ArmKernel kernel(options.kernel, 1.0);
  Eigen::MatrixXd gram;
  kernel.Cross(env.z_, env.z_, &gram);
  env.weights_ = w * (options.norm / std::sqrt(w.dot(gram * w)));
  return env;
}

std::string MmEnvironment::name() const {
  return absl::StrFormat("%s l=%g d=%d", KernelTypeName(options_.kernel), options_.lengthscale,
                         options_.dim);
}

std::optional<TrueKernel> MmEnvironment::true_kernel() const {
  return TrueKernel{options_.kernel, options_.lengthscale};
}

double MmEnvironment::Value(const Eigen::Ref<const Eigen::VectorXd>& x) const {
  const ArmKernel kernel(options_.kernel, 1.0);
  Eigen::MatrixXd row;
  kernel.Cross(x / options_.lengthscale, z_, &row);
  return (row * weights_)(0);
}

double MmEnvironment::RkhsNorm() const {
  const ArmKernel kernel(options_.kernel, 1.0);
  Eigen::MatrixXd gram;
  kernel.Cross(z_, z_, &gram);
  return std::sqrt(weights_.dot(gram * weights_));
}

Round MmEnvironment::MakeRound(uint64_t index) const {
  Rng rng = StreamRng(options_.seed, kRounds, index);
  Round round;
  round.arms.resize(options_.dim, options_.actions);
  for (int k = 0; k < options_.actions; ++k) {
    for (int i = 0; i < options_.dim; ++i) round.arms(i, k) = rng.Uniform();
  }
  const ArmKernel kernel(options_.kernel, 1.0);
  Eigen::MatrixXd cross;
  kernel.Cross(round.arms / options_.lengthscale, z_, &cross);
  round.means = cross * weights_;
  round.noise.resize(options_.actions);
  for (int k = 0; k < options_.actions; ++k) round.noise(k) = options_.noise_std * rng.Normal();
  return round;
}

}  // namespace graphbandit::sim
