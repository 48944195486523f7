// Tests for CRC-32C (core/storage/crc32c.h): known vectors, a bitwise reference at every
// length and alignment, Extend, masking.

#include "core/storage/crc32c.h"

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
#include "core/storage/log_format.h"
#include "core/storage/log_reader.h"
#include "core/storage/log_writer.h"
#include "gtest/gtest.h"
#include "tests/core/storage/log_test_util.h"

namespace graphbandit::storage {
namespace {

using log_test::RandomBytes;

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

// Crc32c uses the SSE4.2 instruction where the CPU has it; the table version must agree
// (machines without it use that one), and so must the instruction where it exists.
TEST(Crc32cTest, BothImplementationsMatchTheReference) {
  std::mt19937_64 rng(4);
  const std::string data = RandomBytes(rng, 4096);
  for (size_t start = 0; start < 8; ++start) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63},
                       size_t{64}, size_t{1000}, size_t{4088}}) {
      const absl::string_view s(data.data() + start, len);
      const uint32_t want = BitwiseCrc32c(s);
      ASSERT_EQ(crc32c_internal::ExtendPortable(0, s.data(), s.size()), want)
          << start << "+" << len;
      if (crc32c_internal::HardwareAvailable()) {
        ASSERT_EQ(crc32c_internal::ExtendHardware(0, s.data(), s.size()), want)
            << start << "+" << len;
      }
    }
  }
  // Extending from a non-zero CRC, split at every offset of a short string.
  const absl::string_view s(data.data(), 40);
  for (size_t split = 0; split <= s.size(); ++split) {
    const uint32_t first = crc32c_internal::ExtendPortable(0, s.data(), split);
    EXPECT_EQ(crc32c_internal::ExtendPortable(first, s.data() + split, s.size() - split),
              BitwiseCrc32c(s));
    if (crc32c_internal::HardwareAvailable()) {
      EXPECT_EQ(crc32c_internal::ExtendHardware(first, s.data() + split, s.size() - split),
                BitwiseCrc32c(s));
    }
  }
}

TEST(Crc32cTest, ExtendEqualsOneShot) {
  std::mt19937_64 rng(2);
  const std::string data = RandomBytes(rng, 100);
  const uint32_t whole = Crc32c(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t first = Crc32cExtend(0, data.data(), split);
    EXPECT_EQ(Crc32cExtend(first, data.data() + split, data.size() - split), whole);
  }
}

TEST(Crc32cTest, MaskRoundTripsAndChangesValue) {
  std::mt19937_64 rng(3);
  std::vector<uint32_t> values = {0u, 1u, 0xFFFFFFFFu, 0x80000000u, Crc32c("foo")};
  for (int i = 0; i < 1000; ++i) values.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t c : values) {
    EXPECT_EQ(Unmask(Mask(c)), c);
    EXPECT_EQ(Mask(Unmask(c)), c);
    EXPECT_NE(Mask(c), c);
    EXPECT_NE(Mask(Mask(c)), Mask(c));
  }
}

}  // namespace
}  // namespace graphbandit::storage
