#include "core/storage/crc32c.h"

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

uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n) {
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

}  // namespace graphbandit::storage
