// Presets as data (sim/preset_loader.h): every embedded file of sim/presets/ parses and
// validates, names are unique, a malformed file is refused with a clear error, and the data
// gives the presets their known contents.
#include "sim/presets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/learner/learner_factory.h"
#include "sim/preset_loader.h"

namespace graphbandit::sim {
namespace {

using ::testing::HasSubstr;

TEST(PresetsTest, EveryEmbeddedFileParsesAndValidates) {
  ASSERT_FALSE(EmbeddedPresetFiles().empty());
  std::set<std::string> names;
  for (const EmbeddedPresetFile& file : EmbeddedPresetFiles()) {
    auto preset = ParsePreset(file.text, file.name);
    ASSERT_TRUE(preset.ok()) << preset.status();
    EXPECT_EQ(preset->name + ".textproto", file.name);
    EXPECT_TRUE(names.insert(preset->name).second) << preset->name;
    EXPECT_FALSE(preset->description.empty()) << file.name;
  }
  auto all = LoadEmbeddedPresets();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(Presets().size(), all->size());
  for (const char* name :
       {"smoke", "lk-pilot", "lk-table1", "lk-coop-kernels", "ek-vs-lk", "ek-bump", "ek-chessboard",
        "memory-bounded", "bounded-regret", "robustness", "robustness-sensitivity"}) {
    EXPECT_NE(FindPreset(name), nullptr) << name;
  }
  EXPECT_EQ(FindPreset("no-such-preset"), nullptr);
}

TEST(PresetsTest, LkTable1HasTheTunedPolicies) {
  const Preset* p = FindPreset("lk-table1");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->environments.size(), 4u);
  EXPECT_EQ(p->environments[0].label, "medium GP-draw ER n=20");
  EXPECT_EQ(p->environments[3].label, "medium GP-draw ER n=200");
  ASSERT_EQ(p->policies.size(), 9u);
  EXPECT_EQ(p->seeds, 20);
  EXPECT_EQ(p->rounds, 3000);
  EXPECT_EQ(p->references.size(), 32u);
  EXPECT_TRUE(static_cast<bool>(p->analysis));

  const PolicySpec& lk = p->policies[0];
  EXPECT_EQ(lk.name, "LK-GP-UCB");
  EXPECT_EQ(lk.model.policy, PolicyKind::kLkGpUcb);
  EXPECT_EQ(lk.model.exploration, 1.0);
  EXPECT_TRUE(lk.model.research.lk.schedule);
  EXPECT_EQ(lk.model.research.lk.lambda_base, 0.001);
  EXPECT_TRUE(lk.model.research.lk.grid);
  EXPECT_EQ(lk.model.user_kernel, UserKernelKind::kLaplacianInverse);
  EXPECT_EQ(lk.model.rho, 0.1);
  EXPECT_FALSE(lk.model.refit.enabled);
  EXPECT_EQ(lk.model.baseline_half_life, 0.0);
  EXPECT_TRUE(lk.run_stream);
  EXPECT_FALSE(lk.served());

  const PolicySpec& ts = p->policies[1];
  EXPECT_EQ(ts.name, "LK-GP-TS");
  EXPECT_EQ(ts.model.policy, PolicyKind::kLkGpTs);
  EXPECT_EQ(ts.model.exploration, 0.5);
  EXPECT_EQ(ts.model.research.lk.lambda_base, 0.01);

  const PolicySpec& gp = p->policies[6];
  EXPECT_EQ(gp.name, "GP-UCB");
  EXPECT_TRUE(gp.pooled);
  EXPECT_EQ(gp.model.user_kernel, UserKernelKind::kIdentity);
  EXPECT_EQ(gp.model.exploration, 4.0);

  const PolicySpec& per_user = p->policies[8];
  EXPECT_EQ(per_user.name, "PerUser-LinUCB");
  EXPECT_EQ(per_user.model.policy, PolicyKind::kLinUcbPerUser);
  EXPECT_EQ(per_user.model.exploration, 2.0);
  EXPECT_EQ(per_user.model.linear_lambda, 1.0);
  EXPECT_EQ(per_user.model.rho, 0.1);  // linear_rho
  EXPECT_EQ(per_user.model.arm_lengthscale, 1.0);
  EXPECT_FALSE(per_user.median_arm_lengthscale);

