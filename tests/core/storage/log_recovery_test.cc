// Tests for corruption and recovery of the record log (core/storage/log_reader.h, RecoverLog):
// torn writes at every byte, bit flips, hostile length fields, zeroed data, bad magic,
// forensic copies.

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
using log_test::Prefix;
using log_test::RandomBytes;
using log_test::ReadAll;
using log_test::ReadAllResult;
using log_test::ReadFile;
using log_test::Rec;
using log_test::TempDir;
using log_test::WriteFile;
using log_test::WriteLog;

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
            ? absl::StrCat("truncated header (", torn, " of 9 bytes)")
            : absl::StrCat("truncated payload (", torn - kLogHeaderSize, " of 150 bytes)");
    const ReadAllResult got = ReadAll(path);
    EXPECT_EQ(got.records, survivors);
    EXPECT_EQ(got.end, ReadResult::kCorruption);
    EXPECT_EQ(got.corruption.offset, last);
    EXPECT_EQ(got.corruption.reason, reason);
    EXPECT_EQ(got.good_offset, last);

    Collected c;
    absl::StatusOr<LogRecovery> rec = RecoverLog(path, c.Apply());
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
      for (const Rec& r : appended) ASSERT_TRUE((*w)->Append(r.type, r.payload).ok());
      ASSERT_TRUE((*w)->Close().ok());
    }
    std::vector<Rec> expected = survivors;
    expected.insert(expected.end(), appended.begin(), appended.end());
    const ReadAllResult again = ReadAll(path);
    EXPECT_EQ(again.end, ReadResult::kEndOfFile);
    EXPECT_EQ(again.records, expected);

    // A second recovery of the repaired log changes nothing.
    Collected c2;
    absl::StatusOr<LogRecovery> rec2 = RecoverLog(path, c2.Apply());
    ASSERT_TRUE(rec2.ok()) << rec2.status();
    EXPECT_FALSE(rec2->truncated);
    EXPECT_EQ(c2.records, expected);
  }
}

// Any single damaged byte in a middle record stops reading at that record:
// earlier records survive, later ones are never returned.
TEST(LogTest, EveryFlippedByteInMiddleRecordIsDetected) {
  TempDir dir;
  std::mt19937_64 rng(7);
  const std::vector<Rec> records = {{1, RandomBytes(rng, 40)},
                                    {2, RandomBytes(rng, 10)},
                                    {3, RandomBytes(rng, 120)},
                                    {4, RandomBytes(rng, 60)},
                                    {5, RandomBytes(rng, 30)}};
  const std::string pristine_path = dir.File("pristine");
  const std::vector<uint64_t> offsets = WriteLog(pristine_path, records);
  const std::string pristine = ReadFile(pristine_path);
  const size_t victim = 2;
  const uint64_t begin = offsets[victim];
  const uint64_t end = offsets[victim + 1];
  const std::vector<Rec> before = Prefix(records, victim);

  for (uint64_t pos = begin; pos < end; ++pos) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      SCOPED_TRACE(testing::Message() << "byte " << pos << " ^ " << int{flip});
      std::string damaged = pristine;
      damaged[pos] = static_cast<char>(damaged[pos] ^ flip);
      const std::string path = dir.File("flipped");
      WriteFile(path, damaged);

      const ReadAllResult got = ReadAll(path);
      EXPECT_EQ(got.records, before);
      ASSERT_EQ(got.end, ReadResult::kCorruption);
      EXPECT_EQ(got.corruption.offset, begin);
      EXPECT_EQ(got.good_offset, begin);
      const std::string& reason = got.corruption.reason;
      const size_t field = pos - begin;
      if (field < 4 || field >= kLogHeaderSize) {
        EXPECT_EQ(reason, "checksum mismatch");  // CRC or payload damaged.
      } else if (field == 8) {
        // Type damaged: covered by the CRC, unless it became the reserved 0.
        EXPECT_EQ(reason,
                  (records[victim].type ^ flip) == 0 ? "zero record type" : "checksum mismatch");
      } else {
        // Length damaged: too long for the limit or the file, or the CRC then
        // covers the wrong bytes.
        EXPECT_TRUE(reason == "checksum mismatch" || reason.rfind("truncated payload", 0) == 0 ||
                    reason.find("exceeds the 64 MiB limit") != std::string::npos)
            << reason;
      }

      Collected c;
      absl::StatusOr<LogRecovery> rec = RecoverLog(path, c.Apply());
      ASSERT_TRUE(rec.ok()) << rec.status();
      EXPECT_EQ(c.records, before);
      EXPECT_TRUE(rec->truncated);
      EXPECT_EQ(rec->good_offset, begin);
      EXPECT_EQ(rec->discarded_bytes, damaged.size() - begin);
      EXPECT_EQ(ReadFile(rec->discarded_path), damaged.substr(begin));
      EXPECT_EQ(ReadFile(path), pristine.substr(0, begin));
      std::filesystem::remove(rec->discarded_path);
    }
  }
}

