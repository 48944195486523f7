#include "core/model/explanations.h"

#include <memory>

#include "absl/strings/str_format.h"

namespace graphbandit {

absl::Status CannotExplain(absl::string_view model, absl::string_view policy) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "model \"%s\" serves %s, whose decisions cannot be explained: explanations need EK_UCB, "
      "EK_TS, GP_UCB or GP_TS, whose mean is a sum over past decisions",
      model, policy));
}

absl::Status ExplainArms(const Scorer& scorer, const UserRegistry& registry, int32_t user,
                         const Eigen::MatrixXd& points, double baseline, bool name_users,
                         absl::string_view model, absl::string_view policy,
                         std::vector<ChosenArm>* arms) {
  auto id = [&](int32_t u) { return name_users || u == user ? registry.Id(u) : std::string(); };
  std::vector<std::shared_ptr<const ArmExplanation>> explained;
  for (const ChosenArm& arm : *arms) {
    MeanExplanation parts;
    if (!scorer.ExplainMean(user, points.col(arm.candidate_index), kExplainedTop, &parts)) {
      return CannotExplain(model, policy);
    }
    auto out = std::make_shared<ArmExplanation>();
    out->shared = parts.shared + baseline;
    out->own = parts.own;
    out->neighbours = parts.neighbours;
    out->exploration_bonus = arm.score - arm.mean;
    for (const MeanExplanation::User& u : parts.top_users) {
      out->top_users.push_back({id(u.user), u.user_factor, u.points, u.contribution});
    }
    for (const MeanExplanation::Point& p : parts.top_points) {
      out->top_points.push_back({id(p.user), p.user_factor, p.similarity, p.contribution});
    }
    explained.push_back(std::move(out));
  }
  for (size_t i = 0; i < arms->size(); ++i) (*arms)[i].explanation = std::move(explained[i]);
  return absl::OkStatus();
}

}  // namespace graphbandit
