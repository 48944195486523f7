// Apprentice mode end to end over gRPC: a model that serves the request's baseline arm while it
// learns, switches to serving itself when its lift over the baseline is shown, says so in
// DescribeModel and the metrics, is switched back by an admin call, and keeps its mode across a
// restart. Then a challenger (ModelConfig.shadow_of), which follows its leader and is reported
// by name in the leader's estimates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/base/random.h"
#include "tests/server/server_fixture.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;

constexpr double kEpsilon = 0.3;

class ApprenticeTest : public ServerTest {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/apprentice_server_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    state_dir_ = pattern;
    apprentice_.name = "default";
    apprentice_.evaluation_epsilon = kEpsilon;
    apprentice_.apprentice_start = true;
    apprentice_.apprentice.min_decisions = 100;
    plain_.name = "plain";
    StartServer({apprentice_, plain_}, /*with_metrics=*/true, state_dir_);
  }
  void TearDown() override {
    ServerTest::TearDown();
    std::filesystem::remove_all(state_dir_);
  }

  grpc::Status SetMode(const std::string& model, v1::SetServingModeRequest::Mode mode,
                       v1::SetServingModeResponse* response) {
    grpc::ClientContext context;
    WithDeadline(&context);
    v1::SetServingModeRequest request;
    request.set_model(model);
    request.set_mode(mode);
    return admin_->SetServingMode(&context, request, response);
  }

  // One decision for a user, with arm "a" as the baseline, rewarded 0.2 for "a", 0.5 for "b" and
  // 0.9 for "c", plus noise uniform in [-0.1, 0.1]. Returns the arm chosen.
  struct Chosen {
    std::string arm;
    bool explored = false;
    double probability = 0.0;
  };
  Chosen Round(int round) {
    v1::SelectArmRequest request = ThreeArms(round % 2 == 0 ? "alice" : "bob");
    request.set_baseline_arm("a");
    v1::SelectArmResponse decision;
    EXPECT_TRUE(Select(request, &decision).ok());
    if (decision.arms_size() != 1) return {};
    const v1::RankedArm& arm = decision.arms(0);
    v1::ReportRewardRequest report;
    report.set_event_id(decision.event_id());
    const double mean = arm.arm_id() == "a" ? 0.2 : arm.arm_id() == "b" ? 0.5 : 0.9;
    report.set_reward(mean + 0.2 * (noise_.Uniform() - 0.5));
    v1::ReportRewardResponse outcome;
    EXPECT_TRUE(Reward(report, &outcome).ok());
    return {arm.arm_id(), arm.explored(), arm.selection_probability()};
  }

  // What an apprentice's decision must be: the baseline arm unless the share drew it, and the
  // mixture's probability, 1 - epsilon + epsilon / 3 for the baseline arm and epsilon / 3 for
  // another, whoever chose it.
  static void ExpectApprentice(const Chosen& chosen) {
    if (!chosen.explored) {
      EXPECT_EQ(chosen.arm, "a");
    }
    EXPECT_NEAR(chosen.probability,
                chosen.arm == "a" ? 1.0 - kEpsilon + kEpsilon / 3 : kEpsilon / 3, 1e-12)
        << chosen.arm;
  }

  std::string state_dir_;
  ModelOptions apprentice_, plain_;
  Rng noise_{20261202};
};

