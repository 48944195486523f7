// Helpers shared by the unit tests: random problems and relative-error comparisons.
#ifndef GRAPHBANDIT_TESTS_TEST_UTIL_H_
#define GRAPHBANDIT_TESTS_TEST_UTIL_H_

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "core/base/random.h"

namespace graphbandit::testing {

inline Eigen::MatrixXd RandomMatrix(int rows, int cols, Rng& rng) {
  Eigen::MatrixXd m(rows, cols);
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) m(i, j) = rng.Normal();
  }
  return m;
}

// A random symmetric positive definite matrix with condition number around `spread`.
inline Eigen::MatrixXd RandomSpd(int n, Rng& rng, double spread = 100.0) {
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(RandomMatrix(n, n, rng));
  const Eigen::MatrixXd q = qr.householderQ();
  Eigen::VectorXd eigenvalues(n);
  for (int i = 0; i < n; ++i) eigenvalues(i) = std::pow(spread, rng.Uniform());
  return q * eigenvalues.asDiagonal() * q.transpose();
}

// An n x n symmetric positive definite matrix that is block diagonal over `parts` interleaved
// components (component p holds the indices i with i % parts == p: dictionary points of users
// in separate graph components), each block a RandomSpd drawn in component order.
inline Eigen::MatrixXd RandomInterleavedBlockSpd(int n, int parts, Rng& rng,
                                                 double spread = 100.0) {
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
  for (int p = 0; p < parts; ++p) {
    const int s = (n - p + parts - 1) / parts;  // indices p, p + parts, ... below n
    const Eigen::MatrixXd block = RandomSpd(s, rng, spread);
    for (int r = 0; r < s; ++r) {
      for (int c = 0; c < s; ++c) a(p + r * parts, p + c * parts) = block(r, c);
    }
  }
  return a;
}

// max |a - b| / max(|b|_inf, floor): relative error in the sup norm.
inline double RelativeError(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                            double floor = 1e-300) {
  return (a - b).cwiseAbs().maxCoeff() / std::max(b.cwiseAbs().maxCoeff(), floor);
}

}  // namespace graphbandit::testing

#endif  // GRAPHBANDIT_TESTS_TEST_UTIL_H_
