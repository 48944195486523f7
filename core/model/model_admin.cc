// Graph administration (users and edges, with the user-table reservations that keep concurrent
// edits within limits.max_users) and switching the serving mode.
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/model/model.h"

namespace graphbandit {

absl::StatusOr<AddUsersResult> Model::AddUsers(absl::Span<const std::string> users,
                                               absl::Time deadline) {
  if (absl::Status s = ValidateUsers(users, options_); !s.ok()) return s;
  std::vector<std::string> reserved;
  if (!ReserveUsers(std::vector<std::string>(users.begin(), users.end()), &reserved)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adding these users would exceed model \"%s\"'s limit of %d (limits.max_users)",
        options_.name, options_.max_users));
  }
  auto applied = SubmitAndWait(AddUsersOp{std::vector<std::string>(users.begin(), users.end())},
                               deadline, reserved);
  if (!applied.ok()) return applied.status();
  AddUsersResult result;
  result.added = applied->users_added;
  result.already_present = static_cast<int>(users.size()) - result.added;
  result.users = registry_->size();
  return result;
}

bool Model::ReserveUsers(const std::vector<std::string>& ids, std::vector<std::string>* fresh) {
  MutexLock lock(&queue_mu_);
  absl::flat_hash_set<std::string> unseen;
  for (const std::string& id : ids) {
    if (registry_->Find(id) < 0 && !reserved_users_.contains(id)) unseen.insert(id);
  }
  if (!UsersFitLocked(static_cast<int64_t>(unseen.size()))) return false;
  for (const std::string& id : unseen) {
    reserved_users_.insert(id);
    fresh->push_back(id);
  }
  return true;
}

bool Model::UsersFitLocked(int64_t more) const {
  if (registry_->size() + static_cast<int64_t>(reserved_users_.size()) + more <=
      options_.max_users) {
    return true;
  }
  // The reserved ids not registered yet, counted before the registry's size is read: an id the
  // writer registers in between is then counted twice (a refusal that a retry resolves), never
  // not at all.
  int64_t pending = 0;
  for (const std::string& id : reserved_users_) pending += registry_->Find(id) < 0 ? 1 : 0;
  return registry_->size() + pending + more <= options_.max_users;
}

void Model::ReleaseUsers(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  MutexLock lock(&queue_mu_);
  for (const std::string& id : ids) reserved_users_.erase(id);
}

absl::StatusOr<EdgeEditResult> Model::AddEdges(std::vector<EdgeEdit> edges, absl::Time deadline) {
  absl::StatusOr<std::vector<std::string>> ids = ValidateEdges(edges, options_);
  if (!ids.ok()) return ids.status();
  std::vector<std::string> reserved;
  if (!ReserveUsers(*ids, &reserved)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "these edges would take model \"%s\" past its limit of %d users (limits.max_users)",
        options_.name, options_.max_users));
  }
  return SubmitAndWait(SetEdgesOp{std::move(edges)}, deadline, reserved);
}

absl::StatusOr<EdgeEditResult> Model::RemoveEdges(
    std::vector<std::pair<std::string, std::string>> pairs, absl::Time deadline) {
  if (absl::Status s = ValidateEdgePairs(pairs, options_); !s.ok()) return s;
  return SubmitAndWait(RemoveEdgesOp{std::move(pairs)}, deadline);
}

absl::StatusOr<EdgeEditResult> Model::SetServingMode(bool apprentice, absl::Time deadline) {
  if (apprentice && !options_.shadow_of.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" is a challenger of \"%s\" (shadow_of): it never serves, so it cannot be "
        "an apprentice",
        options_.name, options_.shadow_of));
  }
  if (apprentice && !(options_.evaluation_epsilon > 0.0)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" cannot be an apprentice without evaluation.epsilon > 0: its lift over the "
        "baseline is estimated from the decisions that share draws uniformly",
        options_.name));
  }
  if (apprentice && options_.samples_parameters()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" cannot be an apprentice: policy %s learns from the probabilities its own "
        "draws chose arms with",
        options_.name, PolicyName(options_.policy)));
  }
  ServingModeOp op;
  op.apprentice = apprentice;
  op.reason = ServingSwitch::kAdmin;
  op.rule = options_.apprentice;
  return SubmitAndWait(op, deadline);
}

}  // namespace graphbandit
