// The Nystrom posterior's scoring as one dense product per request (the decisions' hot path).
//
// With the notation of nystrom_math.h, the variance at s is
//   lambda kz^T M^-1 kz + k_ss - kz^T K_ZZ^-1 kz  =  k_ss - kz^T B kz,   B = K_ZZ^-1 - lambda M^-1,
// so a request for C points needs kz (m x C, the kernel), one product of B's upper triangle with
// kz (about m^2 C / 2 multiply-adds, half those of the full m x m by m x C product, which replaced
// two triangular solves that ran far below the machine's product rate) and column dot products. B
// is positive semi-definite (M >= lambda K_ZZ), and the variance is clamped at zero against
// round-off. Only B's upper triangle is kept: every product, fold and growth step reads and
// writes that triangle alone.
//
// The writer keeps B current without forming it again after every reward:
//  * B = B0 + sum_i s_i u_i u_i^T, where B0 (m x m) is immutable once published, and the u_i (at
//    most fold_rank() of them) are appended in place to a column buffer that published scorers
//    share (each reads only the columns that existed when it was published, which the writer
//    never changes). Publishing therefore copies no m x m matrix.
//  * A rank-one change M +- v v^T (a reward learned, an observation forgotten) changes
//    lambda M^-1 by -+ lambda x x^T / (1 +- v^T x), x = M^-1 v (Sherman-Morrison), i.e. adds
//    u u^T with u = sqrt(lambda / (1 +- v^T x)) x and sign +-1 to B. A batch M + V V^T of k
//    rewards adds U U^T with U U^T = lambda X (I + V^T X)^-1 X^T, X = M^-1 V (Woodbury): k
//    columns at once. The learner reads U off the Householder reflections of its factor's
//    rank-k update (U = sqrt(lambda) L'^-T q21^T q22^-T, CholeskyFactor::Reflected; AddCorrection);
//    RankUpdate forms it from X. Either way it comes from the exact Cholesky factor, so errors do
//    not compound from one update to the next.
//  * When the buffer is full, B0 + U S U^T becomes the next B0 (a symmetric rank-r update of the
//    upper triangle, O(m^2 r), once per r updates), in place when no published scorer holds B0.
//  * Dictionary growth appends rows to both factors: Grow borders B0 with the new points'
//    blocks, computed from the new rows (O(m^2 k) for k points), and keeps the corrections.
//  * Every max(kExactEvery, 32 m) updates (the joined points count), and whenever M or K_ZZ change
//    otherwise (a refit, a graph edit, a fallback refactor), B0 is formed again from the two
//    factors (O(m^3), or block by block on their components: Rebuild), and the corrections are
//    dropped.
// The schedule depends only on the sequence of updates, and snapshots store B0 and the
// corrections, so a restored learner scores bit-identically to the one that saved it.
//
// Single precision. Every B0 has a single-precision copy of its upper triangle, and every
// correction column one too. Scoring in single precision halves the memory the product streams
// and doubles the multiply-adds per vector instruction. Whether that keeps the answers is a
// property of the state, not of the code: B's entries grow with the conditioning of K_ZZ, and
// the variance is a difference k_ss - kz^T B kz that cancels most near the dictionary. The
// owner therefore checks each new B0 on probe points (SingleStddevError: the same request
// scored both ways) and publishes single-precision scoring only while the two agree
// (set_single); otherwise scorers use double precision.
#ifndef GRAPHBANDIT_CORE_LINALG_VARIANCE_FORM_H_
#define GRAPHBANDIT_CORE_LINALG_VARIANCE_FORM_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/kernel/multi_user_kernel.h"
#include "core/storage/coding.h"

namespace graphbandit {

class VarianceForm {
 public:
  // Low-rank terms s_i u_i u_i^T: columns of `u` (m x fold rank) with signs, and `u` in single
  // precision (the columns that exist).
  struct Corrections {
    Eigen::MatrixXd u;
    Eigen::VectorXd sign;
    Eigen::MatrixXf u_single;
  };
  // What a published scorer holds: shared, never modified for the columns [0, rank).
  struct Snapshot {
    // B0's upper triangle; null when the snapshot scores in single precision (the writer may
    // then fold into its B0 in place) or when there is no regression.
    std::shared_ptr<const Eigen::MatrixXd> base;
    std::shared_ptr<const Eigen::MatrixXf> base_single;  // B0's upper triangle, single precision
    std::shared_ptr<const Corrections> corrections;
    int rank = 0;
    int m = 0;  // 0: no regression
    bool single = false;
    int size() const { return m; }
  };

