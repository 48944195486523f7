// The posterior states against slow, direct formulas on small problems (docs/algorithms.md §6.3):
// exact GP vs a fresh dense inverse; Nyström with a full dictionary vs the exact GP; the linear
// arm kernel vs Laplacian-regularised ridge regression in R^{nd}; the O(m^2) KORS score vs the
// explicit augmented formula (EK eq. 41); an empty graph decoupling users; rebuilds after a
// graph change; the log-det recursion.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;
using testing::RelativeError;

constexpr double kTolerance = 1e-8;

struct Problem {
  int dim = 4;
  int users = 8;
  double rho = 0.3;
  double ridge = 0.2;
  ArmKernel arm{KernelType::kRbf, 1.3};
  UserGraph graph;
  std::shared_ptr<const UserKernel> green;
  Eigen::MatrixXd x;  // dim x t
  std::vector<int32_t> users_of;
  Eigen::VectorXd y;

  Eigen::MatrixXd DenseGreen() const {
    Eigen::MatrixXd l = Eigen::MatrixXd::Zero(users, users);
    for (int u = 0; u < users; ++u) {
      for (const auto& [v, w] : graph.Neighbours(u)) {
        l(u, v) -= w;
        l(u, u) += w;
      }
    }
    return (l + rho * Eigen::MatrixXd::Identity(users, users)).inverse();
  }
  // K((a,ua),(b,ub)) computed entry by entry, with the dense Green's function.
  double K(const Eigen::VectorXd& a, int ua, const Eigen::VectorXd& b, int ub,
           const Eigen::MatrixXd& g) const {
    const double gu = (ua < 0 || ub < 0) ? (ua == ub && ua >= 0 ? g(ua, ub) : 0.0) : g(ua, ub);
    return gu * arm(a, b);
  }
  double Prior(int u, const Eigen::VectorXd& a, const Eigen::MatrixXd& g) const {
    return (u < 0 ? 1.0 / rho : g(u, u)) * arm(a, a);
  }
  // The textbook posterior through one dense solve.
  void NaivePosterior(int user, const Eigen::MatrixXd& q, Eigen::VectorXd* mean,
                      Eigen::VectorXd* sd, int t_used = -1) const {
    const int t = t_used < 0 ? static_cast<int>(x.cols()) : t_used;
    const Eigen::MatrixXd g = DenseGreen();
    Eigen::MatrixXd gram(t, t), cross(t, q.cols());
    for (int i = 0; i < t; ++i) {
      for (int j = 0; j < t; ++j) gram(i, j) = K(x.col(i), users_of[i], x.col(j), users_of[j], g);
      for (int j = 0; j < q.cols(); ++j) cross(i, j) = K(x.col(i), users_of[i], q.col(j), user, g);
    }
    gram.diagonal().array() += ridge;
    const Eigen::FullPivLU<Eigen::MatrixXd> lu(gram);
    *mean = cross.transpose() * lu.solve(y.head(t));
    const Eigen::MatrixXd solved = lu.solve(cross);
    sd->resize(q.cols());
    for (int j = 0; j < q.cols(); ++j) {
      (*sd)(j) =
          std::sqrt(std::max(0.0, Prior(user, q.col(j), g) - cross.col(j).dot(solved.col(j))));
    }
  }
};

// Eight users: a connected core 0..5 (a path plus a chord), users 6 and 7 isolated.
Problem MakeProblem(int t, uint64_t seed, KernelType type = KernelType::kRbf) {
  Problem p;
  p.arm = ArmKernel(type, 1.3);
  Rng rng(seed);
  p.graph.EnsureUsers(p.users);
  for (int u = 0; u + 1 < 6; ++u) p.graph.SetEdge(u, u + 1, 1.0 + 0.5 * u);
  p.graph.SetEdge(0, 4, 0.7);
  p.green = *GreenFunction::Build(p.graph, p.rho);
  p.x = RandomMatrix(p.dim, t, rng);
  for (int i = 0; i < t; ++i) p.users_of.push_back(static_cast<int32_t>(rng.UniformInt(p.users)));
  p.y = RandomMatrix(t, 1, rng);
  return p;
}

NystromOptions FullDictionaryOptions(double ridge) {
  NystromOptions options;
  options.ridge = ridge;
  options.kors_mu = ridge;
  options.kors_gamma = 1e12;  // every point is accepted
  options.max_dictionary_size = 1 << 20;
  return options;
}

