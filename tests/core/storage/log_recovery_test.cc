// Tests for corruption and recovery of the record log (core/storage/log_reader.h, RecoverLog):
// torn writes at every byte, bit flips and damaged ranges anywhere (reading resumes at the next
// intact record), hostile length fields, zeroed data, bad magic, forensic copies, and logs of
// the older format.

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/storage/coding.h"
#include "core/storage/crc32c.h"
#include "core/storage/log_format.h"
#include "core/storage/log_reader.h"
#include "core/storage/log_writer.h"
#include "gtest/gtest.h"
#include "tests/core/storage/allocation_probe.h"
#include "tests/core/storage/log_test_util.h"

namespace graphbandit::storage {
namespace {

using log_test::AllocationProbe;
using log_test::Collected;
using log_test::Exists;
using log_test::Prefix;
using log_test::RandomBytes;
using log_test::ReadAll;
using log_test::ReadAllResult;
using log_test::ReadFile;
using log_test::Rec;
using log_test::TempDir;
using log_test::WriteFile;
using log_test::WriteLog;
using log_test::WriteLogV1;

// For every possible torn prefix of the last record: the reader stops at
// that record, recovery cuts it off and saves it, and appending resumes.
TEST(LogTest, TornTailAtEveryByteIsDetectedAndRecovered) {
  TempDir dir;
  std::mt19937_64 rng(6);
  const std::vector<Rec> records = {
      {1, "alpha"}, {2, ""}, {3, RandomBytes(rng, 1000)}, {4, RandomBytes(rng, 150)}};
  const std::string pristine_path = dir.File("pristine");
  const std::vector<uint64_t> offsets = WriteLog(pristine_path, records);
  const std::string pristine = ReadFile(pristine_path);
  const uint64_t last = offsets.back();
  const size_t last_len = pristine.size() - last;
  ASSERT_EQ(last_len, kLogHeaderSize + 150);
  const std::vector<Rec> survivors = Prefix(records, records.size() - 1);
  const std::vector<Rec> appended = {{9, "after recovery"}, {10, RandomBytes(rng, 77)}};

  for (size_t torn = 1; torn < last_len; ++torn) {
    SCOPED_TRACE(testing::Message() << "torn length " << torn);
    const std::string path = dir.File(absl::StrCat("torn", torn));
    WriteFile(path, absl::string_view(pristine).substr(0, last + torn));

    const std::string reason =
        torn < kLogHeaderSize
            ? absl::StrCat("truncated header (", torn, " of 32 bytes)")
            : absl::StrCat("truncated payload (", torn - kLogHeaderSize, " of 150 bytes)");
    const ReadAllResult got = ReadAll(path);
    EXPECT_EQ(got.records, survivors);
    EXPECT_EQ(got.end, ReadResult::kCorruption);
    EXPECT_EQ(got.corruption.offset, last);
    EXPECT_EQ(got.corruption.reason, reason);
    EXPECT_EQ(got.good_offset, last);

    Collected c;
    absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, c.Apply());
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(c.records, survivors);
    EXPECT_EQ(rec->records, survivors.size());
    EXPECT_TRUE(rec->truncated);
    EXPECT_EQ(rec->good_offset, last);
    ASSERT_TRUE(rec->corruption.has_value());
    EXPECT_EQ(rec->corruption->offset, last);
    EXPECT_EQ(rec->corruption->reason, reason);
    EXPECT_EQ(rec->discarded_bytes, torn);
    const std::string saved = absl::StrCat(path, ".corrupt-", last);
    EXPECT_EQ(rec->discarded_path, saved);
    EXPECT_EQ(ReadFile(saved), pristine.substr(last, torn));
    EXPECT_EQ(ReadFile(path), pristine.substr(0, last));

    {
      absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_EQ((*w)->size(), last);
      for (const Rec& r : appended) ASSERT_TRUE((*w)->Append(9, r.type, r.payload).ok());
      ASSERT_TRUE((*w)->Close().ok());
    }
    std::vector<Rec> expected = survivors;
    expected.insert(expected.end(), appended.begin(), appended.end());
    const ReadAllResult again = ReadAll(path);
    EXPECT_EQ(again.end, ReadResult::kEndOfFile);
    EXPECT_EQ(again.records, expected);

    // A second recovery of the repaired log changes nothing.
    Collected c2;
    absl::StatusOr<LogRecovery> rec2 = RecoverLog(path, 1, c2.Apply());
    ASSERT_TRUE(rec2.ok()) << rec2.status();
    EXPECT_FALSE(rec2->truncated);
    EXPECT_EQ(c2.records, expected);
  }
}

// Any single damaged byte in a middle record loses that record only: reading
// resumes at the next one, the damage is reported (with the record's sequence
// number and type when its header still verifies), and recovery keeps a copy of
// the damaged bytes without changing the log.
TEST(LogTest, EveryFlippedByteInAMiddleRecordLosesOnlyThatRecord) {
  TempDir dir;
  std::mt19937_64 rng(7);
  const std::vector<Rec> records = {{1, RandomBytes(rng, 40)},
                                    {2, RandomBytes(rng, 10)},
                                    {3, RandomBytes(rng, 120)},
                                    {4, RandomBytes(rng, 60)},
                                    {5, RandomBytes(rng, 30)}};
  const std::string pristine_path = dir.File("pristine");
  const std::vector<uint64_t> offsets = WriteLog(pristine_path, records, 100);
  const std::string pristine = ReadFile(pristine_path);
  const size_t victim = 2;
  const uint64_t begin = offsets[victim];
  const uint64_t end = offsets[victim + 1];
  std::vector<Rec> others = records;
  others.erase(others.begin() + victim);
  const std::vector<uint64_t> other_seqs = {100, 101, 103, 104};

  for (uint64_t pos = begin; pos < end; ++pos) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      SCOPED_TRACE(testing::Message() << "byte " << pos << " ^ " << int{flip});
      std::string damaged = pristine;
      damaged[pos] = static_cast<char>(damaged[pos] ^ flip);
      const std::string path = dir.File("flipped");
      WriteFile(path, damaged);

      const ReadAllResult got = ReadAll(path);
      EXPECT_EQ(got.records, others);
      EXPECT_EQ(got.seqs, other_seqs);
      ASSERT_EQ(got.end, ReadResult::kEndOfFile);
      ASSERT_EQ(got.skipped.size(), 1u);
      const LogDamage& damage = got.skipped[0];
      EXPECT_EQ(damage.offset, begin);
      EXPECT_EQ(damage.length, end - begin);
      if (pos - begin < kLogHeaderSize) {
        EXPECT_EQ(damage.reason, "header checksum mismatch");
        EXPECT_FALSE(damage.seq.has_value());
      } else {
        EXPECT_EQ(damage.reason, "payload checksum mismatch");
        EXPECT_EQ(damage.seq, std::optional<uint64_t>(102));
        EXPECT_EQ(damage.type, 3);
      }

      Collected c;
      absl::StatusOr<LogRecovery> rec = RecoverLog(path, 100, c.Apply());
      ASSERT_TRUE(rec.ok()) << rec.status();
      EXPECT_EQ(c.records, others);
      EXPECT_EQ(c.seqs, other_seqs);
      EXPECT_FALSE(rec->truncated);
      EXPECT_EQ(rec->last_seq, 104u);
      EXPECT_EQ(rec->good_offset, damaged.size());
      ASSERT_EQ(rec->skipped.size(), 1u);
      const std::string saved = absl::StrCat(path, ".corrupt-", begin);
      EXPECT_EQ(rec->skipped[0].saved_path, saved);
      EXPECT_EQ(ReadFile(saved), damaged.substr(begin, end - begin));
      EXPECT_EQ(ReadFile(path), damaged);  // the log itself is left as it is
      // Recovering again reuses the copy instead of making another one.
      absl::StatusOr<LogRecovery> again = RecoverLog(path, 100, Collected().Apply());
      ASSERT_TRUE(again.ok()) << again.status();
      ASSERT_EQ(again->skipped.size(), 1u);
      EXPECT_EQ(again->skipped[0].saved_path, saved);
      EXPECT_FALSE(Exists(saved + ".1"));
      std::filesystem::remove(saved);
    }
  }
}

