// Fuzz target: the service's request validation, in-process (core/model/engine.h). Bytes become a
// sequence of SelectArm / ReportReward / graph-edit calls with hostile values (NaN, infinities,
// wrong dimensions, duplicate and oversized ids, slates out of range, unknown models and
// events). Checked on every call:
//  * no crash, hang or sanitizer report;
//  * only the status codes the API documents for bad input;
//  * a failed call learns nothing and a decision only ever carries finite scores.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/model/engine.h"
#include "tests/fuzz/fuzz_input.h"

namespace graphbandit::fuzz {
namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "request fuzzer: %s (status %s)\n", what, status.ToString().c_str());
  std::abort();
}

bool DocumentedError(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

Engine& SharedEngine() {
  static Engine* engine = [] {
    EngineOptions options;
    ModelOptions small;  // tight limits so that they are reached
    small.name = "default";
    small.max_candidates = 6;
    small.max_feature_dim = 5;
    small.max_users = 40;
    small.max_decisions = 50;
    small.max_graph_edits_per_call = 6;
    small.reward_bound = 10.0;
    ModelOptions summed = small;
    summed.name = "summed";
    summed.aggregation = Aggregation::kSum;
    summed.default_reward = 0.0;
    summed.policy = PolicyKind::kLinUcbPooled;
    options.models = {small, summed};
    options.run_sweeper = false;
    return Engine::Open(options).value().release();
  }();
  return *engine;
}

int64_t Learned(Engine& engine) {
  int64_t total = 0;
  for (const std::string& name : engine.ModelNames()) {
    Model* model = *engine.FindModel(name);
    model->WaitForWriter();
    total += model->View()->rewards_learned;
  }
  return total;
}

std::string ModelName(FuzzInput& in) {
  switch (in.Byte() % 8) {
    case 0:
    case 1:
    case 2:
      return "summed";
    case 3:
      return in.String(6);
    default:
      return "";
  }
}

// How deep the calls got, printed at exit (a run where every call fails its first check would
// prove little).
struct Reach {
  long calls = 0, decisions = 0, rewards_accepted = 0, refused = 0, edits = 0;
  ~Reach() {
    std::fprintf(stderr,
                 "request fuzzer: %ld calls; %ld decisions, %ld rewards accepted, %ld graph edits "
                 "applied, %ld refused with a documented status\n",
                 calls, decisions, rewards_accepted, edits, refused);
  }
};
Reach reach;

}  // namespace
}  // namespace graphbandit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace graphbandit;
  using namespace graphbandit::fuzz;
  Engine& engine = SharedEngine();
  FuzzInput in(data, size);
  static std::vector<std::string> events;  // event ids seen, so that rewards can find them
  static int64_t clock_seconds = 1'000'000;
  for (int call = 0; call < 16 && !in.empty(); ++call) {
    const absl::Time now = absl::FromUnixSeconds(clock_seconds);
    const int64_t learned_before = Learned(engine);
    absl::Status status;
    bool may_learn = false;
    switch (in.Byte() % 6) {
      case 0:
      case 1: {  // SelectArm
        const std::string model = ModelName(in);
        // Mostly well-formed (so that calls get past validation and the model learns), with one
        // field in eight or so made hostile.
        const std::string user =
            in.Usually(std::string(1, static_cast<char>('a' + in.Byte() % 6)), 8,
                       [&] { return in.Bool() ? std::string(300, 'u') : in.String(4); });
        std::vector<double> context(
            static_cast<size_t>(in.Usually(1, 8, [&] { return in.Int(0, 3); })));
        for (double& x : context) x = in.Double();
        const int n = in.Usually(in.Int(1, 4), 8, [&] { return in.Int(0, 8); });
        std::vector<std::string> ids(static_cast<size_t>(n));
        std::vector<std::vector<double>> features(static_cast<size_t>(n));
        const int dim = in.Usually(2, 8, [&] { return in.Int(0, 6); });
        for (int c = 0; c < n; ++c) {
          ids[c] = in.Usually(std::string(1, static_cast<char>('p' + c)), 8,
                              [&] { return in.String(3); });
          features[c].resize(static_cast<size_t>(in.Usually(dim, 8, [&] { return in.Int(0, 6); })));
          for (double& x : features[c]) x = in.Double();
        }
        DecisionRequest request;
        request.model = model;
        request.user_id = user;
        request.context = context;
        for (int c = 0; c < n; ++c) request.candidates.push_back(CandidateRef{ids[c], features[c]});
        request.slate_size = in.Usually(1, 4, [&] { return in.Int(-1, 8); });
        std::string event_id;
        switch (in.Byte() % 4) {
          case 0:
            event_id = in.String(6);
            break;
          case 1:
            if (!events.empty()) event_id = events[in.Int(0, static_cast<int>(events.size()) - 1)];
            break;
          case 2:
            event_id = std::string(200, 'e');
            break;
          default:
            break;
        }
        request.event_id = event_id;
        const absl::Time deadline =
            in.Byte() % 16 == 0 ? now - absl::Seconds(1) : absl::InfiniteFuture();
        auto decision = engine.SelectArmAt(request, now, deadline);
        status = decision.status();
        reach.decisions += decision.ok();
        if (decision.ok()) {
          if (static_cast<int>(decision->arms.size()) != request.slate_size) {
            Fail("a decision returned a slate of the wrong size", status);
          }
          for (const ChosenArm& arm : decision->arms) {
            if (!std::isfinite(arm.mean) || !std::isfinite(arm.stddev) ||
                !std::isfinite(arm.score)) {
              Fail("a decision carries a non-finite score", status);
            }
          }
          if (events.size() < 64) {
            events.push_back(decision->event_id);
          } else {
            events[in.Byte() % 64] = decision->event_id;  // recent events stay reachable
          }
        }
        break;
      }
      case 2:
      case 3: {  // ReportReward
        RewardRequest request;
        request.model = in.Usually(std::string(), 4, [&] { return ModelName(in); });
        if (!events.empty() && in.Byte() % 4 != 0) {
          request.event_id = events[in.Int(0, static_cast<int>(events.size()) - 1)];
        } else {
          request.event_id = in.String(5);
        }
        if (in.Byte() % 4 != 0) request.reward = in.Double();
        const int arms = in.Usually(0, 4, [&] { return in.Int(0, 3); });
        for (int a = 0; a < arms; ++a) request.arm_rewards.emplace_back(in.String(3), in.Double());
        const absl::Time deadline =
            in.Byte() % 16 == 0 ? now - absl::Seconds(1) : absl::InfiniteFuture();
        auto result = engine.ReportRewardAt(request, now, deadline);
        status = result.status();
        may_learn = result.ok() && result->outcome == RewardOutcome::kAccepted;
        reach.rewards_accepted += may_learn;
        break;
      }
      case 4: {  // graph edits
        Model* model = *engine.FindModel(in.Bool() ? "summed" : "default");
        const int k = in.Int(0, 8);
        if (in.Bool()) {
          std::vector<EdgeEdit> edges;
          for (int e = 0; e < k; ++e)
            edges.push_back(EdgeEdit{in.String(3), in.String(3), in.Double()});
          status = model->AddEdges(std::move(edges)).status();
        } else if (in.Bool()) {
          std::vector<std::pair<std::string, std::string>> pairs;
          for (int e = 0; e < k; ++e) pairs.emplace_back(in.String(3), in.String(3));
          status = model->RemoveEdges(std::move(pairs)).status();
        } else {
          std::vector<std::string> users;
          for (int e = 0; e < k; ++e) users.push_back(in.String(3));
          status = model->AddUsers(users).status();
        }
        reach.edits += status.ok();
        break;
      }
      default: {  // time passes; windows (default ten minutes) may end
        clock_seconds += in.Int(0, 900);
        engine.ExpireDue(absl::FromUnixSeconds(clock_seconds));
        may_learn = true;  // closing decisions learns aggregates and default rewards
        break;
      }
    }
    if (!status.ok() && !DocumentedError(status.code()))
      Fail("an undocumented status code", status);
    ++reach.calls;
    reach.refused += !status.ok();
    const int64_t learned_after = Learned(engine);
    if (!may_learn && learned_after != learned_before)
      Fail("a refused call changed the model", status);
  }
  return 0;
}
