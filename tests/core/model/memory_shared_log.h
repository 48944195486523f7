// A shared log in memory (core/model/shared_log.h) for tests of cluster mode: several engines in
// one process share it as nodes share a JetStream stream. Appends can be made to fail, with the
// record stored or not (an answer lost on the way back, or a request that never arrived).
#ifndef GRAPHBANDIT_TESTS_CORE_MODEL_MEMORY_SHARED_LOG_H_
#define GRAPHBANDIT_TESTS_CORE_MODEL_MEMORY_SHARED_LOG_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/base/sync.h"
#include "core/model/shared_log.h"

namespace graphbandit {

class MemorySharedLog : public SharedLog {
 public:
  absl::StatusOr<uint64_t> Append(absl::string_view payload, absl::string_view record_id) override {
    MutexLock lock(&mu_);
    if (record_id.empty()) return absl::InvalidArgumentError("empty record id");
    bool fail = false, store = true;
    if (failures_ > 0) {
      --failures_;
      fail = true;
      store = store_failed_;
    }
    uint64_t seq = 0;
    if (auto it = ids_.find(record_id); it != ids_.end()) {
      seq = it->second;
    } else if (store) {
      records_.push_back(Record{records_.size() + 1, std::string(record_id), std::string(payload)});
      seq = records_.size();
      ids_.emplace(std::string(record_id), seq);
      cv_.SignalAll();
    }
    ++appends_;
    if (fail) return absl::UnavailableError("injected: no answer from the shared log");
    return seq;
  }

  absl::StatusOr<uint64_t> LastSeq() override {
    MutexLock lock(&mu_);
    if (last_seq_failures_ > 0) {
      --last_seq_failures_;
      return absl::DeadlineExceededError("injected: the shared log did not answer in time");
    }
    return records_.size();
  }

  absl::StatusOr<std::unique_ptr<Reader>> Read(uint64_t first_seq) override {
    if (first_seq == 0) return absl::InvalidArgumentError("records start at 1");
    return std::unique_ptr<Reader>(new MemoryReader(this, first_seq));
  }

  // The next `count` appends fail with UNAVAILABLE; `stored`: the record is stored all the same.
  void FailAppends(int count, bool stored) {
    MutexLock lock(&mu_);
    failures_ = count;
    store_failed_ = stored;
  }
  // The next `count` LastSeq calls fail with DEADLINE_EXCEEDED (a cluster electing a leader).
  void FailLastSeq(int count) {
    MutexLock lock(&mu_);
    last_seq_failures_ = count;
  }
  std::vector<Record> Records() {
    MutexLock lock(&mu_);
    return records_;
  }
  int64_t appends() {
    MutexLock lock(&mu_);
    return appends_;
  }
  // Removes the records before `seq` (a retention limit): readers that need them get DATA_LOSS.
  void DropBefore(uint64_t seq) {
    MutexLock lock(&mu_);
    first_kept_ = seq;
  }

 private:
  class MemoryReader : public Reader {
   public:
    MemoryReader(MemorySharedLog* log, uint64_t next) : log_(log), next_(next) {}
    absl::StatusOr<Record> Next(absl::Duration timeout) override {
      MutexLock lock(&log_->mu_);
      if (next_ < log_->first_kept_) {
        return absl::DataLossError(absl::StrFormat("record %d is no longer in the log", next_));
      }
      if (!log_->cv_.WaitFor(&log_->mu_, timeout, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return log_->records_.size() >= next_;
          })) {
        return absl::DeadlineExceededError(absl::StrFormat("no record %d yet", next_));
      }
      return log_->records_[next_++ - 1];
    }

   private:
    MemorySharedLog* const log_;
    uint64_t next_;
  };

  Mutex mu_;
  CondVar cv_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> ids_ ABSL_GUARDED_BY(mu_);
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  int last_seq_failures_ ABSL_GUARDED_BY(mu_) = 0;
  bool store_failed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t appends_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t first_kept_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_TESTS_CORE_MODEL_MEMORY_SHARED_LOG_H_
