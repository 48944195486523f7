// Little-endian binary encoding for log record payloads.
//
// Encoding rules (the bytes are part of the on-disk format, so they must never
// change meaning):
//   u8        1 byte
//   fixed32   4 bytes, little-endian
//   fixed64   8 bytes, little-endian
//   varint64  LEB128: 7 bits per byte, low groups first, high bit set on every
//             byte but the last; at most 10 bytes
//   double    the IEEE-754 bit pattern as fixed64 (NaN payloads and -0.0 are
//             preserved exactly)
//   string    varint64 length, then the bytes
//   doubles   varint64 count, then count doubles
//
// Encoder and Decoder are ordinary value types with no shared state; one
// instance must not be used from two threads at once.

#ifndef GRAPHBANDIT_CORE_STORAGE_CODING_H_
#define GRAPHBANDIT_CORE_STORAGE_CODING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace graphbandit::storage {

// Longest valid varint64 encoding.
inline constexpr size_t kMaxVarint64Bytes = 10;

// Appends encoded values to an internal buffer. Never fails.
class Encoder {
 public:
  Encoder() = default;
  // An empty encoder that writes into `buffer`'s memory: its contents are dropped, its capacity
  // kept. A large encoding repeated often (a model's snapshots) reuses the pages it already has
  // instead of faulting in fresh ones each time.
  explicit Encoder(std::string buffer) : buf_(std::move(buffer)) { buf_.clear(); }
  // An encoder that keeps nothing and only counts the bytes it is given (size()): an encoding
  // run through it first tells its length, so that it can then be written straight into a
  // length-prefixed frame instead of being built apart and copied (PutStateFrameOf).
  static Encoder Counting() {
    Encoder e;
    e.counting_ = true;
    return e;
  }

  void PutU8(uint8_t v);
  void PutFixed32(uint32_t v);
  void PutFixed64(uint64_t v);
  void PutVarint64(uint64_t v);
  void PutDouble(double v);
  void PutString(absl::string_view s);
  // `values` may be null only if n == 0.
  void PutDoubles(const double* values, size_t n);
  // The same n doubles without the count in front (the reader knows n). `values` may be null
  // only if n == 0.
  void PutRawDoubles(const double* values, size_t n);

  // Allocates room for `n` more bytes at once.
  // Grows geometrically, so that reserving piece by piece stays linear.
  void Reserve(size_t n) {
    if (counting_) return;
    if (buf_.capacity() - buf_.size() < n) {
      buf_.reserve(std::max(buf_.size() + n, 2 * buf_.capacity()));
    }
  }

  // The bytes so far (empty for a counting encoder).
  const std::string& data() const { return buf_; }
  size_t size() const { return counting_ ? counted_ : buf_.size(); }
  bool counting() const { return counting_; }
  // Hands over the encoded bytes and leaves the encoder empty and reusable.
  std::string Release();

 private:
  void Append(const char* bytes, size_t n) {
    if (counting_) {
      counted_ += n;
    } else {
      buf_.append(bytes, n);
    }
  }

  std::string buf_;
  bool counting_ = false;
  size_t counted_ = 0;
};

// Reads values back from bytes that may be truncated, corrupted or hostile.
//
// Guarantees, for any input:
//   * no undefined behaviour and no reads outside the input;
//   * every Get* is all-or-nothing: on failure it returns false, leaves the
//     read position where it was and leaves *out unmodified;
//   * no allocation is sized by a length or count field until that field has
//     been checked against the bytes actually remaining, so memory use is
//     bounded by the input size.
// The Decoder does not own the bytes: the memory behind `input` must outlive it.
class Decoder {
 public:
  explicit Decoder(absl::string_view input) : in_(input) {}

  bool GetU8(uint8_t* out);
  bool GetFixed32(uint32_t* out);
  bool GetFixed64(uint64_t* out);
  // Fails on truncation, on encodings longer than 10 bytes and on 10-byte
  // encodings whose value does not fit in 64 bits.
  bool GetVarint64(uint64_t* out);
  bool GetDouble(double* out);
  // Fails if the declared length exceeds the remaining input.
  bool GetString(std::string* out);
  // Replaces *out with the decoded values. Fails if the declared count exceeds
  // `max_count` or the remaining input.
  bool GetDoubles(std::vector<double>* out, size_t max_count);

  // True once every input byte has been consumed; callers use it to reject
  // trailing garbage after the last expected field.
  bool done() const { return in_.empty(); }
  size_t remaining() const { return in_.size(); }

 private:
  // Decodes a varint64 without consuming it; returns its length, or 0 if the
  // bytes at the front of in_ are not a valid varint64.
  size_t PeekVarint64(uint64_t* out) const;

  absl::string_view in_;
};

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_CODING_H_