void ExpectMatchesNaive(const Scorer& scorer, const Problem& p, uint64_t seed, double tolerance,
                        int t_used = -1) {
  Rng rng(seed);
  const Eigen::MatrixXd q = RandomMatrix(p.dim, 12, rng);
  for (int user : {0, 3, 5, 6, 7, static_cast<int>(kUnknownUser)}) {
    Eigen::VectorXd mean, sd, naive_mean, naive_sd;
    scorer.Score(user, q, &mean, &sd);
    p.NaivePosterior(user, q, &naive_mean, &naive_sd, t_used);
    EXPECT_LT(RelativeError(mean, naive_mean, 1e-12), tolerance) << "user " << user;
    EXPECT_LT(RelativeError(sd, naive_sd), tolerance) << "user " << user;
  }
}

TEST(ExactGpPosteriorTest, MatchesADenseSolveAtEveryStep) {
  const Problem p = MakeProblem(60, 1);
  ExactGpPosterior gp(p.dim, p.arm, p.green, p.ridge);
  for (int i = 0; i < p.x.cols(); ++i) {
    ASSERT_TRUE(gp.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
    if (i % 20 == 19) ExpectMatchesNaive(gp, p, 100 + i, kTolerance, i + 1);
  }
}

TEST(ExactGpPosteriorTest, LogDetRecursionMatchesDirectDeterminant) {
  const Problem p = MakeProblem(50, 2);
  ExactGpPosterior gp(p.dim, p.arm, p.green, p.ridge);
  for (int i = 0; i < p.x.cols(); ++i)
    ASSERT_TRUE(gp.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  const Eigen::MatrixXd g = p.DenseGreen();
  const int t = static_cast<int>(p.x.cols());
  Eigen::MatrixXd m(t, t);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < t; ++j)
      m(i, j) = p.K(p.x.col(i), p.users_of[i], p.x.col(j), p.users_of[j], g) / p.ridge;
  }
  m.diagonal().array() += 1.0;
  const double direct = 2.0 * Eigen::MatrixXd(m.llt().matrixL()).diagonal().array().log().sum();
  EXPECT_NEAR(gp.LogDetGain(), direct, 1e-9 * std::abs(direct));
}

TEST(NystromPosteriorTest, FullDictionaryEqualsExactGp) {
  for (KernelType type : {KernelType::kRbf, KernelType::kMatern32, KernelType::kMatern52}) {
    const Problem p = MakeProblem(40, 3, type);
    NystromPosterior nystrom(p.dim, p.arm, p.green, FullDictionaryOptions(p.ridge));
    for (int i = 0; i < p.x.cols(); ++i) {
      ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
    }
    ASSERT_EQ(nystrom.dictionary_size(), p.x.cols()) << KernelTypeName(type);
    ExpectMatchesNaive(nystrom, p, 4, kTolerance);
    ExpectMatchesNaive(*nystrom.Freeze(), p, 5, kTolerance);
  }
}

TEST(NystromPosteriorTest, PartialDictionaryMatchesTheDirectProjectedRegression) {
  // Half of the points join the dictionary, each after earlier points were learned on a
  // smaller dictionary, so every growth goes through the border K_ZS k_S(z) over the whole
  // history. The result must equal the projected regression formed directly (§4.4).
  const Problem p = MakeProblem(40, 6);
  NystromOptions options = FullDictionaryOptions(p.ridge);
  options.kors_gamma = 0.0;  // accept nothing after the seed point...
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  for (int i = 0; i < p.x.cols(); ++i) {
    if (i % 2 == 1) nystrom.set_force_accept(true);  // ...except every odd point
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  }
  ASSERT_EQ(nystrom.dictionary_size(), 21);
  const Eigen::MatrixXd g = p.DenseGreen();
  const int t = static_cast<int>(p.x.cols());
  std::vector<int> z;
  for (int i = 0; i < t; ++i)
    if (i == 0 || i % 2 == 1) z.push_back(i);
  const int m = static_cast<int>(z.size());
  Eigen::MatrixXd kzs(m, t), kzz(m, m);
  for (int a = 0; a < m; ++a) {
    for (int i = 0; i < t; ++i)
      kzs(a, i) = p.K(p.x.col(z[a]), p.users_of[z[a]], p.x.col(i), p.users_of[i], g);
    for (int b = 0; b < m; ++b) kzz(a, b) = kzs(a, z[b]);
  }
  const Eigen::MatrixXd big_m = kzs * kzs.transpose() + p.ridge * kzz;
  const Eigen::VectorXd w = big_m.fullPivLu().solve(kzs * p.y);
  Rng rng(8);
  const Eigen::MatrixXd q = RandomMatrix(p.dim, 9, rng);
  for (int user : {0, 2, 6}) {
    Eigen::VectorXd mean, sd, direct_mean(q.cols()), direct_sd(q.cols());
    nystrom.Score(user, q, &mean, &sd);
    for (int j = 0; j < q.cols(); ++j) {
      Eigen::VectorXd kz(m);
      for (int a = 0; a < m; ++a) kz(a) = p.K(p.x.col(z[a]), p.users_of[z[a]], q.col(j), user, g);
      const double kss = p.Prior(user, q.col(j), g);
      direct_mean(j) = kz.dot(w);
      const double var =
          p.ridge * kz.dot(big_m.fullPivLu().solve(kz)) + (kss - kz.dot(kzz.fullPivLu().solve(kz)));
      direct_sd(j) = std::sqrt(std::max(var, 0.0));
    }
    EXPECT_LT(RelativeError(mean, direct_mean), kTolerance) << "user " << user;
    EXPECT_LT(RelativeError(sd, direct_sd), kTolerance) << "user " << user;
  }
}

