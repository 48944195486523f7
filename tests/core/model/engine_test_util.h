// Helpers shared by the engine tests (engine_*_test.cc): requests that own their data,
// temporary state directories, engines, and fixed sequences of decisions and rewards.
#ifndef GRAPHBANDIT_TESTS_CORE_MODEL_ENGINE_TEST_UTIL_H_
#define GRAPHBANDIT_TESTS_CORE_MODEL_ENGINE_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/random.h"
#include "core/model/engine.h"

namespace graphbandit {

// A request that owns its data (DecisionRequest only holds views).
struct OwnedRequest {
  std::string model;
  std::string user = "alice";
  std::vector<double> context;
  std::vector<std::pair<std::string, std::vector<double>>> candidates;
  int slate_size = 1;
  std::string event_id;
  bool defer_activation = false;
  int baseline = -1;

  DecisionRequest View() const {
    DecisionRequest r;
    r.model = model;
    r.user_id = user;
    r.context = context;
    for (const auto& [id, f] : candidates) r.candidates.push_back(CandidateRef{id, f});
    r.slate_size = slate_size;
    r.event_id = event_id;
    r.defer_activation = defer_activation;
    r.baseline = baseline;
    return r;
  }
};

inline OwnedRequest ThreeArms(const std::string& user = "alice") {
  OwnedRequest r;
  r.user = user;
  r.candidates = {{"a", {1.0, 0.0}}, {"b", {0.0, 1.0}}, {"c", {0.7, 0.7}}};
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/engine_test.XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::unique_ptr<Engine> OpenEngine(std::vector<ModelOptions> models = {},
                                          const std::string& state_dir = "") {
  EngineOptions options;
  options.models = std::move(models);
  options.state_dir = state_dir;
  auto engine = Engine::Open(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

inline absl::Status SelectStatus(Engine& engine, const OwnedRequest& request) {
  return engine.SelectArm(request.View()).status();
}

// An engine whose decisions close only when the test says so (no sweeper thread).
inline std::unique_ptr<Engine> ManualClockEngine(ModelOptions model) {
  EngineOptions options;
  options.models = {std::move(model)};
  options.run_sweeper = false;
  auto engine = Engine::Open(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

// A one-candidate request: the decision is forced, so what is learned depends only on rewards.
inline OwnedRequest OneArm(const std::string& event_id) {
  OwnedRequest r;
  r.candidates = {{"only", {0.6, 0.8}}};
  r.event_id = event_id;
  return r;
}

inline std::pair<double, double> MeanAndStddev(Engine& engine, absl::Time now) {
  auto probe = engine.SelectArmAt(OneArm("").View(), now, absl::InfiniteFuture());
  EXPECT_TRUE(probe.ok()) << probe.status();
  if (!probe.ok()) return {0, 0};
  return {probe->arms[0].mean, probe->arms[0].stddev};
}

// What a model learns from one reward `value` for the one-arm decision.
inline std::pair<double, double> LearnedFromOne(double value) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  auto engine = ManualClockEngine(options);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  EXPECT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  EXPECT_TRUE(engine->ReportRewardAt({"e", value, {}, ""}, t0, absl::InfiniteFuture()).ok());
  (*engine->FindModel(""))->WaitForFits();
  return MeanAndStddev(*engine, t0);
}

// The means and standard deviations of a slate of three fixed arms for each of `users` (they do
// not depend on the decision's randomness); by default users DriveAndProbe trains, and one
// never seen.
inline std::vector<double> Probe(Engine& engine, const std::vector<std::string>& users = {
                                                     "user0", "user3", "stranger"}) {
  std::vector<double> scores;
  for (const std::string& user : users) {
    OwnedRequest probe = ThreeArms(user);
    probe.slate_size = 3;
    auto decision = engine.SelectArm(probe.View());
    EXPECT_TRUE(decision.ok()) << decision.status();
    if (!decision.ok()) continue;
    for (const ChosenArm& arm : decision->arms) {
      scores.push_back(arm.mean);
      scores.push_back(arm.stddev);
    }
  }
  return scores;
}

// Drives a model with a fixed sequence and returns the scores of a probe request.
inline std::vector<double> DriveAndProbe(Engine& engine, int rounds) {
  Model* model = *engine.FindModel("");
  for (int round = 0; round < rounds; ++round) {
    OwnedRequest request = ThreeArms(absl::StrCat("user", round % 4));
    request.event_id = absl::StrCat("e", round);
    auto decision = engine.SelectArm(request.View());
    EXPECT_TRUE(decision.ok());
    const double reward = decision->arms[0].arm_id == "b" ? 0.8 : 0.1 * (round % 3);
    EXPECT_TRUE(engine.ReportReward({decision->event_id, reward, {}, ""}).ok());
    if (round == rounds / 2) {
      EXPECT_TRUE(model->AddEdges({{"user0", "user1", 1.0}, {"user2", "user3", 0.5}}).ok());
    }
  }
  model->WaitForFits();
  return Probe(engine);
}

// What is on disk at this moment is what a kill -9 would leave (records are written before
// calls return): copying the state directory of a running engine simulates a crash.
inline std::string CrashCopy(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  return to;
}

inline absl::StatusOr<std::unique_ptr<Engine>> Reopen(const std::string& state_dir) {
  EngineOptions options;
  options.state_dir = state_dir;
  return Engine::Open(options);
}

// `rounds` decisions for alice, each rewarded 0.5.
inline void PlayRounds(Engine& engine, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    auto decision = engine.SelectArm(ThreeArms().View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine.ReportReward({decision->event_id, 0.5, {}, ""}).ok());
  }
}

inline std::vector<std::string> FilesMatching(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char c = 0;
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  file.seekp(offset);
  file.write(&c, 1);
}

// `rounds` decisions of users u0..u3 among 6 items whose 2 features are on a scale of 10, with a
// smooth reward of them: the default length-scale 1 is far too short, and the noise standard
// deviation is 0.1.
inline void PlaySmoothTask(Engine& engine, int rounds) {
  Rng rng(17);
  for (int round = 0; round < rounds; ++round) {
    OwnedRequest request;
    request.user = absl::StrCat("u", round % 4);
    for (int i = 0; i < 6; ++i) {
      request.candidates.push_back(
          {absl::StrCat("item", i), {10.0 * rng.Normal(), 10.0 * rng.Normal()}});
    }
    auto decision = engine.SelectArm(request.View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    const std::vector<double>& x = request.candidates[decision->arms[0].candidate_index].second;
    const double reward = std::sin(x[0] / 8.0) + 0.5 * std::cos(x[1] / 12.0) + 0.1 * rng.Normal();
    ASSERT_TRUE(engine.ReportReward({decision->event_id, reward, {}, ""}).ok());
  }
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_TESTS_CORE_MODEL_ENGINE_TEST_UTIL_H_
