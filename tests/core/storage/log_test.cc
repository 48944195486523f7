// Tests for the record log's framing (core/storage/log_writer.h, log_reader.h): round trips,
// the record header, invalid records, failed writes, empty and missing files.

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
#include "tests/core/storage/log_test_util.h"

namespace graphbandit::storage {
namespace {

using log_test::Collected;
using log_test::Exists;
using log_test::RandomBytes;
using log_test::ReadAll;
using log_test::ReadAllResult;
using log_test::ReadFile;
using log_test::Rec;
using log_test::TempDir;
using log_test::WriteFile;
using log_test::WriteLog;

// ---------------------------------------------------------------------------
// Writer and reader

TEST(LogTest, RoundTripsManyRecordsOfVaryingSize) {
  TempDir dir;
  const std::string path = dir.File("log");
  std::mt19937_64 rng(5);
  std::vector<Rec> records;
  for (int i = 0; i < 1000; ++i) {
    size_t len;
    switch (i % 4) {
      case 0:
        len = 0;
        break;
      case 1:
        len = rng() % 64;
        break;
      case 2:
        len = rng() % 4096;
        break;
      default:
        len = rng() % 100001;
        break;
    }
    records.push_back({static_cast<uint8_t>(1 + i % 255), RandomBytes(rng, len)});
  }
  // A few records larger than the reader's 256 KiB buffer.
  records.insert(records.begin() + 500, {7, RandomBytes(rng, 300 << 10)});
  records.push_back({255, RandomBytes(rng, 1 << 20)});

  // Written in two sessions to cover reopening for append.
  const size_t half = records.size() / 2;
  uint64_t expected_size = kLogMagicSize;
  {
    absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->size(), kLogMagicSize);
    for (size_t i = 0; i < half; ++i) {
      ASSERT_TRUE((*w)->Append(1000 + i, records[i].type, records[i].payload).ok());
      expected_size += kLogHeaderSize + records[i].payload.size();
      ASSERT_EQ((*w)->size(), expected_size);
    }
    ASSERT_TRUE((*w)->Sync().ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  {
    absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->size(), expected_size);
    for (size_t i = half; i < records.size(); ++i) {
      ASSERT_TRUE((*w)->Append(1000 + i, records[i].type, records[i].payload).ok());
      expected_size += kLogHeaderSize + records[i].payload.size();
    }
    EXPECT_EQ((*w)->size(), expected_size);
    ASSERT_TRUE((*w)->Sync().ok());
    // No Close(): the destructor must leave a complete file.
  }
  EXPECT_EQ(std::filesystem::file_size(path), expected_size);
  EXPECT_EQ(ReadFile(path).substr(0, kLogMagicSize), std::string("GBLOG\0\x02\n", 8));

  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.end, ReadResult::kEndOfFile);
  EXPECT_EQ(got.good_offset, expected_size);
  ASSERT_EQ(got.records.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_EQ(got.records[i], records[i]) << "record " << i;
    ASSERT_EQ(got.seqs[i], 1000 + i) << "record " << i;
  }
  EXPECT_TRUE(got.skipped.empty());

  Collected c;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, c.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->records, records.size());
  EXPECT_EQ(rec->good_offset, expected_size);
  EXPECT_FALSE(rec->truncated);
  EXPECT_FALSE(rec->corruption.has_value());
  EXPECT_EQ(rec->discarded_bytes, 0u);
  EXPECT_EQ(c.records, records);
  EXPECT_EQ(std::filesystem::file_size(path), expected_size);
}

TEST(LogTest, RecordHeaderLayout) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteLog(path, {{0x2A, "xyz"}}, 0x0102030405060708u);
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), kLogMagicSize + kLogHeaderSize + 3);
  EXPECT_EQ(bytes.substr(0, kLogMagicSize), std::string("GBLOG\0\x02\n", 8));
  const std::string rec = bytes.substr(kLogMagicSize);
  Decoder d(rec);
  uint32_t header_crc, payload_crc, length;
  uint8_t type, zero[3];
  uint64_t seq, offset;
  ASSERT_TRUE(d.GetFixed32(&header_crc));
  ASSERT_TRUE(d.GetFixed32(&payload_crc));
  ASSERT_TRUE(d.GetFixed32(&length));
  ASSERT_TRUE(d.GetU8(&type));
  for (uint8_t& z : zero) ASSERT_TRUE(d.GetU8(&z));
  ASSERT_TRUE(d.GetFixed64(&seq));
  ASSERT_TRUE(d.GetFixed64(&offset));
  EXPECT_EQ(length, 3u);
  EXPECT_EQ(type, 0x2A);
  EXPECT_EQ(zero[0] | zero[1] | zero[2], 0);
  EXPECT_EQ(seq, 0x0102030405060708u);
  EXPECT_EQ(offset, kLogMagicSize);
  EXPECT_EQ(Unmask(header_crc), Crc32c(rec.substr(4, kLogHeaderSize - 4)));
  EXPECT_EQ(Unmask(payload_crc), Crc32c("xyz"));
  EXPECT_EQ(rec.substr(kLogHeaderSize), "xyz");
}

