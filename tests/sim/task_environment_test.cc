// The robustness tasks (sim/task_environment.h): what each option promises about the
// reward function, checked on the function itself.
#include "sim/task_environment.h"

#include <gtest/gtest.h>

#include <Eigen/SVD>
#include <cmath>
#include <vector>

#include "core/base/random.h"

namespace graphbandit::sim {
namespace {

Eigen::VectorXd RandomFeatures(int dim, double scale, Rng& rng) {
  Eigen::VectorXd x(dim);
  for (int i = 0; i < dim; ++i) x(i) = scale * rng.Normal();
  return x;
}

TEST(TaskEnvironmentTest, RoundsArePureFunctionsOfSeedAndIndex) {
  TaskOptions options;
  options.seed = 3;
  const TaskEnvironment a = *TaskEnvironment::Create(options);
  const TaskEnvironment b = *TaskEnvironment::Create(options);
  for (uint64_t t : {0ull, 5ull, 4999ull}) {
    const Round ra = a.MakeRound(t), rb = b.MakeRound(t);
    EXPECT_EQ(ra.user, rb.user);
    EXPECT_EQ(ra.arms, rb.arms);
    EXPECT_EQ(ra.noise, rb.noise);
    ASSERT_EQ(ra.arms.cols(), options.candidates);
    ASSERT_EQ(ra.arms.rows(), options.dim);
    // The round's means are the noise-free reward of its candidates.
    for (int k = 0; k < options.candidates; ++k) {
      EXPECT_EQ(ra.means(k), a.Mean(ra.context, ra.arms.col(k), ra.user, t));
    }
  }
  EXPECT_EQ(a.edges().size(), b.edges().size());
  options.seed = 4;
  const TaskEnvironment c = *TaskEnvironment::Create(options);
  EXPECT_NE(c.MakeRound(0).arms, a.MakeRound(0).arms);
}

// On a stochastic block model the non-linear part is the block's: two users of one block
// differ only by their own linear part, users of different blocks differ.
TEST(TaskEnvironmentTest, SbmUsersOfOneBlockShareTheirFunction) {
  TaskOptions options;
  options.user_linear = 0.0;
  options.seed = 5;
  const TaskEnvironment env = *TaskEnvironment::Create(options);
  Rng rng(1);
  double same = 0.0, other = 0.0;
  for (int i = 0; i < 200; ++i) {
    const Eigen::VectorXd x = RandomFeatures(options.dim, 1.0, rng);
    const Eigen::VectorXd none(0);
    same = std::max(same, std::abs(env.Mean(none, x, 0, 0) - env.Mean(none, x, 3, 0)));
    other = std::max(other, std::abs(env.Mean(none, x, 0, 0) - env.Mean(none, x, 1, 0)));
  }
  EXPECT_LT(same, 1e-12);  // users 0 and 3 are both in block 0 (u % 3)
  EXPECT_GT(other, 0.1);
  // Edges: denser within blocks than across them.
  int within = 0, across = 0;
  for (const Edge& e : env.edges()) (e.a % 3 == e.b % 3 ? within : across)++;
  EXPECT_GT(within, 3 * across);
}

// Every user's shared part has unit standard deviation over the item distribution, so tasks
// are comparable and the noise level means the same thing in each.
TEST(TaskEnvironmentTest, SharedPartHasUnitSpreadAndIgnoresIrrelevantFeatures) {
  for (bool block_units : {false, true}) {
    TaskOptions options;
    options.user_linear = 0.0;
    options.dim = 6;
    options.relevant = 3;
    options.block_units = block_units;
    options.seed = 6;
    const TaskEnvironment env = *TaskEnvironment::Create(options);
    Rng rng(2);
    const Eigen::VectorXd none(0);
    for (int user : {0, 1, 2}) {
      double sum = 0.0, square = 0.0;
      const int n = 20000;
      for (int i = 0; i < n; ++i) {
        const double v = env.Mean(none, RandomFeatures(options.dim, 1.0, rng), user, 0);
        sum += v;
        square += v * v;
      }
      const double sd = std::sqrt(square / n - (sum / n) * (sum / n));
      EXPECT_NEAR(sd, 1.0, 0.05) << "user " << user << " block_units " << block_units;
    }
    Eigen::VectorXd x = RandomFeatures(options.dim, 1.0, rng);
    const double before = env.Mean(none, x, 2, 0);
    x.tail(3) = RandomFeatures(3, 5.0, rng);  // the irrelevant features
    EXPECT_EQ(env.Mean(none, x, 2, 0), before);
  }
}

// With block_units the blocks' functions are unrelated: not even their units are shared. Seen
// inside one task through the gradients of the reward: a tanh layer with 2 units has gradients
// in the 2-dimensional span of its input weights, so with shared units every block's gradients
// (at any input) span 2 dimensions together, and with each block's own units they span 6.
TEST(TaskEnvironmentTest, BlockUnitsGiveEachBlockItsOwnFunction) {
  TaskOptions shared, own;
  shared.user_linear = own.user_linear = 0.0;
  shared.hidden = own.hidden = 2;
  shared.dim = own.dim = 6;
  shared.seed = own.seed = 7;
  own.block_units = true;
  auto gradient_rank = [](const TaskEnvironment& env, int dim) {
    Rng rng(3);
    const Eigen::VectorXd none(0);
    Eigen::MatrixXd gradients(dim, 3 * 20);  // users 0, 1, 2: one of each block
    for (int i = 0; i < 20; ++i) {
      const Eigen::VectorXd x = RandomFeatures(dim, 1.0, rng);
      for (int user = 0; user < 3; ++user) {
        for (int d = 0; d < dim; ++d) {
          const double h = 1e-5;
          Eigen::VectorXd plus = x, minus = x;
          plus(d) += h;
          minus(d) -= h;
          gradients(d, 3 * i + user) =
              (env.Mean(none, plus, user, 0) - env.Mean(none, minus, user, 0)) / (2 * h);
        }
      }
    }
    const Eigen::VectorXd sv = Eigen::JacobiSVD<Eigen::MatrixXd>(gradients).singularValues();
    int rank = 0;
    for (int k = 0; k < sv.size(); ++k) rank += sv(k) > 1e-6 * sv(0) ? 1 : 0;
    return rank;
  };
  EXPECT_EQ(gradient_rank(*TaskEnvironment::Create(shared), 6), 2);
  EXPECT_EQ(gradient_rank(*TaskEnvironment::Create(own), 6), 6);
  TaskOptions er = own;
  er.graph = GraphKind::kErdosRenyi;
  EXPECT_EQ(TaskEnvironment::Create(er).status().code(), absl::StatusCode::kInvalidArgument);
}

// The learner sees features on any scale; the reward is the same function of x / scale.
TEST(TaskEnvironmentTest, FeatureScaleChangesInputsNotTheFunction) {
  TaskOptions unit, scaled;
  unit.seed = scaled.seed = 8;
  scaled.feature_scale = 10.0;
  const TaskEnvironment a = *TaskEnvironment::Create(unit);
  const TaskEnvironment b = *TaskEnvironment::Create(scaled);
  Rng rng(4);
  const Eigen::VectorXd none(0);
  for (int i = 0; i < 20; ++i) {
    const Eigen::VectorXd x = RandomFeatures(unit.dim, 1.0, rng);
    EXPECT_NEAR(b.Mean(none, 10.0 * x, i % 30, 0), a.Mean(none, x, i % 30, 0), 1e-12);
  }
  const Round round = b.MakeRound(0);
  EXPECT_GT(round.arms.cwiseAbs().maxCoeff(), 5.0);  // candidates drawn on the scale
}

// The drifting baseline moves every candidate by the same amount, so it never changes which is
// best (and cancels in the pseudo-regret).
TEST(TaskEnvironmentTest, DriftShiftsEveryCandidateEqually) {
  TaskOptions options;
  options.drift_amplitude = 2.0;
  options.drift_period = 1000;
  options.seed = 9;
  const TaskEnvironment env = *TaskEnvironment::Create(options);
  Rng rng(5);
  const Eigen::VectorXd none(0);
  const Eigen::VectorXd x = RandomFeatures(options.dim, 1.0, rng);
  const Eigen::VectorXd y = RandomFeatures(options.dim, 1.0, rng);
  for (uint64_t t : {0ull, 250ull, 600ull}) {
    const double shift = 2.0 * std::sin(2.0 * M_PI * static_cast<double>(t) / 1000.0);
    EXPECT_NEAR(env.Mean(none, x, 4, t) - env.Mean(none, x, 4, 0), shift, 1e-12);
    EXPECT_NEAR(env.Mean(none, y, 4, t) - env.Mean(none, y, 4, 0), shift, 1e-12);
  }
}

// Zipf arrivals: a few users arrive often, most rarely (cold users).
TEST(TaskEnvironmentTest, ZipfArrivalsMakeMostUsersCold) {
  TaskOptions options;
  options.users = 1000;
  options.blocks = 5;
  options.p_in = 0.02;
  options.p_out = 0.0005;
  options.zipf = 1.0;
  options.seed = 10;
  const TaskEnvironment env = *TaskEnvironment::Create(options);
  std::vector<int> arrivals(options.users, 0);
  for (uint64_t t = 0; t < 5000; ++t) ++arrivals[env.MakeRound(t).user];
  std::sort(arrivals.begin(), arrivals.end());
  const int seen_at_most_twice =
      static_cast<int>(std::upper_bound(arrivals.begin(), arrivals.end(), 2) - arrivals.begin());
  EXPECT_GT(seen_at_most_twice, 600);  // rank r arrives about 5000 / (7.5 r) times: r > 335
  EXPECT_GT(arrivals.back(), 300);     // the most frequent user: about 5000 / H(1000) = 670
}

TEST(TaskEnvironmentTest, RefusesInvalidOptions) {
  TaskOptions bad;
  bad.relevant = 9;  // more than dim
  EXPECT_EQ(TaskEnvironment::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = TaskOptions();
  bad.feature_scale = 0.0;
  EXPECT_EQ(TaskEnvironment::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = TaskOptions();
  bad.candidates = 1;
  EXPECT_EQ(TaskEnvironment::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace graphbandit::sim
