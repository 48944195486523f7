#include "core/model/request_validation.h"

#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit {

absl::Status CheckId(absl::string_view id, absl::string_view field) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " must not be empty"));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is %d bytes long; the limit is %d", field, id.size(), kMaxIdBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(absl::Span<const double> values, absl::string_view field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s[%d] is %s", field, i, std::isnan(values[i]) ? "NaN" : "infinite"));
    }
    if (std::abs(values[i]) > kMaxFeatureMagnitude) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s[%d] is %g; feature values must lie in [-%g, %g] (rescale them)",
                          field, i, values[i], kMaxFeatureMagnitude, kMaxFeatureMagnitude));
    }
  }
  return absl::OkStatus();
}

namespace {

// More per-arm rewards than any decision can have returned (slates are at most
// limits.max_candidates, itself at most this).
constexpr size_t kMaxArmRewards = 10'000;

// A reported reward: finite and within the model's bound. `field` names it ("reward",
// "arm_rewards[2].reward").
absl::Status CheckReward(double reward, absl::string_view field, const ModelOptions* options) {
  if (!std::isfinite(reward)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is %s", field, std::isnan(reward) ? "NaN" : "infinite"));
  }
  if (options != nullptr && std::abs(reward) > options->reward_bound) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %g is outside [-%g, %g] (model \"%s\" limits.reward_bound)", field,
                        reward, options->reward_bound, options->reward_bound, options->name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckEventId(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("event_id must not be empty");
  if (id.size() > kMaxEventIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("event_id must be 1..%d printable ASCII characters, got %d bytes",
                        kMaxEventIdBytes, id.size()));
  }
  for (char c : id) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("event_id %s contains a byte outside printable ASCII", QuoteId(id)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRewardRequest(const RewardRequest& request, const ModelOptions* options) {
  if (absl::Status s = CheckEventId(request.event_id); !s.ok()) return s;
  if (request.reward.has_value() == !request.arm_rewards.empty()) {
    return absl::InvalidArgumentError(
        request.reward.has_value()
            ? "set either reward or arm_rewards, not both"
            : "no reward given: set reward (single-arm decisions) or arm_rewards");
  }
  if (request.reward.has_value()) return CheckReward(*request.reward, "reward", options);
  if (request.arm_rewards.size() > kMaxArmRewards) {
    return absl::InvalidArgumentError(absl::StrFormat("arm_rewards has %d entries; the limit is %d",
                                                      request.arm_rewards.size(), kMaxArmRewards));
  }
  absl::flat_hash_set<absl::string_view> reported;
  for (size_t i = 0; i < request.arm_rewards.size(); ++i) {
    const auto& [arm_id, reward] = request.arm_rewards[i];
    if (absl::Status s = CheckId(arm_id, absl::StrFormat("arm_rewards[%d].arm_id", i)); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckReward(reward, absl::StrFormat("arm_rewards[%d].reward", i), options);
        !s.ok()) {
      return s;
    }
    if (!reported.insert(arm_id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("arm %s is reported twice in arm_rewards", QuoteId(arm_id)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDecisionRequest(const DecisionRequest& request, const Dimensions& dims,
                                     const ModelOptions& options) {
  if (absl::Status s = CheckId(request.user_id, "user_id"); !s.ok()) return s;
  const int n = static_cast<int>(request.candidates.size());
  if (n == 0) return absl::InvalidArgumentError("candidates must not be empty");
  if (n > options.max_candidates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d candidates exceed model \"%s\"'s limit of %d (limits.max_candidates)",
                        n, options.name, options.max_candidates));
  }
  if (request.slate_size < 1) return absl::InvalidArgumentError("slate_size must be at least 1");
  if (request.baseline < -1 || request.baseline >= n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "baseline %d is not a candidate's index (%d candidates)", request.baseline, n));
  }
  if (request.slate_size > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slate_size %d exceeds the number of candidates (%d)", request.slate_size, n));
  }
  const int expected_context = dims.fixed ? dims.context_dim : -1;
  if (expected_context >= 0 && static_cast<int>(request.context.size()) != expected_context) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context has %d values; model \"%s\" expects %d", request.context.size(),
                        options.name, expected_context));
  }
  if (!dims.fixed && static_cast<int>(request.context.size()) > options.max_feature_dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context has %d values; the limit is %d (limits.max_feature_dim)",
                        request.context.size(), options.max_feature_dim));
  }
  if (absl::Status s = CheckFinite(request.context, "context"); !s.ok()) return s;