// Corruption at every byte of a log with many records, and damaged ranges of
// random length anywhere: exactly the records that do not overlap the damage
// are read, in order, with their sequence numbers. Damage that reaches the end
// of the file is a torn tail; anything before it is passed over.
TEST(LogTest, DamageAnywhereLosesExactlyTheRecordsItOverlaps) {
  TempDir dir;
  std::mt19937_64 rng(11);
  std::vector<Rec> records;
  for (int i = 0; i < 60; ++i) {
    const size_t len = i % 7 == 0 ? 0 : (i % 5 == 0 ? 700 : rng() % 90);
    records.push_back({static_cast<uint8_t>(1 + rng() % 9), RandomBytes(rng, len)});
  }
  const std::string pristine_path = dir.File("pristine");
  std::vector<uint64_t> offsets = WriteLog(pristine_path, records);
  const std::string pristine = ReadFile(pristine_path);
  offsets.push_back(pristine.size());
  const std::string path = dir.File("damaged");

  auto check = [&](uint64_t from, uint64_t to, const std::string& damaged) {
    SCOPED_TRACE(testing::Message() << "damage [" << from << ", " << to << ")");
    std::vector<Rec> expected;
    std::vector<uint64_t> expected_seqs;
    size_t last_hit = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      if (offsets[i + 1] <= from || offsets[i] >= to) {
        expected.push_back(records[i]);
        expected_seqs.push_back(i + 1);
      } else {
        last_hit = i;
      }
    }
    WriteFile(path, damaged);
    const ReadAllResult got = ReadAll(path);
    EXPECT_EQ(got.records, expected);
    EXPECT_EQ(got.seqs, expected_seqs);
    const bool tail = last_hit + 1 == records.size();
    EXPECT_EQ(got.end, tail ? ReadResult::kCorruption : ReadResult::kEndOfFile);
  };

  for (uint64_t pos = kLogMagicSize; pos < pristine.size(); ++pos) {
    std::string damaged = pristine;
    damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << (pos % 8)));
    check(pos, pos + 1, damaged);
  }
  for (int trial = 0; trial < 300; ++trial) {
    const uint64_t from = kLogMagicSize + rng() % (pristine.size() - kLogMagicSize);
    const uint64_t len = 1 + rng() % (trial % 3 == 0 ? 2000 : 60);
    const uint64_t to = std::min<uint64_t>(from + len, pristine.size());
    std::string damaged = pristine;
    for (uint64_t i = from; i < to; ++i) {
      damaged[i] = trial % 2 == 0 ? '\0' : static_cast<char>(rng() & 0xff);
    }
    if (damaged == pristine) continue;
    // Bytes that happened to keep their value are not damage.
    uint64_t a = from, b = to;
    while (a < b && damaged[a] == pristine[a]) ++a;
    while (b > a && damaged[b - 1] == pristine[b - 1]) --b;
    check(a, b, damaged);
  }
}