TEST_F(ApprenticeTest, ServesTheBaselineThenSwitchesWhenItsLiftIsShown) {
  v1::ModelDescription start = Describe();
  EXPECT_TRUE(start.config().apprentice().start());
  EXPECT_TRUE(start.apprentice().apprentice());
  EXPECT_EQ(start.apprentice().next_check(), 100u);
  EXPECT_EQ(start.apprentice().last_switch().reason(), v1::SwitchEvent::START);
  EXPECT_TRUE(start.apprentice().last_switch().to_apprentice());
  EXPECT_EQ(start.apprentice().margin(), 0.0);
  EXPECT_THAT(ScrapeMetrics(), HasSubstr("graphbandit_apprentice{model=\"default\"} 1"));

  // Apprenticeship: every decision not drawn by the share is the baseline arm.
  int rounds = 0;
  // (A decision made before a DescribeModel that still says "apprentice" was an apprentice's:
  // the mode only changes once here.)
  for (; rounds < 1600; ++rounds) {
    const Chosen chosen = Round(rounds);
    if (!Describe().apprentice().apprentice()) break;
    ExpectApprentice(chosen);
  }
  const v1::ApprenticeSummary switched = Describe().apprentice();
  ASSERT_FALSE(switched.apprentice()) << "no switch in " << rounds << " decisions";
  // It switched at or after the first checkpoint (100 lift terms; a checkpoint waits until the
  // model's own choices have been logged often enough), by the lift.
  const uint64_t at = switched.last_switch().decisions();
  EXPECT_GE(at, 100u);
  EXPECT_LE(at, static_cast<uint64_t>(rounds + 1));
  EXPECT_EQ(switched.last_switch().reason(), v1::SwitchEvent::LIFT);
  EXPECT_FALSE(switched.last_switch().to_apprentice());
  EXPECT_GT(switched.last_switch().lower(), 0.0);
  EXPECT_GT(switched.last_switch().lift(), switched.last_switch().lower());
  // The true lift of "c" over "a" is 0.7; the estimate averages over the apprenticeship, the
  // decisions of a model still learning included.
  EXPECT_GT(switched.lift().estimate(), 0.2);
  EXPECT_LT(switched.lift().estimate(), 1.2);
  EXPECT_EQ(switched.decisions(), at);
  EXPECT_EQ(switched.next_check(), 0u);
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(metrics, HasSubstr("graphbandit_apprentice{model=\"default\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_apprentice_lift{bound=\"lower\",model=\"default\"}"));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat(
                           "graphbandit_apprentice_lift_decisions{model=\"default\"} ", at)));

  // Serving itself: the policy's own choice, which is now mostly "c".
  int best = 0, own = 0;
  for (int i = 0; i < 100; ++i) {
    const Chosen chosen = Round(rounds + 1 + i);
    if (chosen.explored) continue;
    ++own;
    best += chosen.arm == "c" ? 1 : 0;
  }
  EXPECT_GT(best, own * 8 / 10) << best << " of " << own;

  // The switch is kept across a restart (from the snapshot or by replaying the log).
  StartServer({apprentice_, plain_}, /*with_metrics=*/false, state_dir_);
  const v1::ApprenticeSummary restarted = Describe().apprentice();
  EXPECT_FALSE(restarted.apprentice());
  EXPECT_EQ(restarted.last_switch().decisions(), at);
  EXPECT_EQ(restarted.last_switch().lower(), switched.last_switch().lower());
}

TEST_F(ApprenticeTest, AdminCallsSwitchBothWaysAndAreKept) {
  v1::SetServingModeResponse response;
  // Already an apprentice: nothing changes.
  ASSERT_TRUE(SetMode("", v1::SetServingModeRequest::APPRENTICE, &response).ok());
  EXPECT_FALSE(response.changed());
  for (int i = 0; i < 20; ++i) ExpectApprentice(Round(i));
  ASSERT_TRUE(SetMode("", v1::SetServingModeRequest::SERVING, &response).ok());
  EXPECT_TRUE(response.changed());
  EXPECT_FALSE(response.apprentice().apprentice());
  EXPECT_EQ(response.apprentice().last_switch().reason(), v1::SwitchEvent::ADMIN);
  EXPECT_FALSE(response.apprentice().last_switch().to_apprentice());
  EXPECT_EQ(response.apprentice().last_switch().decisions(), 20u);

  // Back to apprentice: the lift's count starts again, and the baseline is served.
  ASSERT_TRUE(SetMode("", v1::SetServingModeRequest::APPRENTICE, &response).ok());
  EXPECT_TRUE(response.changed());
  EXPECT_TRUE(response.apprentice().apprentice());
  EXPECT_EQ(response.apprentice().decisions(), 0u);
  EXPECT_TRUE(response.apprentice().last_switch().to_apprentice());
  for (int i = 0; i < 20; ++i) ExpectApprentice(Round(i));
  (*server_->engine().FindModel(""))->WaitForWriter();  // the last reward applied
  EXPECT_EQ(Describe().apprentice().decisions(), 20u);

  // Kept across a restart: the admin switch is in the log (and the snapshot).
  StartServer({apprentice_, plain_}, /*with_metrics=*/false, state_dir_);
  const v1::ApprenticeSummary restarted = Describe().apprentice();
  EXPECT_TRUE(restarted.apprentice());
  EXPECT_EQ(restarted.decisions(), 20u);
  EXPECT_EQ(restarted.last_switch().reason(), v1::SwitchEvent::ADMIN);
  EXPECT_TRUE(restarted.last_switch().to_apprentice());
}

