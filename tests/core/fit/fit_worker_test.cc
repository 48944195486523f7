// The fit helper thread (core/fit/fit_worker.h): its CPU-share pacing and that Stop() ends a
// pause at once.
#include "core/fit/fit_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/fit/refit.h"
#include "tests/core/fit/fit_test_util.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

TEST(FitPause, KeepsTheFitToItsShareOfTheWallClock) {
  // A quarter share: three evaluation-lengths of pause after each evaluation.
  EXPECT_EQ(FitPause(0.010, 0.25), absl::Milliseconds(30));
  EXPECT_EQ(FitPause(0.010, 0.5), absl::Milliseconds(10));
  // The whole core, or nothing measured: no pause.
  EXPECT_EQ(FitPause(0.010, 1.0), absl::ZeroDuration());
  EXPECT_EQ(FitPause(0.0, 0.25), absl::ZeroDuration());
  // A long evaluation at a small share is capped.
  EXPECT_EQ(FitPause(2.0, 0.01), kMaxFitPause);
}

FitWorker::Job SmallJob(double cpu_share) {
  Rng rng(4);
  FitWorker::Job job;
  job.data = fit_test::RandomData(60, 3, 8, rng);
  job.graph = std::make_shared<const UserGraph>(fit_test::SmallGraph());
  job.start = fit_test::Values(3, rng);
  job.spec = fit_test::GroupedSpec(KernelType::kRbf, 0, 3, false);
  job.spec.max_evaluations = 20;
  job.spec.cpu_share = cpu_share;
  return job;
}

TEST(FitWorker, PausesBetweenEvaluationsOnlyBelowAWholeCore) {
  for (double share : {1.0, 0.5}) {
    SCOPED_TRACE(share);
    absl::Notification done;
    FitWorker worker([&done] { done.Notify(); });
    ASSERT_TRUE(worker.Start(SmallJob(share)));
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    std::optional<FitWorker::Outcome> outcome = worker.Take();
    ASSERT_TRUE(outcome.has_value());
    ASSERT_TRUE(outcome->result.ok()) << outcome->result.status();
    if (share == 1.0) {
      EXPECT_EQ(worker.pauses(), 0);
    } else {
      // One pause after every likelihood evaluation the optimiser asked for.
      EXPECT_EQ(worker.pauses(), outcome->result->evaluations);
      EXPECT_GT(worker.pauses(), 1);
    }
  }
}

TEST(FitWorker, StopEndsAPauseAtOnce) {
  FitWorker worker(nullptr);
  // At this share every pause is the cap (5 s): the fit is inside one almost all the time.
  ASSERT_TRUE(worker.Start(SmallJob(1e-6)));
  // Wait (bounded) until the first pause has begun: the fit thread is idle class and may get
  // little CPU on a busy machine.
  for (int i = 0; i < 6000 && worker.pauses() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(worker.pauses(), 1);
  const auto started = std::chrono::steady_clock::now();
  worker.Stop();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // The pause had about kMaxFitPause to go: Stop woke it.
  EXPECT_LT(seconds, 0.5 * absl::ToDoubleSeconds(kMaxFitPause));
  EXPECT_EQ(worker.pauses(), 1);
  EXPECT_FALSE(worker.Start(SmallJob(1.0)));  // stopped for good
}

TEST(FitWorker, StopGivesUpAtItsDeadlineWhileAnEvaluationRuns) {
  // The fit is held inside its second likelihood evaluation (after_evaluation runs within the
  // optimiser's objective) until the test lets it go: Stop with a deadline returns at the
  // deadline instead of waiting for it (a server's shutdown keeps its grace period), and a Stop
  // without one then joins. (The old Stop blocked here until the test's timeout.)
  FitWorker::Job job = SmallJob(1.0);
  job.spec.max_evaluations = 50;
  absl::Notification inside, release;
  std::atomic<int> evaluations{0};
  job.spec.after_evaluation = [&](double) {
    if (evaluations.fetch_add(1) == 1) {
      inside.Notify();
      release.WaitForNotification();
    }
  };
  FitWorker worker(nullptr);
  ASSERT_TRUE(worker.Start(std::move(job)));
  ASSERT_TRUE(inside.WaitForNotificationWithTimeout(absl::Seconds(60)));
  const auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(worker.Stop(absl::Now() + absl::Milliseconds(20)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 1.0);
  release.Notify();
  EXPECT_TRUE(worker.Stop());  // joins once the evaluation ends
  EXPECT_FALSE(worker.Start(SmallJob(1.0)));
}

TEST(FitWorker, RequestStopReturnsAtOnceAndStopJoinsLater) {
  // A shutdown asks the fit to stop first and waits for it last (Model::Shutdown): the request
  // returns while the fit is held inside an evaluation, nothing new starts after it, and Stop
  // joins once the evaluation ends.
  FitWorker::Job job = SmallJob(1.0);
  job.spec.max_evaluations = 50;
  absl::Notification inside, release;
  std::atomic<int> evaluations{0};
  job.spec.after_evaluation = [&](double) {
    if (evaluations.fetch_add(1) == 1) {
      inside.Notify();
      release.WaitForNotification();
    }
  };
  FitWorker worker(nullptr);
  ASSERT_TRUE(worker.Start(std::move(job)));
  ASSERT_TRUE(inside.WaitForNotificationWithTimeout(absl::Seconds(60)));
  const auto started = std::chrono::steady_clock::now();
  worker.RequestStop();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_TRUE(worker.busy());  // stopping: no job may start
  EXPECT_FALSE(worker.Start(SmallJob(1.0)));
  release.Notify();
  EXPECT_TRUE(worker.Stop());
  EXPECT_EQ(evaluations.load(), 2) << "a likelihood evaluation ran after the cancellation";
}

}  // namespace
}  // namespace graphbandit
