// A logged fit whose rebuild the learner spreads over the rewards that follow
// (core/learner/nystrom_posterior.h, spread_refit_work): the model keeps its values, scaling and
// user kernel until the learner switches, switches with it, rescales the rewards staged
// meanwhile, and a snapshot taken while the rebuild is pending restores and continues
// bit-identically.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/random.h"
#include "core/model/learned_state.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

ModelOptions Options() {
  ModelOptions options;
  options.refit.enabled = true;
  options.research.spread_refit_work = 0.0;  // spread whatever the size
  return options;
}

std::unique_ptr<LearnedState> NewState() {
  auto state = LearnedState::Create(Options());
  EXPECT_TRUE(state.ok()) << state.status();
  EdgeEditResult ignored;
  EXPECT_TRUE((*state)->Apply(FixDimensionsOp{0, 2}, &ignored).ok());
  return *std::move(state);
}

ObserveOp Observation(Rng* rng, int64_t ordinal) {
  ObserveOp observe;
  observe.event_id = absl::StrCat("e", ordinal);
  observe.arm_id = "a";
  observe.user = absl::StrCat("u", ordinal % 3);
  observe.features = {10.0 * rng->Normal(), 10.0 * rng->Normal()};
  observe.reward = std::sin(observe.features[0] / 8.0) + 0.1 * rng->Normal();
  return observe;
}

// Stages `rewards` observations, learning them one LearnOp each.
void Learn(LearnedState* state, Rng* rng, int rewards) {
  for (int i = 0; i < rewards; ++i) {
    RewardOp reward;
    reward.learn.push_back(Observation(rng, state->staged_total()));
    EdgeEditResult ignored;
    ASSERT_TRUE(state->Apply(reward, &ignored).ok());
    ASSERT_TRUE(state->Apply(LearnOp{state->staged_total()}, &ignored).ok());
  }
}

HyperparametersOp NewValues(const LearnedState& state) {
  HyperparametersOp op;
  op.values = state.hyperparameters();
  op.values.lengthscales = Eigen::Vector2d(4.0, 9.0);
  op.values.noise_variance = 0.02;
  op.values.signal_variance = 1.5;
  op.fitted_at = state.rewards_learned();
  return op;
}

TEST(SpreadRefitTest, TheModelSwitchesWithTheLearnerAndASnapshotInBetweenContinues) {
  auto live = NewState();
  Rng rng(5);
  Learn(live.get(), &rng, 200);
  const Hyperparameters old_values = live->hyperparameters();
  const HyperparametersOp op = NewValues(*live);
  EdgeEditResult ignored;
  ASSERT_TRUE(live->Apply(op, &ignored).ok());
  ASSERT_TRUE(live->learner()->RefitPending());
  EXPECT_EQ(live->hyperparameters(), old_values);  // the old values serve meanwhile
  EXPECT_EQ(live->scaling().lengthscales(), old_values.lengthscales);
  Learn(live.get(), &rng, 10);
  ASSERT_TRUE(live->learner()->RefitPending());

  const std::string mid = live->Save(7);
  // Encoded into memory that held a longer, different encoding (as a snapshot reuses the last
  // one's): the same bytes, nothing left over.
  EXPECT_EQ(live->Save(7, std::string(2 * mid.size() + 4096, '\xff')), mid);
  auto restored = NewState();
  storage::Decoder in(mid);
  ASSERT_TRUE(restored->Load(&in).ok());
  ASSERT_TRUE(restored->learner()->RefitPending());
  EXPECT_EQ(restored->hyperparameters(), old_values);
  EXPECT_EQ(restored->Save(7), mid);

  // 200 retained rewards at 4 history entries per reward: the rebuild ends with the 50th.
  Rng copy = rng;
  Learn(live.get(), &rng, 40);
  Learn(restored.get(), &copy, 40);
  for (LearnedState* state : {live.get(), restored.get()}) {
    EXPECT_FALSE(state->learner()->RefitPending());
    EXPECT_EQ(state->hyperparameters(), op.values);
    EXPECT_EQ(state->scaling().lengthscales(), op.values.lengthscales);
  }
  EXPECT_EQ(restored->Save(8), live->Save(8));
}

