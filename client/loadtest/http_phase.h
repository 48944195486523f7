// The load generator's HTTP phase: the same decisions as its gRPC run, sent to the server's
// Personalizer-compatible REST API (--http_listen; server/personalizer_http.h) as rank calls,
// each followed by its reward, in a closed loop of N callers with keep-alive connections
// (cpp-httplib's client). graphbandit-loadgen --http_target reports its latency, throughput and
// CPU per call beside gRPC's.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_HTTP_PHASE_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_HTTP_PHASE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graphbandit/v1/bandit.pb.h"

namespace graphbandit::loadtest {

// A rank body (Personalizer's JSON) carrying a SelectArm request's named features: its user as
// the context feature "_userId", each context namespace as an object (the default namespace's
// features at the top level), each candidate as an action with its namespaces. Dense vectors
// cannot be sent this way: INVALID_ARGUMENT if the request has any.
absl::StatusOr<std::string> RankBody(const graphbandit::v1::SelectArmRequest& request);

struct HttpPhaseOptions {
  std::string target;  // host:port of --http_listen
  std::string key;     // sent as Ocp-Apim-Subscription-Key when not empty
  int callers = 4;
  double seconds = 1.0;
  double reward_ratio = 1.0;
  uint64_t seed = 1;
};

struct HttpCalls {
  std::vector<double> latencies;         // seconds, successful calls
  std::map<std::string, int64_t> codes;  // "OK", "HTTP 400", ..., or the transport error
};

struct HttpPhaseResult {
  double seconds = 0;
  HttpCalls rank, reward;
};

// Sends bodies[i % size] from each caller in turn for `seconds`; after a successful rank, with
// probability reward_ratio, the reward reward_of(i, rewardActionId) to its event. Fails only
// when the target is not host:port.
absl::StatusOr<HttpPhaseResult> RunHttpPhase(
    const HttpPhaseOptions& options, const std::vector<std::string>& bodies,
    const std::function<double(size_t, const std::string&)>& reward_of);

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_HTTP_PHASE_H_