  // Exact B0 = K_ZZ^-1 - lambda M^-1 from the lower Cholesky factors of K_ZZ and M (same size,
  // possibly 0), dropping every correction. O(m^3), or the sum of the cubes of the blocks when
  // the factors' patterns fall into groups of at most half the points (disjoint_sets.h).
  void Rebuild(const Eigen::Ref<const Eigen::MatrixXd>& chol_zz,
               const Eigen::Ref<const Eigen::MatrixXd>& chol_m, double ridge);
  void Clear();

  // Grows the form by the points that joined the regression since it was last current: the
  // arguments are the lower factors of the grown K_ZZ and M (n x n), whose leading size() x
  // size() blocks are the factors the form is current for (the growth only appended rows). With
  // L = [L11 0; L21 L22], the inverse of L L^T is [A + P P^T, P N; N^T P^T, N^T N], A the inverse
  // of L11 L11^T (the form has it), N = L22^-1 and P = -L11^-T L21^T N^T: O(n^2 k) for k new
  // points instead of Rebuild's O(n^3). The corrections stay (padded with zeros); the k new
  // points count as k updates towards the next exact rebuild. Rebuilds instead when the form is
  // empty or larger than the factors, or when the two factors differ in size.
  void Grow(const Eigen::Ref<const Eigen::MatrixXd>& chol_zz,
            const Eigen::Ref<const Eigen::MatrixXd>& chol_m, double ridge);

  // Records M <- M + sign v v^T, given x = M^-1 v and v^T x from the factor before the change.
  // Returns false when 1 + sign v^T x is not positive (a downdate that round-off made
  // infeasible): the caller must Rebuild from its factors.
  bool RankOne(const Eigen::Ref<const Eigen::VectorXd>& x, double v_dot_x, double ridge,
               double sign);
  // Records M <- M + V V^T for k columns at once, given X = M^-1 V (m x k) and V^T X (k x k)
  // from the factor before the change. Returns false when I + V^T X is not numerically positive
  // definite (round-off; the caller must Rebuild). Counts k updates. (The learner reads the
  // correction off its factor's update and calls AddCorrection; this is the form's tests'
  // reference way in.)
  bool RankUpdate(const Eigen::Ref<const Eigen::MatrixXd>& x,
                  const Eigen::Ref<const Eigen::MatrixXd>& v_dot_x, double ridge);
  // The same change given its correction's factor: B <- B + U U^T, where
  // U U^T = lambda X (I + V^T X)^-1 X^T (e.g. from the factor's reflections after the change,
  // CholeskyFactor::Reflected). Counts U's columns as updates.
  void AddCorrection(const Eigen::Ref<const Eigen::MatrixXd>& u);

  // How far single-precision scoring moves the standard deviation at the probe points: kz are
  // their kernel columns (size() x p), k_ss their prior variances. The largest
  // |stddev_single - stddev_double| / sqrt(k_ss) over the probes, with B as it is now.
  double SingleStddevError(const Eigen::Ref<const Eigen::MatrixXd>& kz,
                           const Eigen::Ref<const Eigen::VectorXd>& k_ss) const;
  // Whether snapshots score in single precision (false until the owner says so; Rebuild, Grow,
  // Clear and Load reset it: such a B0 must be checked first). base_version() changes with every
  // new B0 (folds included), rebuild_version() only with those four, so that the owner knows
  // when to check.
  void set_single(bool single) { single_ = single && base_ != nullptr; }
  bool single() const { return single_; }
  uint64_t base_version() const { return base_version_; }
  uint64_t rebuild_version() const { return rebuild_version_; }
  // Whether enough updates accumulated since the last exact rebuild that the owner should
  // rebuild now (every kExactEvery updates or kExactEveryPerPoint m, whichever is more).
  bool ExactDue() const;

  Snapshot snapshot() const;
  int size() const { return base_ == nullptr ? 0 : static_cast<int>(base_->rows()); }
  int rank() const { return rank_; }
  int fold_rank() const;

  // Exact serialisation (core/storage/state_coding.h conventions).
  void Save(storage::Encoder* out) const;
  // Reads what Save wrote; `size` is the regression size the owner restored. False when
  // malformed (the form is then unchanged).
  bool Load(storage::Decoder* in, int size);

