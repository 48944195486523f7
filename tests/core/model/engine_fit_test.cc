// Fitted hyper-parameters in-process (core/model/engine.h): when fits run, how they are logged
// and recovered, configured values, dictionary coarsening, refused graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/base/random.h"
#include "core/model/engine.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

// WaitForFits covers the moment between the writer applying a batch and deciding that a fit is
// due (the writer is held in that moment here; before the fix WaitForFits returned in it with
// no fit started, and fits_* below were all 0).
TEST(EngineTest, WaitForFitsSeesAFitDueOnTheLastBatch) {
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  auto engine = OpenEngine({options}, "");
  Model* model = *engine->FindModel("");
  PlaySmoothTask(*engine, 19);
  model->WaitForFits();
  ModelStats stats = model->Stats();
  EXPECT_EQ(stats.fits_applied + stats.fits_unchanged + stats.fits_skipped + stats.fits_failed, 0);

  model->SetAfterApplyHookForTesting(
      [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  PlaySmoothTask(*engine, 1);  // the 20th reward: a fit is due once it is applied
  model->WaitForFits();
  stats = model->Stats();
  EXPECT_EQ(stats.fits_applied + stats.fits_unchanged + stats.fits_skipped + stats.fits_failed, 1);
  model->SetAfterApplyHookForTesting(nullptr);
}

// Hyper-parameters are fitted beside the serving state, logged, and reproduced by recovery
// (from the log alone, and from the shutdown snapshot); values set in the configuration stay
// exactly as configured.
TEST(EngineTest, FittedHyperparametersAreLoggedAndRecovered) {
  TempDir dir;
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  options.rho = 0.5;
  options.refit.fit_rho = false;  // as if "graph { rho: 0.5 }" were configured
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}, {"u1", "u2", 1.0}}).ok());
  PlaySmoothTask(*engine, 240);
  model->WaitForFits();
  const std::shared_ptr<const ModelView> view = model->View();
  ASSERT_TRUE(view->hyperparameters.has_value());
  const HyperparameterView fitted = *view->hyperparameters;
  EXPECT_GE(fitted.fits_applied, 1);
  EXPECT_GE(model->Stats().fits_applied, 1);
  EXPECT_EQ(fitted.values.rho, 0.5);  // configured: fixed
  ASSERT_EQ(fitted.values.lengthscales.size(), 2);
  for (int d = 0; d < 2; ++d) {
    EXPECT_GT(fitted.values.lengthscales(d), 3.0) << fitted.values.DebugString();
  }
  EXPECT_GT(fitted.values.noise_variance, 0.1 * 0.01) << fitted.values.DebugString();
  EXPECT_LT(fitted.values.noise_variance, 10 * 0.01) << fitted.values.DebugString();
  EXPECT_EQ(fitted.kors_mu, fitted.values.noise_variance);
  EXPECT_EQ(view->scaling.lengthscales(), fitted.values.lengthscales);
  // Users the model learned from (their posterior depends on the whole learner state) and one
  // it never saw.
  const std::vector<std::string> probed = {"u0", "u1", "u3", "stranger"};
  const std::vector<double> before = Probe(*engine, probed);
  model->WaitForFits();

  // Crash: the log alone (no snapshot yet) replays the logged fits at their place.
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  auto reopen = [&options](const std::string& state_dir) {
    EngineOptions engine_options;
    engine_options.models = {options};
    engine_options.state_dir = state_dir;
    return Engine::Open(engine_options);
  };
  {
    auto recovered = reopen(crashed);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    Model* again = *(*recovered)->FindModel("");
    EXPECT_EQ(again->recovery().snapshot_seq, 0u);
    EXPECT_TRUE(again->recovery().damage.empty());
    ASSERT_TRUE(again->View()->hyperparameters.has_value());
    EXPECT_EQ(again->View()->hyperparameters->values, fitted.values);
    EXPECT_EQ(again->View()->hyperparameters->fits_applied, fitted.fits_applied);
    EXPECT_EQ(Probe(**recovered, probed), before);  // bit-identical
    (*recovered)->Shutdown();
  }
  std::filesystem::remove_all(crashed);

  // Clean restart: the shutdown snapshot holds the values and the learner built with them.
  engine->Shutdown();
  engine.reset();
  auto restarted = reopen(dir.path());
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  Model* again = *(*restarted)->FindModel("");
  EXPECT_GT(again->recovery().snapshot_seq, 0u);
  EXPECT_EQ(again->recovery().records_replayed, 0);
  EXPECT_EQ(again->View()->hyperparameters->values, fitted.values);
  EXPECT_EQ(Probe(**restarted, probed), before);
}

