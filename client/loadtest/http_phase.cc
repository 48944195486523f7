#include "client/loadtest/http_phase.h"

// After the protobuf headers: httplib.h brings <resolv.h>, whose macro _res must not reach
// headers that use the name.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "graphbandit/personalizer/v1/personalizer.pb.h"

namespace graphbandit::loadtest {
namespace {

namespace pz = ::graphbandit::personalizer::v1;
using Clock = std::chrono::steady_clock;

google::protobuf::Value JsonValue(const graphbandit::v1::FeatureValue& value) {
  google::protobuf::Value out;
  switch (value.kind_case()) {
    case graphbandit::v1::FeatureValue::kNumber:
      out.set_number_value(value.number());
      break;
    case graphbandit::v1::FeatureValue::kText:
      out.set_string_value(value.text());
      break;
    case graphbandit::v1::FeatureValue::kStrings:
      for (const std::string& s : value.strings().values()) {
        out.mutable_list_value()->add_values()->set_string_value(s);
      }
      break;
    default:
      out.set_null_value(google::protobuf::NULL_VALUE);
  }
  return out;
}

// Namespaces as feature objects: the default namespace's features at the top level of one
// object, every other namespace as an object under its name.
void AddNamespaces(
    const google::protobuf::RepeatedPtrField<graphbandit::v1::FeatureNamespace>& namespaces,
    google::protobuf::RepeatedPtrField<google::protobuf::Struct>* objects) {
  for (const graphbandit::v1::FeatureNamespace& ns : namespaces) {
    google::protobuf::Struct* object = objects->Add();
    google::protobuf::Struct* fields = object;
    if (!ns.name().empty()) {
      fields = (*object->mutable_fields())[ns.name()].mutable_struct_value();
    }
    for (const graphbandit::v1::NamedFeature& feature : ns.features()) {
      (*fields->mutable_fields())[feature.name()] = JsonValue(feature.value());
    }
  }
}

std::string CodeOf(const httplib::Result& result, int expected) {
  if (!result) return httplib::to_string(result.error());
  return result->status == expected ? "OK" : absl::StrCat("HTTP ", result->status);
}

}  // namespace

absl::StatusOr<std::string> RankBody(const graphbandit::v1::SelectArmRequest& request) {
  if (request.context_size() > 0) {
    return absl::InvalidArgumentError("a rank body carries named features only, not a context");
  }
  pz::RankRequest rank;
  google::protobuf::Struct* user = rank.add_context_features();
  (*user->mutable_fields())["_userId"].set_string_value(request.user_id());
  AddNamespaces(request.context_features(), rank.mutable_context_features());
  for (const graphbandit::v1::Arm& arm : request.candidates()) {
    if (arm.features_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("candidate ", arm.id(), " has a dense vector: use --features=named"));
    }
    pz::RankableAction* action = rank.add_actions();
    action->set_id(arm.id());
    AddNamespaces(arm.named_features(), action->mutable_features());
  }
  std::string json;
  if (auto printed = google::protobuf::util::MessageToJsonString(rank, &json); !printed.ok()) {
    return absl::InternalError(printed.message().as_string());
  }
  return json;
}

absl::StatusOr<HttpPhaseResult> RunHttpPhase(
    const HttpPhaseOptions& options, const std::vector<std::string>& bodies,
    const std::function<double(size_t, const std::string&)>& reward_of) {
  const size_t colon = options.target.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.target.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--http_target=%s is not host:port", options.target));
  }
  std::string host = options.target.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (bodies.empty()) return absl::InvalidArgumentError("no rank bodies");

  HttpPhaseResult result;
  std::mutex mu;
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::max(0.0, options.seconds)));
  httplib::Headers headers;
  if (!options.key.empty()) headers.emplace("Ocp-Apim-Subscription-Key", options.key);

  std::vector<std::thread> callers;
  for (int t = 0; t < std::max(1, options.callers); ++t) {
    callers.emplace_back([&, t] {
      httplib::Client client(host, port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);  // else a request sent in two segments waits for an ACK
      client.set_read_timeout(10, 0);
      std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(t));
      std::uniform_real_distribution<double> uniform(0.0, 1.0);
      HttpCalls rank, reward;
      while (Clock::now() < end) {
        const size_t i = next.fetch_add(1);
        const Clock::time_point sent = Clock::now();
        httplib::Result answer = client.Post("/personalizer/v1.0/rank", headers,
                                             bodies[i % bodies.size()], "application/json");
        const std::string code = CodeOf(answer, 201);
        ++rank.codes[code];
        if (code != "OK") continue;
        rank.latencies.push_back(std::chrono::duration<double>(Clock::now() - sent).count());
        if (uniform(rng) >= options.reward_ratio) continue;
        pz::RankResponse ranked;
        google::protobuf::util::JsonParseOptions parse;
        parse.ignore_unknown_fields = true;
        if (!google::protobuf::util::JsonStringToMessage(answer->body, &ranked, parse).ok()) {
          ++reward.codes["unreadable rank answer"];
          continue;
        }
        const std::string body = absl::StrFormat(
            R"({"value": %.17g})", reward_of(i % bodies.size(), ranked.reward_action_id()));
        const Clock::time_point reward_sent = Clock::now();
        httplib::Result rewarded =
            client.Post(absl::StrCat("/personalizer/v1.0/events/", ranked.event_id(), "/reward"),
                        headers, body, "application/json");
        const std::string reward_code = CodeOf(rewarded, 204);
        ++reward.codes[reward_code];
        if (reward_code == "OK") {
          reward.latencies.push_back(
              std::chrono::duration<double>(Clock::now() - reward_sent).count());
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      const auto merge = [](const HttpCalls& from, HttpCalls* to) {
        to->latencies.insert(to->latencies.end(), from.latencies.begin(), from.latencies.end());
        for (const auto& [code, n] : from.codes) to->codes[code] += n;
      };
      merge(rank, &result.rank);
      merge(reward, &result.reward);
    });
  }
  for (std::thread& caller : callers) caller.join();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace graphbandit::loadtest