TEST(NystromPosteriorTest, LinearKernelIsLaplacianRegularisedRidge) {
  // With k_x(x,x') = <x,x'>, the GP posterior mean is the ridge estimate with penalty
  // lambda vec(Theta)^T (L_rho (x) I_d) vec(Theta), and the variance is
  // lambda phi^T (Phi^T Phi + lambda L_rho (x) I_d)^-1 phi with phi = e_u (x) x.
  Problem p = MakeProblem(30, 9, KernelType::kLinear);
  p.arm = ArmKernel(KernelType::kLinear, 1.0);
  const int n = p.users, d = p.dim, t = static_cast<int>(p.x.cols());
  Eigen::MatrixXd laplacian_rho = p.DenseGreen().inverse();
  Eigen::MatrixXd penalty = Eigen::MatrixXd::Zero(n * d, n * d);
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      penalty.block(u * d, v * d, d, d) = laplacian_rho(u, v) * Eigen::MatrixXd::Identity(d, d);
    }
  }
  Eigen::MatrixXd phi = Eigen::MatrixXd::Zero(t, n * d);
  for (int i = 0; i < t; ++i) phi.block(i, p.users_of[i] * d, 1, d) = p.x.col(i).transpose();
  const Eigen::MatrixXd normal = phi.transpose() * phi + p.ridge * penalty;
  const Eigen::VectorXd theta = normal.ldlt().solve(phi.transpose() * p.y);

  ExactGpPosterior gp(d, p.arm, p.green, p.ridge);
  NystromPosterior nystrom(d, p.arm, p.green, FullDictionaryOptions(p.ridge));
  for (int i = 0; i < t; ++i) {
    ASSERT_TRUE(gp.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  }
  // Each user's points span at most d dimensions of the linear kernel's feature space, so a
  // user's fifth point is dependent: the guard skips exactly those, and the dictionary still
  // spans every observed feature vector.
  EXPECT_EQ(nystrom.dictionary_size() + nystrom.stats().skipped_dependent, t);
  EXPECT_GT(nystrom.stats().skipped_dependent, 0);
  Rng rng(10);
  const Eigen::MatrixXd q = RandomMatrix(d, 6, rng);
  for (int user = 0; user < n; ++user) {
    Eigen::VectorXd ridge_mean(q.cols()), ridge_sd(q.cols());
    for (int j = 0; j < q.cols(); ++j) {
      Eigen::VectorXd f = Eigen::VectorXd::Zero(n * d);
      f.segment(user * d, d) = q.col(j);
      ridge_mean(j) = f.dot(theta);
      ridge_sd(j) = std::sqrt(p.ridge * f.dot(normal.ldlt().solve(f)));
    }
    for (const Learner* learner :
         {static_cast<const Learner*>(&gp), static_cast<const Learner*>(&nystrom)}) {
      Eigen::VectorXd mean, sd;
      learner->Score(user, q, &mean, &sd);
      EXPECT_LT(RelativeError(mean, ridge_mean), kTolerance) << "user " << user;
      EXPECT_LT(RelativeError(sd, ridge_sd), kTolerance) << "user " << user;
    }
  }
}