// A fit held inside a likelihood evaluation at shutdown (on a busy machine, a fit thread waiting
// for idle cycles) does not take the shutdown's time: the writer applies everything and the
// final snapshot is written; only the fit is abandoned (false: the model must not be destroyed
// while it runs). The shutdown used to wait for the fit first, then found its deadline spent and
// closed the log without the snapshot.
TEST(EngineTest, AFitHeldAtShutdownDoesNotCostTheFinalSnapshot) {
  TempDir dir;
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  // Before the engine: the fit thread uses them until it ends, when the engine is destroyed.
  std::atomic<int> evaluations{0};
  absl::Notification inside, release;
  // Released on every way out, so that a failed assertion does not leave the fit held (the
  // model's destruction waits for it).
  absl::Cleanup let_go = [&release] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  model->SetFitEvaluationHookForTesting([&] {
    if (evaluations.fetch_add(1) == 1) {
      inside.Notify();
      release.WaitForNotification();
    }
  });
  // The first fits are skipped (too few points for the parameters); one starts by 240.
  PlaySmoothTask(*engine, 240);
  ASSERT_TRUE(inside.WaitForNotificationWithTimeout(absl::Seconds(60)));
  PlaySmoothTask(*engine, 20);
  const absl::Time waited = absl::Now() + absl::Seconds(30);
  while (model->View()->rewards_learned < 260 && absl::Now() < waited) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(model->View()->rewards_learned, 260);

  const absl::Time start = absl::Now();
  EXPECT_FALSE(model->Shutdown(absl::Now() + absl::Milliseconds(300)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const std::string copy = CrashCopy(dir.path(), dir.path() + "-after-stop");
  release.Notify();  // the fit ends; the model's destruction joins its thread
  {
    EngineOptions engine_options;
    engine_options.models = {options};
    engine_options.state_dir = copy;
    auto reopened = Engine::Open(engine_options);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    const Model& restarted = **(*reopened)->FindModel("");
    EXPECT_GT(restarted.recovery().snapshot_seq, 0u) << "no final snapshot";
    EXPECT_EQ(restarted.recovery().records_replayed, 0);
    EXPECT_EQ(restarted.View()->rewards_learned, 260);
  }
  std::filesystem::remove_all(copy);
}

// The same with every fit's rebuild spread over the rewards that follow (as a served model does
// on a long history): recovery from the log and from the shutdown snapshot, which may hold a
// rebuild still pending, reproduces the state bit for bit.
TEST(EngineTest, SpreadRefitsAreRecoveredBitIdentically) {
  TempDir dir;
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  options.research.spread_refit_work = 0.0;
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}, {"u1", "u2", 1.0}}).ok());
  PlaySmoothTask(*engine, 600);
  model->WaitForFits();
  ASSERT_GE(model->Stats().fits_applied, 1);
  const HyperparameterView fitted = *model->View()->hyperparameters;
  EXPECT_EQ(model->View()->scaling.lengthscales(), fitted.values.lengthscales);
  const std::vector<std::string> probed = {"u0", "u1", "u3", "stranger"};
  const std::vector<double> before = Probe(*engine, probed);
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  auto reopen = [&options](const std::string& state_dir) {
    EngineOptions engine_options;
    engine_options.models = {options};
    engine_options.state_dir = state_dir;
    return Engine::Open(engine_options);
  };
  {
    auto recovered = reopen(crashed);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    EXPECT_EQ((*(*recovered)->FindModel(""))->View()->hyperparameters->values, fitted.values);
    EXPECT_EQ(Probe(**recovered, probed), before);
    (*recovered)->Shutdown();
  }
  std::filesystem::remove_all(crashed);
  engine->Shutdown();
  engine.reset();
  auto restarted = reopen(dir.path());
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_GT((*(*restarted)->FindModel(""))->recovery().snapshot_seq, 0u);
  EXPECT_EQ(Probe(**restarted, probed), before);
}

