// CRC-32C (Castagnoli) for checksumming log records.
//
// The values are the standard CRC-32C (reflected polynomial 0x82F63B78, initial
// value and final xor 0xFFFFFFFF), so they match iSCSI, ext4, LevelDB and any
// other implementation: Crc32c("123456789") == 0xE3069283.
//
// All functions are pure and safe to call from any thread.

#ifndef GRAPHBANDIT_CORE_STORAGE_CRC32C_H_
#define GRAPHBANDIT_CORE_STORAGE_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace graphbandit::storage {

// Returns the CRC-32C of A|data[0, n), where `crc` is the CRC-32C of some
// string A. Extending a result therefore gives the same value as checksumming
// the concatenation in one call, which lets a caller checksum a header and a
// payload that live in different buffers. `data` may be null only if n == 0.
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n);

namespace crc32c_internal {
// The two implementations Crc32cExtend chooses between (for tests): table lookups
// (slicing-by-8) on any CPU, and the SSE4.2 crc32 instruction, which Crc32cExtend uses where
// the CPU has it (HardwareAvailable). Both give the same values.
uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n);
bool HardwareAvailable();
// REQUIRES: HardwareAvailable().
uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n);
}  // namespace crc32c_internal

// Returns the CRC-32C of `data`.
inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// A CRC stored next to (or inside) the bytes it covers is weak: the CRC of a
// string that embeds its own CRC tends towards degenerate values. Storing a
// masked CRC avoids that. Mask is a bijection; Unmask(Mask(c)) == c for all c.
inline constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;

inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta; }

inline uint32_t Unmask(uint32_t masked_crc) {
  const uint32_t rotated = masked_crc - kCrc32cMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_CRC32C_H_