  const int expected_arm =
      dims.fixed ? dims.arm_dim : static_cast<int>(request.candidates[0].features.size());
  if (!dims.fixed) {
    if (expected_arm == 0) {
      return absl::InvalidArgumentError(
          "candidates[0] has no features; every candidate needs at least one");
    }
    if (expected_arm > options.max_feature_dim) {
      return absl::InvalidArgumentError(
          absl::StrFormat("candidates have %d features; the limit is %d (limits.max_feature_dim)",
                          expected_arm, options.max_feature_dim));
    }
  }
  absl::flat_hash_map<absl::string_view, int> seen;
  seen.reserve(n);
  for (int i = 0; i < n; ++i) {
    const CandidateRef& candidate = request.candidates[i];
    const std::string field = absl::StrFormat("candidates[%d].id", i);
    if (absl::Status s = CheckId(candidate.id, field); !s.ok()) return s;
    auto [it, inserted] = seen.emplace(candidate.id, i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrFormat("duplicate arm id %s: candidates[%d] and candidates[%d]",
                          QuoteId(candidate.id), it->second, i));
    }
    if (static_cast<int>(candidate.features.size()) != expected_arm) {
      return absl::InvalidArgumentError(
          absl::StrFormat("candidates[%d] (%s) has %d features; %s %d", i, QuoteId(candidate.id),
                          candidate.features.size(),
                          dims.fixed ? absl::StrFormat("model \"%s\" expects", options.name)
                                     : std::string("candidates[0] has"),
                          expected_arm));
    }
    if (absl::Status s =
            CheckFinite(candidate.features,
                        absl::StrFormat("candidates[%d] (%s) features", i, QuoteId(candidate.id)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateUsers(absl::Span<const std::string> users, const ModelOptions& options) {
  if (users.empty()) return absl::InvalidArgumentError("user_ids must not be empty");
  if (static_cast<int64_t>(users.size()) > options.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d users exceed the limit of %d per call (limits.max_graph_edits_per_call)", users.size(),
        options.max_graph_edits_per_call));
  }
  for (size_t i = 0; i < users.size(); ++i) {
    if (absl::Status s = CheckId(users[i], absl::StrFormat("user_ids[%d]", i)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ValidateEdges(const std::vector<EdgeEdit>& edges,
                                                       const ModelOptions& options) {
  if (edges.empty()) return absl::InvalidArgumentError("edges must not be empty");
  if (static_cast<int64_t>(edges.size()) > options.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d edges exceed the limit of %d per call (limits.max_graph_edits_per_call)", edges.size(),
        options.max_graph_edits_per_call));
  }
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, size_t> pairs;
  std::vector<std::string> ids;
  for (size_t i = 0; i < edges.size(); ++i) {
    const EdgeEdit& e = edges[i];
    for (const std::string* user : {&e.user_a, &e.user_b}) {
      absl::Status s = CheckId(
          *user, absl::StrFormat("edges[%d].%s", i, user == &e.user_a ? "user_a" : "user_b"));
      if (!s.ok()) return s;
    }
    if (e.user_a == e.user_b) {
      return absl::InvalidArgumentError(
          absl::StrFormat("edges[%d] joins user %s to itself", i, QuoteId(e.user_a)));
    }
    if (!(e.weight >= kMinEdgeWeight && e.weight <= kMaxEdgeWeight)) {  // also NaN
      return absl::InvalidArgumentError(
          absl::StrFormat("edges[%d].weight must lie in [%g, %g], got %g", i, kMinEdgeWeight,
                          kMaxEdgeWeight, e.weight));
    }
    auto key = e.user_a < e.user_b
                   ? std::make_pair(absl::string_view(e.user_a), absl::string_view(e.user_b))
                   : std::make_pair(absl::string_view(e.user_b), absl::string_view(e.user_a));
    auto [it, inserted] = pairs.emplace(key, i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrFormat("edges[%d] repeats the pair (%s, %s) of edges[%d]", i, QuoteId(e.user_a),
                          QuoteId(e.user_b), it->second));
    }
    ids.push_back(e.user_a);
    ids.push_back(e.user_b);
  }
  return ids;
}

absl::Status ValidateEdgePairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                               const ModelOptions& options) {
  if (pairs.empty()) return absl::InvalidArgumentError("edges must not be empty");
  if (static_cast<int64_t>(pairs.size()) > options.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d edges exceed the limit of %d per call (limits.max_graph_edits_per_call)", pairs.size(),
        options.max_graph_edits_per_call));
  }
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, size_t> seen;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [a, b] = pairs[i];
    if (absl::Status s = CheckId(a, absl::StrFormat("edges[%d].user_a", i)); !s.ok()) return s;
    if (absl::Status s = CheckId(b, absl::StrFormat("edges[%d].user_b", i)); !s.ok()) return s;
    auto key = a < b ? std::make_pair(absl::string_view(a), absl::string_view(b))
                     : std::make_pair(absl::string_view(b), absl::string_view(a));
    auto [it, inserted] = seen.emplace(key, i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrFormat("edges[%d] repeats the pair (%s, %s) of edges[%d]", i, QuoteId(a),
                          QuoteId(b), it->second));
    }
  }
  return absl::OkStatus();
}

}  // namespace graphbandit
