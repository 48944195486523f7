// The tighter-bounds paper's tasks (sim/mm_environment.h): the reward function has exactly the
// RKHS norm the task names, rounds are its values at uniform actions, and the environment tells
// policies its kernel.
#include "sim/mm_environment.h"

#include <gtest/gtest.h>

namespace graphbandit::sim {
namespace {

TEST(MmEnvironmentTest, TheFunctionHasTheNamedNormAndTheRoundsItsValues) {
  for (KernelType kernel : {KernelType::kRbf, KernelType::kMatern52, KernelType::kMatern32}) {
    MmOptions options;
    options.kernel = kernel;
    options.lengthscale = 0.2;
    options.seed = 5;
    auto env = MmEnvironment::Create(options);
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_NEAR(env->RkhsNorm(), 10.0, 1e-9);
    const Round round = env->MakeRound(3);
    ASSERT_EQ(round.arms.rows(), 3);
    ASSERT_EQ(round.arms.cols(), 100);
    EXPECT_GE(round.arms.minCoeff(), 0.0);
    EXPECT_LT(round.arms.maxCoeff(), 1.0);
    for (int k = 0; k < 100; k += 17)
      EXPECT_NEAR(round.means(k), env->Value(round.arms.col(k)), 1e-12);
    ASSERT_TRUE(env->true_kernel().has_value());
    EXPECT_EQ(env->true_kernel()->type, kernel);
    EXPECT_EQ(env->true_kernel()->lengthscale, 0.2);
    // Other seeds, other functions.
    options.seed = 6;
    EXPECT_NE(MmEnvironment::Create(options)->MakeRound(3).means, round.means);
  }
  MmOptions linear;
  linear.kernel = KernelType::kLinear;
  EXPECT_FALSE(MmEnvironment::Create(linear).ok());
}

}  // namespace
}  // namespace graphbandit::sim
