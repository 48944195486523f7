// A learner that knows nothing and learns nothing: every candidate scores mean 0 and width 0,
// so the selection rule's uniform tie-break (core/policy/selection.h) makes each choice
// uniformly at random. The papers' "random" baseline, and what regret is measured against.
#ifndef GRAPHBANDIT_CORE_LEARNER_RANDOM_CHOICE_H_
#define GRAPHBANDIT_CORE_LEARNER_RANDOM_CHOICE_H_

#include <cstdint>
#include <memory>

#include "core/learner/posterior.h"

namespace graphbandit {

class RandomChoice final : public Learner {
 public:
  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  // Counts the observation (history_size) and learns nothing from it.
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> kernel) override;
  std::shared_ptr<const Scorer> Freeze() const override;
  int64_t history_size() const override { return observations_; }
  int64_t dictionary_size() const override { return 0; }

 private:
  int64_t observations_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_RANDOM_CHOICE_H_