// A valid-looking record inside a payload (bytes a client chose) is not taken
// for a record when the header before it is damaged: it does not name its own
// file offset.
TEST(LogTest, ARecordEmbeddedInAPayloadIsNotResynchronisedTo) {
  TempDir dir;
  const std::string inner_path = dir.File("inner");
  WriteLog(inner_path, {{7, "forged"}}, 2);
  const std::string forged = ReadFile(inner_path).substr(kLogMagicSize);
  const std::string path = dir.File("log");
  const std::vector<uint64_t> offsets =
      WriteLog(path, {{1, "a"}, {2, "xx" + forged + "yy"}, {3, "after"}});
  std::string bytes = ReadFile(path);
  bytes[offsets[1] + 9] ^= 0x10;  // the victim's length field
  WriteFile(path, bytes);
  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.records, (std::vector<Rec>{{1, "a"}, {3, "after"}}));
  EXPECT_EQ(got.seqs, (std::vector<uint64_t>{1, 3}));
  ASSERT_EQ(got.skipped.size(), 1u);
  EXPECT_EQ(got.skipped[0].offset, offsets[1]);
  EXPECT_EQ(got.skipped[0].length, offsets[2] - offsets[1]);
}

// Damage that spans a header and then the payload of the next record: the search after the
// damaged header stops at the next header that verifies, so the second record is reported with
// its sequence number and type rather than folded into an unknown region.
TEST(LogTest, TheSearchAfterADamagedHeaderStopsAtTheNextHeaderThatVerifies) {
  TempDir dir;
  const std::string path = dir.File("log");
  const std::vector<uint64_t> offsets =
      WriteLog(path, {{1, "one"}, {2, "two"}, {3, "three"}, {4, "four"}});
  std::string bytes = ReadFile(path);
  bytes[offsets[1] + 2] ^= 1;                   // record 2's header
  bytes[offsets[2] + kLogHeaderSize + 1] ^= 1;  // record 3's payload
  WriteFile(path, bytes);
  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.records, (std::vector<Rec>{{1, "one"}, {4, "four"}}));
  ASSERT_EQ(got.skipped.size(), 2u);
  EXPECT_EQ(got.skipped[0].offset, offsets[1]);
  EXPECT_EQ(got.skipped[0].length, offsets[2] - offsets[1]);
  EXPECT_FALSE(got.skipped[0].seq.has_value());
  EXPECT_EQ(got.skipped[1].offset, offsets[2]);
  EXPECT_EQ(got.skipped[1].seq, std::optional<uint64_t>(3));
  EXPECT_EQ(got.skipped[1].type, 3);
}

