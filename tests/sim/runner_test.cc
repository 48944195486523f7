// The runner's prior round (SimEnvironment::PriorRound): an experiment's initial pull is
// learned before round 1, and counted in neither the regret nor the steps.
#include "sim/runner.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/environment.h"
#include "sim/robustness.h"

namespace graphbandit::sim {
namespace {

// Two arms, 0.1 (mean 0) and 0.9 (mean 1), without noise; with `prior`, a first round that
// offers arm 0.9 alone.
class TwoArms final : public SimEnvironment {
 public:
  explicit TwoArms(bool prior) : prior_(prior) {}
  std::string name() const override { return "two arms"; }
  int users() const override { return 1; }
  const std::vector<Edge>& edges() const override { return edges_; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return 1; }
  Round MakeRound(uint64_t) const override { return Make({0.1, 0.9}, {0.0, 1.0}); }
  std::optional<Round> PriorRound() const override {
    if (!prior_) return std::nullopt;
    return Make({0.9}, {1.0});
  }

 private:
  static Round Make(const std::vector<double>& arms, const std::vector<double>& means) {
    Round round;
    const int n = static_cast<int>(arms.size());
    round.arms.resize(1, n);
    round.means.resize(n);
    round.noise = Eigen::VectorXd::Zero(n);
    for (int k = 0; k < n; ++k) {
      round.arms(0, k) = arms[k];
      round.means(k) = means[k];
    }
    return round;
  }
  bool prior_;
  std::vector<Edge> edges_;
};

RunOutput RunGreedy(bool prior, uint64_t seed) {
  ModelOptions options;
  options.exploration = 0.0;  // the mean alone decides
  options.refit.enabled = false;
  RunSpec spec;
  spec.environment = "two arms";
  spec.make_environment = [prior](uint64_t) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
    return std::unique_ptr<SimEnvironment>(new TwoArms(prior));
  };
  spec.policy = ServedPolicy("greedy", options);
  spec.seed = seed;
  spec.rounds = 3;
  spec.sample_points = 3;
  spec.record_choices = true;
  return Run(spec, nullptr);
}

TEST(RunnerTest, ThePriorRoundIsLearnedButNotScored) {
  int first_choices_of_the_worse_arm = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const RunOutput with = RunGreedy(/*prior=*/true, seed);
    ASSERT_EQ(with.error, "");
    // Three scored rounds, no more: the prior round is in neither the choices nor the steps.
    ASSERT_EQ(with.choices.size(), 3u);
    EXPECT_EQ(with.result.steps, (std::vector<int64_t>{1, 2, 3}));
    // Having learned arm 0.9's reward of 1, the greedy policy takes it from the first round.
    EXPECT_EQ(with.choices[0], 1) << "seed " << seed;
    EXPECT_EQ(with.result.cumulative_regret.back(), 0.0) << "seed " << seed;

    const RunOutput without = RunGreedy(/*prior=*/false, seed);
    ASSERT_EQ(without.error, "");
    ASSERT_EQ(without.choices.size(), 3u);
    if (without.choices[0] == 0) ++first_choices_of_the_worse_arm;
  }
  // Without the prior round the first decision knows nothing: it does not always find arm 0.9.
  EXPECT_GT(first_choices_of_the_worse_arm, 0);
}

}  // namespace
}  // namespace graphbandit::sim
