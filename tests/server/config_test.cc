// The server's configuration (server/config.h): text-format files mapped onto the core's
// options with their defaults, ledger and durability settings, and every enum value both ways.
#include "server/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/fit/refit.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, TextFormatConfigMapsToOptionsWithDefaults) {
  auto config =
      ParseServerConfig(R"pb(
                          default_model: "news"
                          models {
                            name: "news"
                            policy: EK_TS
                            arm_kernel { type: MATERN52 arm_lengthscale: 0.5 }
                            graph { rho: 0.3 }
                            exploration: 0
                            limits { max_candidates: 50 }
                          }
                          models { name: "small" policy: GP_UCB context_dim: 2 arm_feature_dim: 3 }
                        )pb",
                        "inline");
  ASSERT_TRUE(config.ok()) << config.status();
  auto options = ToEngineOptions(*config, "/tmp/x");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->default_model, "news");
  ASSERT_EQ(options->models.size(), 2u);
  const ModelOptions& news = options->models[0];
  EXPECT_EQ(news.policy, PolicyKind::kEkTs);
  EXPECT_EQ(news.kernel, KernelType::kMatern52);
  EXPECT_EQ(news.arm_lengthscale, 0.5);
  EXPECT_EQ(news.context_lengthscale, 1.0);
  EXPECT_EQ(news.rho, 0.3);
  EXPECT_EQ(news.exploration, 0.0);  // explicitly zero is kept
  EXPECT_EQ(news.ridge, 0.1);
  EXPECT_EQ(news.max_candidates, 50);
  EXPECT_EQ(news.max_dictionary_size, 1000);
  EXPECT_EQ(options->models[1].arm_dim, 3);
  // Values set in the configuration are held fixed; the others are fitted.
  EXPECT_TRUE(news.refits_hyperparameters());
  EXPECT_FALSE(news.refit.fit_rho);
  EXPECT_FALSE(news.refit.fit_arm_lengthscale);
  EXPECT_TRUE(news.refit.fit_context_lengthscale);
  EXPECT_TRUE(news.refit.fit_signal_variance);
  EXPECT_TRUE(news.refit.fit_noise_variance);
  // Round trip through the effective configuration: fitted values stay unset (so they are
  // fitted again), fixed ones keep their value.
  auto again = ToModelOptions(ToModelConfig(news));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->kors_mu, 0.0);  // follows the (fitted) ridge
  EXPECT_EQ(again->effective_kors_mu(), news.effective_kors_mu());
  EXPECT_EQ(again->exploration, 0.0);
  EXPECT_EQ(again->rho, 0.3);
  EXPECT_EQ(again->arm_lengthscale, 0.5);
  EXPECT_FALSE(again->refit.fit_rho);
  EXPECT_FALSE(again->refit.fit_arm_lengthscale);
  EXPECT_TRUE(again->refit.fit_noise_variance);
  EXPECT_TRUE(again->refit.fit_signal_variance);
  EXPECT_EQ(again->refit.max_points, news.refit.max_points);
  EXPECT_EQ(again->refit.min_gain_per_parameter, 1.0);
  auto gain = ParseServerConfig(R"pb(
                                  models {
                                    name: "g"
                                    hyperparameters { min_gain_per_parameter: 0 }
                                  }
                                )pb",
                                "inline");
  ASSERT_TRUE(gain.ok());
  EXPECT_EQ(ToModelOptions(gain->models(0))->refit.min_gain_per_parameter, 0.0);
  auto negative_gain = ParseServerConfig(R"pb(
                                           models {
                                             name: "g"
                                             hyperparameters { min_gain_per_parameter: -1 }
                                           }
                                         )pb",
                                         "inline");
  ASSERT_TRUE(negative_gain.ok());
  EXPECT_THAT(std::string(ToModelOptions(negative_gain->models(0)).status().message()),
              HasSubstr("min_gain_per_parameter"));
  // KORS mu's factor over the noise variance: read, written back, and refused when not > 0.
  auto factor = ParseServerConfig(R"pb(
                                    models {
                                      name: "k"
                                      hyperparameters { kors_mu_factor: 10 }
                                    }
                                    models {
                                      name: "z"
                                      hyperparameters { kors_mu_factor: 0 }
                                    }
                                  )pb",
                                  "inline");
  ASSERT_TRUE(factor.ok()) << factor.status();
  auto k = ToModelOptions(factor->models(0));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->refit.kors_mu_factor, 10.0);
  EXPECT_EQ(k->effective_kors_mu(), 10.0 * k->ridge);
  EXPECT_EQ(ToModelConfig(*k).hyperparameters().kors_mu_factor(), 10.0);
  EXPECT_EQ(ToModelOptions(ToModelConfig(*k))->refit.kors_mu_factor, 10.0);
  EXPECT_THAT(std::string(ToModelOptions(factor->models(1)).status().message()),
              HasSubstr("kors_mu_factor"));
  // A fit's share of a core: served default, read, written back, refused outside (0, 1].
  auto share = ParseServerConfig(R"pb(
                                   models { name: "default_share" }
                                   models {
                                     name: "half"
                                     hyperparameters { fit_cpu_share: 0.5 }
                                   }
                                   models {
                                     name: "zero"
                                     hyperparameters { fit_cpu_share: 0 }
                                   }
                                 )pb",
                                 "inline");
  ASSERT_TRUE(share.ok()) << share.status();
  EXPECT_EQ(ToModelOptions(share->models(0))->refit.cpu_share, kServedFitCpuShare);
  auto half = ToModelOptions(share->models(1));
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->refit.cpu_share, 0.5);
  EXPECT_EQ(ToModelConfig(*half).hyperparameters().fit_cpu_share(), 0.5);
  EXPECT_EQ(ToModelOptions(ToModelConfig(*half))->refit.cpu_share, 0.5);
  EXPECT_THAT(std::string(ToModelOptions(share->models(2)).status().message()),
              HasSubstr("fit_cpu_share must lie in (0, 1], got 0"));
  // Fitting can be switched off; then every value is used as configured.
  auto off = ParseServerConfig(R"pb(
                                 models {
                                   name: "fixed"
                                   hyperparameters { fit: false }
                                 }
                               )pb",
                               "inline");
  ASSERT_TRUE(off.ok()) << off.status();
  auto fixed = ToModelOptions(off->models(0));
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->refits_hyperparameters());
  const v1::ModelConfig fixed_config = ToModelConfig(*fixed);
  EXPECT_EQ(fixed_config.ridge(), 0.1);
  EXPECT_EQ(fixed_config.graph().rho(), 0.1);
  EXPECT_FALSE(fixed_config.hyperparameters().fit());
  // Out-of-range fitting settings are refused with the field named.
  auto bad = ParseServerConfig(R"pb(
                                 models {
                                   name: "bad"
                                   hyperparameters { growth: 0.5 }
                                 }
                               )pb",
                               "inline");
  ASSERT_TRUE(bad.ok());
  auto refused = ToModelOptions(bad->models(0));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("growth"));

  auto full = ParseServerConfig(R"pb(
                                  models {
                                    name: "g"
                                    policy: GRAPH_UCB
                                    graph { user_kernel: HEAT heat_tau: 0.5 spectral_dims: 4 }
                                    nystrom { max_history: 5000 forget_evicted: true }
                                    linear { lambda: 2 }
                                    batched { threshold: 3 oversampling: 7 }
                                  }
                                )pb",
                                "inline");
  ASSERT_TRUE(full.ok()) << full.status();
  auto g = ToModelOptions(full->models(0));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->policy, PolicyKind::kGraphUcb);
  EXPECT_EQ(g->user_kernel, UserKernelKind::kHeat);
  EXPECT_EQ(g->heat_tau, 0.5);
  EXPECT_EQ(g->spectral_dims, 4);
  EXPECT_EQ(g->max_history, 5000);
  EXPECT_TRUE(g->forget_evicted);
  EXPECT_EQ(g->linear_lambda, 2.0);
  EXPECT_EQ(g->batched_threshold, 3.0);
  EXPECT_EQ(g->batched_oversampling, 7.0);
  const v1::ModelConfig effective = ToModelConfig(*g);
  EXPECT_EQ(effective.policy(), v1::GRAPH_UCB);
  EXPECT_EQ(effective.graph().user_kernel(), v1::GraphConfig::HEAT);
  auto back = ToModelOptions(effective);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->max_history, 5000);
  EXPECT_EQ(back->batched_oversampling, 7.0);

  // The community part of the Green's function: 8 dimensions unless set; 0 turns it off;
  // more than 64 is refused, naming the field; both survive the round trip.
  EXPECT_EQ(g->community_dims, 8);
  EXPECT_TRUE(g->refit.fit_community_variance);
  EXPECT_EQ(effective.graph().community_dims(), 8u);
  auto community = ParseServerConfig(
      R"pb(models {
             name: "c"
             graph { community_dims: 0 }
             hyperparameters { fit_community_variance: false }
           }
           models {
             name: "d"
             graph { community_dims: 65 }
           })pb",
      "inline");
  ASSERT_TRUE(community.ok()) << community.status();
  auto no_community = ToModelOptions(community->models(0));
  ASSERT_TRUE(no_community.ok()) << no_community.status();
  EXPECT_EQ(no_community->community_dims, 0);
  EXPECT_FALSE(no_community->refit.fit_community_variance);
  auto off_back = ToModelOptions(ToModelConfig(*no_community));
  ASSERT_TRUE(off_back.ok());
  EXPECT_EQ(off_back->community_dims, 0);
  EXPECT_FALSE(off_back->refit.fit_community_variance);
  auto too_many = ToModelOptions(community->models(1));
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_many.status().message()),
              HasSubstr("graph.community_dims must be in 0..64, got 65"));

  auto typo = ParseServerConfig("models { nmae: \"x\" }", "bad.textproto");
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(typo.status().message()), HasSubstr("bad.textproto: line 1"));
  auto unnamed = ParseServerConfig("models { ridge: 1 }", "x");
  ASSERT_TRUE(unnamed.ok());
  EXPECT_THAT(std::string(ToEngineOptions(*unnamed, "").status().message()),
              HasSubstr("models[0].name is required"));
  auto negative = ParseServerConfig("models { name: \"m\" graph { rho: -1 } }", "x");
  ASSERT_TRUE(negative.ok());
  EXPECT_THAT(std::string(ToEngineOptions(*negative, "").status().message()),
              HasSubstr("graph.rho must be a finite number > 0"));
}

