// Exact binary coding of learner state (snapshots, Learner::SaveState / LoadState).
//
// A restarted server restores a learner from a snapshot and must then score and learn exactly
// as the original would have, to the last bit. So every double is stored as its bit pattern
// (never recomputed from the history), together with the counters, the random-number state and
// every internal layout that later floating-point arithmetic depends on: the physical slot order
// of a ring-buffer history (ForEachBlock's contiguous runs) and the allocated capacity of a
// Cholesky factor (its column stride). Kernels and options are not part of the state: the owner
// constructs the learner the same way and then restores it.
//
// Frame (what SaveState appends; coding.h primitives):
//   u8       tag (LearnerStateTag: which learner wrote it)
//   u8       format version of that learner's payload
//   string   payload (varint length, bytes)
//   fixed32  Mask(CRC-32C of tag, version and payload)
// The CRC turns any damage to the saved bytes (not only structural damage) into DataLoss
// instead of a silently different posterior, and is checked before the payload is parsed.
//
// Payload pieces:
//   count     varint64 of a non-negative integer
//   user      varint64 of a user index (0 <= user <= INT32_MAX)
//   doubles   coding.h doubles: count, then that many doubles
//   matrix    count rows, count cols, rows * cols doubles (column-major)
//   vector    count size, size doubles
//   lower     count n, n (n + 1) / 2 doubles: the lower triangle, column by column
//   cholesky  count size, count capacity, then the lower triangle of matrix() (size columns)
//   rng       4 fixed64: the xoshiro256** state words
//   history   count capacity, count dim, count size, count total, count head, then `size`
//             entries in PHYSICAL SLOT order (slots 0..size-1; see HistoryBuffer::head), each
//             dim doubles (the point), user, double (the reward)
//   columns   a matrix (GrowableColumns::view())
//
// Every Get* checks a length or count against the bytes remaining before allocating anything
// sized by it, so a damaged or hostile input costs at most memory proportional to its size
// (Cholesky storage: to a capacity bound the learner derives from trusted options and sizes).
// Get* return false on malformed input; learners report that as DataLoss.
#ifndef GRAPHBANDIT_CORE_STORAGE_STATE_CODING_H_
#define GRAPHBANDIT_CORE_STORAGE_STATE_CODING_H_

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/base/random.h"
#include "core/learner/history_buffer.h"
#include "core/linalg/cholesky_factor.h"
#include "core/linalg/growable_columns.h"
#include "core/storage/coding.h"
#include "core/storage/crc32c.h"