  auto ref = p->references.find({"medium GP-draw ER n=20", "LK-GP-UCB"});
  ASSERT_NE(ref, p->references.end());
  EXPECT_EQ(ref->second.mean, 627.22);
  EXPECT_EQ(ref->second.spread, 32.98);  // a standard error
  EXPECT_EQ(ref->second.runs, 0);
  // MM's Table 1 gives standard deviations over 10 runs.
  const Preset* mm = FindPreset("mm-table1");
  ASSERT_NE(mm, nullptr);
  auto sd = mm->references.find({"RBF l=0.5", "Kernel DMM-UCB"});
  ASSERT_NE(sd, mm->references.end());
  EXPECT_EQ(sd->second.spread, 20.9);
  EXPECT_EQ(sd->second.runs, 10);
  EXPECT_NEAR(sd->second.StandardError(), 20.9 / std::sqrt(10.0), 1e-12);
}

TEST(PresetsTest, SweepsExpandInOrder) {
  const Preset* pilot = FindPreset("lk-pilot");
  ASSERT_NE(pilot, nullptr);
  // 4 exploration values x (5 lambda_base values x 6 GP methods + 4 linear methods).
  ASSERT_EQ(pilot->policies.size(), 136u);
  EXPECT_EQ(pilot->policies[0].name, "LK-GP-UCB [b=0.5 lb=0.001]");
  EXPECT_EQ(pilot->policies[0].model.exploration, 0.5);
  EXPECT_EQ(pilot->policies[0].model.research.lk.lambda_base, 0.001);
  EXPECT_EQ(pilot->policies[6].name, "LK-GP-UCB [b=0.5 lb=0.005]");
  EXPECT_EQ(pilot->policies[30].name, "GOB.Lin [a=0.5]");
  EXPECT_EQ(pilot->policies[34].name, "LK-GP-UCB [b=1 lb=0.001]");
  EXPECT_EQ(pilot->policies[135].name, "PerUser-LinUCB [a=4]");
  EXPECT_EQ(pilot->policies[135].model.exploration, 4.0);

  const Preset* bump = FindPreset("ek-bump");
  ASSERT_NE(bump, nullptr);
  ASSERT_EQ(bump->policies.size(), 8u);
  EXPECT_EQ(bump->policies[1].name, "EK-UCB lambda=10 mu=10");
  EXPECT_EQ(bump->policies[1].model.policy, PolicyKind::kEkUcb);
  EXPECT_EQ(bump->policies[1].model.kors_mu, 10.0);
  EXPECT_EQ(bump->policies[1].model.exploration, 0.1 / std::sqrt(10.0));
  EXPECT_EQ(bump->policies[1].model.kors_gamma, 0.1 * 10.0);
  EXPECT_EQ(bump->policies[1].model.research.growth_batch_divisor, 0);  // point by point
  EXPECT_EQ(bump->policies[7].name, "CBBKB lambda=10 C=30");
  EXPECT_EQ(bump->policies[7].model.policy, PolicyKind::kBatchedNystromUcb);
  EXPECT_EQ(bump->policies[7].model.batched_threshold, 30.0);
  EXPECT_EQ(bump->policies[7].model.research.batched_min_growth, 0.0);

  const Preset* sensitivity = FindPreset("robustness-sensitivity");
  ASSERT_NE(sensitivity, nullptr);
  EXPECT_EQ(sensitivity->policies[1].name, "EK-UCB [exploration 0.25]");
  EXPECT_TRUE(sensitivity->policies[1].served());
  EXPECT_EQ(sensitivity->policies[1].model.exploration, 0.25);
  // A served policy is the server's own reading of a ModelConfig (proto/model_config.h).
  bool saw_kors_factor = false;
  for (const PolicySpec& policy : sensitivity->policies) {
    if (policy.name != "EK-UCB [KORS mu 10x noise]") continue;
    saw_kors_factor = true;
    EXPECT_TRUE(policy.served());
    EXPECT_EQ(policy.model.refit.kors_mu_factor, 10.0);
  }
  EXPECT_TRUE(saw_kors_factor);
}

// A small valid preset that the malformed variants below change.
constexpr char kValid[] = R"pb(
  name: "tiny"
  description: "a test"
  environment { ek: BUMP }
  policy { policy { name: "EK" family: EK ridge: 1 } }
)pb";