// Version-1 logs (written by earlier builds) are still read; they have no
// resynchronisation points, so reading stops at their first damage, and
// recovery cuts the rest off as before. The writer turns an empty one into the
// current format and refuses to append to one that holds records.
TEST(LogTest, Version1LogsAreReadAndStopAtTheirFirstDamage) {
  TempDir dir;
  const std::string path = dir.File("v1");
  const std::vector<Rec> records = {{1, "one"}, {2, "two"}, {3, "three"}};
  const std::vector<uint64_t> offsets = WriteLogV1(path, records);
  const std::string pristine = ReadFile(path);

  ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.records, records);
  EXPECT_EQ(got.end, ReadResult::kEndOfFile);
  Collected c;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, 40, c.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->version, 1);
  EXPECT_EQ(c.seqs, (std::vector<uint64_t>{40, 41, 42}));
  EXPECT_EQ(LogWriter::Open(path).status().code(), absl::StatusCode::kFailedPrecondition);

  std::string damaged = pristine;
  damaged[offsets[1] + kLogHeaderSizeV1] ^= 1;
  WriteFile(path, damaged);
  got = ReadAll(path);
  EXPECT_EQ(got.records, Prefix(records, 1));
  EXPECT_EQ(got.end, ReadResult::kCorruption);
  EXPECT_EQ(got.corruption.reason, "checksum mismatch");
  Collected c2;
  rec = RecoverLog(path, 40, c2.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(c2.records, Prefix(records, 1));
  EXPECT_TRUE(rec->truncated);
  EXPECT_EQ(ReadFile(path), pristine.substr(0, offsets[1]));

  const std::string empty = dir.File("empty-v1");
  WriteLogV1(empty, {});
  {
    absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(empty);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Append(5, 1, "new").ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  got = ReadAll(empty);
  EXPECT_EQ(got.records, (std::vector<Rec>{{1, "new"}}));
  EXPECT_EQ(got.seqs, (std::vector<uint64_t>{5}));
}

// Sets a header's length field and, if `reseal`, recomputes its checksum (a
// header that verifies but lies, as a buggy or hostile writer could produce).
void SetLength(std::string* bytes, uint64_t offset, uint32_t length, bool reseal) {
  Encoder len;
  len.PutFixed32(length);
  bytes->replace(offset + 8, 4, len.data());
  if (reseal) {
    Encoder crc;
    crc.PutFixed32(Mask(Crc32cExtend(0, bytes->data() + offset + 4, kLogHeaderSize - 4)));
    bytes->replace(offset, 4, crc.data());
  }
}

TEST(LogTest, HugeLengthFieldIsRejectedWithoutAllocating) {
  TempDir dir;
  const std::string path = dir.File("log");
  const std::vector<uint64_t> offsets = WriteLog(path, {{1, "a"}, {2, "bcd"}});
  const std::string pristine = ReadFile(path);
  struct Case {
    uint32_t length;
    bool reseal;
    std::string reason;
  };
  for (const Case& k :
       {Case{0xffffffffu, false, "header checksum mismatch"},
        Case{0xffffffffu, true, "record length 4294967295 exceeds the 64 MiB limit"},
        Case{kMaxRecordPayload, true, "truncated payload (3 of 67108864 bytes)"}}) {
    SCOPED_TRACE(k.reason);
    std::string bytes = pristine;
    SetLength(&bytes, offsets[1], k.length, k.reseal);
    WriteFile(path, bytes);
    ReadAllResult got;
    size_t largest;
    {
      AllocationProbe probe;
      got = ReadAll(path);
      largest = probe.largest();
    }
    EXPECT_LT(largest, 1u << 20);
    EXPECT_EQ(got.records, (std::vector<Rec>{{1, "a"}}));
    EXPECT_EQ(got.end, ReadResult::kCorruption);
    EXPECT_EQ(got.corruption.offset, offsets[1]);
    EXPECT_EQ(got.corruption.reason, k.reason);

    absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, Collected().Apply());
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_TRUE(rec->truncated);
    EXPECT_EQ(rec->good_offset, offsets[1]);
    EXPECT_EQ(std::filesystem::file_size(path), offsets[1]);
    std::filesystem::remove(rec->discarded_path);
  }
}