namespace graphbandit {

// Which learner wrote a state frame. Values are part of the snapshot format: never reuse one.
enum class LearnerStateTag : uint8_t {
  kUnsupported = 0,  // written by learners without snapshot support; never accepted
  kNystrom = 1,
  kExactGp = 2,
  kLinearUcb = 3,
  kBatchedNystrom = 4,
  kSemiParametric = 5,
};

inline absl::string_view LearnerStateTagName(uint8_t tag) {
  switch (static_cast<LearnerStateTag>(tag)) {
    case LearnerStateTag::kUnsupported:
      return "unsupported";
    case LearnerStateTag::kNystrom:
      return "nystrom";
    case LearnerStateTag::kExactGp:
      return "exact_gp";
    case LearnerStateTag::kLinearUcb:
      return "linear_ucb";
    case LearnerStateTag::kBatchedNystrom:
      return "batched_nystrom";
    case LearnerStateTag::kSemiParametric:
      return "semi_parametric";
  }
  return "unknown";
}

namespace state_coding_internal {

inline uint32_t FrameCrc(uint8_t tag, uint8_t version, absl::string_view payload) {
  const char header[2] = {static_cast<char>(tag), static_cast<char>(version)};
  return storage::Mask(
      storage::Crc32cExtend(storage::Crc32cExtend(0, header, 2), payload.data(), payload.size()));
}

// True when a x b doubles fit in the decoder's remaining bytes (no overflow).
inline bool DoublesFit(const storage::Decoder& in, uint64_t a, uint64_t b) {
  const uint64_t available = in.remaining() / sizeof(double);
  return a == 0 || b <= available / a;
}

}  // namespace state_coding_internal

// DataLoss("malformed <learner> state: <what>").
inline absl::Status MalformedState(absl::string_view learner, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed ", learner, " state: ", what));
}

// Appends a frame around `payload`.
inline void PutStateFrame(storage::Encoder* out, LearnerStateTag tag, uint8_t version,
                          absl::string_view payload) {
  const uint8_t t = static_cast<uint8_t>(tag);
  out->Reserve(payload.size() + 16);  // one allocation for a payload of megabytes
  out->PutU8(t);
  out->PutU8(version);
  out->PutString(payload);
  out->PutFixed32(state_coding_internal::FrameCrc(t, version, payload));
}

// The frame PutStateFrame writes, byte for byte, with the payload encoded by `encode(out)`
// straight into `out` rather than into a buffer of its own that is then copied: for a learner
// at m = 1,000 that buffer is tens of megabytes, faulted in and filled twice on the writer
// thread. `encode` runs twice, first on a counting encoder for the length, and must write
// the same bytes both times (an encoding of state that does not change meanwhile does).
template <typename Encode>
void PutStateFrameOf(storage::Encoder* out, LearnerStateTag tag, uint8_t version,
                     const Encode& encode) {
  storage::Encoder counter = storage::Encoder::Counting();
  encode(&counter);
  const size_t length = counter.size();
  const uint8_t t = static_cast<uint8_t>(tag);
  out->Reserve(length + 16);  // one allocation for a payload of megabytes
  out->PutU8(t);
  out->PutU8(version);
  out->PutVarint64(length);
  const size_t start = out->size();
  encode(out);
  if (out->size() - start != length) {
    // A frame whose length lies would make the snapshot unreadable: stop rather than write it.
    std::fprintf(stderr, "PutStateFrameOf: %s state encoded to %zu bytes, counted %zu\n",
                 std::string(LearnerStateTagName(t)).c_str(), out->size() - start, length);
    std::abort();
  }
  const absl::string_view payload =
      out->counting() ? absl::string_view() : absl::string_view(out->data()).substr(start);
  out->PutFixed32(state_coding_internal::FrameCrc(t, version, payload));
}

// Reads a frame written with `tag` and a version in [oldest, version] and hands out its
// payload, checksum verified, and the version it was written with. DataLoss on truncation,
// another tag, another version or a checksum mismatch.
inline absl::Status GetStateFrame(storage::Decoder* in, LearnerStateTag tag, uint8_t version,
                                  std::string* payload, uint8_t oldest = 0,
                                  uint8_t* written = nullptr) {
  if (oldest == 0) oldest = version;
  const absl::string_view want = LearnerStateTagName(static_cast<uint8_t>(tag));
  uint8_t got_tag = 0, got_version = 0;
  if (!in->GetU8(&got_tag)) return absl::DataLossError(absl::StrCat(want, " state: truncated"));
  if (got_tag != static_cast<uint8_t>(tag)) {
    return absl::DataLossError(absl::StrFormat("expected a %s learner state, found tag %d (%s)",
                                               want, got_tag, LearnerStateTagName(got_tag)));
  }
  if (!in->GetU8(&got_version)) {
    return absl::DataLossError(absl::StrCat(want, " state: truncated"));
  }
  if (got_version < oldest || got_version > version) {
    return absl::DataLossError(
        absl::StrFormat("%s state has format version %d; this build reads versions %d to %d", want,
                        got_version, oldest, version));
  }
  if (written != nullptr) *written = got_version;
  std::string bytes;
  uint32_t crc = 0;
  if (!in->GetString(&bytes) || !in->GetFixed32(&crc)) {
    return absl::DataLossError(absl::StrCat(want, " state: truncated"));
  }
  if (crc != state_coding_internal::FrameCrc(got_tag, got_version, bytes)) {
    return absl::DataLossError(absl::StrCat(want, " state: checksum mismatch"));
  }
  *payload = std::move(bytes);
  return absl::OkStatus();
}

// Non-negative counts.
inline void PutCount(storage::Encoder* out, int64_t n) {
  out->PutVarint64(static_cast<uint64_t>(n));
}
inline bool GetCount(storage::Decoder* in, int64_t* n,
                     int64_t max = std::numeric_limits<int64_t>::max()) {
  uint64_t v = 0;
  if (!in->GetVarint64(&v) || v > static_cast<uint64_t>(max)) return false;
  *n = static_cast<int64_t>(v);
  return true;
}

// Registered user indices (>= 0).
inline void PutUser(storage::Encoder* out, int32_t user) {
  out->PutVarint64(static_cast<uint64_t>(static_cast<uint32_t>(user)));
}
inline bool GetUser(storage::Decoder* in, int32_t* user) {
  int64_t v = 0;
  if (!GetCount(in, &v, std::numeric_limits<int32_t>::max())) return false;
  *user = static_cast<int32_t>(v);
  return true;
}

inline void PutUsers(storage::Encoder* out, const std::vector<int32_t>& users) {
  PutCount(out, static_cast<int64_t>(users.size()));
  for (int32_t u : users) PutUser(out, u);
}
// At most max_count users; each takes at least one byte, which bounds the allocation.
inline bool GetUsers(storage::Decoder* in, int64_t max_count, std::vector<int32_t>* users) {
  int64_t n = 0;
  if (!GetCount(in, &n, max_count) || static_cast<uint64_t>(n) > in->remaining()) return false;
  std::vector<int32_t> result(static_cast<size_t>(n));
  for (int32_t& u : result) {
    if (!GetUser(in, &u)) return false;
  }
  *users = std::move(result);
  return true;
}

inline void PutDoubleVector(storage::Encoder* out, const std::vector<double>& values) {
  out->PutDoubles(values.data(), values.size());
}
inline bool GetDoubleVector(storage::Decoder* in, int64_t max_count, std::vector<double>* values) {
  return in->GetDoubles(values, static_cast<size_t>(max_count));
}

inline void PutMatrix(storage::Encoder* out, const Eigen::Ref<const Eigen::MatrixXd>& m) {
  PutCount(out, m.rows());
  PutCount(out, m.cols());
  if (m.rows() == 0) return;
  out->Reserve(static_cast<size_t>(m.rows() * m.cols()) * sizeof(double));
  for (Eigen::Index j = 0; j < m.cols(); ++j) {
    out->PutRawDoubles(m.data() + j * m.outerStride(), static_cast<size_t>(m.rows()));
  }
}
inline bool GetMatrix(storage::Decoder* in, Eigen::MatrixXd* m) {
  int64_t rows = 0, cols = 0;
  constexpr int64_t kMaxIndex = std::numeric_limits<int>::max();
  if (!GetCount(in, &rows, kMaxIndex) || !GetCount(in, &cols, kMaxIndex) ||
      !state_coding_internal::DoublesFit(*in, rows, cols)) {
    return false;
  }
  // An empty matrix's other extent is bounded too (callers loop over it): by the input, or by
  // 2^20, which a model's dimensions stay under. Bounding it by the input alone refused a true
  // state: an empty dictionary of 128-dimensional points near the end of a snapshot.
  if ((rows == 0 || cols == 0) &&
      static_cast<uint64_t>(rows + cols) > std::max<uint64_t>(in->remaining(), 1u << 20)) {
    return false;
  }
  Eigen::MatrixXd result(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j) {
    for (Eigen::Index i = 0; i < rows; ++i) {
      if (!in->GetDouble(&result(i, j))) return false;
    }
  }
  *m = std::move(result);
  return true;
}

inline void PutVector(storage::Encoder* out, const Eigen::Ref<const Eigen::VectorXd>& v) {
  out->PutDoubles(v.data(), static_cast<size_t>(v.size()));
}
inline bool GetVector(storage::Decoder* in, Eigen::VectorXd* v) {
  std::vector<double> values;
  if (!in->GetDoubles(&values, std::numeric_limits<int>::max())) return false;
  *v = Eigen::Map<const Eigen::VectorXd>(values.data(), static_cast<Eigen::Index>(values.size()));
  return true;
}

namespace state_coding_internal {

inline void PutLowerBody(storage::Encoder* out, const Eigen::Ref<const Eigen::MatrixXd>& m) {
  // Column j's entries from the diagonal down are contiguous (column-major, inner stride 1).
  const Eigen::Index n = m.rows();
  out->Reserve(static_cast<size_t>(n * (n + 1) / 2) * sizeof(double));
  for (Eigen::Index j = 0; j < m.cols(); ++j) {
    if (j < n) out->PutRawDoubles(m.data() + j * m.outerStride() + j, static_cast<size_t>(n - j));
  }
}
// Reads the lower triangle of an n x n block into the top-left corner of *dst (already at
// least n x n); the caller has checked that the doubles fit.
inline bool GetLowerBody(storage::Decoder* in, int64_t n, Eigen::MatrixXd* dst) {
  for (Eigen::Index j = 0; j < n; ++j) {
    for (Eigen::Index i = j; i < n; ++i) {
      if (!in->GetDouble(&(*dst)(i, j))) return false;
    }
  }
  return true;
}
inline bool LowerFits(const storage::Decoder& in, int64_t n) {
  // n (n + 1) / 2 doubles, without overflow: (n + 1) / 2 x n or n / 2 x (n + 1).
  return n % 2 == 0 ? DoublesFit(in, n / 2, n + 1) : DoublesFit(in, (n + 1) / 2, n);
}

}  // namespace state_coding_internal

// The lower triangle of a square matrix (the strictly upper part is not stored).
inline void PutLowerTriangle(storage::Encoder* out, const Eigen::Ref<const Eigen::MatrixXd>& m) {
  PutCount(out, m.rows());
  state_coding_internal::PutLowerBody(out, m);
}
// *m becomes n x n with the stored lower triangle and ZEROS above the diagonal.
inline bool GetLowerTriangle(storage::Decoder* in, Eigen::MatrixXd* m) {
  int64_t n = 0;
  if (!GetCount(in, &n, std::numeric_limits<int>::max()) ||
      !state_coding_internal::LowerFits(*in, n)) {
    return false;
  }
  Eigen::MatrixXd result = Eigen::MatrixXd::Zero(n, n);
  if (!state_coding_internal::GetLowerBody(in, n, &result)) return false;
  *m = std::move(result);
  return true;
}

// A Cholesky factor: its size, its allocated capacity and the lower triangle of matrix().
inline void PutCholesky(storage::Encoder* out, const CholeskyFactor& factor) {
  PutCount(out, factor.size());
  PutCount(out, factor.capacity());
  state_coding_internal::PutLowerBody(out, factor.matrix());
}
// Fails unless size <= capacity <= max_capacity and the triangle fits in the input.
inline bool GetCholesky(storage::Decoder* in, int64_t max_capacity, CholeskyFactor* factor) {
  int64_t size = 0, capacity = 0;
  if (max_capacity > std::numeric_limits<int>::max())
    max_capacity = std::numeric_limits<int>::max();
  if (!GetCount(in, &size, std::numeric_limits<int>::max()) ||
      !GetCount(in, &capacity, max_capacity) || size > capacity ||
      !state_coding_internal::LowerFits(*in, size)) {
    return false;
  }
  Eigen::MatrixXd storage = Eigen::MatrixXd::Zero(capacity, capacity);
  if (!state_coding_internal::GetLowerBody(in, size, &storage)) return false;
  CholeskyFactor result;
  if (!result.Restore(std::move(storage), static_cast<int>(size)).ok()) return false;
  *factor = std::move(result);
  return true;
}

inline void PutRngState(storage::Encoder* out, const Rng::State& state) {
  for (uint64_t word : state) out->PutFixed64(word);
}
// Rejects the all-zero state, which xoshiro256** never reaches from a seed and never leaves.
inline bool GetRngState(storage::Decoder* in, Rng::State* state) {
  Rng::State result{};
  for (uint64_t& word : result) {
    if (!in->GetFixed64(&word)) return false;
  }
  if (result[0] == 0 && result[1] == 0 && result[2] == 0 && result[3] == 0) return false;
  *state = result;
  return true;
}

// A history buffer with its entries in their physical slots.
inline void PutHistory(storage::Encoder* out, const HistoryBuffer& history) {
  PutCount(out, history.capacity());
  PutCount(out, history.dim());
  PutCount(out, history.size());
  PutCount(out, history.total());
  PutCount(out, history.head());
  for (int64_t slot = 0; slot < history.size(); ++slot) {
    const auto point = history.slot_point(slot);  // a column: contiguous
    out->PutRawDoubles(point.data(), static_cast<size_t>(point.size()));
    PutUser(out, history.slot_user(slot));
    out->PutDouble(history.slot_reward(slot));
  }
}
// Restores into *history, which must have been constructed with the saved dimension and
// capacity (they are checked). Points and rewards must be finite (Observe guarantees it).
inline bool GetHistory(storage::Decoder* in, HistoryBuffer* history) {
  int64_t capacity = 0, dim = 0, size = 0, total = 0, head = 0;
  if (!GetCount(in, &capacity) || capacity != history->capacity() || !GetCount(in, &dim) ||
      dim != history->dim() || !GetCount(in, &size) || !GetCount(in, &total) ||
      !GetCount(in, &head)) {
    return false;
  }
  // Each entry takes dim + 1 doubles and at least one byte for the user.
  const uint64_t entry_bytes = (static_cast<uint64_t>(dim) + 1) * sizeof(double) + 1;
  if (size > std::numeric_limits<int>::max() ||
      static_cast<uint64_t>(size) > in->remaining() / entry_bytes) {
    return false;
  }
  Eigen::MatrixXd points(dim, size);
  std::vector<int32_t> users(static_cast<size_t>(size));
  std::vector<double> rewards(static_cast<size_t>(size));
  for (int64_t slot = 0; slot < size; ++slot) {
    for (int64_t i = 0; i < dim; ++i) {
      if (!in->GetDouble(&points(i, slot)) || !std::isfinite(points(i, slot))) return false;
    }
    if (!GetUser(in, &users[slot]) || !in->GetDouble(&rewards[slot]) ||
        !std::isfinite(rewards[slot])) {
      return false;
    }
  }
  return history->RestoreSlots(points, users, rewards, head, total);
}

inline void PutColumns(storage::Encoder* out, const GrowableColumns& columns) {
  PutMatrix(out, columns.view());
}
// Restores into *columns, whose row count must match the saved one.
inline bool GetColumns(storage::Decoder* in, GrowableColumns* columns) {
  Eigen::MatrixXd m;
  if (!GetMatrix(in, &m) || m.rows() != columns->rows()) return false;
  GrowableColumns result(columns->rows());
  for (Eigen::Index j = 0; j < m.cols(); ++j) result.Append(m.col(j));
  *columns = std::move(result);
  return true;
}

// The (point, user, reward) history that the exact GP and the linear learners store alike.
// Returns null on success, else a description of what was malformed.
inline const char* GetPointHistory(storage::Decoder* in, GrowableColumns* points,
                                   std::vector<int32_t>* users, std::vector<double>* rewards) {
  if (!GetColumns(in, points)) return "history points";
  const int64_t t = points->cols();
  if (!points->view().allFinite()) return "non-finite history point";
  if (!GetUsers(in, t, users) || static_cast<int64_t>(users->size()) != t) return "history users";
  if (!GetDoubleVector(in, t, rewards) || static_cast<int64_t>(rewards->size()) != t) {
    return "history rewards";
  }
  for (double y : *rewards) {
    if (!std::isfinite(y)) return "non-finite reward";
  }
  return nullptr;
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_STORAGE_STATE_CODING_H_
