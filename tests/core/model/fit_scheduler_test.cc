// The fit scheduler (core/model/fit_scheduler.h) driven directly, with a host that records the
// count of fits in flight as the scheduler changes it.
#include "core/model/fit_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/base/random.h"
#include "core/model/model_ops.h"

namespace graphbandit {
namespace {

class RecordingHost : public FitScheduler::Host {
 public:
  absl::Status LogHyperparameters(HyperparametersOp op) override {
    logged.push_back(std::move(op));
    Add(+1);
    return absl::OkStatus();
  }
  void AddFitsInFlight(int delta) override { Add(delta); }

  int in_flight = 0;
  std::vector<int> counts;  // after every change
  std::vector<HyperparametersOp> logged;

 private:
  void Add(int delta) {
    in_flight += delta;
    counts.push_back(in_flight);
  }
};

void Learn(LearnedState* state, Rng* rng, int rewards) {
  for (int i = 0; i < rewards; ++i) {
    ObserveOp observe;
    observe.event_id = absl::StrCat("e", state->rewards_learned());
    observe.arm_id = "a";
    observe.user = absl::StrCat("u", i % 3);
    observe.features = {10.0 * rng->Normal(), 10.0 * rng->Normal()};
    observe.reward = std::sin(observe.features[0] / 8.0) + 0.1 * rng->Normal();
    RewardOp reward;
    reward.event_id = observe.event_id;
    reward.learn.push_back(std::move(observe));
    EdgeEditResult ignored;
    ASSERT_TRUE(state->Apply(reward, &ignored).ok());
    // EK learns in batches (learned_state.h): one LearnOp per reward here.
    ASSERT_TRUE(state->Apply(LearnOp{state->staged_total()}, &ignored).ok());
  }
}

// A learned state for two arm features (no context), on which the tests here schedule fits.
absl::StatusOr<std::unique_ptr<LearnedState>> TwoFeatureState(const ModelOptions& options) {
  auto state = LearnedState::Create(options);
  if (!state.ok()) return state.status();
  EdgeEditResult ignored;
  if (absl::Status s = (*state)->Apply(FixDimensionsOp{0, 2}, &ignored); !s.ok()) return s;
  return state;
}

// WaitForFits returns once no fit is in flight (and the writer decided after its last batch).
// When a fit lands and the next one is already due, the count must not touch 0 between the two:
// a waiter woken there would return while a fit that changes the model is about to start.
TEST(FitSchedulerTest, AFitLandingWhenTheNextIsDueKeepsOneInFlightThroughout) {
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.min_points_per_parameter = 0;  // the schedule, not the minimum, is tested
  options.refit.max_points = 200;
  // Every fit is judged not worth applying, so that the next one starts in the same decision.
  options.refit.min_gain_per_parameter = 1e9;
  auto state = TwoFeatureState(options);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE((*state)->refits());

  RecordingHost host;
  absl::Notification* ready = nullptr;
  absl::Notification first_ready;
  ready = &first_ready;
  FitScheduler scheduler(options, &host, [&ready] {
    if (ready != nullptr && !ready->HasBeenNotified()) ready->Notify();
  });
  Rng rng(5);
  Learn(state->get(), &rng, 20);
  scheduler.AfterBatch(state->get());
  ASSERT_EQ(host.in_flight, 1);  // the first fit started
  const int64_t next = (*state)->next_fit_at();
  ASSERT_GT(next, 20);

  // The next fit falls due while the first is still running (one batch learns past it).
  Learn(state->get(), &rng, static_cast<int>(next - 20));
  ASSERT_TRUE(first_ready.WaitForNotificationWithTimeout(absl::Seconds(60)));
  host.counts.clear();
  scheduler.AfterBatch(state->get());
  EXPECT_TRUE(host.logged.empty());
  EXPECT_EQ(scheduler.stats().unchanged, 1);
  EXPECT_EQ(host.in_flight, 1);  // the second fit started
  for (int count : host.counts) EXPECT_GT(count, 0) << "a moment with no fit in flight";
  EXPECT_EQ((*state)->next_fit_at(), NextFitAfter(next, options.refit));
  scheduler.Stop();
}

// min_seconds_between_fits bounds how often fits start by the clock, but not while the model is
// young (no fit applied, fewer rewards than max_interval): a first fit judged not worth applying
// is followed by the next one as soon as the rewards say so. Once the model has max_interval
// rewards the clock holds the next fit back.
TEST(FitSchedulerTest, TheClockHoldsFitsBackOnlyOnceTheModelIsNoLongerYoung) {
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.min_points_per_parameter = 0;  // the schedule, not the minimum, is tested
  options.refit.max_points = 200;
  options.refit.max_interval = 60;
  options.refit.min_seconds_between = 3600;
  options.refit.min_gain_per_parameter = 1e9;  // every fit is judged not worth applying
  auto state = TwoFeatureState(options);
  ASSERT_TRUE(state.ok()) << state.status();

  RecordingHost host;
  absl::Notification first_ready, second_ready;
  absl::Notification* ready = &first_ready;
  FitScheduler scheduler(options, &host, [&ready] {
    if (ready != nullptr && !ready->HasBeenNotified()) ready->Notify();
  });
  Rng rng(7);
  Learn(state->get(), &rng, 20);
  scheduler.AfterBatch(state->get());
  ASSERT_EQ(host.in_flight, 1);  // the first fit started
  ASSERT_TRUE(first_ready.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ready = &second_ready;
  // Due again by rewards, an hour before the clock would allow it: young, so it starts.
  Learn(state->get(), &rng, static_cast<int>((*state)->next_fit_at() - 20));
  ASSERT_LT((*state)->rewards_learned(), options.refit.max_interval);
  scheduler.AfterBatch(state->get());
  EXPECT_EQ(scheduler.stats().unchanged, 1);
  EXPECT_EQ(host.in_flight, 1);  // the second fit started
  ASSERT_TRUE(second_ready.WaitForNotificationWithTimeout(absl::Seconds(60)));

  // Past max_interval rewards, with no fit applied, the clock holds the next one back.
  Learn(state->get(), &rng,
        static_cast<int>(std::max((*state)->next_fit_at(), options.refit.max_interval) -
                         (*state)->rewards_learned()));
  ASSERT_EQ((*state)->fits_applied(), 0);
  scheduler.AfterBatch(state->get());
  EXPECT_EQ(scheduler.stats().unchanged, 2);
  EXPECT_EQ(host.in_flight, 0) << "a fit started within the clock's bound";
  scheduler.Stop();
}

// Once a fit has been applied the model is no longer young, however few its rewards: the clock
// holds the next fit back.
TEST(FitSchedulerTest, AfterAnAppliedFitTheClockHoldsTheNextBack) {
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.min_points_per_parameter = 0;  // the schedule, not the minimum, is tested
  options.refit.max_points = 200;
  options.refit.min_seconds_between = 3600;
  options.refit.min_change = 0.0;  // every fit is applied
  options.refit.min_gain_per_parameter = 0.0;
  auto state = TwoFeatureState(options);
  ASSERT_TRUE(state.ok()) << state.status();
  EdgeEditResult ignored;

  RecordingHost host;
  absl::Notification first_ready;
  FitScheduler scheduler(options, &host, [&first_ready] {
    if (!first_ready.HasBeenNotified()) first_ready.Notify();
  });
  Rng rng(11);
  Learn(state->get(), &rng, 20);
  scheduler.AfterBatch(state->get());
  ASSERT_EQ(host.in_flight, 1);
  ASSERT_TRUE(first_ready.WaitForNotificationWithTimeout(absl::Seconds(60)));
  scheduler.AfterBatch(state->get());
  ASSERT_EQ(host.logged.size(), 1u) << "the fit was not logged for applying";
  // The writer applies the record, as it would from the log.
  ASSERT_TRUE((*state)->Apply(host.logged[0], &ignored).ok());
  scheduler.HyperparametersApplied();
  scheduler.AfterBatch(state->get());
  ASSERT_EQ((*state)->fits_applied(), 1);
  EXPECT_EQ(host.in_flight, 0);

  // Due again by rewards, still far below max_interval: the clock holds it back now.
  Learn(state->get(), &rng,
        static_cast<int>((*state)->next_fit_at() - (*state)->rewards_learned()));
  ASSERT_LT((*state)->rewards_learned(), options.refit.max_interval);
  scheduler.AfterBatch(state->get());
  EXPECT_EQ(host.in_flight, 0) << "a fit started within the clock's bound";
  scheduler.Stop();
}

// A fit's log record carries the community variance after the fields of older records; a
// record written before it existed decodes with 0, and trailing bytes are damage.
TEST(HyperparametersRecordTest, CommunityVarianceRoundTripsAndOlderRecordsDecodeWithZero) {
  HyperparametersOp op;
  op.values.signal_variance = 0.9;
  op.values.user_variance = 0.2;
  op.values.community_variance = 0.7;
  op.values.lengthscales = Eigen::VectorXd::Constant(3, 1.5);
  op.values.rho = 0.05;
  op.kors_mu_factor = 2.0;
  op.fitted_at = 1234;
  op.points = 400;
  op.log_likelihood = -0.25;
  const std::string payload = EncodeOp(op);
  const uint8_t type = static_cast<uint8_t>(TypeOf(ModelOp(op)));
  auto decoded = DecodeOp(type, payload);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& back = std::get<HyperparametersOp>(*decoded);
  EXPECT_TRUE(back.values == op.values);
  EXPECT_EQ(back.fitted_at, 1234);
  // The same record as written before: without the last double.
  auto older = DecodeOp(type, payload.substr(0, payload.size() - sizeof(double)));
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(std::get<HyperparametersOp>(*older).values.community_variance, 0.0);
  EXPECT_EQ(std::get<HyperparametersOp>(*older).values.rho, 0.05);
  EXPECT_EQ(DecodeOp(type, payload + "x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeOp(type, payload.substr(0, payload.size() - 3)).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace graphbandit
