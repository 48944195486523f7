// Observations (point, user, reward) kept by a learner: all of them, or only the most recent
// `capacity` (a ring buffer), for bounded memory in long-running servers.
#ifndef GRAPHBANDIT_CORE_LEARNER_HISTORY_BUFFER_H_
#define GRAPHBANDIT_CORE_LEARNER_HISTORY_BUFFER_H_

#include <Eigen/Dense>
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace graphbandit {

class HistoryBuffer {
 public:
  struct Entry {
    Eigen::VectorXd point;
    int32_t user = 0;
    double reward = 0.0;
  };

  // capacity 0: unbounded.
  HistoryBuffer(int dim, int64_t capacity) : dim_(dim), capacity_(capacity) {
    if (capacity_ > 0) Reserve(capacity_);
  }

  int dim() const { return dim_; }
  int64_t capacity() const { return capacity_; }
  // Entries retained now.
  int64_t size() const { return size_; }
  // Entries ever appended.
  int64_t total() const { return total_; }

  // Appends; when full, the oldest entry is overwritten and, if `evicted` is given, copied out.
  // Returns true when an entry was evicted.
  bool Append(const Eigen::Ref<const Eigen::VectorXd>& point, int32_t user, double reward,
              Entry* evicted = nullptr) {
    ++total_;
    if (capacity_ == 0 || size_ < capacity_) {
      if (size_ == static_cast<int64_t>(users_.size())) Reserve(std::max<int64_t>(16, 2 * size_));
      Put(Physical(size_), point, user, reward);
      ++size_;
      return false;
    }
    if (evicted != nullptr) {
      evicted->point = points_.col(head_);
      evicted->user = users_[head_];
      evicted->reward = rewards_[head_];
    }
    Put(head_, point, user, reward);
    head_ = (head_ + 1) % capacity_;
    return true;
  }

  // Entry i, oldest first.
  auto point(int64_t i) const { return points_.col(Physical(i)); }
  int32_t user(int64_t i) const { return users_[Physical(i)]; }
  double reward(int64_t i) const { return rewards_[Physical(i)]; }

  // Exact serialisation (core/storage/state_coding.h). Entries live in physical slots 0..size()-1:
  // a ring buffer only moves its head once it is full. head() is the oldest entry's slot (always 0
  // without a capacity or before the ring is full). The slot order decides the contiguous runs
  // ForEachBlock visits, so it is saved and restored as is.
  int64_t head() const { return head_; }
  auto slot_point(int64_t slot) const { return points_.col(slot); }
  int32_t slot_user(int64_t slot) const { return users_[slot]; }
  double slot_reward(int64_t slot) const { return rewards_[slot]; }
  // Replaces the contents by points.cols() entries given in physical slot order, with the
  // oldest at slot `head` and `total` entries ever appended; the storage grows as if they had
  // been appended one by one. Returns false (buffer unchanged) if that is not a state this
  // buffer's dimension and capacity can reach.
  bool RestoreSlots(const Eigen::Ref<const Eigen::MatrixXd>& points,
                    const std::vector<int32_t>& users, const std::vector<double>& rewards,
                    int64_t head, int64_t total) {
    const int64_t size = points.cols();
    if (points.rows() != dim_ || static_cast<int64_t>(users.size()) != size ||
        static_cast<int64_t>(rewards.size()) != size || total < size) {
      return false;
    }
    if (capacity_ > 0) {
      if (size > capacity_ || head < 0 || head >= capacity_ || (head != 0 && size != capacity_)) {
        return false;
      }
    } else if (head != 0) {
      return false;
    }
    size_ = 0;
    head_ = 0;
    points_.resize(dim_, 0);
    users_.clear();
    rewards_.clear();
    if (capacity_ > 0) Reserve(capacity_);
    for (int64_t i = 0; i < size; ++i) Append(points.col(i), users[i], rewards[i]);
    head_ = head;
    total_ = total;
    return true;
  }

  // Multiplies every stored point by `factors`, coordinate by coordinate.
  void ScaleRows(const Eigen::Ref<const Eigen::VectorXd>& factors) {
    points_.leftCols(size_).array().colwise() *= factors.array();  // slots 0..size_-1 hold them
  }

  // Calls f(points (dim x len), users, rewards, len) over contiguous runs of at most `block`
  // entries, oldest first.
  template <typename F>
  void ForEachBlock(int64_t block, F&& f) const {
    ForEachBlockIn(0, size_, block, std::forward<F>(f));
  }
  // The same over entries [begin, end) (oldest first, 0 <= begin <= end <= size()); the runs
  // split where the ring wraps and every `block` entries from `begin`.
  template <typename F>
  void ForEachBlockIn(int64_t begin, int64_t end, int64_t block, F&& f) const {
    int64_t done = begin;
    while (done < end) {
      const int64_t start = Physical(done);
      const int64_t contiguous = std::min(end - done, Stored() - start);
      const int64_t len = std::min(block, contiguous);
      f(points_.middleCols(start, len), users_.data() + start, rewards_.data() + start, len);
      done += len;
    }
  }

 private:
  int64_t Stored() const { return static_cast<int64_t>(users_.size()); }
  int64_t Physical(int64_t i) const { return capacity_ > 0 ? (head_ + i) % capacity_ : i; }
  void Put(int64_t slot, const Eigen::Ref<const Eigen::VectorXd>& point, int32_t user,
           double reward) {
    points_.col(slot) = point;
    users_[slot] = user;
    rewards_[slot] = reward;
  }
  void Reserve(int64_t n) {
    Eigen::MatrixXd grown(dim_, n);
    grown.leftCols(size_) = points_.leftCols(size_);
    points_.swap(grown);
    users_.resize(n);
    rewards_.resize(n);
  }

  int dim_;
  int64_t capacity_;
  int64_t size_ = 0;
  int64_t total_ = 0;
  int64_t head_ = 0;  // oldest entry's slot (ring mode)
  Eigen::MatrixXd points_{dim_, 0};
  std::vector<int32_t> users_;
  std::vector<double> rewards_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_HISTORY_BUFFER_H_
