// The nearest-rank percentile shared by the load generator and the benchmark.
#include "core/base/percentile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace graphbandit {
namespace {

std::vector<double> OneTo(int n) {
  std::vector<double> values(n);
  std::iota(values.begin(), values.end(), 1.0);
  return values;
}

TEST(PercentileTest, NearestRankOfOneToTen) {
  const std::vector<double> values = OneTo(10);
  EXPECT_EQ(PercentileOfSorted(values, 0.0), 1.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.05), 1.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.10), 1.0);  // exactly 1 of 10 values is <= 1
  EXPECT_EQ(PercentileOfSorted(values, 0.11), 2.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.50), 5.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.90), 9.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.99), 10.0);
  EXPECT_EQ(PercentileOfSorted(values, 1.0), 10.0);
}

TEST(PercentileTest, ExactRanksAreNotRoundedUp) {
  const std::vector<double> values = OneTo(100);
  EXPECT_EQ(PercentileOfSorted(values, 0.50), 50.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.99), 99.0);
  EXPECT_EQ(PercentileOfSorted(values, 0.995), 100.0);
  EXPECT_EQ(PercentileOfSorted(OneTo(4), 0.5), 2.0);
}

TEST(PercentileTest, SmallAndEmptySamples) {
  EXPECT_TRUE(std::isnan(PercentileOfSorted({}, 0.5)));
  std::vector<double> none;
  EXPECT_TRUE(std::isnan(Percentile(&none, 0.5)));
  const std::vector<double> one = {3.5};
  for (double q : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(PercentileOfSorted(one, q), 3.5) << q;
}

TEST(PercentileTest, OutOfRangeQuantilesAreClamped) {
  const std::vector<double> values = OneTo(10);
  EXPECT_EQ(PercentileOfSorted(values, -1.0), 1.0);
  EXPECT_EQ(PercentileOfSorted(values, 2.0), 10.0);
  EXPECT_EQ(NearestRankIndex(10, 1.5), 9u);
}

TEST(PercentileTest, UnsortedInputGivesTheSortedAnswer) {
  std::vector<double> shuffled = {9, 2, 7, 4, 10, 1, 8, 3, 6, 5, 11, 0};
  std::vector<double> sorted = shuffled;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.0, 0.25, 0.5, 0.9, 0.99, 1.0}) {
    std::vector<double> copy = shuffled;
    EXPECT_EQ(Percentile(&copy, q), PercentileOfSorted(sorted, q)) << q;
  }
}

}  // namespace
}  // namespace graphbandit
