// A lower-triangular Cholesky factor that can grow by one row and column and absorb rank-one
// updates in O(m^2), without refactoring.
//
// The posterior states need exactly these two operations (docs/algorithms.md §0.5, P2; and the
// rank-one update behind EK-UCB's Sherman-Morrison step, done here on the factor instead of on
// the inverse because the factor stays accurate over millions of updates while an explicitly
// updated inverse drifts).
#ifndef GRAPHBANDIT_CORE_LINALG_CHOLESKY_FACTOR_H_
#define GRAPHBANDIT_CORE_LINALG_CHOLESKY_FACTOR_H_

#include <Eigen/Dense>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/linalg/disjoint_sets.h"

namespace graphbandit {

class CholeskyFactor {
 public:
  CholeskyFactor() = default;

  // Factor of an explicit symmetric positive definite matrix (only its lower triangle is read).
  // Fails with FailedPrecondition if the matrix is not numerically positive definite. A matrix
  // whose non-zero pattern falls into groups of at most half its rows that share no entry (the
  // multi-user kernel's graph components) is factored group by group: the factor is the same
  // block-diagonal one (up to round-off), at the cost of the groups' sizes cubed.
  absl::Status Reset(const Eigen::Ref<const Eigen::MatrixXd>& a);
  void Clear() {
    size_ = 0;
    Changed();
  }
  // Drops trailing rows/columns; undoes Append calls (the leading block never changes).
  void Truncate(int n) {
    if (n < size_) Changed();
    size_ = n < size_ ? n : size_;
  }

  int size() const { return size_; }
  // Rows (and columns) allocated; Append reallocates once size() reaches it. Exposed for exact
  // serialisation (core/storage/state_coding.h): the allocation fixes the column stride and
  // alignment that later arithmetic sees, so a restored factor keeps it.
  int capacity() const { return static_cast<int>(storage_.rows()); }
  // Replaces the factor: `storage` (capacity x capacity, square) becomes the storage and its
  // leading size x size lower triangle the factor L; the strictly upper part of that block is
  // set to zero, as every other operation leaves it. Returns InvalidArgument (factor unchanged)
  // if `storage` is not square or size is outside [0, capacity].
  absl::Status Restore(Eigen::MatrixXd storage, int size);

  // The factor L (size x size, lower triangular) with L L^T = A.
  Eigen::Block<const Eigen::MatrixXd> matrix() const {
    return storage_.topLeftCorner(size_, size_);
  }
  auto lower() const { return matrix().triangularView<Eigen::Lower>(); }

  // A <- [[A, b], [b^T, c]]. Requires the Schur complement c - b^T A^-1 b to exceed
  // min_pivot_sq; otherwise returns FailedPrecondition and leaves the factor unchanged.
  absl::Status Append(const Eigen::Ref<const Eigen::VectorXd>& b, double c,
                      double min_pivot_sq = 0.0);
  // The same with l = L^-1 b already solved (a caller that needed it anyway).
  absl::Status AppendSolved(const Eigen::Ref<const Eigen::VectorXd>& l, double c,
                            double min_pivot_sq = 0.0);

  // A <- A + v v^T. Always succeeds for finite v.
  void RankOneUpdate(Eigen::VectorXd v);

  // The last k rows of the orthogonal Q with [L V] Q = [L' 0] (RankUpdate's reflections):
  // q21 (k x n) and q22 (k x k). They give, without a triangular solve on the old factor,
  //   L'^-1 V = q21^T   and   q22 q22^T = I - V^T (L' L'^T)^-1 V = (I + V^T (L L^T)^-1 V)^-1,
  // which is what a Woodbury correction for the batch needs (NystromPosterior::ObserveBatch).
  struct Reflected {
    Eigen::MatrixXd q21, q22;
  };
  // A <- A + V V^T for the k columns of V (size() x k) at once. Always succeeds for finite V.
  // Each row of V is folded into the factor's diagonal by one Householder reflection acting on
  // that column of L and the k columns of V; the reflections of a panel of kRankPanel columns
  // are applied to every row below the panel at once in compact WY form (matrix products), so
  // that the O(size()^2 k) work runs at the rate of a matrix product (BLAS-3) instead of k
  // memory-bound rotation sweeps. k = 1 without `reflected` is RankOneUpdate. When
  // `reflected` is given it also receives Reflected (above; k = 1 included: it then takes the
  // reflections' way).
  void RankUpdate(const Eigen::Ref<const Eigen::MatrixXd>& v, Reflected* reflected = nullptr);
  static constexpr int kRankPanel = 32;
  // A row of V whose squared norm is at most this times L(j,j)^2 is below round-off and is not
  // folded (RankUpdateLower): eps^2.
  static constexpr double kNegligibleFold =
      std::numeric_limits<double>::epsilon() * std::numeric_limits<double>::epsilon();
  // RankUpdate's arithmetic on a lower factor L held elsewhere (`storage`, n x n, e.g. a block
  // from GatherLower): L L^T + V V^T, V n x k; `reflected`, when given, as above.
  static void RankUpdateLower(Eigen::Ref<Eigen::MatrixXd> storage,
                              const Eigen::Ref<const Eigen::MatrixXd>& v,
                              Reflected* reflected = nullptr);

