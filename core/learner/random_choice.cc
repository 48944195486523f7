#include "core/learner/random_choice.h"

namespace graphbandit {

void RandomChoice::Score(int32_t /*user*/, const Eigen::Ref<const Eigen::MatrixXd>& points,
                         Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  *mean = Eigen::VectorXd::Zero(points.cols());
  *stddev = Eigen::VectorXd::Zero(points.cols());
}

absl::Status RandomChoice::Observe(int32_t /*user*/,
                                   const Eigen::Ref<const Eigen::VectorXd>& /*point*/,
                                   double /*reward*/) {
  ++observations_;
  return absl::OkStatus();
}

absl::Status RandomChoice::SetGraph(const UserGraph& /*graph*/,
                                    std::shared_ptr<const UserKernel> /*kernel*/) {
  return absl::OkStatus();
}

std::shared_ptr<const Scorer> RandomChoice::Freeze() const {
  return std::make_shared<RandomChoice>(*this);
}

}  // namespace graphbandit
