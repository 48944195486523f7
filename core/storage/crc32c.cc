#include "core/storage/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace graphbandit::storage {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reversed.

// Slicing-by-8: table[k][b] is the CRC contribution of byte b when it is
// followed by k more bytes, so eight input bytes fold into the CRC with eight
// independent lookups instead of a serial chain of eight. That is roughly
// 4-5x faster than the one-table loop, without needing SSE4.2.
struct Tables {
  uint32_t t[8][256];
};

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1u)));
    }
    tables.t[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) {
      const uint32_t prev = tables.t[k - 1][b];
      tables.t[k][b] = (prev >> 8) ^ tables.t[0][prev & 0xffu];
    }
  }
  return tables;
}

// Built at compile time so there is no initialisation-order hazard for callers
// that checksum during static initialisation.
constexpr Tables kTables = MakeTables();

inline uint32_t LoadLE32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

namespace crc32c_internal {

uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n) {
  const auto& t = kTables.t;
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  uint32_t l = crc ^ 0xFFFFFFFFu;

  while (n >= 8) {
    const uint32_t lo = LoadLE32(p) ^ l;
    const uint32_t hi = LoadLE32(p + 4);
    l = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    l = t[0][(l ^ *p) & 0xffu] ^ (l >> 8);
    ++p;
    --n;
  }
  return l ^ 0xFFFFFFFFu;
}

// The SSE4.2 instruction folds eight bytes per call (one a cycle once pipelined, against about
// 1.5 GB/s for the tables): snapshots of tens of megabytes are checksummed on every write and
// read. Debian 12 packages no CRC-32C library (Abseil's absl::crc32c is newer than its
// 20220623), hence the few lines here.
#if defined(__x86_64__)
bool HardwareAvailable() {
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const char* data,
                                                          size_t n) {
  uint64_t l = crc ^ 0xFFFFFFFFu;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, data, sizeof(word));  // little-endian, as the tables read it
    l = _mm_crc32_u64(l, word);
    data += 8;
    n -= 8;
  }
  auto l32 = static_cast<uint32_t>(l);
  while (n > 0) {
    l32 = _mm_crc32_u8(l32, static_cast<unsigned char>(*data));
    ++data;
    --n;
  }
  return l32 ^ 0xFFFFFFFFu;
}
#else
bool HardwareAvailable() { return false; }
uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n) {
  return ExtendPortable(crc, data, n);
}
#endif

}  // namespace crc32c_internal

uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n) {
  return crc32c_internal::HardwareAvailable() ? crc32c_internal::ExtendHardware(crc, data, n)
                                              : crc32c_internal::ExtendPortable(crc, data, n);
}

}  // namespace graphbandit::storage