TEST(ConfigTest, LedgerAndDurabilitySettings) {
  auto config = ParseServerConfig(
      R"pb(
        durability { sync: GROUP_COMMIT group_commit_interval_ms: 5 snapshot_every_records: 0 }
        models {
          name: "m"
          ledger { reward_window_seconds: 60 aggregation: SUM default_reward: 0 max_tombstones: 7 }
        }
      )pb",
      "inline");
  ASSERT_TRUE(config.ok()) << config.status();
  auto options = ToEngineOptions(*config, "");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->durability.sync, Durability::Sync::kGroupCommit);
  EXPECT_EQ(options->durability.group_commit_interval, absl::Milliseconds(5));
  EXPECT_EQ(options->durability.snapshot_every_records, 0);  // explicitly zero: only at shutdown
  const ModelOptions& m = options->models[0];
  EXPECT_EQ(m.reward_window, absl::Seconds(60));
  EXPECT_EQ(m.aggregation, Aggregation::kSum);
  ASSERT_TRUE(m.default_reward.has_value());
  EXPECT_EQ(*m.default_reward, 0.0);
  EXPECT_EQ(m.max_tombstones, 7);
  const v1::ModelConfig effective = ToModelConfig(m);
  EXPECT_EQ(effective.ledger().aggregation(), v1::SUM);
  EXPECT_TRUE(effective.ledger().has_default_reward());

  // Defaults: a sync per record (shared), snapshots every 100,000 records, FIRST, no default.
  auto defaults = ToEngineOptions(*ParseServerConfig("models { name: \"d\" }", "x"), "");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->durability.sync, Durability::Sync::kEveryRecord);
  EXPECT_EQ(defaults->durability.group_commit_interval, absl::Milliseconds(2));
  EXPECT_EQ(defaults->durability.snapshot_every_records, 100'000);
  EXPECT_EQ(defaults->models[0].aggregation, Aggregation::kFirst);
  EXPECT_FALSE(defaults->models[0].default_reward.has_value());

  EXPECT_EQ(defaults->durability.max_queued_operations, 0);  // derived from the cadence

  auto bounded = ParseServerConfig("durability { max_queued_operations: 2000 }", "x");
  ASSERT_TRUE(bounded.ok());
  ASSERT_TRUE(ToEngineOptions(*bounded, "").ok());
  EXPECT_EQ(ToEngineOptions(*bounded, "")->durability.max_queued_operations, 2000);
  auto unbounded = ParseServerConfig("durability { max_queued_operations: 0 }", "x");
  ASSERT_TRUE(unbounded.ok());
  EXPECT_THAT(std::string(ToEngineOptions(*unbounded, "").status().message()),
              HasSubstr("durability.max_queued_operations is 0; it must be 1..10000000"));

  EXPECT_EQ(defaults->durability.max_learning_lag, absl::Milliseconds(500));
  auto lag = ParseServerConfig("durability { max_learning_lag_ms: 0 }", "x");
  ASSERT_TRUE(lag.ok());
  EXPECT_EQ(ToEngineOptions(*lag, "")->durability.max_learning_lag, absl::ZeroDuration());
  lag = ParseServerConfig("durability { max_learning_lag_ms: 3600001 }", "x");
  ASSERT_TRUE(lag.ok());
  EXPECT_THAT(std::string(ToEngineOptions(*lag, "").status().message()),
              HasSubstr("durability.max_learning_lag_ms is 3600001; it must be 0..3600000"));

  auto slow = ParseServerConfig("durability { group_commit_interval_ms: 5000 }", "x");
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(ToEngineOptions(*slow, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ToEngineOptions(*slow, "").status().message()),
              HasSubstr("durability.group_commit_interval_ms is 5000; it must be 1..1000"));
  auto bad_default =
      ParseServerConfig("models { name: \"m\" ledger { default_reward: 1e12 } }", "x");
  ASSERT_TRUE(bad_default.ok());
  EXPECT_THAT(std::string(ToEngineOptions(*bad_default, "").status().message()),
              HasSubstr("ledger.default_reward must be finite and within limits.reward_bound"));
}

