// Tests for the record log: CRC-32C, payload coding, LogWriter, LogReader and
// RecoverLog, including torn writes, bit flips and malformed headers.

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

// ---------------------------------------------------------------------------
// Allocation probe: lets a test assert that decoding a hostile length field
// did not allocate anything near the declared size. Only counts while armed,
// so the rest of the binary is unaffected apart from the indirection.

namespace {
std::atomic<bool> g_probe_armed{false};
std::atomic<size_t> g_largest_allocation{0};

void* ProbedAlloc(size_t n) {
  if (g_probe_armed.load(std::memory_order_relaxed)) {
    size_t prev = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > prev && !g_largest_allocation.compare_exchange_weak(prev, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

class AllocationProbe {
 public:
  AllocationProbe() {
    g_largest_allocation.store(0);
    g_probe_armed.store(true);
  }
  ~AllocationProbe() { g_probe_armed.store(false); }
  size_t largest() const { return g_largest_allocation.load(); }
};
}  // namespace

void* operator new(size_t n) { return ProbedAlloc(n); }
void* operator new[](size_t n) { return ProbedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace graphbandit::storage {
namespace {

// ---------------------------------------------------------------------------
// Helpers

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "log_test.XXXXXX").string();
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
  std::string File(absl::string_view name) const {
    return absl::StrCat(path_, "/", name);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

struct Rec {
  uint8_t type;
  std::string payload;
  bool operator==(const Rec& o) const {
    return type == o.type && payload == o.payload;
  }
};

std::ostream& operator<<(std::ostream& os, const Rec& r) {
  return os << "Rec{type=" << int{r.type} << ", " << r.payload.size()
            << " bytes}";
}

struct ReadAllResult {
  std::vector<Rec> records;
  ReadResult end = ReadResult::kRecord;
  LogCorruption corruption;
  uint64_t good_offset = 0;
};

ReadAllResult ReadAll(const std::string& path) {
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
  }
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

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Writes `records` to a new log at `path`; returns each record's offset.
std::vector<uint64_t> WriteLog(const std::string& path,
                               const std::vector<Rec>& records) {
  std::vector<uint64_t> offsets;
  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return offsets;
  for (const Rec& r : records) {
    offsets.push_back((*w)->size());
    EXPECT_TRUE((*w)->Append(r.type, r.payload).ok());
  }
  EXPECT_TRUE((*w)->Sync().ok());
  EXPECT_TRUE((*w)->Close().ok());
  return offsets;
}

struct Collected {
  std::vector<Rec> records;
  std::function<absl::Status(uint8_t, absl::string_view)> Apply() {
    return [this](uint8_t type, absl::string_view payload) {
      records.push_back({type, std::string(payload)});
      return absl::OkStatus();
    };
  }
};

std::vector<Rec> Prefix(const std::vector<Rec>& v, size_t n) {
  return std::vector<Rec>(v.begin(), v.begin() + n);
}

// ---------------------------------------------------------------------------
// CRC-32C

uint32_t BitwiseCrc32c(absl::string_view s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  // RFC 3720 (iSCSI) B.4 vectors.
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0'), descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<char>(i);
    descending[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  std::mt19937_64 rng(1);
  const std::string data = RandomBytes(rng, 300);
  for (size_t start = 0; start < 8; ++start) {
    for (size_t len = 0; start + len <= data.size(); ++len) {
      const absl::string_view s(data.data() + start, len);
      ASSERT_EQ(Crc32c(s), BitwiseCrc32c(s)) << start << "+" << len;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsOneShot) {
  std::mt19937_64 rng(2);
  const std::string data = RandomBytes(rng, 100);
  const uint32_t whole = Crc32c(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t first = Crc32cExtend(0, data.data(), split);
    EXPECT_EQ(Crc32cExtend(first, data.data() + split, data.size() - split),
              whole);
  }
}

TEST(Crc32cTest, MaskRoundTripsAndChangesValue) {
  std::mt19937_64 rng(3);
  std::vector<uint32_t> values = {0u, 1u, 0xFFFFFFFFu, 0x80000000u,
                                  Crc32c("foo")};
  for (int i = 0; i < 1000; ++i) values.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t c : values) {
    EXPECT_EQ(Unmask(Mask(c)), c);
    EXPECT_EQ(Mask(Unmask(c)), c);
    EXPECT_NE(Mask(c), c);
    EXPECT_NE(Mask(Mask(c)), Mask(c));
  }
}

// ---------------------------------------------------------------------------
// Coding

uint64_t Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof(b));
  return b;
}
double FromBits(uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof(d));
  return d;
}

const std::vector<double>& InterestingDoubles() {
  static const std::vector<double> v = {
      0.0,
      -0.0,
      1.5,
      -3.25e-300,
      std::numeric_limits<double>::infinity(),
      -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::max(),
      std::numeric_limits<double>::lowest(),
      FromBits(0x7FF8000000000000ull),  // canonical quiet NaN
      FromBits(0x7FF8000000000123ull),  // quiet NaN with payload
      FromBits(0x7FF0000000000001ull),  // signalling NaN
      FromBits(0xFFF8DEADBEEF0001ull),  // negative NaN with payload
  };
  return v;
}

TEST(CodingTest, RoundTripsEveryTypeBitExactly) {
  const std::vector<uint64_t> varints = {
      0, 1, 127, 128, 255, 300, 16383, 16384, (1ull << 32) - 1, 1ull << 32,
      (1ull << 63) - 1, 1ull << 63, std::numeric_limits<uint64_t>::max()};
  const std::vector<double>& doubles = InterestingDoubles();
  const std::string binary("a\0b\xff", 4);

  Encoder enc;
  enc.PutU8(0);
  enc.PutU8(255);
  enc.PutFixed32(0);
  enc.PutFixed32(0xDEADBEEFu);
  enc.PutFixed64(0x0123456789ABCDEFull);
  for (uint64_t v : varints) enc.PutVarint64(v);
  for (double d : doubles) enc.PutDouble(d);
  enc.PutString("");
  enc.PutString(binary);
  enc.PutString(std::string(1000, 'x'));
  enc.PutDoubles(nullptr, 0);
  enc.PutDoubles(doubles.data(), doubles.size());

  Decoder dec(enc.data());
  uint8_t u8;
  ASSERT_TRUE(dec.GetU8(&u8));
  EXPECT_EQ(u8, 0);
  ASSERT_TRUE(dec.GetU8(&u8));
  EXPECT_EQ(u8, 255);
  uint32_t u32;
  ASSERT_TRUE(dec.GetFixed32(&u32));
  EXPECT_EQ(u32, 0u);
  ASSERT_TRUE(dec.GetFixed32(&u32));
  EXPECT_EQ(u32, 0xDEADBEEFu);
  uint64_t u64;
  ASSERT_TRUE(dec.GetFixed64(&u64));
  EXPECT_EQ(u64, 0x0123456789ABCDEFull);
  for (uint64_t v : varints) {
    ASSERT_TRUE(dec.GetVarint64(&u64));
    EXPECT_EQ(u64, v);
  }
  for (double d : doubles) {
    double got;
    ASSERT_TRUE(dec.GetDouble(&got));
    EXPECT_EQ(Bits(got), Bits(d));
  }
  std::string s = "junk";
  ASSERT_TRUE(dec.GetString(&s));
  EXPECT_EQ(s, "");
  ASSERT_TRUE(dec.GetString(&s));
  EXPECT_EQ(s, binary);
  ASSERT_TRUE(dec.GetString(&s));
  EXPECT_EQ(s, std::string(1000, 'x'));
  std::vector<double> got = {1.0};
  ASSERT_TRUE(dec.GetDoubles(&got, 0));
  EXPECT_TRUE(got.empty());
  ASSERT_TRUE(dec.GetDoubles(&got, doubles.size()));
  ASSERT_EQ(got.size(), doubles.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(Bits(got[i]), Bits(doubles[i]));
  EXPECT_TRUE(dec.done());
  EXPECT_EQ(dec.remaining(), 0u);
  EXPECT_FALSE(dec.GetU8(&u8));
}

TEST(CodingTest, ByteLayoutIsLittleEndianAndStable) {
  Encoder enc;
  enc.PutFixed32(0x04030201u);
  enc.PutFixed64(0x0807060504030201ull);
  enc.PutVarint64(300);  // 0xAC 0x02
  enc.PutDouble(1.0);    // 0x3FF0000000000000
  enc.PutString("hi");
  EXPECT_EQ(enc.data(), std::string("\x01\x02\x03\x04"
                                    "\x01\x02\x03\x04\x05\x06\x07\x08"
                                    "\xAC\x02"
                                    "\x00\x00\x00\x00\x00\x00\xF0\x3F"
                                    "\x02hi",
                                    4 + 8 + 2 + 8 + 3));
  Encoder max;
  max.PutVarint64(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(max.data(), std::string(9, '\xff') + '\x01');
}

TEST(CodingTest, ReleaseEmptiesEncoder) {
  Encoder enc;
  enc.PutString("abc");
  const std::string out = enc.Release();
  EXPECT_EQ(out, "\x03" "abc");
  EXPECT_EQ(enc.size(), 0u);
  enc.PutU8(7);
  EXPECT_EQ(enc.data(), "\x07");
}

// Decodes the schema used by RejectsTruncationAtEveryByte; false if any field
// fails, checking that a failing call consumed nothing.
bool DecodeSchema(absl::string_view in) {
  Decoder d(in);
  uint8_t u8;
  uint32_t u32;
  uint64_t u64;
  double dbl;
  std::string s;
  std::vector<double> v;
  auto step = [&d](bool ok, size_t before) {
    if (!ok) {
      EXPECT_EQ(d.remaining(), before) << "failed Get consumed input";
    }
    return ok;
  };
  size_t r;
  r = d.remaining(); if (!step(d.GetU8(&u8), r)) return false;
  r = d.remaining(); if (!step(d.GetFixed32(&u32), r)) return false;
  r = d.remaining(); if (!step(d.GetVarint64(&u64), r)) return false;
  r = d.remaining(); if (!step(d.GetFixed64(&u64), r)) return false;
  r = d.remaining(); if (!step(d.GetDouble(&dbl), r)) return false;
  r = d.remaining(); if (!step(d.GetString(&s), r)) return false;
  r = d.remaining(); if (!step(d.GetDoubles(&v, 100), r)) return false;
  r = d.remaining(); if (!step(d.GetVarint64(&u64), r)) return false;
  return d.done();
}

TEST(CodingTest, RejectsTruncationAtEveryByte) {
  Encoder enc;
  enc.PutU8(9);
  enc.PutFixed32(123456);
  enc.PutVarint64(std::numeric_limits<uint64_t>::max());
  enc.PutFixed64(42);
  enc.PutDouble(-0.0);
  enc.PutString("hello, world");
  const double ds[] = {1, 2, 3};
  enc.PutDoubles(ds, 3);
  enc.PutVarint64(1ull << 40);
  const std::string full = enc.data();
  ASSERT_TRUE(DecodeSchema(full));
  for (size_t len = 0; len < full.size(); ++len) {
    EXPECT_FALSE(DecodeSchema(absl::string_view(full.data(), len))) << len;
  }
  // Trailing garbage is visible through done().
  EXPECT_FALSE(DecodeSchema(full + "x"));
}

TEST(CodingTest, FailedGetLeavesOutputUntouched) {
  Decoder d(absl::string_view("\x05" "ab", 3));  // String claims 5, has 2.
  std::string s = "keep";
  EXPECT_FALSE(d.GetString(&s));
  EXPECT_EQ(s, "keep");
  std::vector<double> v = {4.0};
  EXPECT_FALSE(d.GetDoubles(&v, 10));
  EXPECT_EQ(v, std::vector<double>{4.0});
  uint32_t u32 = 7;
  EXPECT_FALSE(d.GetFixed32(&u32));
  EXPECT_EQ(u32, 7u);
  EXPECT_EQ(d.remaining(), 3u);
}

TEST(CodingTest, RejectsOverlongAndOverflowingVarints) {
  uint64_t v = 99;
  // 11 bytes: continuation bit still set after the 10th byte.
  const std::string eleven = std::string(10, '\x80') + '\x00';
  Decoder d1(eleven);
  EXPECT_FALSE(d1.GetVarint64(&v));
  EXPECT_EQ(d1.remaining(), eleven.size());
  // 10 bytes whose last byte would set bits above 63.
  const std::string overflow = std::string(9, '\xff') + '\x02';
  Decoder d2(overflow);
  EXPECT_FALSE(d2.GetVarint64(&v));
  EXPECT_EQ(v, 99u);
  // Unterminated.
  const std::string unterminated(5, '\x80');
  Decoder d3(unterminated);
  EXPECT_FALSE(d3.GetVarint64(&v));
  // The same rules apply to length prefixes.
  std::string s;
  const std::string long_prefix = eleven + "payload";
  Decoder d4(long_prefix);
  EXPECT_FALSE(d4.GetString(&s));
  std::vector<double> dv;
  const std::string overflow_prefix = overflow + std::string(64, 'x');
  Decoder d5(overflow_prefix);
  EXPECT_FALSE(d5.GetDoubles(&dv, 1000));
  // A 10-byte encoding with final byte 1 is the largest valid value.
  const std::string largest = std::string(9, '\xff') + '\x01';
  Decoder d6(largest);
  EXPECT_TRUE(d6.GetVarint64(&v));
  EXPECT_EQ(v, std::numeric_limits<uint64_t>::max());
}

TEST(CodingTest, HugeDeclaredLengthsDoNotAllocate) {
  const std::vector<uint64_t> huge = {
      1ull << 30, (1ull << 61) + 1, 1ull << 62,
      std::numeric_limits<uint64_t>::max() / 8 + 1,
      std::numeric_limits<uint64_t>::max()};
  for (uint64_t n : huge) {
    Encoder enc;
    enc.PutVarint64(n);
    enc.PutFixed64(0x1111111111111111ull);  // 8 bytes of "data".
    const std::string bytes = enc.Release();

    std::string s = "keep";
    std::vector<double> v = {1.0};
    bool string_ok = true, doubles_ok = true, doubles_max_ok = true;
    size_t largest;
    {
      AllocationProbe probe;
      Decoder ds(bytes);
      string_ok = ds.GetString(&s);
      Decoder dd(bytes);
      doubles_ok = dd.GetDoubles(&v, std::numeric_limits<size_t>::max());
      Decoder dm(bytes);
      doubles_max_ok = dm.GetDoubles(&v, 1000);
      largest = probe.largest();
    }
    EXPECT_FALSE(string_ok) << n;
    EXPECT_FALSE(doubles_ok) << n;
    EXPECT_FALSE(doubles_max_ok) << n;
    EXPECT_EQ(s, "keep");
    EXPECT_EQ(v, std::vector<double>{1.0});
    EXPECT_LT(largest, 4096u) << "allocation driven by length field " << n;
  }
}

TEST(CodingTest, DoublesCountAboveMaximumIsRejectedEvenIfPresent) {
  const double ds[] = {1, 2, 3, 4};
  Encoder enc;
  enc.PutDoubles(ds, 4);
  std::vector<double> v;
  Decoder d(enc.data());
  EXPECT_FALSE(d.GetDoubles(&v, 3));
  EXPECT_EQ(d.remaining(), enc.size());
  EXPECT_TRUE(d.GetDoubles(&v, 4));
  EXPECT_EQ(v, std::vector<double>(ds, ds + 4));
}

TEST(CodingTest, RandomInputNeverMisbehaves) {
  // Cheap stand-in for the fuzzer: the sanitizer build makes this meaningful.
  std::mt19937_64 rng(4);
  for (int iter = 0; iter < 20000; ++iter) {
    const std::string in = RandomBytes(rng, rng() % 40);
    Decoder d(in);
    std::string s;
    std::vector<double> v;
    uint64_t u64;
    uint32_t u32;
    uint8_t u8;
    double dbl;
    for (int step = 0; step < 12 && !d.done(); ++step) {
      const size_t before = d.remaining();
      bool ok = false;
      switch (rng() % 7) {
        case 0: ok = d.GetU8(&u8); break;
        case 1: ok = d.GetFixed32(&u32); break;
        case 2: ok = d.GetFixed64(&u64); break;
        case 3: ok = d.GetVarint64(&u64); break;
        case 4: ok = d.GetDouble(&dbl); break;
        case 5: ok = d.GetString(&s); break;
        case 6: ok = d.GetDoubles(&v, 4); break;
      }
      if (ok) {
        ASSERT_LT(d.remaining(), before);
      } else {
        ASSERT_EQ(d.remaining(), before);
      }
      ASSERT_LE(s.size(), in.size());
      ASSERT_LE(v.size(), 4u);
    }
  }
}

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
      case 0: len = 0; break;
      case 1: len = rng() % 64; break;
      case 2: len = rng() % 4096; break;
      default: len = rng() % 100001; break;
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
      ASSERT_TRUE((*w)->Append(records[i].type, records[i].payload).ok());
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
      ASSERT_TRUE((*w)->Append(records[i].type, records[i].payload).ok());
      expected_size += kLogHeaderSize + records[i].payload.size();
    }
    EXPECT_EQ((*w)->size(), expected_size);
    ASSERT_TRUE((*w)->Sync().ok());
    // No Close(): the destructor must leave a complete file.
  }
  EXPECT_EQ(std::filesystem::file_size(path), expected_size);
  EXPECT_EQ(ReadFile(path).substr(0, kLogMagicSize),
            std::string("GBLOG\0\x01\n", 8));

  const ReadAllResult got = ReadAll(path);
  EXPECT_EQ(got.end, ReadResult::kEndOfFile);
  EXPECT_EQ(got.good_offset, expected_size);
  ASSERT_EQ(got.records.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_EQ(got.records[i], records[i]) << "record " << i;
  }

  Collected c;
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, c.Apply());
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
  WriteLog(path, {{0x2A, "xyz"}});
  const std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), kLogMagicSize + kLogHeaderSize + 3);
  const std::string rec = bytes.substr(kLogMagicSize);
  Decoder d(rec);
  uint32_t masked, length;
  uint8_t type;
  ASSERT_TRUE(d.GetFixed32(&masked));
  ASSERT_TRUE(d.GetFixed32(&length));
  ASSERT_TRUE(d.GetU8(&type));
  EXPECT_EQ(length, 3u);
  EXPECT_EQ(type, 0x2A);
  EXPECT_EQ(Unmask(masked), Crc32c(std::string("\x2A" "xyz")));
  EXPECT_EQ(rec.substr(kLogHeaderSize), "xyz");
}

TEST(LogTest, WriterRejectsInvalidRecordsAndStaysUsable) {
  TempDir dir;
  const std::string path = dir.File("log");
  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->Append(0, "x").code(), absl::StatusCode::kInvalidArgument);
  {
    const std::string too_big(size_t{kMaxRecordPayload} + 1, 'z');
    EXPECT_EQ((*w)->Append(1, too_big).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*w)->size(), kLogMagicSize);
  ASSERT_TRUE((*w)->Append(1, "ok").ok());
  {
    const std::string max_size(kMaxRecordPayload, 'm');
    ASSERT_TRUE((*w)->Append(2, max_size).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Append(1, "late").code(),
            absl::StatusCode::kFailedPrecondition);
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
  const absl::Status first = (*w)->Append(2, std::string(1000, 'p'));
  const absl::Status later = (*w)->Append(3, "small");
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
  absl::StatusOr<LogRecovery> rec = RecoverLog(path, c.Apply());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(c.records, (std::vector<Rec>{{1, "first"}}));
  EXPECT_TRUE(rec->truncated);
  EXPECT_EQ(rec->good_offset, good);
  EXPECT_EQ(rec->discarded_bytes, 20u);
  ASSERT_TRUE(rec->corruption.has_value());
  EXPECT_EQ(rec->corruption->reason, "truncated payload (11 of 1000 bytes)");
  EXPECT_EQ(std::filesystem::file_size(path), good);
}

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
            : absl::StrCat("truncated payload (", torn - kLogHeaderSize,
                           " of 150 bytes)");
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
        EXPECT_EQ(reason, (records[victim].type ^ flip) == 0
                              ? "zero record type"
                              : "checksum mismatch");
      } else {
        // Length damaged: too long for the limit or the file, or the CRC then
        // covers the wrong bytes.
        EXPECT_TRUE(reason == "checksum mismatch" ||
                    reason.rfind("truncated payload", 0) == 0 ||
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
  EXPECT_EQ(got.corruption.reason,
            "record length 4294967295 exceeds the 64 MiB limit");

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
  absl::StatusOr<LogRecovery> rec =
      RecoverLog(path, [&calls](uint8_t type, absl::string_view) {
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
  for (const std::string& content :
       {std::string("NOTALOG!") + std::string(100, 'x'),
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
    EXPECT_EQ(got.corruption.reason,
              absl::StrCat("truncated magic (", len, " of 8 bytes)"));

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

TEST(LogTest, WriterInitialisesEmptyFile) {
  TempDir dir;
  const std::string path = dir.File("log");
  WriteFile(path, "");
  absl::StatusOr<std::unique_ptr<LogWriter>> w = LogWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->size(), kLogMagicSize);
  ASSERT_TRUE((*w)->Append(5, "five").ok());
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
      RecoverLog(path, [&calls](uint8_t, absl::string_view) {
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
  EXPECT_EQ(std::filesystem::status(path).permissions() &
                std::filesystem::perms::others_write,
            std::filesystem::perms::none);

  EXPECT_EQ(LogWriter::Open(dir.File("no/such/dir")).status().code(),
            absl::StatusCode::kNotFound);
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
