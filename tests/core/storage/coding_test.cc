// Tests for the payload coding (core/storage/coding.h): bit-exact round trips, the byte layout,
// truncation, overlong varints, hostile lengths that must not allocate, random input.

#include "core/storage/coding.h"

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
using log_test::RandomBytes;

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
  const std::vector<uint64_t> varints = {0,
                                         1,
                                         127,
                                         128,
                                         255,
                                         300,
                                         16383,
                                         16384,
                                         (1ull << 32) - 1,
                                         1ull << 32,
                                         (1ull << 63) - 1,
                                         1ull << 63,
                                         std::numeric_limits<uint64_t>::max()};
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
  EXPECT_EQ(out,
            "\x03"
            "abc");
  EXPECT_EQ(enc.size(), 0u);
  enc.PutU8(7);
  EXPECT_EQ(enc.data(), "\x07");
}

// An encoder given a buffer drops its contents and writes into its memory.
TEST(CodingTest, AnEncoderGivenABufferEncodesIntoItsMemory) {
  std::string buffer(1 << 16, 'x');
  const char* memory = buffer.data();
  Encoder reused(std::move(buffer));
  EXPECT_EQ(reused.size(), 0u);  // the old contents are gone
  Encoder fresh;
  for (Encoder* e : {&reused, &fresh}) {
    e->PutFixed64(7);
    e->PutString("abc");
    e->PutVarint64(300);
  }
  EXPECT_EQ(reused.data(), fresh.data());
  EXPECT_EQ(reused.data().data(), memory);  // no new allocation
  EXPECT_EQ(reused.Release().data(), memory);
}

// The same calls on an encoder and on a counting one: the counter's size is the encoder's
// byte count after every call, and it keeps no bytes.
TEST(CodingTest, ACountingEncoderCountsWhatAnEncoderWrites) {
  Encoder enc;
  Encoder counter = Encoder::Counting();
  EXPECT_TRUE(counter.counting());
  EXPECT_FALSE(enc.counting());
  const std::vector<double> doubles = InterestingDoubles();
  std::vector<std::function<void(Encoder*)>> calls = {
      [](Encoder* e) { e->PutU8(0xab); },
      [](Encoder* e) { e->PutFixed32(0xdeadbeef); },
      [](Encoder* e) { e->PutFixed64(1); },
      [](Encoder* e) { e->PutDouble(-0.0); },
      [](Encoder* e) { e->PutString(""); },
      [](Encoder* e) { e->PutString(std::string(300, 'x')); },
      [&](Encoder* e) { e->PutDoubles(doubles.data(), doubles.size()); },
      [&](Encoder* e) { e->PutRawDoubles(doubles.data(), 3); },
      [](Encoder* e) { e->PutDoubles(nullptr, 0); },
      [](Encoder* e) { e->Reserve(1 << 20); },
  };
  for (uint64_t v : {uint64_t{0}, uint64_t{127}, uint64_t{128}, uint64_t{16383}, uint64_t{16384},
                     uint64_t{1} << 35, std::numeric_limits<uint64_t>::max()}) {
    calls.push_back([v](Encoder* e) { e->PutVarint64(v); });
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i](&enc);
    calls[i](&counter);
    ASSERT_EQ(counter.size(), enc.size()) << "after call " << i;
  }
  EXPECT_GT(counter.size(), 300u);
  EXPECT_TRUE(counter.data().empty());
  EXPECT_TRUE(counter.Release().empty());
  EXPECT_EQ(counter.size(), 0u);
  EXPECT_TRUE(counter.counting());  // still counts after Release
  counter.PutU8(1);
  EXPECT_EQ(counter.size(), 1u);
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
  r = d.remaining();
  if (!step(d.GetU8(&u8), r)) return false;
  r = d.remaining();
  if (!step(d.GetFixed32(&u32), r)) return false;
  r = d.remaining();
  if (!step(d.GetVarint64(&u64), r)) return false;
  r = d.remaining();
  if (!step(d.GetFixed64(&u64), r)) return false;
  r = d.remaining();
  if (!step(d.GetDouble(&dbl), r)) return false;
  r = d.remaining();
  if (!step(d.GetString(&s), r)) return false;
  r = d.remaining();
  if (!step(d.GetDoubles(&v, 100), r)) return false;
  r = d.remaining();
  if (!step(d.GetVarint64(&u64), r)) return false;
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
  Decoder d(
      absl::string_view("\x05"
                        "ab",
                        3));  // String claims 5, has 2.
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
  const std::vector<uint64_t> huge = {1ull << 30, (1ull << 61) + 1, 1ull << 62,
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
        case 0:
          ok = d.GetU8(&u8);
          break;
        case 1:
          ok = d.GetFixed32(&u32);
          break;
        case 2:
          ok = d.GetFixed64(&u64);
          break;
        case 3:
          ok = d.GetVarint64(&u64);
          break;
        case 4:
          ok = d.GetDouble(&dbl);
          break;
        case 5:
          ok = d.GetString(&s);
          break;
        case 6:
          ok = d.GetDoubles(&v, 4);
          break;
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

}  // namespace
}  // namespace graphbandit::storage
