#include "core/storage/coding.h"

#include <cstring>
#include <utility>

#include "absl/base/config.h"

namespace graphbandit::storage {
namespace {

// Byte-at-a-time so the result does not depend on host endianness; compilers
// turn these into single loads/stores on little-endian targets.
inline void StoreLE32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}
inline void StoreLE64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}
inline uint32_t LoadLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
inline uint64_t LoadLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

inline uint64_t DoubleBits(double d) {
  uint64_t bits;
  static_assert(sizeof(bits) == sizeof(d), "double must be 64-bit IEEE-754");
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}
inline double BitsDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

}  // namespace

void Encoder::PutU8(uint8_t v) {
  const char c = static_cast<char>(v);
  Append(&c, 1);
}

void Encoder::PutFixed32(uint32_t v) {
  char tmp[4];
  StoreLE32(tmp, v);
  Append(tmp, sizeof(tmp));
}

void Encoder::PutFixed64(uint64_t v) {
  char tmp[8];
  StoreLE64(tmp, v);
  Append(tmp, sizeof(tmp));
}

void Encoder::PutVarint64(uint64_t v) {
  char tmp[kMaxVarint64Bytes];
  size_t n = 0;
  while (v >= 0x80) {
    tmp[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  tmp[n++] = static_cast<char>(v);
  Append(tmp, n);
}

void Encoder::PutDouble(double v) { PutFixed64(DoubleBits(v)); }

void Encoder::PutString(absl::string_view s) {
  PutVarint64(s.size());
  Append(s.data(), s.size());
}

void Encoder::PutDoubles(const double* values, size_t n) {
  PutVarint64(n);
  PutRawDoubles(values, n);
}

void Encoder::PutRawDoubles(const double* values, size_t n) {
  if (n == 0) return;
#if defined(ABSL_IS_LITTLE_ENDIAN)
  // Vectors of features/posteriors and the columns of matrices can be long; on little-endian
  // hosts the in-memory representation already is the wire format.
  Append(reinterpret_cast<const char*>(values), n * sizeof(double));
#else
  Reserve(n * sizeof(double));
  for (size_t i = 0; i < n; ++i) PutDouble(values[i]);
#endif
}

std::string Encoder::Release() {
  std::string out = std::move(buf_);
  buf_.clear();  // A moved-from string is valid but unspecified.
  counted_ = 0;
  return out;
}

bool Decoder::GetU8(uint8_t* out) {
  if (in_.empty()) return false;
  *out = static_cast<unsigned char>(in_[0]);
  in_.remove_prefix(1);
  return true;
}

bool Decoder::GetFixed32(uint32_t* out) {
  if (in_.size() < 4) return false;
  *out = LoadLE32(in_.data());
  in_.remove_prefix(4);
  return true;
}

bool Decoder::GetFixed64(uint64_t* out) {
  if (in_.size() < 8) return false;
  *out = LoadLE64(in_.data());
  in_.remove_prefix(8);
  return true;
}

size_t Decoder::PeekVarint64(uint64_t* out) const {
  uint64_t result = 0;
  const size_t limit = in_.size() < kMaxVarint64Bytes ? in_.size() : kMaxVarint64Bytes;
  for (size_t i = 0; i < limit; ++i) {
    const uint64_t byte = static_cast<unsigned char>(in_[i]);
    // The 10th byte carries bit 63 only; anything more would silently drop
    // high bits, which would let two different encodings collide.
    if (i == kMaxVarint64Bytes - 1 && byte > 1) return 0;
    result |= (byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      *out = result;
      return i + 1;
    }
  }
  return 0;  // Truncated, or more than 10 bytes long.
}

bool Decoder::GetVarint64(uint64_t* out) {
  uint64_t v;
  const size_t len = PeekVarint64(&v);
  if (len == 0) return false;
  *out = v;
  in_.remove_prefix(len);
  return true;
}

bool Decoder::GetDouble(double* out) {
  if (in_.size() < 8) return false;
  *out = BitsDouble(LoadLE64(in_.data()));
  in_.remove_prefix(8);
  return true;
}

bool Decoder::GetString(std::string* out) {
  uint64_t len;
  const size_t prefix = PeekVarint64(&len);
  if (prefix == 0) return false;
  if (len > in_.size() - prefix) return false;
  out->assign(in_.data() + prefix, static_cast<size_t>(len));
  in_.remove_prefix(prefix + static_cast<size_t>(len));
  return true;
}

bool Decoder::GetDoubles(std::vector<double>* out, size_t max_count) {
  uint64_t count;
  const size_t prefix = PeekVarint64(&count);
  if (prefix == 0) return false;
  // Compare counts, not byte sizes: count * 8 could overflow.
  if (count > max_count) return false;
  if (count > (in_.size() - prefix) / sizeof(double)) return false;
  const size_t n = static_cast<size_t>(count);
  const char* p = in_.data() + prefix;
  out->resize(n);
#if defined(ABSL_IS_LITTLE_ENDIAN)
  if (n > 0) std::memcpy(out->data(), p, n * sizeof(double));
#else
  for (size_t i = 0; i < n; ++i) (*out)[i] = BitsDouble(LoadLE64(p + 8 * i));
#endif
  in_.remove_prefix(prefix + n * sizeof(double));
  return true;
}

}  // namespace graphbandit::storage
