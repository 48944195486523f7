// The simulator measures what the server serves: a served policy (sim PolicySpec::served) run by
// the simulator and the same configuration served by an in-process model (core/model/engine.h),
// fed the same seeded stream of rounds, choose the same candidate in every round.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/engine.h"
#include "sim/environment.h"
#include "sim/presets.h"
#include "sim/robustness.h"
#include "sim/runner.h"
#include "sim/task_environment.h"

namespace graphbandit::sim {
namespace {

constexpr int64_t kRounds = 150;
constexpr uint64_t kSeed = 3;

std::string UserId(int user) { return absl::StrCat("user-", user); }

// Plays the environment's rounds against a model served by an Engine, as a client would:
// register the users and the graph, then SelectArm and ReportReward per round, letting the
// model learn each reward before the next decision (as the simulator does).
std::vector<int> ServedChoices(const EnvironmentFactory& make, ModelOptions options) {
  auto env = make(kSeed);
  EXPECT_TRUE(env.ok()) << env.status();
  // The seed the simulator gives the model for this run.
  PolicySpec spec = ServedPolicy("served", options);
  auto run_policy = MakeRunPolicy(spec, **env, kRounds, kSeed);
  EXPECT_TRUE(run_policy.ok()) << run_policy.status();
  options.seed = run_policy->model_seed.value();
  options.name = "served";
  EngineOptions engine_options;
  engine_options.models = {options};
  engine_options.default_model = "served";
  engine_options.run_sweeper = false;
  auto engine = Engine::Open(engine_options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  Model* model = *(*engine)->FindModel("served");

  std::vector<std::string> users;
  for (int u = 0; u < (*env)->users(); ++u) users.push_back(UserId(u));
  EXPECT_TRUE(model->AddUsers(users).ok());
  std::vector<EdgeEdit> edges;
  for (const Edge& edge : (*env)->edges()) {
    edges.push_back({UserId(edge.a), UserId(edge.b), edge.weight});
  }
  if (!edges.empty()) {
    EXPECT_TRUE(model->AddEdges(edges).ok());
  }

  std::vector<int> choices;
  for (int64_t t = 0; t < kRounds; ++t) {
    const Round round = (*env)->MakeRound(static_cast<uint64_t>(t));
    const std::string user = UserId(round.user);
    const std::string event_id = SimEventId(t);
    std::vector<std::string> arm_ids;
    for (int k = 0; k < round.arms.cols(); ++k) arm_ids.push_back(absl::StrCat("arm-", k));
    DecisionRequest request;
    request.user_id = user;
    request.context = absl::MakeConstSpan(round.context.data(), round.context.size());
    for (int k = 0; k < round.arms.cols(); ++k) {
      request.candidates.push_back(
          {arm_ids[k], absl::MakeConstSpan(round.arms.col(k).data(), round.arms.rows())});
    }
    request.event_id = event_id;
    auto decision = (*engine)->SelectArm(request);
    if (!decision.ok()) {
      ADD_FAILURE() << "round " << t << ": " << decision.status();
      break;
    }
    const int chosen = decision->arms[0].candidate_index;
    choices.push_back(chosen);
    RewardRequest reward;
    reward.event_id = event_id;
    reward.reward = (*env)->Reward(round, chosen);
    auto result = (*engine)->ReportReward(reward);
    EXPECT_TRUE(result.ok() && result->outcome == RewardOutcome::kAccepted)
        << "round " << t << ": " << result.status();
    model->WaitForWriter();
    model->WaitForFits();
  }
  (*engine)->Shutdown();
  return choices;
}

std::vector<int> SimulatedChoices(const EnvironmentFactory& make, const ModelOptions& options) {
  RunSpec spec;
  spec.environment = "task";
  spec.make_environment = make;
  spec.policy = ServedPolicy("served", options);
  spec.seed = kSeed;
  spec.rounds = kRounds;
  spec.sample_points = 1;
  spec.record_choices = true;
  RunOutput out = Run(spec, nullptr);
  EXPECT_EQ(out.error, "");
  return out.choices;
}

EnvironmentFactory LkEasyTask() {
  return [](uint64_t seed) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
    EnvironmentOptions options = LkTask("easy", 10, RewardKind::kGpDraw, GraphKind::kErdosRenyi);
    options.seed = seed;
    auto env = Environment::Create(options);
    if (!env.ok()) return env.status();
    return std::unique_ptr<SimEnvironment>(new Environment(*std::move(env)));
  };
}

// A robustness task with a context (features and context both matter).
EnvironmentFactory ContextTask() {
  for (const auto& [name, task] : RobustnessTaskOptions()) {
    if (task.context_dim == 0) continue;
    return [task = task](uint64_t seed) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
      TaskOptions options = task;
      options.seed = seed;
      auto env = TaskEnvironment::Create(options);
      if (!env.ok()) return env.status();
      return std::unique_ptr<SimEnvironment>(new TaskEnvironment(*std::move(env)));
    };
  }
  ADD_FAILURE() << "no robustness task has a context";
  return LkEasyTask();
}

ModelOptions Configured(PolicyKind policy, bool fits) {
  ModelOptions options;
  options.policy = policy;
  options.refit.enabled = fits;
  return options;
}

struct Case {
  std::string name;
  PolicyKind policy;
  bool fits;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ServedPolicyTest : public ::testing::TestWithParam<Case> {};

TEST_P(ServedPolicyTest, SimulatorAndModelChooseIdentically) {
  const ModelOptions options = Configured(GetParam().policy, GetParam().fits);
  for (const auto& [task, make] :
       {std::pair{"LK easy", LkEasyTask()}, std::pair{"with context", ContextTask()}}) {
    SCOPED_TRACE(task);
    const std::vector<int> simulated = SimulatedChoices(make, options);
    const std::vector<int> served = ServedChoices(make, options);
    ASSERT_EQ(simulated.size(), static_cast<size_t>(kRounds));
    EXPECT_EQ(simulated, served);
    // Not a trivial agreement: the policy explores more than one candidate position.
    EXPECT_GT(std::set<int>(simulated.begin(), simulated.end()).size(), 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, ServedPolicyTest,
                         ::testing::Values(Case{"EkUcb", PolicyKind::kEkUcb, false},
                                           Case{"EkTs", PolicyKind::kEkTs, false},
                                           Case{"GpUcb", PolicyKind::kGpUcb, false},
                                           Case{"GpTs", PolicyKind::kGpTs, false},
                                           Case{"LinUcbPerUser", PolicyKind::kLinUcbPerUser, false},
                                           Case{"GraphUcb", PolicyKind::kGraphUcb, false},
                                           Case{"EkUcbWithFits", PolicyKind::kEkUcb, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace graphbandit::sim