// EK eq. (41) with the explicit augmented dictionary Z* = Z + {s}, weights 1/p.
double DirectKorsScore(const Problem& p, const std::vector<Eigen::VectorXd>& z_points,
                       const std::vector<int>& z_users, const std::vector<double>& z_probability,
                       const Eigen::VectorXd& s, int s_user, double mu, double eps) {
  const Eigen::MatrixXd g = p.DenseGreen();
  const int m = static_cast<int>(z_points.size());
  Eigen::MatrixXd k_star(m + 1, m + 1);
  Eigen::VectorXd b_star(m + 1), scale(m + 1);
  auto point = [&](int i) { return i < m ? z_points[i] : s; };
  auto user = [&](int i) { return i < m ? z_users[i] : s_user; };
  for (int i = 0; i <= m; ++i) {
    scale(i) = 1.0 / std::sqrt(i < m ? z_probability[i] : 1.0);
    b_star(i) = p.K(point(i), user(i), s, s_user, g);
    for (int j = 0; j <= m; ++j) k_star(i, j) = p.K(point(i), user(i), point(j), user(j), g);
  }
  const Eigen::MatrixXd inner = scale.asDiagonal() * k_star * scale.asDiagonal() +
                                mu * Eigen::MatrixXd::Identity(m + 1, m + 1);
  const Eigen::VectorXd sb = scale.asDiagonal() * b_star;
  const double kss = p.K(s, s_user, s, s_user, g);
  return (1.0 + eps) / mu * (kss - sb.dot(inner.fullPivLu().solve(sb)));
}

TEST(NystromPosteriorTest, KorsScoreEqualsTheAugmentedFormula) {
  const Problem p = MakeProblem(80, 11);
  NystromOptions options;
  options.ridge = p.ridge;
  options.kors_mu = 0.3;
  options.kors_gamma = 0.5;
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  for (int i = 0; i < p.x.cols(); ++i)
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  const int m = static_cast<int>(nystrom.dictionary_size());
  ASSERT_GT(m, 3);
  ASSERT_LT(m, p.x.cols());  // a genuinely partial dictionary
  std::vector<Eigen::VectorXd> z;
  std::vector<double> prob;
  for (int j = 0; j < m; ++j) {
    z.push_back(nystrom.dictionary_points().col(j));
    prob.push_back(1.0 / nystrom.dictionary_weights()[j]);
  }
  std::vector<int> zu(nystrom.dictionary_users().begin(), nystrom.dictionary_users().end());
  Rng rng(12);
  for (int trial = 0; trial < 10; ++trial) {
    const Eigen::VectorXd s = RandomMatrix(p.dim, 1, rng);
    const int user = static_cast<int>(rng.UniformInt(p.users));
    const double direct =
        DirectKorsScore(p, z, zu, prob, s, user, options.kors_mu, options.kors_epsilon);
    EXPECT_NEAR(nystrom.KorsScore(user, s), direct, 1e-9 * std::max(1.0, direct));
  }
}

TEST(NystromPosteriorTest, MergingDuplicatesKeepsTheWeightedKorsOperator) {
  // A finite pool: repeated identical points are accepted now and then and must be merged.
  Problem p = MakeProblem(6, 13);
  NystromOptions options;
  options.ridge = p.ridge;
  options.kors_mu = 0.05;
  options.kors_gamma = 3.0;
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  Rng rng(14);
  for (int step = 0; step < 400; ++step) {
    const int i = static_cast<int>(rng.UniformInt(p.x.cols()));
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), rng.Normal()).ok());
  }
  EXPECT_GT(nystrom.stats().merged_duplicates, 0);
  EXPECT_LE(nystrom.dictionary_size(), p.x.cols());
  // Expand every merged weight w into two copies with probabilities 2/w each: the augmented
  // formula must not notice the difference.
  std::vector<Eigen::VectorXd> z;
  std::vector<int> zu;
  std::vector<double> merged, expanded;
  std::vector<Eigen::VectorXd> z2;
  std::vector<int> zu2;
  for (int j = 0; j < nystrom.dictionary_size(); ++j) {
    const double w = nystrom.dictionary_weights()[j];
    z.push_back(nystrom.dictionary_points().col(j));
    zu.push_back(nystrom.dictionary_users()[j]);
    merged.push_back(1.0 / w);
    for (int copy = 0; copy < 2; ++copy) {
      z2.push_back(z.back());
      zu2.push_back(zu.back());
      expanded.push_back(2.0 / w);
    }
  }
  for (int trial = 0; trial < 5; ++trial) {
    const Eigen::VectorXd s =
        trial < 3 ? Eigen::VectorXd(p.x.col(trial)) : Eigen::VectorXd(RandomMatrix(p.dim, 1, rng));
    const int user = trial < 3 ? p.users_of[trial] : 2;
    const double with_merged =
        DirectKorsScore(p, z, zu, merged, s, user, options.kors_mu, options.kors_epsilon);
    const double with_copies =
        DirectKorsScore(p, z2, zu2, expanded, s, user, options.kors_mu, options.kors_epsilon);
    EXPECT_NEAR(with_merged, with_copies, 1e-9);
    EXPECT_NEAR(nystrom.KorsScore(user, s), with_merged, 1e-9);
  }
}

