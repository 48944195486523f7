// The load generator's calls to one model of a running server: checking that the model takes
// the environment's features, registering the environment's user graph, playing the rounds with
// closed-loop workers, and waiting for the model to learn what it acknowledged.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_SESSION_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_SESSION_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/connection.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "sim/environment.h"

namespace graphbandit::loadtest {

// What one round measured; NaN where it did not get that far (failed or not played).
struct Sample {
  double regret = NAN;  // the best candidate's mean reward minus the chosen one's
  double select_ms = NAN;
  double reward_ms = NAN;
};

// What the closed loop measured.
struct RunResult {
  std::vector<Sample> samples;            // one per requested round
  int64_t played = 0;                     // rounds started (at most samples.size())
  int64_t accepted = 0;                   // rewards the server acknowledged
  std::map<std::string, int64_t> errors;  // "<RPC> <gRPC status code>" -> failed rounds
  double seconds = 0.0;
};

// How the environment's users and items are named on the server.
struct Naming {
  std::string user_prefix;  // distinct per run, so that runs do not share users
  std::string UserId(int user) const { return absl::StrCat(user_prefix, "u", user); }
  static std::string ItemId(int item) { return absl::StrCat("item", item); }
};

class Session {
 public:
  // Waits for the channel to connect, at most one `deadline` (also the deadline of every call).
  static absl::StatusOr<Session> Connect(client::Connection connection, const std::string& target,
                                         std::string model, std::chrono::milliseconds deadline);

  // The model's description before the run; an error when its dimensions are fixed and differ
  // from the environment's.
  absl::StatusOr<graphbandit::v1::ModelDescription> CheckModel(
      const sim::SimEnvironment& env) const;

  // Adds the environment's users and edges to the model.
  absl::Status RegisterGraph(const sim::SimEnvironment& env, const Naming& naming) const;

  // Plays rounds 0..rounds-1 with `concurrency` workers, each taking the next round as soon as
  // its previous one is done; no round starts after `max_seconds`. Round r shows the same user
  // and candidates whichever worker plays it.
  RunResult Run(const sim::SimEnvironment& env, const Naming& naming, int64_t rounds,
                int concurrency, double max_seconds) const;

  // Rewards are learned asynchronously: describes the model until nothing is queued, at most
  // `max_seconds`; the last description obtained (empty if none was).
  graphbandit::v1::ModelDescription WaitForLearning(double max_seconds) const;

 private:
  Session(client::Connection connection, std::string model, std::chrono::milliseconds deadline);

  // A context with the service's token and the call deadline (plus `extra`).
  std::unique_ptr<grpc::ClientContext> Context(
      const char* service, std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;
  absl::StatusOr<graphbandit::v1::ModelDescription> Describe() const;
  // Plays round r, measuring into `sample`: empty when the reward was accepted, otherwise the
  // error's key ("<RPC> <gRPC status code>").
  std::string PlayRound(const sim::SimEnvironment& env, const Naming& naming, int64_t r,
                        Sample* sample) const;

  client::Connection connection_;
  std::string model_;
  std::chrono::milliseconds deadline_;
  std::unique_ptr<graphbandit::v1::BanditService::Stub> bandit_;
  std::unique_ptr<graphbandit::v1::AdminService::Stub> admin_;
};

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_SESSION_H_
