// client/loadtest/load_driver.h: the statistics and the schedule the three load drivers share.
#include "client/loadtest/load_driver.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace graphbandit::loadtest {
namespace {

TEST(LoadDriverTest, LatencyStatsAreNearestRankAndDropNan) {
  // 1..1000 shuffled, with NaNs (calls that never completed) mixed in.
  std::vector<double> values;
  for (int i = 1000; i >= 1; --i) {
    values.push_back(i);
    if (i % 100 == 0) values.push_back(NAN);
  }
  const LatencyStats s = SummariseLatencies(values);
  EXPECT_EQ(s.count, 1000);
  EXPECT_EQ(s.p50, 500.0);  // the ceil(0.5 * 1000) = 500th smallest
  EXPECT_EQ(s.p90, 900.0);
  EXPECT_EQ(s.p99, 990.0);
  EXPECT_EQ(s.p999, 999.0);
  EXPECT_EQ(s.max, 1000.0);
  EXPECT_DOUBLE_EQ(s.mean, 500.5);

  // Four values: the p50 is the 2nd smallest, never an interpolation.
  const LatencyStats four = SummariseLatencies({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(four.p50, 2.0);
  EXPECT_EQ(four.p99, 4.0);

  const LatencyStats none = SummariseLatencies({NAN});
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(std::isnan(none.p50));
  EXPECT_TRUE(std::isnan(none.max));
  EXPECT_TRUE(std::isnan(none.mean));
}

TEST(LoadDriverTest, TheOpenLoopScheduleIsFixedInAdvance) {
  const Clock::time_point start = Clock::now() + std::chrono::hours(1);
  const OpenLoopSchedule schedule(start, 250.0);
  EXPECT_EQ(schedule.Due(0), start);
  EXPECT_EQ(schedule.Due(250), start + std::chrono::seconds(1));
  EXPECT_EQ(schedule.Due(1000) - schedule.Due(999), ToDuration(0.004));
  EXPECT_DOUBLE_EQ(Seconds(schedule.Due(125) - start), 0.5);
  // Due in the past: WaitFor returns at once, and the request is late.
  const OpenLoopSchedule past(Clock::now() - std::chrono::seconds(10), 1.0);
  const Clock::time_point due = past.WaitFor(0);
  EXPECT_TRUE(OpenLoopSchedule::Late(due));
  EXPECT_FALSE(OpenLoopSchedule::Late(Clock::now() + std::chrono::seconds(1)));
  // Due 20 ms from now: WaitFor sleeps until then.
  const Clock::time_point soon = Clock::now() + std::chrono::milliseconds(20);
  const OpenLoopSchedule near(soon, 1.0);
  near.WaitFor(0);
  EXPECT_GE(Clock::now(), soon);
}

TEST(LoadDriverTest, TheProcessCpuClockAdvancesWithWork) {
  const double before = ProcessCpuSeconds();
  ASSERT_TRUE(std::isfinite(before));
  volatile double sink = 0.0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
  EXPECT_GT(ProcessCpuSeconds(), before);
}

}  // namespace
}  // namespace graphbandit::loadtest
