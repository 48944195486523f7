// Shared by the tests of core/storage/ (crc32c_test.cc, coding_test.cc, log_test.cc,
// log_recovery_test.cc): a temporary directory, whole-file reads and writes, records and reading
// a whole log, random bytes, writing a log, and collecting what recovery applies.
#ifndef GRAPHBANDIT_TESTS_CORE_STORAGE_LOG_TEST_UTIL_H_
#define GRAPHBANDIT_TESTS_CORE_STORAGE_LOG_TEST_UTIL_H_

#include <stdlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/storage/crc32c.h"
#include "core/storage/log_format.h"
#include "core/storage/log_reader.h"
#include "core/storage/log_writer.h"
#include "gtest/gtest.h"

namespace graphbandit::storage::log_test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "log_test.XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) {
      ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
    } else {
      path_ = made;
    }
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline bool Exists(const std::string& path) { return std::filesystem::exists(path); }

struct Rec {
  uint8_t type;
  std::string payload;
  bool operator==(const Rec& o) const { return type == o.type && payload == o.payload; }
};

inline std::ostream& operator<<(std::ostream& os, const Rec& r) {
  return os << "Rec{type=" << int{r.type} << ", " << r.payload.size() << " bytes}";
}

struct ReadAllResult {
  std::vector<Rec> records;
  std::vector<uint64_t> seqs;
  std::vector<LogDamage> skipped;
  ReadResult end = ReadResult::kRecord;
  LogCorruption corruption;
  uint64_t good_offset = 0;
};

inline ReadAllResult ReadAll(const std::string& path) {
  ReadAllResult out;
  absl::StatusOr<std::unique_ptr<LogReader>> reader = LogReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  uint8_t type = 0;
  std::string payload;
  for (;;) {
    const ReadResult r = (*reader)->Next(&type, &payload);
    if (r != ReadResult::kRecord) {
      out.end = r;
      break;
    }
    out.records.push_back({type, payload});
    out.seqs.push_back((*reader)->seq());
  }
  out.skipped = (*reader)->skipped();
  if (out.end == ReadResult::kCorruption) {
    out.corruption = (*reader)->corruption();
    EXPECT_TRUE((*reader)->io_status().ok());
  }
  out.good_offset = (*reader)->good_offset();
  // Terminal results are sticky.
  EXPECT_EQ((*reader)->Next(&type, &payload), out.end);
  EXPECT_TRUE(payload.empty());
  return out;
}

inline std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Writes `records` to a new log at `path`, record i with sequence number
// first_seq + i; returns each record's offset.
inline std::vector<uint64_t> WriteLog(const std::string& path, const std::vector<Rec>& records,
                                      uint64_t first_seq = 1) {
  std::vector<uint64_t> offsets;
  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return offsets;
  for (size_t i = 0; i < records.size(); ++i) {
    offsets.push_back((*w)->size());
    EXPECT_TRUE((*w)->Append(first_seq + i, records[i].type, records[i].payload).ok());
  }
  EXPECT_TRUE((*w)->Sync().ok());
  EXPECT_TRUE((*w)->Close().ok());
  return offsets;
}

// Writes `records` in the version-1 format (which LogWriter no longer writes),
// byte by byte as log_format.h describes it; returns each record's offset.
inline std::vector<uint64_t> WriteLogV1(const std::string& path, const std::vector<Rec>& records) {
  std::string bytes(kLogMagicV1);
  std::vector<uint64_t> offsets;
  auto put32 = [&bytes](uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  for (const Rec& r : records) {
    offsets.push_back(bytes.size());
    const char type = static_cast<char>(r.type);
    put32(Mask(Crc32cExtend(Crc32cExtend(0, &type, 1), r.payload.data(), r.payload.size())));
    put32(static_cast<uint32_t>(r.payload.size()));
    bytes.push_back(type);
    bytes += r.payload;
  }
  WriteFile(path, bytes);
  return offsets;
}

struct Collected {
  std::vector<Rec> records;
  std::vector<uint64_t> seqs;
  ApplyRecord Apply() {
    return [this](uint64_t seq, uint8_t type, absl::string_view payload) {
      records.push_back({type, std::string(payload)});
      seqs.push_back(seq);
      return absl::OkStatus();
    };
  }
};

inline std::vector<Rec> Prefix(const std::vector<Rec>& v, size_t n) {
  return std::vector<Rec>(v.begin(), v.begin() + n);
}

}  // namespace graphbandit::storage::log_test

#endif  // GRAPHBANDIT_TESTS_CORE_STORAGE_LOG_TEST_UTIL_H_