TEST(SpreadRefitTest, RewardsStagedWhenTheLearnerSwitchesAreRescaled) {
  auto state = NewState();
  Rng rng(8);
  Learn(state.get(), &rng, 200);
  EdgeEditResult ignored;
  const HyperparametersOp op = NewValues(*state);
  ASSERT_TRUE(state->Apply(op, &ignored).ok());
  Learn(state.get(), &rng, 40);
  ASSERT_TRUE(state->learner()->RefitPending());
  // Twenty rewards staged; the first ten complete the rebuild, the last ten wait, scaled with
  // the old length-scales.
  std::vector<ObserveOp> staged;
  for (int i = 0; i < 20; ++i) {
    RewardOp reward;
    reward.learn.push_back(Observation(&rng, state->staged_total()));
    staged.push_back(reward.learn.back());
    ASSERT_TRUE(state->Apply(reward, &ignored).ok());
  }
  ASSERT_TRUE(state->Apply(LearnOp{state->staged_total() - 10}, &ignored).ok());
  ASSERT_FALSE(state->learner()->RefitPending());
  ASSERT_EQ(state->staged(), 10);
  ASSERT_TRUE(state->Apply(LearnOp{state->staged_total()}, &ignored).ok());
  // The history's last ten points are those rewards' features over the new length-scales.
  const FitData history = state->learner()->SpreadObservations(1 << 20);
  const int64_t t = history.x.cols();
  ASSERT_EQ(t, 260);
  for (int i = 0; i < 10; ++i) {
    const ObserveOp& o = staged[10 + i];
    const Eigen::Vector2d expected(o.features[0] / 4.0, o.features[1] / 9.0);
    EXPECT_LT((history.x.col(t - 10 + i) - expected).norm(), 1e-12 * expected.norm()) << i;
  }
}

// Replay learns a LearnOp in chunks of 1,024: when the first chunk ends the pass, the second
// chunk's points (scaled with the old length-scales when staged) are rescaled before it is
// learned.
TEST(SpreadRefitTest, AChunkAfterTheSwitchIsRescaledBeforeItIsLearned) {
  auto state = NewState();
  Rng rng(10);
  Learn(state.get(), &rng, 200);
  EdgeEditResult ignored;
  const HyperparametersOp op = NewValues(*state);
  ASSERT_TRUE(state->Apply(op, &ignored).ok());
  ASSERT_TRUE(state->learner()->RefitPending());
  std::vector<ObserveOp> staged;
  for (int i = 0; i < 1100; ++i) {
    RewardOp reward;
    reward.learn.push_back(Observation(&rng, state->staged_total()));
    staged.push_back(reward.learn.back());
    ASSERT_TRUE(state->Apply(reward, &ignored).ok());
  }
  ASSERT_TRUE(state->Apply(LearnOp{state->staged_total()}, &ignored).ok());
  ASSERT_FALSE(state->learner()->RefitPending());
  EXPECT_EQ(state->hyperparameters(), op.values);
  const FitData history = state->learner()->SpreadObservations(1 << 20);
  const int64_t t = history.x.cols();
  ASSERT_EQ(t, 1300);
  for (int i = 1024; i < 1100; ++i) {
    const ObserveOp& o = staged[i];
    const Eigen::Vector2d expected(o.features[0] / 4.0, o.features[1] / 9.0);
    EXPECT_LT((history.x.col(200 + i) - expected).norm(), 1e-12 * expected.norm()) << i;
  }
}

TEST(SpreadRefitTest, AGraphEditCompletesThePendingRefitFirst) {
  auto state = NewState();
  Rng rng(9);
  Learn(state.get(), &rng, 200);
  EdgeEditResult ignored;
  const HyperparametersOp op = NewValues(*state);
  ASSERT_TRUE(state->Apply(op, &ignored).ok());
  ASSERT_TRUE(state->learner()->RefitPending());
  ASSERT_TRUE(state->Apply(SetEdgesOp{{{"u0", "u1", 1.0}}}, &ignored).ok());
  EXPECT_FALSE(state->learner()->RefitPending());
  EXPECT_EQ(state->hyperparameters(), op.values);
}

}  // namespace
}  // namespace graphbandit