// A KORS mu set in the configuration is what the learner uses, through fits (which change the
// noise variance mu would otherwise follow) and after a restart from the shutdown snapshot.
TEST(EngineTest, AConfiguredKorsMuStaysThroughFitsAndRestarts) {
  TempDir dir;
  ModelOptions options;
  options.kors_mu = 0.05;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}, {"u1", "u2", 1.0}}).ok());
    PlaySmoothTask(*engine, 240);
    model->WaitForFits();
    const std::shared_ptr<const ModelView> view = model->View();
    ASSERT_GE(view->hyperparameters->fits_applied, 1);
    ASSERT_NE(view->hyperparameters->values.noise_variance, 0.05);
    EXPECT_EQ(view->hyperparameters->kors_mu, 0.05);  // read from the learner
    engine->Shutdown();
  }
  auto engine = OpenEngine({options}, dir.path());
  const std::shared_ptr<const ModelView> view = (*engine->FindModel(""))->View();
  EXPECT_GT((*engine->FindModel(""))->recovery().snapshot_seq, 0u);
  EXPECT_EQ(view->hyperparameters->kors_mu, 0.05);
}

// After a configuration change, values the new configuration fixes win over the snapshot's.
TEST(EngineTest, ConfiguredValuesWinOverFittedOnesAfterARestart) {
  TempDir dir;
  ModelOptions options;
  options.refit.first_fit = 10;
  options.refit.min_points_per_parameter = 0;  // a fit on the first few rewards, as before
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    for (int round = 0; round < 60; ++round) {
      auto decision = engine->SelectArm(ThreeArms(absl::StrCat("u", round % 3)).View());
      ASSERT_TRUE(decision.ok());
      const double reward = decision->arms[0].arm_id == "a" ? 1.0 : 0.1 * (round % 4);
      ASSERT_TRUE(engine->ReportReward({decision->event_id, reward, {}, ""}).ok());
    }
    model->WaitForFits();
    ASSERT_GE(model->Stats().fits_applied, 1);
    ASSERT_NE(model->View()->hyperparameters->values.noise_variance, 0.3);
  }
  ModelOptions fixed = options;
  fixed.ridge = 0.3;
  fixed.refit.fit_noise_variance = false;  // as if "ridge: 0.3" were configured now
  {
    auto engine = OpenEngine({fixed}, dir.path());
    Model* model = *engine->FindModel("");
    EXPECT_GT(model->recovery().snapshot_seq, 0u);
    EXPECT_EQ(model->View()->hyperparameters->values.noise_variance, 0.3);
    auto decision = engine->SelectArm(ThreeArms("u1").View());
    ASSERT_TRUE(decision.ok()) << decision.status();
  }
  ModelOptions off = options;
  off.refit.enabled = false;
  auto engine = OpenEngine({off}, dir.path());
  const std::shared_ptr<const ModelView> view = (*engine->FindModel(""))->View();
  const HyperparameterView& h = *view->hyperparameters;
  EXPECT_EQ(h.values.noise_variance, off.ridge);
  EXPECT_EQ(h.values.rho, off.rho);
  EXPECT_EQ(h.values.signal_variance, off.kernel_variance);
  EXPECT_EQ(h.values.offset_variance, 0.0);
  EXPECT_EQ(h.values.user_variance, 0.0);
  EXPECT_EQ(h.values.lengthscales, Eigen::Vector2d(1.0, 1.0));
}

// A model whose dictionary reaches its cap rebuilds it with a coarser KORS mu, logged so that
// recovery rebuilds at the same place; the cap is never exceeded.
TEST(EngineTest, AFullDictionaryIsCoarsenedAndRecovered) {
  TempDir dir;
  ModelOptions options;
  options.max_dictionary_size = 12;
  options.coarsen_full_dictionary = true;
  options.refit.enabled = false;  // the coarsening alone
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  Rng rng(5);
  for (int round = 0; round < 200; ++round) {
    OwnedRequest request;
    request.user = absl::StrCat("u", round % 5);
    for (int i = 0; i < 4; ++i) {
      request.candidates.push_back({absl::StrCat("i", i), {3 * rng.Normal(), 3 * rng.Normal()}});
    }
    auto decision = engine->SelectArm(request.View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, rng.Normal(), {}, ""}).ok());
    ASSERT_LE(model->View()->dictionary_size, 12);
  }
  model->WaitForFits();
  const HyperparameterView h = *model->View()->hyperparameters;
  EXPECT_GE(h.coarsenings, 1);
  EXPECT_GT(h.kors_mu, h.values.noise_variance);
  EXPECT_EQ(model->View()->rewards_learned, 200);
  const std::vector<std::string> probed = {"u0", "u2", "u4", "stranger"};
  const std::vector<double> before = Probe(*engine, probed);
  model->WaitForFits();
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  {
    EngineOptions engine_options;
    engine_options.models = {options};
    engine_options.state_dir = crashed;
    auto recovered = Engine::Open(engine_options);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    Model* again = *(*recovered)->FindModel("");
    EXPECT_EQ(again->View()->hyperparameters->coarsenings, h.coarsenings);
    EXPECT_EQ(again->View()->hyperparameters->kors_mu, h.kors_mu);
    EXPECT_EQ(Probe(**recovered, probed), before);
    (*recovered)->Shutdown();
  }
  std::filesystem::remove_all(crashed);
}