TEST(LogTest, WriterRejectsInvalidRecordsAndStaysUsable) {
  TempDir dir;
  const std::string path = dir.File("log");
  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->Append(7, 0, "x").code(), absl::StatusCode::kInvalidArgument);
  {
    const std::string too_big(size_t{kMaxRecordPayload} + 1, 'z');
    EXPECT_EQ((*w)->Append(7, 1, too_big).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*w)->size(), kLogMagicSize);
  ASSERT_TRUE((*w)->Append(7, 1, "ok").ok());
  {
    const std::string max_size(kMaxRecordPayload, 'm');
    ASSERT_TRUE((*w)->Append(7, 2, max_size).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Append(7, 1, "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Sync().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*w)->Close().ok());

  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.end, ReadResult::kEndOfFile);
  ASSERT_EQ(got.records.size(), 2u);
  EXPECT_EQ(got.records[0], (Rec{1, "ok"}));
  EXPECT_EQ(got.records[1].type, 2);
  EXPECT_EQ(got.records[1].payload, std::string(kMaxRecordPayload, 'm'));
}

TEST(LogTest, FailedWritePoisonsWriterAndRecoveryRemovesPartialRecord) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteLog(path, {{1, "first"}});
  const uint64_t good = std::filesystem::file_size(path);

  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  // RLIMIT_FSIZE makes the kernel accept part of the record and then fail
  // with EFBIG: a deterministic short write followed by an error.
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = good + 20;
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const absl::Status first = (*w)->Append(7, 2, std::string(1000, 'p'));
  const absl::Status later = (*w)->Append(7, 3, "small");
  const absl::Status sync = (*w)->Sync();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(first.code(), absl::StatusCode::kDataLoss) << first;
  EXPECT_NE(first.message().find("File too large"), std::string::npos) << first;
  EXPECT_EQ(later, first);
  EXPECT_EQ(sync, first);
  EXPECT_EQ((*w)->size(), good + 20);
  EXPECT_EQ((*w)->Close(), first);
  EXPECT_EQ(std::filesystem::file_size(path), good + 20);

  Collected c;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, 1, c.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(c.records, (std::vector<Rec>{{1, "first"}}));
  EXPECT_TRUE(rec->truncated);
  EXPECT_EQ(rec->good_offset, good);
  EXPECT_EQ(rec->discarded_bytes, 20u);
  ASSERT_TRUE(rec->corruption.has_value());
  EXPECT_EQ(rec->corruption->reason, "truncated header (20 of 32 bytes)");
  EXPECT_EQ(std::filesystem::file_size(path), good);
}

TEST(LogTest, WriterInitialisesEmptyFile) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteFile(path, "");
  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->size(), kLogMagicSize);
  ASSERT_TRUE((*w)->Append(7, 5, "five").ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(ReadAll(path).records, (std::vector<Rec>{{5, "five"}}));
}

TEST(LogTest, MissingFile) {
  TempDir dir;
  const std::string path = dir.File("missing");
  absl::StatusOr<std::unique_ptr<LogReader>> r = LogReader::Open(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();

  int calls = 0;
  absl::StatusOr<LogRecovery> rec =
      RecoverLog(path, 1, [&calls](uint64_t, uint8_t, absl::string_view) {
        ++calls;
        return absl::OkStatus();
      });
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->records, 0u);
  EXPECT_FALSE(rec->truncated);
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(Exists(path));

  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->size(), kLogMagicSize);
  EXPECT_EQ(ReadFile(path), std::string(kLogMagic));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::others_write,
            std::filesystem::perms::none);

  EXPECT_EQ(LogWriter::Open(dir.File("no/such/dir")).status().code(), absl::StatusCode::kNotFound);
}

TEST(LogTest, ReaderOnEmptyLogReportsEndOfFile) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteLog(path, {});
  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.end, ReadResult::kEndOfFile);
  EXPECT_TRUE(got.records.empty());
  EXPECT_EQ(got.good_offset, kLogMagicSize);
}

}  // namespace
}  // namespace graphbandit::storage