// Every named value of every enum of ModelConfig maps to core and back to itself; unknown
// numbers are refused with the field and the allowed names.
// The combinatorial GP paper's schedules and the prior mean: parsed, defaulted, round-tripped.
TEST(ConfigTest, IndexScheduleAndPriorMean) {
  auto config = ParseServerConfig(R"pb(
                                    models {
                                      name: "slates"
                                      policy: GP_UCB
                                      exploration: 1
                                      exploration_width: BAYES_UCB
                                      index_schedule { arm_count: 5000 xi: 2 inverse_t_level: true }
                                      prior_mean: 0.25
                                    }
                                    models { name: "plain" }
                                  )pb",
                                  "inline");
  ASSERT_TRUE(config.ok()) << config.status();
  auto slates = ToModelOptions(config->models(0));
  ASSERT_TRUE(slates.ok()) << slates.status();
  EXPECT_EQ(slates->exploration_width, ExplorationWidth::kBayesUcb);
  EXPECT_EQ(slates->index_schedule.arm_count, 5000.0);
  EXPECT_EQ(slates->index_schedule.omega, 1.0);  // default
  EXPECT_EQ(slates->index_schedule.xi, 2.0);
  EXPECT_TRUE(slates->index_schedule.inverse_t_level);
  EXPECT_EQ(slates->prior_mean, 0.25);
  auto again = ToModelOptions(ToModelConfig(*slates));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->index_schedule.arm_count, 5000.0);
  EXPECT_EQ(again->index_schedule.xi, 2.0);
  EXPECT_TRUE(again->index_schedule.inverse_t_level);
  EXPECT_EQ(again->prior_mean, 0.25);
  auto plain = ToModelOptions(config->models(1));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->index_schedule.arm_count, 1000.0);
  EXPECT_EQ(plain->prior_mean, 0.0);
  // Out of range: named precisely.
  v1::ModelConfig bad = config->models(0);
  bad.mutable_index_schedule()->set_omega(-1.0);
  EXPECT_THAT(std::string(ToModelOptions(bad).status().message()),
              HasSubstr("index_schedule.omega and xi must be finite and > 0"));
  v1::ModelConfig linear = config->models(1);
  linear.set_policy(v1::LINUCB_PER_USER);
  linear.set_prior_mean(1.0);
  EXPECT_THAT(std::string(ToModelOptions(linear).status().message()),
              HasSubstr("prior_mean is a kernel policy's"));
}