TEST(NystromPosteriorTest, EmptyGraphDecouplesUsers) {
  Problem p = MakeProblem(30, 15);
  p.graph = UserGraph();
  p.graph.EnsureUsers(p.users);
  p.green = *GreenFunction::Build(p.graph, p.rho);
  for (auto& u : p.users_of) u = 0;  // all data belongs to user 0
  NystromPosterior nystrom(p.dim, p.arm, p.green, FullDictionaryOptions(p.ridge));
  ExactGpPosterior gp(p.dim, p.arm, p.green, p.ridge);
  for (int i = 0; i < p.x.cols(); ++i) {
    ASSERT_TRUE(nystrom.Observe(0, p.x.col(i), p.y(i)).ok());
    ASSERT_TRUE(gp.Observe(0, p.x.col(i), p.y(i)).ok());
  }
  Rng rng(16);
  const Eigen::MatrixXd q = RandomMatrix(p.dim, 5, rng);
  for (const Learner* learner :
       {static_cast<const Learner*>(&nystrom), static_cast<const Learner*>(&gp)}) {
    Eigen::VectorXd mean, sd;
    learner->Score(3, q, &mean, &sd);  // another user: exactly the prior
    EXPECT_EQ(mean, Eigen::VectorXd::Zero(q.cols()));
    for (int j = 0; j < q.cols(); ++j)
      EXPECT_NEAR(sd(j), std::sqrt(p.arm(q.col(j), q.col(j)) / p.rho), 1e-12);
  }
  // User 0 alone: a single-user GP with kernel k_x / rho.
  ExpectMatchesNaive(nystrom, p, 17, kTolerance);
}

TEST(NystromPosteriorTest, NewUserWithOneFriendBorrowsTheFriendsData) {
  Problem p = MakeProblem(40, 18);
  for (auto& u : p.users_of) u = 1;  // only user 1 has data
  p.graph = UserGraph();
  p.graph.EnsureUsers(p.users);
  p.graph.SetEdge(1, 2, 1.0);  // user 2 has never been seen, but is user 1's friend
  p.green = *GreenFunction::Build(p.graph, p.rho);
  p.y = p.x.row(0).transpose();  // reward = first feature
  NystromOptions options;
  options.ridge = 0.01;
  options.kors_mu = 0.01;
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  for (int i = 0; i < p.x.cols(); ++i) ASSERT_TRUE(nystrom.Observe(1, p.x.col(i), p.y(i)).ok());
  Eigen::MatrixXd q(p.dim, 2);
  q.col(0) = p.x.col(0);
  q.col(1) = p.x.col(1);
  Eigen::VectorXd friend_mean, friend_sd, stranger_mean, stranger_sd;
  nystrom.Score(2, q, &friend_mean, &friend_sd);
  nystrom.Score(kUnknownUser, q, &stranger_mean, &stranger_sd);
  EXPECT_EQ(stranger_mean, Eigen::VectorXd::Zero(2));
  // The friend's means have the sign of the true rewards and its uncertainty shrank.
  for (int j = 0; j < 2; ++j) {
    EXPECT_GT(friend_mean(j) * p.y(j), 0.0);
    EXPECT_LT(friend_sd(j), stranger_sd(j));
  }
}