TEST_F(ApprenticeTest, BadSwitchesAreRefusedPrecisely) {
  v1::SetServingModeResponse response;
  grpc::Status status = SetMode("", v1::SetServingModeRequest::MODE_UNSPECIFIED, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("APPRENTICE or SERVING"));
  status = SetMode("nope", v1::SetServingModeRequest::SERVING, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  // A model without the evaluation share cannot estimate a lift.
  status = SetMode("plain", v1::SetServingModeRequest::APPRENTICE, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("evaluation.epsilon"));
  EXPECT_FALSE(Describe("plain").apprentice().apprentice());
  // Nor be configured as an apprentice.
  ModelOptions bad;
  bad.name = "bad";
  bad.apprentice_start = true;
  const absl::Status refused = ValidateModelOptions(bad);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("apprentice.start needs evaluation.epsilon > 0"));
  bad.evaluation_epsilon = 0.1;
  bad.policy = PolicyKind::kSemiGraphTs;
  EXPECT_EQ(ValidateModelOptions(bad).code(), absl::StatusCode::kInvalidArgument);
}

// A challenger (ModelConfig.shadow_of) over gRPC: it refuses to serve, follows its leader's
// decisions and rewards, and its own policy's value is in the leader's DescribeModel and in the
// metrics under its name.
class ChallengerServerTest : public ServerTest {
 protected:
  void SetUp() override {
    ModelOptions leader;
    leader.name = "default";
    leader.evaluation_epsilon = kEpsilon;
    ModelOptions challenger;
    challenger.name = "challenger";
    challenger.shadow_of = "default";
    StartServer({leader, challenger}, /*with_metrics=*/true);
  }

  // The policy entry named `name` in `model`'s evaluation, or null.
  static const v1::PolicyValueEstimate* Policy(const v1::ModelDescription& model,
                                               const std::string& name) {
    for (const v1::PolicyValueEstimate& p : model.evaluation().policies()) {
      if (p.policy() == name) return &p;
    }
    return nullptr;
  }
};

TEST_F(ChallengerServerTest, FollowsItsLeaderAndIsReportedByName) {
  v1::SelectArmRequest refused = ThreeArms();
  refused.set_model("challenger");
  v1::SelectArmResponse unused;
  const grpc::Status status = Select(refused, &unused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("challenger of \"default\""));

  Rng noise(3);
  constexpr int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    v1::SelectArmResponse decision;
    ASSERT_TRUE(Select(ThreeArms(round % 2 == 0 ? "alice" : "bob"), &decision).ok());
    const std::string& arm = decision.arms(0).arm_id();
    v1::ReportRewardRequest report;
    report.set_event_id(decision.event_id());  // no model named: the leader's
    report.set_reward((arm == "a" ? 0.2 : arm == "b" ? 0.5 : 0.9) + 0.1 * noise.Normal());
    v1::ReportRewardResponse outcome;
    ASSERT_TRUE(Reward(report, &outcome).ok());
    EXPECT_EQ(outcome.model(), "default");
  }
  // The challenger follows on its own thread: wait (10 s at most) until it has every reward.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while ((Describe("challenger").rewards_learned() < kRounds ||
          Describe().rewards_learned() < kRounds) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const v1::ModelDescription challenger = Describe("challenger");
  EXPECT_EQ(challenger.config().shadow_of(), "default");
  EXPECT_EQ(challenger.rewards_learned(), static_cast<uint64_t>(kRounds));
  EXPECT_EQ(challenger.decisions(), static_cast<uint64_t>(kRounds));
  const v1::ModelDescription leader = Describe();
  const v1::PolicyValueEstimate* judged = Policy(leader, "challenger");
  ASSERT_NE(judged, nullptr);
  EXPECT_EQ(judged->decisions(), static_cast<uint64_t>(kRounds));
  ASSERT_TRUE(judged->has_dr());
  EXPECT_LT(judged->dr().lower(), judged->dr().estimate());
  // The same numbers in the challenger's own description, and its view of the leader's value.
  const v1::PolicyValueEstimate* own = Policy(challenger, "challenger");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->dr().estimate(), judged->dr().estimate());
  EXPECT_EQ(Policy(challenger, "deployed")->ips().estimate(),
            Policy(leader, "deployed")->ips().estimate());
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat(
                           "graphbandit_policy_value{bound=\"estimate\",estimator=\"dr\",model="
                           "\"default\",policy=\"challenger\"} ")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("graphbandit_challenger_operations_total{leader="
                                              "\"default\",model=\"challenger\",operation="
                                              "\"decision\",outcome=\"applied\"} ",
                                              kRounds)));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("graphbandit_challenger_operations_total{leader="
                                              "\"default\",model=\"challenger\",operation="
                                              "\"reward\",outcome=\"applied\"} ",
                                              kRounds)));
}

}  // namespace
}  // namespace graphbandit::server