TEST(ConfigTest, EveryEnumValueRoundTrips) {
  const std::vector<std::vector<std::string>> paths = {{"policy"},
                                                       {"arm_kernel", "type"},
                                                       {"graph", "user_kernel"},
                                                       {"exploration_width"},
                                                       {"ledger", "aggregation"}};
  for (const std::vector<std::string>& path : paths) {
    // The message holding the field, and the field.
    auto field_of = [&path](google::protobuf::Message* root, google::protobuf::Message** holder) {
      google::protobuf::Message* message = root;
      for (size_t i = 0; i + 1 < path.size(); ++i) {
        message = message->GetReflection()->MutableMessage(
            message, message->GetDescriptor()->FindFieldByName(path[i]));
      }
      *holder = message;
      return message->GetDescriptor()->FindFieldByName(path.back());
    };
    v1::ModelConfig probe;
    google::protobuf::Message* holder = nullptr;
    const google::protobuf::EnumDescriptor* values = field_of(&probe, &holder)->enum_type();
    ASSERT_NE(values, nullptr) << path.back();
    for (int i = 1; i < values->value_count(); ++i) {  // 0 is *_UNSPECIFIED
      v1::ModelConfig config;
      config.set_name("m");
      const google::protobuf::FieldDescriptor* field = field_of(&config, &holder);
      holder->GetReflection()->SetEnumValue(holder, field, values->value(i)->number());
      auto options = ToModelOptions(config);
      ASSERT_TRUE(options.ok()) << values->value(i)->name() << ": " << options.status();
      v1::ModelConfig effective = ToModelConfig(*options);
      field = field_of(&effective, &holder);
      EXPECT_EQ(holder->GetReflection()->GetEnumValue(*holder, field), values->value(i)->number())
          << values->value(i)->name();
    }
    v1::ModelConfig unknown;
    unknown.set_name("m");
    const google::protobuf::FieldDescriptor* field = field_of(&unknown, &holder);
    holder->GetReflection()->SetEnumValue(holder, field, 99);
    const std::string message(ToModelOptions(unknown).status().message());
    EXPECT_THAT(message,
                HasSubstr(absl::StrCat("model \"m\": unknown ", absl::StrJoin(path, "."),
                                       " 99: it must be one of ", values->value(1)->name(), ", ")));
  }

  v1::ServerConfig server;
  for (const auto sync : {v1::DurabilityConfig::EVERY_RECORD, v1::DurabilityConfig::GROUP_COMMIT,
                          v1::DurabilityConfig::OS}) {
    server.mutable_durability()->set_sync(sync);
    EXPECT_TRUE(ToEngineOptions(server, "").ok()) << sync;
  }
  server.mutable_durability()->set_sync(static_cast<v1::DurabilityConfig::Sync>(7));
  EXPECT_THAT(std::string(ToEngineOptions(server, "").status().message()),
              HasSubstr("unknown durability.sync 7: it must be one of EVERY_RECORD, GROUP_COMMIT, "
                        "OS (unset means EVERY_RECORD)"));
}