TEST(LogTest, HugeLengthFieldIsRejectedWithoutAllocating) {
  TempDir dir;
  const std::string path = dir.File("log");
  const std::vector<uint64_t> offsets = WriteLog(path, {{1, "a"}, {2, "bcd"}});
  std::string bytes = ReadFile(path);
  for (int i = 0; i < 4; ++i) bytes[offsets[1] + 4 + i] = '\xff';
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
  EXPECT_EQ(got.corruption.reason, "record length 4294967295 exceeds the 64 MiB limit");

  // Within the limit but beyond the end of the file: reported, not allocated.
  Encoder len;
  len.PutFixed32(kMaxRecordPayload);
  bytes.replace(offsets[1] + 4, 4, len.data());
  WriteFile(path, bytes);
  {
    AllocationProbe probe;
    got = ReadAll(path);
    largest = probe.largest();
  }
  EXPECT_LT(largest, 1u << 20);
  EXPECT_EQ(got.corruption.offset, offsets[1]);
  EXPECT_EQ(got.corruption.reason, "truncated payload (3 of 67108864 bytes)");

  absl::StatusOr<LogRecovery> rec = RecoverLog(path, Collected().Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_TRUE(rec->truncated);
  EXPECT_EQ(rec->good_offset, offsets[1]);
  EXPECT_EQ(std::filesystem::file_size(path), offsets[1]);
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
  EXPECT_EQ(got.corruption.reason, "zero record type");

  Collected c;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, c.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(c.records, records);
  EXPECT_TRUE(rec->truncated);
  EXPECT_EQ(rec->good_offset, good);
  EXPECT_EQ(rec->discarded_bytes, 4096u);
  EXPECT_EQ(ReadFile(rec->discarded_path), std::string(4096, '\0'));
  EXPECT_EQ(std::filesystem::file_size(path), good);
}

TEST(LogTest, ZeroedMiddleRecordHidesEverythingAfterIt) {
  TempDir dir;
  const std::string path = dir.File("log");
  const std::vector<Rec> records = {{1, "one"}, {2, "two"}, {3, "three"}};
  const std::vector<uint64_t> offsets = WriteLog(path, records);
  std::string bytes = ReadFile(path);
  std::fill(bytes.begin() + offsets[1], bytes.begin() + offsets[2], '\0');
  WriteFile(path, bytes);

  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.records, Prefix(records, 1));
  EXPECT_EQ(got.corruption.offset, offsets[1]);
  EXPECT_EQ(got.corruption.reason, "zero record type");
}

TEST(LogTest, ApplyErrorStopsRecoveryAndLeavesFileAlone) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteLog(path, {{1, "a"}, {2, "b"}, {3, "c"}});
  WriteFile(path, ReadFile(path) + "torn");
  const std::string before = ReadFile(path);
  int calls = 0;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, [&calls](uint8_t type, absl::string_view) {
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

  absl::StatusOr<LogRecovery> rec = RecoverLog(path, Collected().Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->discarded_path, first_copy + ".1");
  EXPECT_EQ(ReadFile(first_copy + ".1"), "xyz");
  EXPECT_EQ(ReadFile(first_copy), "from an earlier crash");
}

TEST(LogTest, BadMagicIsReportedAndNeverTruncated) {
  TempDir dir;
  for (const std::string& content : {std::string("NOTALOG!") + std::string(100, 'x'),
                                     std::string("GBLOG\0\x02\n", 8),  // unknown version
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

    absl::StatusOr<LogRecovery> rec = RecoverLog(path, Collected().Apply());
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
    absl::StatusOr<LogRecovery> rec = RecoverLog(path, c.Apply());
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