std::string ErrorOf(const std::string& text, const std::string& file = "tiny.textproto") {
  auto preset = ParsePreset(text, file);
  return preset.ok() ? std::string("(no error)") : std::string(preset.status().message());
}

// The presets' user kernel, exploration width, propensity rule and confidence bound are the
// configuration's enums (config.proto), read through the server's tables.
TEST(PresetsTest, PolicyEnumsAreTheConfigurationsOwn) {
  auto preset = ParsePreset(
      std::string(kValid) + R"pb(
        policy { policy { name: "H" family: EK ridge: 1 user_kernel: HEAT width: BAYES_UCB } }
        policy { policy { name: "S" family: SEMI_PARAMETRIC propensity: OWN_DRAW } }
        policy { policy { name: "D" family: KERNEL_UCB bound: DMM } }
        policy { policy { name: "A" family: KERNEL_UCB } }
      )pb",
      "tiny.textproto");
  ASSERT_TRUE(preset.ok()) << preset.status();
  ASSERT_EQ(preset->policies.size(), 5u);
  EXPECT_EQ(preset->policies[0].model.user_kernel, UserKernelKind::kLaplacianInverse);  // unset
  EXPECT_EQ(preset->policies[0].model.exploration_width, ExplorationWidth::kStddev);
  EXPECT_EQ(preset->policies[1].model.user_kernel, UserKernelKind::kHeat);
  EXPECT_EQ(preset->policies[1].model.exploration_width, ExplorationWidth::kBayesUcb);
  EXPECT_EQ(preset->policies[2].model.propensity_rule, PropensityRule::kOwnDraw);
  EXPECT_EQ(preset->policies[3].model.confidence.bound, ConfidenceBound::kDmm);
  EXPECT_EQ(preset->policies[4].model.confidence.bound, ConfidenceBound::kAmm);  // unset

  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"T\" family: KERNEL_UCB "
                                            "bound: TUNED } }\n"),
              HasSubstr("bound TUNED is not a confidence bound"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"W\" family: EK ridge: 1 "
                                            "width: 9 } }\n"),
              HasSubstr("unknown width 9: it must be one of STDDEV, AMM, GP_UCB_THEOREM, "
                        "BAYES_UCB (unset means STDDEV)"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"U\" family: EK ridge: 1 "
                                            "user_kernel: 17 } }\n"),
              HasSubstr("unknown user_kernel 17"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"R\" family: ROUTE "
                                            "width: STDDEV } }\n"),
              HasSubstr("ROUTE: width is GP_UCB_THEOREM or BAYES_UCB"));
  // The LK environment's reward and graph have no default.
  EXPECT_THAT(ErrorOf(std::string(kValid) + "environment { lk { level: \"easy\" users: 2 "
                                            "graph: SBM } }\n"),
              HasSubstr("lk.reward is not set: it must be one of GP_DRAW, REPRESENTER, "
                        "LINEAR_GOB"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "environment { lk { level: \"easy\" users: 2 "
                                            "reward: GP_DRAW graph: 7 } }\n"),
              HasSubstr("unknown lk.graph 7: it must be one of ERDOS_RENYI, RBF, SBM"));
}

// GraphUCB-Local is the semi-parametric family's uncentred graph learner chosen by UCB: its
// own policy kind (not served), with an intercept when asked, and without the sampling fields.
TEST(PresetsTest, GraphUcbLocalIsAUcbPolicyOnTheGraph) {
  auto preset = ParsePreset(std::string(kValid) + R"pb(
                              policy {
                                policy {
                                  name: "G"
                                  family: SEMI_PARAMETRIC
                                  semi: GRAPH_UCB_LOCAL
                                  exploration: 0.1
                                  linear_lambda: 5
                                  intercept: true
                                }
                              }
                            )pb",
                            "tiny.textproto");
  ASSERT_TRUE(preset.ok()) << preset.status();
  const ModelOptions& o = preset->policies[1].model;
  EXPECT_EQ(o.policy, PolicyKind::kGraphUcbLocal);
  EXPECT_FALSE(o.servable());
  EXPECT_FALSE(o.samples_parameters());
  EXPECT_EQ(SelectionRuleFor(o), SelectionRule::kUcb);
  EXPECT_EQ(o.exploration, 0.1);
  EXPECT_EQ(o.linear_lambda, 5.0);
  EXPECT_TRUE(preset->policies[1].intercept);
  for (const char* field :
       {"propensity: OWN_DRAW", "propensity_draws: 10", "code_gamma: true", "pooled: true"}) {
    SCOPED_TRACE(field);
    EXPECT_THAT(ErrorOf(std::string(kValid) +
                        "policy { policy { name: \"G\" family: SEMI_PARAMETRIC "
                        "semi: GRAPH_UCB_LOCAL " +
                        field + " } }\n"),
                HasSubstr("semi GRAPH_UCB_LOCAL chooses by UCB on the graph"));
  }
}