// Configuration errors found after parsing name the file, the line and the field; a
// default_model that names no configured model is one of them.
TEST(ConfigTest, ErrorsNameTheFileTheLineAndTheField) {
  const std::string path = ::testing::TempDir() + "/config_test_errors.textproto";
  auto write = [&path](const std::string& text) { std::ofstream(path) << text; };
  write(
      "models { name: \"a\" }\n"
      "default_model: \"b\"\n");
  auto missing = ReadEngineOptions(path, "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(missing.status().message()),
            path +
                ":2: default_model \"b\" names no configured model (configured: a); add a "
                "models { name: \"b\" } block or remove default_model");
  write("default_model: \"b\"\n");
  EXPECT_THAT(std::string(ReadEngineOptions(path, "").status().message()),
              HasSubstr(":1: default_model \"b\" names no configured model (none is configured)"));

  write(
      "# two models\n"
      "models { name: \"ok\" }\n"
      "models {\n"
      "  name: \"bad\"\n"
      "  ridge: -1\n"
      "}\n");
  auto bad_ridge = ReadEngineOptions(path, "");
  EXPECT_THAT(std::string(bad_ridge.status().message()),
              HasSubstr(path + ":3: model \"bad\": ridge must be a finite number > 0"));
  write(
      "durability {\n"
      "  sync: EVERY_RECORD\n"
      "  group_commit_interval_ms: 5000\n"
      "}\n");
  EXPECT_THAT(std::string(ReadEngineOptions(path, "").status().message()),
              HasSubstr(path + ":3: durability.group_commit_interval_ms is 5000"));
  write(
      "models { name: \"x\" }\n"
      "models { name: \"y\" }\n"
      "models {\n"
      "  name: \"x\"\n"
      "}\n");
  EXPECT_EQ(std::string(ReadEngineOptions(path, "").status().message()),
            path + ":3: model \"x\" is declared twice (first at line 1)");
  write("models { name: \"x\" nope: 1 }\n");
  EXPECT_THAT(std::string(ReadEngineOptions(path, "").status().message()),
              HasSubstr(path + ": line 1 column"));
  write("models { name: \"x\" }\ndefault_model: \"x\"\n");
  auto fine = ReadEngineOptions(path, "/tmp/state");
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->default_model, "x");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace graphbandit::server
