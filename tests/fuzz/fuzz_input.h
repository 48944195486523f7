// Turns fuzzer bytes into typed values (a small stand-in for LLVM's FuzzedDataProvider, which
// only ships with clang). Once the bytes run out every read returns zero / empty.
#ifndef GRAPHBANDIT_TESTS_FUZZ_FUZZ_INPUT_H_
#define GRAPHBANDIT_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace graphbandit::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool Bool() { return Byte() & 1; }
  // A value in [lo, hi].
  int Int(int lo, int hi) {
    const uint32_t span = static_cast<uint32_t>(hi - lo) + 1;
    uint32_t v = 0;
    for (int i = 0; i < 4 && span > (1u << (8 * i)); ++i) v = (v << 8) | Byte();
    return lo + static_cast<int>(v % span);
  }
  // Mostly ordinary numbers, sometimes the values that break code: NaN, infinities, huge,
  // tiny, negative zero, or raw bits.
  double Double() {
    const uint8_t kind = Byte();
    if (kind >= 48) return (Int(0, 2000) - 1000) / 250.0;  // four times in five
    switch (kind % 8) {
      case 0:
        return std::numeric_limits<double>::quiet_NaN();
      case 1:
        return Bool() ? std::numeric_limits<double>::infinity()
                      : -std::numeric_limits<double>::infinity();
      case 2:
        return Bool() ? 1e300 : -1e300;
      case 3:
        return std::numeric_limits<double>::denorm_min();
      case 4:
        return -0.0;
      case 5: {
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | Byte();
        double d;
        std::memcpy(&d, &bits, sizeof d);
        return d;
      }
      default:
        return (Int(0, 2000) - 1000) / 250.0;
    }
  }
  // Usually `usual`, sometimes (one time in `odds`) something else from `other()`.
  template <typename T, typename F>
  T Usually(T usual, int odds, F other) {
    return Byte() % odds == 0 ? other() : usual;
  }
  // A string of 0..max_len bytes, drawn from a small alphabet (so that ids collide) or raw.
  std::string String(int max_len) {
    const int len = Int(0, max_len);
    std::string s;
    const bool raw = Byte() % 4 == 0;
    for (int i = 0; i < len && !empty(); ++i) {
      const uint8_t b = Byte();
      s.push_back(raw ? static_cast<char>(b) : static_cast<char>('a' + b % 4));
    }
    return s;
  }
  // Everything left.
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace graphbandit::fuzz

#endif  // GRAPHBANDIT_TESTS_FUZZ_FUZZ_INPUT_H_
