#include "core/model/shadow_feed.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/base/log.h"
#include "core/base/thread_priority.h"
#include "core/model/engine.h"

namespace graphbandit {

OwnedDecisionRequest::OwnedDecisionRequest(const DecisionRequest& request) : request_(request) {
  request_.model = Keep(request.model);
  request_.user_id = Keep(request.user_id);
  request_.context = Keep(request.context);
  request_.context_features = Keep(request.context_features);
  request_.event_id = Keep(request.event_id);
  for (CandidateRef& candidate : request_.candidates) {
    candidate.id = Keep(candidate.id);
    candidate.features = Keep(candidate.features);
    candidate.named_features = Keep(candidate.named_features);
  }
}

absl::string_view OwnedDecisionRequest::Keep(absl::string_view text) {
  return strings_.emplace_back(text);
}

absl::Span<const double> OwnedDecisionRequest::Keep(absl::Span<const double> numbers) {
  return numbers_.emplace_back(numbers.begin(), numbers.end());
}

absl::Span<const FeatureNamespace> OwnedDecisionRequest::Keep(
    absl::Span<const FeatureNamespace> namespaces) {
  std::vector<FeatureNamespace>& kept =
      namespaces_.emplace_back(namespaces.begin(), namespaces.end());
  for (FeatureNamespace& ns : kept) {
    ns.name = Keep(ns.name);
    for (NamedFeature& feature : ns.features) {
      feature.name = Keep(feature.name);
      feature.value.text = Keep(feature.value.text);
      for (absl::string_view& text : feature.value.texts) text = Keep(text);
    }
  }
  return kept;
}

void ShadowFeed::Tally::Count(ShadowCounts::Kind kind, bool ok, const std::string& challenger,
                              const std::string& what) {
  int64_t failed = 0;
  {
    MutexLock lock(&mu);
    (ok ? counts.applied : counts.failed)[kind] += 1;
    failed = counts.failed[kind];
  }
  // The first failure and then every power of two: a challenger that cannot follow its leader
  // (other dimensions, a full ledger) says so without flooding the log.
  if (!ok && (failed & (failed - 1)) == 0) {
    LogWarning(absl::StrFormat("challenger \"%s\": %d shadowed %s failed; the last: %s", challenger,
                               failed,
                               kind == ShadowCounts::kDecision ? "decisions"
                               : kind == ShadowCounts::kReward ? "rewards"
                                                               : "activations",
                               what));
  }
}

ShadowFeed::ShadowFeed(Model* challenger, size_t capacity)
    : challenger_(challenger), capacity_(capacity) {
  thread_ = std::thread([this] {
    SetThreadName("gb-shadow");
    Run();
  });
}

ShadowFeed::~ShadowFeed() { Stop(absl::Now()); }

namespace {

// The bytes an owned copy of `namespaces` takes, roughly (OwnedDecisionRequest keeps every
// string in its own std::string).
size_t NamespaceBytes(absl::Span<const FeatureNamespace> namespaces) {
  size_t bytes = 0;
  for (const FeatureNamespace& ns : namespaces) {
    bytes += sizeof(FeatureNamespace) + sizeof(std::string) + ns.name.size();
    for (const NamedFeature& feature : ns.features) {
      bytes += sizeof(NamedFeature) + 2 * sizeof(std::string) + feature.name.size() +
               feature.value.text.size();
      for (absl::string_view text : feature.value.texts) bytes += sizeof(std::string) + text.size();
    }
  }
  return bytes;
}

}  // namespace

size_t ShadowFeed::EstimatedBytes(const DecisionRequest& request) {
  size_t bytes = sizeof(DecisionItem) + sizeof(OwnedDecisionRequest) + 4 * sizeof(std::string) +
                 request.model.size() + request.user_id.size() + request.event_id.size() +
                 sizeof(double) * request.context.size() + NamespaceBytes(request.context_features);
  for (const CandidateRef& c : request.candidates) {
    bytes += sizeof(CandidateRef) + sizeof(std::string) + c.id.size() +
             sizeof(std::vector<double>) + sizeof(double) * c.features.size() +
             NamespaceBytes(c.named_features) + sizeof(double);  // and its probability
  }
  return bytes;
}

bool ShadowFeed::ReserveDecision(size_t bytes) {
  {
    // Reserved in the same step as it is checked: concurrent requests cannot overshoot.
    MutexLock lock(&mu_);
    if (!stopping_ && queued_decisions_ < capacity_ / 2 &&
        queued_bytes_ + bytes <= kMaxQueuedBytes) {
      ++queued_decisions_;
      queued_bytes_ += bytes;
      return true;
    }
  }
  MutexLock lock(&tally_->mu);
  tally_->counts.dropped[ShadowCounts::kDecision] += 1;
  return false;
}

void ShadowFeed::Decided(const DecisionRequest& request, const Decision& decision, absl::Time now) {
  // Only decisions with every candidate's logging probability, decided afresh (a retry's
  // decision was shadowed when it was made) and logged.
  if (decision.replayed || !decision.logged || decision.arms.size() != 1 ||
      decision.evaluation == nullptr || decision.logging_probabilities == nullptr ||
      decision.logging_probabilities->size() != request.candidates.size()) {
    return;
  }
  // Reserved before anything is copied, on the leader's request thread.
  const size_t bytes = EstimatedBytes(request);
  if (!ReserveDecision(bytes)) return;
  DecisionItem item;
  DecisionRequest copy = request;
  copy.model = challenger_->name();
  copy.event_id = decision.event_id;
  copy.explain = false;
  copy.rank_all = false;
  copy.min_model_version = 0;
  item.request = std::make_unique<OwnedDecisionRequest>(copy);
  item.event_id = decision.event_id;
  item.shadow.chosen = decision.arms[0].candidate_index;
  item.shadow.propensity = decision.evaluation->propensity;
  item.shadow.explored = decision.explored;
  item.shadow.probabilities = *decision.logging_probabilities;
  item.now = now;
  item.bytes = bytes;
  Push(std::move(item), ShadowCounts::kDecision);
}

bool ShadowFeed::Shadowed(const std::string& event_id) {
  {
    MutexLock lock(&mu_);
    if (queued_events_.contains(event_id)) return true;
  }
  // Handled decisions are in the challenger's ledger (until it forgets closed ones).
  return challenger_->Knows(event_id);
}

void ShadowFeed::Rewarded(const RewardRequest& request, absl::Time now) {
  if (!Shadowed(request.event_id)) return;
  RewardItem item{request, now};
  item.request.model = challenger_->name();
  Push(std::move(item), ShadowCounts::kReward);
}

void ShadowFeed::Activated(const std::string& event_id, absl::Time now) {
  if (!Shadowed(event_id)) return;
  Push(ActivationItem{event_id, now}, ShadowCounts::kActivation);
}

void ShadowFeed::Push(Item item, ShadowCounts::Kind kind) {
  {
    MutexLock lock(&mu_);
    // Decisions hold a reservation (ReserveDecision: at most half the queue); rewards and
    // activations may use all of it. After a stop, what arrives is dropped (and counted).
    auto* d = std::get_if<DecisionItem>(&item);
    if (!stopping_ && queue_.size() < capacity_) {
      if (d != nullptr) queued_events_.insert(d->event_id);
      queue_.push_back(std::move(item));
      ++pushed_;
      cv_.SignalAll();
      return;
    }
    if (d != nullptr) {  // gives its reservation back
      --queued_decisions_;
      queued_bytes_ -= d->bytes;
    }
  }
  MutexLock lock(&tally_->mu);
  tally_->counts.dropped[kind] += 1;
}

void ShadowFeed::Run() {
  for (;;) {
    std::optional<Item> item;
    absl::Time deadline;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_,
               [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      if (stopping_ && absl::Now() >= stop_deadline_) {
        {
          MutexLock tally(&tally_->mu);
          for (const Item& left : queue_) tally_->counts.dropped[left.index()] += 1;
        }
        handled_ += static_cast<int64_t>(queue_.size());
        // Only what the queue held: a Decided call may still hold a reservation it gives back.
        for (const Item& left : queue_) {
          if (const auto* d = std::get_if<DecisionItem>(&left)) {
            --queued_decisions_;
            queued_bytes_ -= d->bytes;
          }
        }
        queue_.clear();
        queued_events_.clear();
        cv_.SignalAll();
        return;
      }
      item.emplace(std::move(queue_.front()));
      queue_.pop_front();
      // An item may take kItemDeadline, and no longer than a stop allows.
      deadline = std::min(absl::Now() + kItemDeadline, stop_deadline_);
    }
    Handle(*item, deadline);
    MutexLock lock(&mu_);
    if (auto* d = std::get_if<DecisionItem>(&*item)) {
      --queued_decisions_;
      queued_bytes_ -= d->bytes;
      queued_events_.erase(d->event_id);
    }
    ++handled_;
    cv_.SignalAll();
  }
}

void ShadowFeed::Handle(Item& item, absl::Time deadline) {
  if (auto* d = std::get_if<DecisionItem>(&item)) {
    const DecisionRequest& request = d->request->request();
    absl::StatusOr<Decision> shadowed =
        challenger_->Select(request, d->event_id, /*client_event_id=*/true,
                            RequestFingerprint(request), d->now, deadline, &d->shadow);
    // Answered but not logged (the challenger's log refused the record): its rewards will be
    // unknown there, so it taught the challenger nothing.
    const bool ok = shadowed.ok() && shadowed->logged;
    tally_->Count(ShadowCounts::kDecision, ok, challenger_->name(),
                  !shadowed.ok() ? shadowed.status().ToString()
                  : !ok ? "answered but not logged (the challenger's log refused the record)"
                        : "");
  } else if (auto* r = std::get_if<RewardItem>(&item)) {
    // Without waiting for the challenger's log to be durable where it can (one thread feeds
    // every reward); the answer is counted when it comes.
    auto done = [tally = tally_, name = challenger_->name(),
                 event = r->request.event_id](absl::StatusOr<RewardResult> result) {
      // Late: the challenger had closed the decision (its own reward window), so it learned
      // something other than what the leader did.
      const bool ok = result.ok() && result->outcome != RewardOutcome::kUnknownEvent &&
                      result->outcome != RewardOutcome::kLate;
      std::string what;
      if (!result.ok()) {
        what = result.status().ToString();
      } else if (!ok) {
        what = absl::StrFormat("event %s is %s in the challenger", QuoteId(event),
                               RewardOutcomeName(result->outcome));
      }
      tally->Count(ShadowCounts::kReward, ok, name, what);
    };
    Model::RewardCallback callback = done;
    if (!challenger_->TryRewardWithoutWaiting(r->request, r->now, &callback)) {
      done(challenger_->Reward(r->request, r->now, deadline));
    }
  } else if (auto* a = std::get_if<ActivationItem>(&item)) {
    absl::StatusOr<ActivationResult> result = challenger_->Activate(a->event_id, a->now, deadline);
    const bool ok = result.ok() && result->outcome != ActivationOutcome::kUnknownEvent &&
                    result->outcome != ActivationOutcome::kClosed;
    std::string what;
    if (!result.ok()) {
      what = result.status().ToString();
    } else if (!ok) {
      what =
          absl::StrFormat("event %s is unknown or closed in the challenger", QuoteId(a->event_id));
    }
    tally_->Count(ShadowCounts::kActivation, ok, challenger_->name(), what);
  }
}

void ShadowFeed::RequestStop(absl::Time deadline) {
  MutexLock lock(&mu_);
  if (!stopping_) {
    stopping_ = true;
    stop_deadline_ = deadline;
  }
  cv_.SignalAll();
}

void ShadowFeed::Stop(absl::Time deadline) {
  RequestStop(deadline);
  if (thread_.joinable()) thread_.join();
}

void ShadowFeed::Drain() {
  MutexLock lock(&mu_);
  cv_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return handled_ == pushed_ || (stopping_ && queue_.empty());
  });
}

ShadowCounts ShadowFeed::counts() const {
  MutexLock lock(&tally_->mu);
  return tally_->counts;
}

}  // namespace graphbandit