  // Work on a block. A set of rows and columns `support` (sorted, distinct, each < size())
  // separates when no entry of L links it to the rest: L(i, j) = 0 whenever exactly one of i
  // and j is in it. Then L's block on the support (GatherLower) is the Cholesky factor of A's
  // block there, solves with a right-hand side that is zero off the support are zero off it and
  // are the block's solves on it, and an update A + V V^T with V zero off the support changes
  // that block alone (the block's RankUpdateLower, written back with ScatterLower). This is
  // what a multi-user kernel gives when the batch's users share nothing with the other
  // dictionary points' users (their graph components, core/kernel/multi_user_kernel.h): exact
  // zeros in A that every operation here keeps. Separates answers from the components of L's
  // non-zero pattern (or coarser ones: a Reset takes A's), which it finds with one read of L's
  // lower triangle after a Restore, Truncate or Clear, and otherwise keeps up to date: Append,
  // ScatterLower and the
  // updates join the components their new non-zeros reach (only ever joining, so the answer
  // stays safe: a component that a later cancellation splits is still taken as one). Then it
  // costs O(s log s) for a support of s rows. A support that is not sorted and distinct, or
  // reaches past the factor, is not proved separate (false).
  bool Separates(const std::vector<int>& support);
  Eigen::MatrixXd GatherLower(const std::vector<int>& support) const;
  // Writes a block's lower triangle back into L; the rest of L is unchanged.
  void ScatterLower(const std::vector<int>& support,
                    const Eigen::Ref<const Eigen::MatrixXd>& block);

  // A <- A - v v^T. Fails with FailedPrecondition (factor unchanged) if the result would not be
  // positive definite.
  absl::Status RankOneDowndate(Eigen::VectorXd v);

  // x = L^-1 b, solved in place for a vector or for every column of a matrix.
  template <typename Derived>
  void ForwardSolveInPlace(Eigen::MatrixBase<Derived>& b) const {
    lower().solveInPlace(b);
  }
  template <typename Derived>
  void ForwardSolveInPlace(Eigen::MatrixBase<Derived>&& b) const {
    lower().solveInPlace(b);
  }

  // L in single precision (size x size; the strictly upper part zero), made on the first call
  // after the factor changed and kept until the next change: for callers that solve against
  // the same factor many times where single precision serves (KORS's leverage at a full
  // dictionary), so that L is not rounded again for every batch.
  const Eigen::MatrixXf& SingleLower();

  // x = A^-1 b.
  Eigen::VectorXd Solve(const Eigen::Ref<const Eigen::VectorXd>& b) const;

  // log det A.
  double LogDeterminant() const;

 private:
  // Adds v v^T (downdate false) or removes it (true) by rotations down the columns; v is used
  // as workspace. RankOneDowndate checks feasibility first.
  void Sweep(Eigen::VectorXd& v, bool downdate);

  void Reserve(int n);
  // Every change to L: drops the single-precision copy and the components.
  void Changed() {
    single_.reset();
    components_valid_ = false;
  }
  // Whether the components describe the factor as it is (a moved-from factor's do not).
  bool ComponentsKnown() const;
  // Changed(), keeping the components through an update by the columns of v.
  void KeepComponentsThrough(const Eigen::Ref<const Eigen::MatrixXd>& v);
  void FindComponents();

  Eigen::MatrixXd storage_;  // capacity x capacity; only the leading size_ x size_ is live
  int size_ = 0;
  // SingleLower's copy; every change to the factor drops it. Shared, so that copying a factor
  // does not copy it.
  std::shared_ptr<const Eigen::MatrixXf> single_;
  // Separates' components of L's non-zero pattern (or coarser: joined sets stay joined), valid
  // while components_valid_.
  DisjointSets components_;
  bool components_valid_ = false;
};

// The block of a lower triangular matrix on rows and columns `support` (in order), with zeros
// above its diagonal; for either precision (CholeskyFactor::SingleLower's copy included).
template <typename Derived>
Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, Eigen::Dynamic> GatherLowerBlock(
    const Eigen::MatrixBase<Derived>& lower, const std::vector<int>& support) {
  const Eigen::Index s = static_cast<Eigen::Index>(support.size());
  Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, Eigen::Dynamic> block(s, s);
  for (Eigen::Index c = 0; c < s; ++c) {
    block.col(c).head(c).setZero();
    for (Eigen::Index r = c; r < s; ++r) block(r, c) = lower(support[r], support[c]);
  }
  return block;
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_CHOLESKY_FACTOR_H_
