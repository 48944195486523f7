// Tests for the plot axes (sim/plot_axis.h): round ticks, log decades, tick labels.

#include "sim/plot_axis.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/sim/report_test_util.h"

namespace graphbandit::sim {
namespace {

using report_test::ExpectNiceTicks;

// ---------------------------------------------------------------- axes

TEST(AxisTest, NiceAxisExtended) {
  Axis a = NiceAxis(0, 2810, true);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 3000);
  EXPECT_EQ(a.ticks, (std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000}));
  a = NiceAxis(0, 1, true);
  EXPECT_EQ(a.hi, 1);
  ExpectNiceTicks(a.ticks, 5, 8);
  a = NiceAxis(0, 0, true);  // all-zero regret
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 1);
  a = NiceAxis(-3, 47, true);
  EXPECT_LE(a.lo, -3);
  EXPECT_GE(a.hi, 47);
  ExpectNiceTicks(a.ticks, 5, 8);
  // A sweep over magnitudes: always 5 to 8 nice ticks covering the data, from 0.
  for (double hi = 1e-3; hi < 1e9; hi *= 1.37) {
    a = NiceAxis(0, hi, true);
    SCOPED_TRACE(hi);
    EXPECT_EQ(a.lo, 0);
    EXPECT_GE(a.hi, hi);
    EXPECT_EQ(a.ticks.front(), a.lo);
    EXPECT_EQ(a.ticks.back(), a.hi);
    ExpectNiceTicks(a.ticks, 5, 8);
  }
}

TEST(AxisTest, NiceAxisExact) {
  Axis a = NiceAxis(0, 3000, false);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 3000);
  EXPECT_EQ(a.ticks, (std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000}));
  a = NiceAxis(0, 100000, false);
  EXPECT_EQ(a.ticks.back(), 100000);
  for (double hi = 3; hi < 1e8; hi *= 1.29) {
    a = NiceAxis(0, std::round(hi), false);
    SCOPED_TRACE(hi);
    EXPECT_EQ(a.hi, std::round(hi));
    EXPECT_LE(a.ticks.back(), a.hi);
    ExpectNiceTicks(a.ticks, 4, 8);
  }
}

TEST(AxisTest, LogAxis) {
  Axis a = LogAxis(0.03, 40);
  EXPECT_EQ(a.lo, 0.01);
  EXPECT_EQ(a.hi, 100);
  EXPECT_EQ(a.ticks, (std::vector<double>{0.01, 0.1, 1, 10, 100}));
  EXPECT_DOUBLE_EQ(a.Fraction(1), 0.5);
  EXPECT_DOUBLE_EQ(a.Fraction(10), 0.75);
  a = LogAxis(0.2, 0.8);  // one decade: 2 and 5 labelled too
  EXPECT_EQ(a.ticks, (std::vector<double>{0.1, 0.2, 0.5, 1}));
  a = LogAxis(1, 1);
  EXPECT_EQ(a.lo, 0.1);
  EXPECT_EQ(a.hi, 10);
}

TEST(AxisTest, FormatTick) {
  EXPECT_EQ(FormatTick(0), "0");
  EXPECT_EQ(FormatTick(0.25), "0.25");
  EXPECT_EQ(FormatTick(0.1 + 0.2), "0.3");
  EXPECT_EQ(FormatTick(500), "500");
  EXPECT_EQ(FormatTick(1000), "1k");
  EXPECT_EQ(FormatTick(2500), "2.5k");
  EXPECT_EQ(FormatTick(10000), "10k");
  EXPECT_EQ(FormatTick(1e6), "1M");
  EXPECT_EQ(FormatTick(1.5e6), "1.5M");
  EXPECT_EQ(FormatTick(-2000), "-2k");
  EXPECT_EQ(FormatTick(1e-5), "1e-05");
}

}  // namespace
}  // namespace graphbandit::sim
