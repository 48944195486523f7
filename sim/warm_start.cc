#include "sim/warm_start.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace graphbandit::replay {

absl::StatusOr<WarmStartResult> WarmStart(const LoggedHistory& history, Engine& engine,
                                          const std::string& model) {
  absl::StatusOr<Model*> target = engine.FindModel(model);
  if (!target.ok()) return target.status();
  std::set<std::string> users;
  for (const LoggedEvent& e : history.events) users.insert(e.user);
  for (const EdgeEdit& e : history.edges) {
    users.insert(e.user_a);
    users.insert(e.user_b);
  }
  // In batches well inside a call's limit on graph edits.
  constexpr size_t kBatch = 10'000;
  const std::vector<std::string> list(users.begin(), users.end());
  for (size_t i = 0; i < list.size(); i += kBatch) {
    const size_t end = std::min(list.size(), i + kBatch);
    auto added = (*target)->AddUsers(absl::MakeConstSpan(list).subspan(i, end - i));
    if (!added.ok()) return added.status();
  }
  for (size_t i = 0; i < history.edges.size(); i += kBatch) {
    const size_t end = std::min(history.edges.size(), i + kBatch);
    std::vector<EdgeEdit> batch(history.edges.begin() + static_cast<std::ptrdiff_t>(i),
                                history.edges.begin() + static_cast<std::ptrdiff_t>(end));
    if (auto added = (*target)->AddEdges(std::move(batch)); !added.ok()) return added.status();
  }
  WarmStartResult result;
  for (const LoggedEvent& e : history.events) {
    DecisionRequest request;
    request.model = model;
    request.user_id = e.user;
    request.context = e.context;
    request.candidates = {CandidateRef{e.ids[e.chosen], e.features[e.chosen]}};
    const std::string event_id = absl::StrCat("warm:", e.event_id);
    request.event_id = event_id;
    absl::StatusOr<Decision> decision = engine.SelectArm(request);
    if (decision.status().code() == absl::StatusCode::kAlreadyExists) {
      ++result.already_known;  // imported and closed before
      continue;
    }
    if (!decision.ok()) {
      return absl::Status(decision.status().code(),
                          absl::StrFormat("event %s: %s", e.event_id, decision.status().message()));
    }
    absl::StatusOr<RewardResult> reward = engine.ReportReward({event_id, e.reward, {}, model});
    if (!reward.ok()) {
      return absl::Status(reward.status().code(),
                          absl::StrFormat("event %s: %s", e.event_id, reward.status().message()));
    }
    if (reward->outcome == RewardOutcome::kAccepted) {
      ++result.learned;
    } else if (reward->outcome == RewardOutcome::kDuplicate) {
      ++result.already_known;
    } else {
      return absl::InternalError(absl::StrFormat("event %s: the reward was %s", e.event_id,
                                                 RewardOutcomeName(reward->outcome)));
    }
  }
  return result;
}

}  // namespace graphbandit::replay