TEST(PresetsTest, MalformedFilesAreRefusedClearly) {
  ASSERT_EQ(ErrorOf(kValid), "(no error)");
  EXPECT_THAT(ErrorOf(std::string(kValid) + "rounds: \"many\"\n"),
              HasSubstr("tiny.textproto: line"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "no_such_field: 1\n"), HasSubstr("no_such_field"));
  EXPECT_THAT(ErrorOf(kValid, "other.textproto"),
              HasSubstr("other.textproto: name \"tiny\" differs from the file's name \"other\""));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"L\" family: LK_GP "
                                            "kors_mu: 1 } }\n"),
              HasSubstr("policy \"L\": field kors_mu is not used by family LK_GP"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"EK\" family: EK } }\n"),
              HasSubstr("two policies are named \"EK\""));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "analysis: \"nope\"\n"),
              HasSubstr("unknown analysis \"nope\""));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "environment { robustness_task: \"nope\" }\n"),
              HasSubstr("environment 2: unknown robustness_task \"nope\""));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "environment { lk { level: \"huge\" users: 2 "
                                            "reward: GP_DRAW graph: SBM } }\n"),
              HasSubstr("lk.level \"huge\" must be easy, medium or hard"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { sweep { parameter: \"rule\" value: 1 "
                                            "entry { policy { name: \"X\" family: EK } } } }\n"),
              HasSubstr("\"rule\" is not a numeric field of Policy"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"X {kors_mu}\" "
                                            "family: EK } }\n"),
              HasSubstr("the name uses {kors_mu}, which is not set"));
  EXPECT_THAT(ErrorOf(std::string(kValid) + "reference { environment: \"Bump\" policy: \"Z\" }\n"),
              HasSubstr("names no environment or policy"));
  // A paper's spread is either a standard error or a standard deviation over a number of runs.
  for (const char* spread : {"", "se: 1 sd: 2 runs: 10"}) {
    EXPECT_THAT(ErrorOf(std::string(kValid) +
                        "reference { environment: \"Bump\" policy: \"EK\" "
                        "mean: 3 " +
                        spread + " }\n"),
                HasSubstr("exactly one of se"))
        << spread;
  }
  for (const char* spread : {"sd: 2", "sd: 2 runs: 1", "se: 2 runs: 5", "se: -1"}) {
    EXPECT_THAT(ErrorOf(std::string(kValid) +
                        "reference { environment: \"Bump\" policy: \"EK\" "
                        "mean: 3 " +
                        spread + " }\n"),
                HasSubstr("sd goes with runs of at least 2"))
        << spread;
  }
  EXPECT_EQ(ErrorOf(std::string(kValid) +
                    "reference { environment: \"Bump\" policy: \"EK\" mean: 3 sd: 2 runs: 10 }\n"),
            "(no error)");
  EXPECT_THAT(ErrorOf(std::string(kValid) + "policy { policy { name: \"B\" family: BATCHED "
                                            "ek_beta: 0.1 } }\n"),
              HasSubstr("need ridge"));
  // Unsigned fields (the served model's dictionary cap) sweep, but not to negative values.
  EXPECT_THAT(
      ErrorOf(std::string(kValid) + "policy { sweep { parameter: "
                                    "\"served.nystrom.max_dictionary_size\" value: -1 "
                                    "entry { policy { name: \"S\" family: SERVED } } } }\n"),
      HasSubstr("served.nystrom.max_dictionary_size is an unsigned field: -1 is negative"));
  EXPECT_EQ(ErrorOf(std::string(kValid) + "policy { sweep { parameter: "
                                          "\"served.nystrom.max_dictionary_size\" value: 64 "
                                          "entry { policy { name: \"S\" family: SERVED } } } }\n"),
            "(no error)");
}

}  // namespace
}  // namespace graphbandit::sim