TEST(NystromPosteriorTest, GraphChangeRebuildEqualsLearningUnderTheNewGraph) {
  Problem p = MakeProblem(35, 19);
  NystromPosterior nystrom(p.dim, p.arm, p.green, FullDictionaryOptions(p.ridge));
  ExactGpPosterior gp(p.dim, p.arm, p.green, p.ridge);
  for (int i = 0; i < p.x.cols(); ++i) {
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
    ASSERT_TRUE(gp.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  }
  p.graph.SetEdge(6, 7, 2.0);  // connect the two isolated users
  p.graph.RemoveEdge(0, 4);
  p.graph.SetEdge(5, 6, 0.3);
  p.green = *GreenFunction::Build(p.graph, p.rho);
  ASSERT_TRUE(nystrom.SetGraph(p.graph, p.green).ok());
  ASSERT_TRUE(gp.SetGraph(p.graph, p.green).ok());
  ExpectMatchesNaive(nystrom, p, 20, kTolerance);
  ExpectMatchesNaive(gp, p, 21, kTolerance);
  // Learning continues correctly after the rebuild.
  Rng rng(22);
  const Eigen::MatrixXd extra = RandomMatrix(p.dim, 5, rng);
  for (int i = 0; i < 5; ++i) {
    p.x.conservativeResize(Eigen::NoChange, p.x.cols() + 1);
    p.x.col(p.x.cols() - 1) = extra.col(i);
    p.users_of.push_back(i);
    p.y.conservativeResize(p.y.size() + 1);
    p.y(p.y.size() - 1) = 0.5 * i;
    ASSERT_TRUE(nystrom.Observe(i, extra.col(i), 0.5 * i).ok());
  }
  ExpectMatchesNaive(nystrom, p, 23, kTolerance);
}

TEST(NystromPosteriorTest, FrozenScorerIsIndependentOfLaterLearning) {
  const Problem p = MakeProblem(30, 24);
  NystromOptions options;
  options.ridge = p.ridge;
  options.kors_mu = p.ridge;
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  const std::shared_ptr<const Scorer> frozen = nystrom.Freeze();
  Rng rng(25);
  const Eigen::MatrixXd q = RandomMatrix(p.dim, 4, rng);
  Eigen::VectorXd live_mean, live_sd, mean_before, sd_before, mean_after, sd_after;
  nystrom.Score(1, q, &live_mean, &live_sd);
  frozen->Score(1, q, &mean_before, &sd_before);
  EXPECT_EQ(live_mean, mean_before);  // bit-identical
  EXPECT_EQ(live_sd, sd_before);
  for (int i = 15; i < 30; ++i)
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  frozen->Score(1, q, &mean_after, &sd_after);
  EXPECT_EQ(mean_after, mean_before);
  EXPECT_EQ(sd_after, sd_before);
  nystrom.Score(1, q, &live_mean, &live_sd);
  EXPECT_NE(live_mean, mean_before);
}

// Learning asks for the mean alone (a reward baseline's prediction) through Mean, which skips
// the variance: it must equal Score's mean bit for bit, or learning would change.
TEST(NystromPosteriorTest, MeanAloneEqualsScoresMeanBitForBit) {
  const Problem p = MakeProblem(60, 31);
  NystromOptions options;
  options.ridge = p.ridge;
  options.kors_mu = 0.5;
  options.prior_mean = 0.25;
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  Rng rng(32);
  const Eigen::MatrixXd q = RandomMatrix(p.dim, 7, rng);
  const auto expect_same = [&](const char* when) {
    for (int user : {0, 3, 7, static_cast<int>(kUnknownUser)}) {
      for (Eigen::Index c : {1, 7}) {
        Eigen::VectorXd scored, sd, alone;
        nystrom.Score(user, q.leftCols(c), &scored, &sd);
        nystrom.Mean(user, q.leftCols(c), &alone);
        EXPECT_EQ(alone, scored) << when << ", user " << user << ", C = " << c;
      }
    }
  };
  expect_same("no data");  // the prior mean, not 0
  for (int i = 0; i < p.x.cols(); ++i) {
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
    if (i == 0 || i == 20 || i + 1 == p.x.cols()) expect_same("after learning");
  }
  // The last comparison was of a learned mean (a dictionary, a mean away from the prior), not
  // of the prior again.
  ASSERT_GT(nystrom.dictionary_size(), 1);
  Eigen::VectorXd learned;
  nystrom.Mean(0, q, &learned);
  EXPECT_GT((learned.array() - options.prior_mean).abs().maxCoeff(), 1e-3);
  // Scorers without their own Mean (the exact GP here) get the default, which goes through
  // Score; this guards an override added later.
  ExactGpPosterior exact(p.dim, p.arm, p.green, p.ridge);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(exact.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  Eigen::VectorXd scored, sd, alone;
  exact.Score(2, q, &scored, &sd);
  exact.Mean(2, q, &alone);
  EXPECT_EQ(alone, scored);
}

TEST(NystromPosteriorTest, SameSeedAndDataGiveBitIdenticalState) {
  const Problem p = MakeProblem(200, 26);
  NystromOptions options;
  options.ridge = p.ridge;
  options.kors_mu = 0.5;
  options.seed = 99;
  NystromPosterior a(p.dim, p.arm, p.green, options), b(p.dim, p.arm, p.green, options);
  for (int i = 0; i < p.x.cols(); ++i) {
    ASSERT_TRUE(a.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
    ASSERT_TRUE(b.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  }
  EXPECT_EQ(a.dictionary_size(), b.dictionary_size());
  EXPECT_EQ(a.dictionary_points(), b.dictionary_points());
  Rng rng(27);
  const Eigen::MatrixXd q = RandomMatrix(p.dim, 4, rng);
  Eigen::VectorXd ma, sa, mb, sb;
  a.Score(2, q, &ma, &sa);
  b.Score(2, q, &mb, &sb);
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(sa, sb);
}

TEST(NystromPosteriorTest, DictionaryRespectsItsCap) {
  const Problem p = MakeProblem(100, 28);
  NystromOptions options = FullDictionaryOptions(p.ridge);
  options.max_dictionary_size = 10;
  NystromPosterior nystrom(p.dim, p.arm, p.green, options);
  for (int i = 0; i < p.x.cols(); ++i)
    ASSERT_TRUE(nystrom.Observe(p.users_of[i], p.x.col(i), p.y(i)).ok());
  EXPECT_EQ(nystrom.dictionary_size(), 10);
  EXPECT_EQ(nystrom.stats().skipped_full, 90);
  EXPECT_EQ(nystrom.history_size(), 100);
}

// Points admitted with a residual near round-off (here: a guard of 1e-16 and every point forced
// in, on a one-dimensional input where a few points span everything) make M = K_ZS K_SZ +
// lambda K_ZZ numerically indefinite. The learner then re-admits its dictionary with a stricter
// guard instead of failing: every observation is learned, and the posterior is the regression
// it should be (the reward is the input itself).
TEST(NystromPosteriorTest, NearlyDependentPointsAreDroppedNotFatal) {
  Rng rng(47);
  UserGraph graph;
  graph.EnsureUsers(1);
  auto green = *GreenFunction::Build(graph, 0.1);
  NystromOptions options;
  options.ridge = options.kors_mu = 1e-4;
  options.min_relative_residual = 1e-16;
  NystromPosterior nystrom(1, ArmKernel(KernelType::kRbf, 1.0), green, options);
  for (int i = 0; i < 200; ++i) {
    Eigen::VectorXd x(1);
    x(0) = rng.Uniform();
    nystrom.set_force_accept(true);
    ASSERT_TRUE(nystrom.Observe(0, x, x(0) + 0.01 * rng.Normal()).ok()) << "observation " << i;
  }
  EXPECT_EQ(nystrom.history_size(), 200);
  EXPECT_LT(nystrom.dictionary_size(), 50);
  EXPECT_GT(nystrom.stats().skipped_dependent, 0);
  Eigen::MatrixXd probes(1, 3);
  probes << 0.2, 0.5, 0.8;
  Eigen::VectorXd mean, stddev;
  nystrom.Score(0, probes, &mean, &stddev);
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(mean(j), probes(0, j), 0.02);
    EXPECT_TRUE(std::isfinite(stddev(j)));
  }
}

TEST(NystromPosteriorTest, RejectsBadObservations) {
  const Problem p = MakeProblem(1, 29);
  NystromPosterior nystrom(p.dim, p.arm, p.green, NystromOptions());
  EXPECT_FALSE(nystrom.Observe(kUnknownUser, p.x.col(0), 1.0).ok());
  EXPECT_FALSE(nystrom.Observe(0, Eigen::VectorXd::Zero(p.dim + 1), 1.0).ok());
  EXPECT_FALSE(nystrom.Observe(0, p.x.col(0), std::nan("")).ok());
  EXPECT_EQ(nystrom.history_size(), 0);
}

}  // namespace
}  // namespace graphbandit
