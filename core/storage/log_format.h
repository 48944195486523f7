// On-disk format of graphbandit record logs (LogWriter / LogReader).
//
// A log file is an 8-byte magic followed by zero or more records:
//
//   file   := magic record*
//   magic  := "GBLOG" 0x00 0x01 '\n'               (8 bytes; 0x01 = version)
//   record := crc:fixed32 length:fixed32 type:u8 payload:byte[length]
//
// All integers are little-endian. The 9-byte header is:
//   offset 0  crc     Mask(CRC-32C(type byte || payload))   (see crc32c.h)
//   offset 4  length  payload size in bytes, 0 .. kMaxRecordPayload
//   offset 8  type    caller-chosen record type, 1..255
//
// Why the pieces are as they are:
//   * The magic catches a log opened at the wrong path (or a file that is not
//     a log at all) before anything is applied or truncated. Its '\n' and NUL
//     bytes catch text-mode and C-string mangling.
//   * The CRC does not cover the length field, as in LevelDB. A damaged length
//     still gets caught: it either exceeds the limit or the file, or it makes
//     the CRC run over the wrong bytes.
//   * Type 0 is never written. Some filesystems expose a torn append as a run
//     of zero bytes. Refusing type 0 rejects such a region by construction
//     instead of relying on its stored CRC of 0 happening not to match.
//   * kMaxRecordPayload bounds the memory a reader may be asked to allocate
//     and makes a garbage length obviously invalid.
//   * Records are never split or padded: a record is written by one write()
//     and a crash can only leave a prefix of the last record, which readers
//     report as a truncated header or payload.
//
// There are no blocks, fragments or resynchronisation points: readers stop at
// the first damaged record, so damage can never be silently skipped.

#ifndef GRAPHBANDIT_CORE_STORAGE_LOG_FORMAT_H_
#define GRAPHBANDIT_CORE_STORAGE_LOG_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace graphbandit::storage {

inline constexpr size_t kLogMagicSize = 8;
inline constexpr absl::string_view kLogMagic("GBLOG\x00\x01\n", kLogMagicSize);

inline constexpr size_t kLogHeaderSize = 4 + 4 + 1;  // crc, length, type

inline constexpr uint32_t kMaxRecordPayload = 64u << 20;  // 64 MiB

// Record type 0 is reserved: never written, always reported as corruption.
inline constexpr uint8_t kInvalidRecordType = 0;

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_LOG_FORMAT_H_