TEST(LogTest, ZeroFilledTailIsDetectedAndTruncated) {
  TempDir dir;
  const std::string path = dir.File("log");
  const std::vector<Rec> records = {{1, "one"}, {2, "two"}};
  WriteLog(path, records);
  const uint64_t good = std::filesystem::file_size(path);
  WriteFile(path, ReadFile(path) + std::string(4096, '\0'));

  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.records, records);
  EXPECT_EQ(got.end, ReadResult::kCorruption);
  EXPECT_EQ(got.corruption.offset, good);
  EXPECT_EQ(got.corruption.reason, "zeroed header");

  Collected c;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, c.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(c.records, records);
  EXPECT_TRUE(rec->truncated);
  EXPECT_EQ(rec->good_offset, good);
  EXPECT_EQ(rec->discarded_bytes, 4096u);
  EXPECT_EQ(ReadFile(rec->discarded_path), std::string(4096, '\0'));
  EXPECT_EQ(std::filesystem::file_size(path), good);
}

TEST(LogTest, AZeroedMiddleRecordIsPassedOver) {
  TempDir dir;
  const std::string path = dir.File("log");
  const std::vector<Rec> records = {{1, "one"}, {2, "two"}, {3, "three"}};
  const std::vector<uint64_t> offsets = WriteLog(path, records);
  std::string bytes = ReadFile(path);
  std::fill(bytes.begin() + offsets[1], bytes.begin() + offsets[2], '\0');
  WriteFile(path, bytes);

  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.records, (std::vector<Rec>{{1, "one"}, {3, "three"}}));
  EXPECT_EQ(got.end, ReadResult::kEndOfFile);
  ASSERT_EQ(got.skipped.size(), 1u);
  EXPECT_EQ(got.skipped[0].offset, offsets[1]);
  EXPECT_EQ(got.skipped[0].length, offsets[2] - offsets[1]);
  EXPECT_EQ(got.skipped[0].reason, "zeroed header");
}