// min_seconds_between bounds how often fits start by the clock, whatever the reward schedule:
// with an hour between fits, rewards that make four more fits due start none of them.
TEST(EngineTest, FitsStartAtMostOncePerConfiguredInterval) {
  for (const double seconds : {0.0, 3600.0}) {
    ModelOptions options;
    options.refit.first_fit = 20;
    options.refit.max_interval = 20;
    options.refit.max_points = 100;
    options.refit.max_evaluations = 5;
    options.refit.min_seconds_between = seconds;
    auto engine = OpenEngine({options}, "");
    Model* model = *engine->FindModel("");
    for (int batch = 0; batch < 5; ++batch) {
      PlaySmoothTask(*engine, 20);  // one more fit due after each batch
      model->WaitForFits();
    }
    const ModelStats stats = model->Stats();
    const int64_t fits =
        stats.fits_applied + stats.fits_unchanged + stats.fits_skipped + stats.fits_failed;
    if (seconds == 0.0) {
      EXPECT_EQ(fits, 5);
    } else {
      EXPECT_EQ(fits, 1);
    }
  }
}

// With fitting off every value is used as configured and no fit runs.
TEST(EngineTest, FittingCanBeSwitchedOff) {
  ModelOptions options;
  options.refit.enabled = false;
  options.refit.first_fit = 5;
  auto engine = OpenEngine({options});
  Model* model = *engine->FindModel("");
  for (int round = 0; round < 60; ++round) {
    auto decision = engine->SelectArm(ThreeArms(absl::StrCat("u", round % 3)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 0.1 * (round % 7), {}, ""}).ok());
  }
  model->WaitForFits();
  const ModelStats stats = model->Stats();
  EXPECT_EQ(stats.fits_applied + stats.fits_unchanged + stats.fits_failed + stats.fits_skipped, 0);
  ASSERT_TRUE(stats.view.hyperparameters.has_value());
  EXPECT_EQ(stats.view.hyperparameters->values.noise_variance, options.ridge);
  EXPECT_EQ(stats.view.hyperparameters->values.rho, options.rho);
  EXPECT_EQ(stats.view.hyperparameters->values.lengthscales, Eigen::Vector2d(1.0, 1.0));
}

TEST(EngineTest, AGraphThePolicyCannotServeIsRefusedAndReplayedTheSameWay) {
  TempDir dir;
  ModelOptions options;
  options.policy = PolicyKind::kGraphUcb;  // one dense inverse per connected component
  auto open = [&] { return OpenEngine({options}, dir.path()); };
  {
    auto engine = open();
    Model* model = *engine->FindModel("");
    ASSERT_TRUE(engine->SelectArm(ThreeArms("u0").View()).ok());  // 2 features per point
    ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}}).ok());
    // A chain of 4097 users x 2 features = 8194 rows: over the 8192-row limit.
    std::vector<EdgeEdit> chain;
    for (int u = 1; u < 4097; ++u)
      chain.push_back({absl::StrCat("u", u), absl::StrCat("u", u + 1), 1.0});
    const auto refused = model->AddEdges(chain);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("exceeds its limit"));
    EXPECT_EQ(model->View()->edges, 1);  // the previous graph is kept
    auto decision = engine->SelectArm(ThreeArms("u1").View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 1.0, {}, ""}).ok());
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
  }
  auto engine = open();  // the refused edit is in the log: replay refuses it again
  Model* model = *engine->FindModel("");
  EXPECT_EQ(model->View()->edges, 1);
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_TRUE(engine->SelectArm(ThreeArms("u2").View()).ok());
}

}  // namespace
}  // namespace graphbandit
