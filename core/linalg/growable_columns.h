// A d x n matrix that grows by appending columns (amortised O(d) per column).
#ifndef GRAPHBANDIT_CORE_LINALG_GROWABLE_COLUMNS_H_
#define GRAPHBANDIT_CORE_LINALG_GROWABLE_COLUMNS_H_

#include <Eigen/Dense>
#include <algorithm>

namespace graphbandit {

class GrowableColumns {
 public:
  explicit GrowableColumns(int rows = 0) : storage_(rows, 0) {}

  int rows() const { return static_cast<int>(storage_.rows()); }
  int cols() const { return cols_; }

  void Append(const Eigen::Ref<const Eigen::VectorXd>& column) {
    if (cols_ == storage_.cols()) {
      Eigen::MatrixXd grown(storage_.rows(), std::max<Eigen::Index>(16, 2 * storage_.cols()));
      grown.leftCols(cols_) = storage_.leftCols(cols_);
      storage_.swap(grown);
    }
    storage_.col(cols_++) = column;
  }
  void Clear() { cols_ = 0; }
  // Keeps the first n columns.
  void Truncate(int n) { cols_ = n < cols_ ? n : cols_; }
  // Keeps only the listed columns, in the given order.
  template <typename IndexRange>
  void Select(const IndexRange& keep) {
    Eigen::MatrixXd kept(storage_.rows(), std::max<Eigen::Index>(16, storage_.cols()));
    int n = 0;
    for (int index : keep) kept.col(n++) = storage_.col(index);
    storage_.swap(kept);
    cols_ = n;
  }

  // Multiplies every column by `factors`, coordinate by coordinate.
  void ScaleRows(const Eigen::Ref<const Eigen::VectorXd>& factors) {
    storage_.leftCols(cols_).array().colwise() *= factors.array();
  }

  auto view() const { return storage_.leftCols(cols_); }
  auto col(int j) const { return storage_.col(j); }

 private:
  Eigen::MatrixXd storage_;
  int cols_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_GROWABLE_COLUMNS_H_