TEST(LogTest, ApplyErrorStopsRecoveryAndLeavesFileAlone) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteLog(path, {{1, "a"}, {2, "b"}, {3, "c"}});
  WriteFile(path, ReadFile(path) + "torn");
  const std::string before = ReadFile(path);
  int calls = 0;
  absl::StatusOr<LogRecovery> rec =
      RecoverLog(path, 1, [&calls](uint64_t, uint8_t type, absl::string_view) {
        ++calls;
        return type == 2 ? absl::AbortedError("no thanks") : absl::OkStatus();
      });
  EXPECT_EQ(rec.status(), absl::AbortedError("no thanks"));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(ReadFile(path), before);
}

TEST(LogTest, RecoveryKeepsEarlierForensicCopies) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteLog(path, {{1, "a"}});
  const uint64_t good = std::filesystem::file_size(path);
  const std::string first_copy = absl::StrCat(path, ".corrupt-", good);
  WriteFile(first_copy, "from an earlier crash");
  WriteFile(path, ReadFile(path) + "xyz");

  absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, Collected().Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->discarded_path, first_copy + ".1");
  EXPECT_EQ(ReadFile(first_copy + ".1"), "xyz");
  EXPECT_EQ(ReadFile(first_copy), "from an earlier crash");
}

TEST(LogTest, BadMagicIsReportedAndNeverTruncated) {
  TempDir dir;
  for (const std::string& content : {std::string("NOTALOG!") + std::string(100, 'x'),
                                     std::string("GBLOG\0\x03\n", 8),  // unknown version
                                     std::string("GBX"), std::string("\0\0\0\0", 4)}) {
    SCOPED_TRACE(content);
    const std::string path = dir.File("log");
    WriteFile(path, content);

    const ReadAllResult got = ReadAll(path);
    EXPECT_TRUE(got.records.empty());
    EXPECT_EQ(got.end, ReadResult::kCorruption);
    EXPECT_EQ(got.corruption.offset, 0u);
    EXPECT_EQ(got.corruption.reason, "bad magic");
    EXPECT_EQ(got.good_offset, 0u);

    absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, Collected().Apply());
    EXPECT_EQ(rec.status().code(), absl::StatusCode::kDataLoss) << rec.status();
    EXPECT_NE(rec.status().message().find("bad magic"), std::string::npos);

    absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
    EXPECT_EQ(ReadFile(path), content);
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(LogTest, EmptyFileAndMagicPrefixesAreCompletedByRecovery) {
  TempDir dir;
  for (size_t len = 0; len < kLogMagicSize; ++len) {
    SCOPED_TRACE(testing::Message() << "prefix length " << len);
    const std::string path = dir.File(absl::StrCat("log", len));
    WriteFile(path, kLogMagic.substr(0, len));

    const ReadAllResult got = ReadAll(path);
    EXPECT_EQ(got.end, ReadResult::kCorruption);
    EXPECT_EQ(got.corruption.offset, 0u);
    EXPECT_EQ(got.corruption.reason, absl::StrCat("truncated magic (", len, " of 8 bytes)"));

    if (len > 0) {
      // The writer insists on recovery first.
      absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
      EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
    }

    Collected c;
    absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, c.Apply());
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(rec->records, 0u);
    EXPECT_EQ(rec->good_offset, kLogMagicSize);
    EXPECT_FALSE(rec->truncated);
    EXPECT_FALSE(rec->corruption.has_value());
    EXPECT_TRUE(c.records.empty());
    EXPECT_EQ(ReadFile(path), std::string(kLogMagic));

    const ReadAllResult after = ReadAll(path);
    EXPECT_EQ(after.end, ReadResult::kEndOfFile);
    EXPECT_EQ(after.good_offset, kLogMagicSize);
  }
}

}  // namespace
}  // namespace graphbandit::storage