  static constexpr int64_t kExactEvery = 1024;
  // The exact rebuild costs O(m^3) (about 4 m^3 flops): every 32 m updates it adds about m^2 / 8
  // per update, and 32 m folds of rounding stay far below the corrections' own accuracy
  // (variance_form_test: a long run against a fresh inverse).
  static constexpr int64_t kExactEveryPerPoint = 32;
  // Single precision is published while SingleStddevError stays below this.
  static constexpr double kSingleTolerance = 1e-3;

 private:
  void Fold();
  // After B0 changed: its single-precision copy and a new version; `structural` (not a fold of
  // corrections): a new rebuild version too, and single precision off until checked. `rows`,
  // when known (must be sorted): the change was an update on those rows alone, so only the
  // entries among them changed. The copy is made in the buffer of an earlier copy that no snapshot
  // holds any more (SingleBuffers), bringing up to date only the entries the changes since
  // touched: an m x m rounding and a fresh allocation per batch otherwise.
  void BaseChanged(bool structural = true, const std::vector<int>* rows = nullptr);
  // B0 to modify: the current one when no snapshot shares it, else a copy.
  Eigen::MatrixXd* WritableBase();
  // Room for `columns` more correction columns (folding or starting a fresh buffer).
  void MakeRoom(int columns);

  // Shared with snapshots that score in double precision (copied before a change then).
  std::shared_ptr<Eigen::MatrixXd> base_;
  std::shared_ptr<const Eigen::MatrixXf> base_single_;
  // Where single-precision copies go when their last holder drops them: at most one is kept,
  // the newest, with the base version it matched. Its mutex orders the readers' last reads of a
  // copy before the writer's reuse. The versions are the form's, so a copy of the form starts
  // an empty shelf; copies made before it return to the shelf they came from, and a move takes
  // the shelf along with the versions.
  struct SingleBuffers {
    struct Shelf {
      std::mutex mu;
      std::unique_ptr<Eigen::MatrixXf> kept;
      uint64_t version = 0;
    };
    std::shared_ptr<Shelf> shelf = std::make_shared<Shelf>();
    SingleBuffers() = default;
    SingleBuffers(const SingleBuffers&) {}
    SingleBuffers& operator=(const SingleBuffers&) {
      shelf = std::make_shared<Shelf>();
      return *this;
    }
    SingleBuffers(SingleBuffers&&) = default;
    SingleBuffers& operator=(SingleBuffers&&) = default;
  };
  SingleBuffers single_buffers_;
  // The rows each of the last base versions changed (from the version before), newest last,
  // for bringing a kept copy up to date; an entry without rows: unknown (a structural change).
  struct BaseChange {
    uint64_t version = 0;
    bool rows_known = false;
    std::vector<int> rows;
  };
  std::vector<BaseChange> recent_changes_;
  static constexpr size_t kRecentChanges = 4;
  std::shared_ptr<Corrections> corrections_;
  int rank_ = 0;
  int64_t updates_since_exact_ = 0;
  bool single_ = false;
  uint64_t base_version_ = 0;
  uint64_t rebuild_version_ = 0;
};

// Mean and standard deviation at `points` (all for `user`) through the form: the basis points
// (d x m), their squared norms, their users, the weights M^-1 Gamma and the prior mean. The mean
// and the kernel are computed in double precision, the variance's product in the form's
// precision. Uses a per-thread workspace that grows to the largest request seen and is then
// reused: no allocation but for `mean` and `stddev` when their size changes.
void ScoreWithVarianceForm(const MultiUserKernel& kernel,
                           const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                           const Eigen::Ref<const Eigen::VectorXd>& basis_squared_norms,
                           const std::vector<int32_t>& basis_users,
                           const VarianceForm::Snapshot& form, const Eigen::VectorXd& weights,
                           double prior_mean, int32_t user,
                           const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
                           Eigen::VectorXd* stddev);

// The mean alone, with the same arithmetic as ScoreWithVarianceForm's (bit for bit): what
// learning needs for a reward baseline's prediction, without the O(m^2) variance.
void MeanWithVarianceForm(const MultiUserKernel& kernel,
                          const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                          const Eigen::Ref<const Eigen::VectorXd>& basis_squared_norms,
                          const std::vector<int32_t>& basis_users, Eigen::Index m,
                          const Eigen::VectorXd& weights, double prior_mean, int32_t user,
                          const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_VARIANCE_FORM_H_
