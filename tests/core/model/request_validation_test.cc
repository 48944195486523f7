// ValidateRewardRequest: the one check of a reward report's own values (the join with its
// decision is JudgeReport's).
#include "core/model/request_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

ModelOptions Bounded(double bound) {
  ModelOptions options;
  options.name = "news";
  options.reward_bound = bound;
  return options;
}

RewardRequest Single(double reward) { return RewardRequest{"e1", reward, {}, ""}; }

RewardRequest PerArm(std::vector<std::pair<std::string, double>> rewards) {
  return RewardRequest{"e1", std::nullopt, std::move(rewards), ""};
}

void ExpectRefused(const RewardRequest& request, const ModelOptions* options,
                   const std::string& message) {
  const absl::Status status = ValidateRewardRequest(request, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
}

TEST(ValidateRewardRequestTest, AcceptsWellFormedReportsWithinTheBound) {
  const ModelOptions options = Bounded(5.0);
  EXPECT_TRUE(ValidateRewardRequest(Single(5.0), &options).ok());
  EXPECT_TRUE(ValidateRewardRequest(Single(-5.0), &options).ok());
  EXPECT_TRUE(ValidateRewardRequest(PerArm({{"a", 1.0}, {"b", -5.0}}), &options).ok());
}

TEST(ValidateRewardRequestTest, RefusesEachMalformedPartWithTheFieldNamed) {
  const ModelOptions options = Bounded(5.0);
  ExpectRefused(RewardRequest{"", 1.0, {}, ""}, &options, "event_id must not be empty");
  ExpectRefused(RewardRequest{"e\n1", 1.0, {}, ""}, &options, "outside printable ASCII");
  ExpectRefused(RewardRequest{"e1", std::nullopt, {}, ""}, &options, "no reward given");
  ExpectRefused(RewardRequest{"e1", 1.0, {{"a", 1.0}}, ""}, &options, "not both");
  ExpectRefused(Single(NAN), &options, "reward is NaN");
  ExpectRefused(Single(-INFINITY), &options, "reward is infinite");
  ExpectRefused(Single(5.5), &options,
                "reward 5.5 is outside [-5, 5] (model \"news\" limits.reward_bound)");
  ExpectRefused(PerArm({{"a", 1.0}, {"", 1.0}}), &options, "arm_rewards[1].arm_id must not be");
  ExpectRefused(PerArm({{std::string(kMaxIdBytes + 1, 'x'), 1.0}}), &options,
                "arm_rewards[0].arm_id is");
  ExpectRefused(PerArm({{"a", 1.0}, {"b", NAN}}), &options, "arm_rewards[1].reward is NaN");
  ExpectRefused(PerArm({{"a", -6.0}}), &options, "arm_rewards[0].reward -6 is outside [-5, 5]");
  ExpectRefused(PerArm({{"a", 1.0}, {"a", 2.0}}), &options, "arm \"a\" is reported twice");
  std::vector<std::pair<std::string, double>> many;
  for (int i = 0; i <= 10'000; ++i) many.emplace_back(std::to_string(i), 0.0);
  ExpectRefused(PerArm(std::move(many)), &options, "arm_rewards has 10001 entries");
}

TEST(ValidateRewardRequestTest, WithoutAModelOnlyTheBoundIsLeftUnchecked) {
  EXPECT_TRUE(ValidateRewardRequest(Single(1e300), nullptr).ok());
  ExpectRefused(Single(NAN), nullptr, "reward is NaN");
  ExpectRefused(PerArm({{"a", 1.0}, {"a", 1.0}}), nullptr, "reported twice");
}

}  // namespace
}  // namespace graphbandit
