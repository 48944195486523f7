// On-disk format of graphbandit record logs (LogWriter / LogReader).
//
// A log file is an 8-byte magic followed by zero or more records. The magic's seventh byte is
// the format version. LogWriter writes version 2; LogReader reads versions 1 and 2.
//
//   file   := magic record*
//   magic  := "GBLOG" 0x00 <version> '\n'          (8 bytes)
//
// Version 2 (written since damaged records became detectable and skippable):
//
//   record := header:byte[32] payload:byte[length]
//   header := header_crc:fixed32 payload_crc:fixed32 length:fixed32 type:u8 zero:byte[3]
//             seq:fixed64 offset:fixed64
//
//   offset 0   header_crc   Mask(CRC-32C(header bytes 4..31))
//   offset 4   payload_crc  Mask(CRC-32C(payload))
//   offset 8   length       payload size in bytes, 0 .. kMaxRecordPayload
//   offset 12  type         caller-chosen record type, 1..255; then three zero bytes
//   offset 16  seq          the caller's sequence number for the record
//   offset 24  offset       the file offset of this header
//
// All integers are little-endian (see crc32c.h for Mask).
//
// Why the pieces are as they are:
//   * The header has its own checksum, covering the length. A record whose payload is damaged
//     but whose header verifies can be stepped over exactly: the reader trusts the length, reports
//     the record (its sequence number and type are known) as lost and reads on after it.
//   * A record whose header is damaged cannot tell where it ends. The reader then searches
//     forward, byte by byte, for the next position p holding a header that verifies, whose
//     offset field equals p, whose payload lies inside the file and verifies too. The offset
//     field makes a valid-looking header inside someone's payload (bytes a client chose, copied
//     into a record) useless unless it also names the exact position it was written at; with
//     the two checksums, resynchronising at a wrong place needs about 2^-64 luck per candidate
//     position, or a payload crafted with knowledge of the exact file offset. Nothing in the
//     damaged bytes is trusted.
//   * The explicit sequence number tells the reader's caller how many records a damaged region
//     held (the gap between the sequence numbers around it), and lets it refuse a record that
//     would be applied twice or out of order.
//   * The magic catches a log opened at the wrong path before anything is applied or truncated.
//     Its '\n' and NUL bytes catch text-mode and C-string mangling.
//   * Type 0 is never written. A zero-filled region (some filesystems expose a torn append so)
//     fails the header checksum and the type check.
//   * kMaxRecordPayload bounds the memory a reader may be asked to allocate.
//   * Records are never split or padded: a record is written by one write() and a crash can only
//     leave a prefix of the last record. Damage that no intact record follows is a torn tail;
//     recovery cuts it off (and keeps a copy).
//
// Version 1 (read only): record := crc:fixed32 length:fixed32 type:u8 payload, with the CRC over
// the type byte and the payload and no sequence number. It cannot be resynchronised: a reader
// stops at its first damaged record.

#ifndef GRAPHBANDIT_CORE_STORAGE_LOG_FORMAT_H_
#define GRAPHBANDIT_CORE_STORAGE_LOG_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace graphbandit::storage {

inline constexpr size_t kLogMagicSize = 8;
inline constexpr absl::string_view kLogMagicV1("GBLOG\x00\x01\n", kLogMagicSize);
inline constexpr absl::string_view kLogMagic("GBLOG\x00\x02\n", kLogMagicSize);  // written
inline constexpr size_t kLogVersionByte = 6;  // the magic's byte that holds the version

inline constexpr size_t kLogHeaderSizeV1 = 4 + 4 + 1;  // crc, length, type
inline constexpr size_t kLogHeaderSize = 32;           // version 2, see above

inline constexpr uint32_t kMaxRecordPayload = 64u << 20;  // 64 MiB

// Record type 0 is reserved: never written, always reported as corruption.
inline constexpr uint8_t kInvalidRecordType = 0;

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_LOG_FORMAT_H_
