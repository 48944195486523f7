// Seeded random streams with explicit, serialisable state.
//
// The standard library's distributions are implementation-defined, and absl's are not stable
// across releases, so replaying a logged history (or restoring a snapshot) could diverge after
// an upgrade. Everything that must be reproducible draws from this generator instead:
// xoshiro256** (Blackman & Vigna) seeded through SplitMix64, with our own uniform and normal
// transforms.
#ifndef GRAPHBANDIT_CORE_BASE_RANDOM_H_
#define GRAPHBANDIT_CORE_BASE_RANDOM_H_

#include <array>
#include <cmath>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace graphbandit {

// One step of SplitMix64; used to expand seeds and to mix hashes.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A stable 64-bit hash of a byte string (FNV-1a folded through SplitMix64). Stable across
// platforms and releases, unlike std::hash or absl::Hash: it seeds per-decision streams.
inline uint64_t StableHash(absl::string_view bytes, uint64_t seed = 0) {
  uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return SplitMix64(h);
}

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  explicit Rng(uint64_t seed = 1) { Seed(seed); }

  void Seed(uint64_t seed) {
    uint64_t sm = seed;
    for (auto& word : s_) word = SplitMix64(sm);
  }

  uint64_t NextU64() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias is below 2^-64 * n).
  uint64_t UniformInt(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(NextU64()) * n) >> 64);
  }

  // Standard normal by the Box-Muller transform. Draws exactly two uniforms per call (no cached
  // second value), so the number of values consumed is a simple function of the calls made.
  double Normal() {
    double u1 = Uniform();
    const double u2 = Uniform();
    if (u1 <= 0.0) u1 = 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

  const State& state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  State s_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_RANDOM_H_
