// Challengers: a model configured with `shadow_of: "<leader>"` learns from the leader's
// decisions and rewards without ever serving, so that its own policy can be judged against the
// leader's on the same traffic before it replaces it.
//
// For each single-arm decision the leader logs with every candidate (the leader's evaluation
// share above 0; core/policy/evaluation.h), the challenger scores the same request with its own
// state and logs the leader's choice with the leader's probability of it, its own policy's
// probability of it and its own means (Model::Select with Model::ShadowOf). The rewards and
// activations the leader is sent follow. Its PolicyEvaluator then estimates, off-policy, the
// value of the challenger's policy as it would serve (its rule with its own share), and the
// engine reports it under the challenger's name in the leader's estimates.
//
// The work runs on a thread of the challenger's own, off the leader's requests: a leader's
// answer never waits for its challengers, and a challenger's failure never fails the leader.
// The queue between them is bounded: decisions take about half of it at most, and a byte
// budget (by an estimate of their copies' size), leaving room for the rewards and activations
// of the decisions it took; what does not fit is dropped and counted. Only the rewards and
// activations of decisions the challenger was given are forwarded. Items are handled in arrival
// order, so a decision is logged in the challenger before the rewards that follow it.
//
// Not in cluster mode (Engine::Open refuses it): there a reward may reach the shared log from
// another node before the decision this node's feed has yet to publish.
#ifndef GRAPHBANDIT_CORE_MODEL_SHADOW_FEED_H_
#define GRAPHBANDIT_CORE_MODEL_SHADOW_FEED_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "core/base/sync.h"
#include "core/ledger/decision.h"
#include "core/model/model.h"

namespace graphbandit {

// A decision request that owns what it refers to (DecisionRequest holds views).
class OwnedDecisionRequest {
 public:
  explicit OwnedDecisionRequest(const DecisionRequest& request);
  OwnedDecisionRequest(const OwnedDecisionRequest&) = delete;
  OwnedDecisionRequest& operator=(const OwnedDecisionRequest&) = delete;

  const DecisionRequest& request() const { return request_; }

 private:
  absl::string_view Keep(absl::string_view text);
  absl::Span<const double> Keep(absl::Span<const double> numbers);
  absl::Span<const FeatureNamespace> Keep(absl::Span<const FeatureNamespace> namespaces);

  // Deques: adding an element never moves the others, so the views stay valid.
  std::deque<std::string> strings_;
  std::deque<std::vector<double>> numbers_;
  std::deque<std::vector<FeatureNamespace>> namespaces_;
  DecisionRequest request_;
};

// What a feed has done, by kind of item.
struct ShadowCounts {
  enum Kind { kDecision = 0, kReward = 1, kActivation = 2 };
  static constexpr int kKinds = 3;
  std::array<int64_t, kKinds> applied{};  // the challenger took it
  // The challenger refused it, answered a decision its log could not record, or (a reward,
  // an activation) found its decision closed there.
  std::array<int64_t, kKinds> failed{};
  std::array<int64_t, kKinds> dropped{};  // the queue was full, or the server stopping
};

class ShadowFeed {
 public:
  // Items waiting at most; beyond, new ones are dropped.
  static constexpr size_t kDefaultCapacity = 10'000;
  // How long the challenger may take over one item before it is counted as failed.
  static constexpr absl::Duration kItemDeadline = absl::Seconds(30);

  // Bytes of decision requests waiting at most (their features and strings, roughly).
  static constexpr size_t kMaxQueuedBytes = size_t{256} << 20;

  // `challenger` must outlive the feed (or its Stop).
  // (Its leader is challenger->options().shadow_of.)
  explicit ShadowFeed(Model* challenger, size_t capacity = kDefaultCapacity);
  ~ShadowFeed();

  // The leader answered `decision` for `request` at `now`: shadowed when it is a single-arm
  // decision with every candidate's logging probability (otherwise ignored).
  void Decided(const DecisionRequest& request, const Decision& decision, absl::Time now);
  // A reward or an activation the leader recorded (its model field is replaced): forwarded
  // when its decision was given to the challenger, ignored otherwise.
  void Rewarded(const RewardRequest& request, absl::Time now);
  void Activated(const std::string& event_id, absl::Time now);

  // Takes no more items; what is waiting is handled until `deadline`, the rest dropped.
  void RequestStop(absl::Time deadline);
  // RequestStop, then joins the thread. Idempotent.
  void Stop(absl::Time deadline);
  // Waits until every item taken so far has been handled (tests).
  void Drain();

  Model* challenger() const { return challenger_; }
  ShadowCounts counts() const;

  // What a queued copy of `request` takes, roughly (its strings, numbers and features): what
  // kMaxQueuedBytes bounds.
  static size_t EstimatedBytes(const DecisionRequest& request);

 private:
  struct DecisionItem {
    std::unique_ptr<OwnedDecisionRequest> request;
    std::string event_id;
    Model::ShadowOf shadow;
    absl::Time now;
    size_t bytes = 0;
  };
  struct RewardItem {
    RewardRequest request;
    absl::Time now;
  };
  struct ActivationItem {
    std::string event_id;
    absl::Time now;
  };
  using Item = std::variant<DecisionItem, RewardItem, ActivationItem>;

  // The counts, shared with the reward callbacks the challenger may run after the feed is gone.
  struct Tally {
    Mutex mu;
    ShadowCounts counts ABSL_GUARDED_BY(mu);
    void Count(ShadowCounts::Kind kind, bool ok, const std::string& challenger,
               const std::string& what);
  };

  // Reserves room for a decision of `bytes` in the queue, if there is (else counts it as
  // dropped); Push uses the reservation or gives it back.
  bool ReserveDecision(size_t bytes);
  // Whether the event's decision was given to the challenger (queued, or in its ledger).
  bool Shadowed(const std::string& event_id);
  void Push(Item item, ShadowCounts::Kind kind);
  void Run();
  void Handle(Item& item, absl::Time deadline);

  Model* const challenger_;
  const size_t capacity_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_decisions_ ABSL_GUARDED_BY(mu_) = 0;
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The event ids of the decisions queued (forwarding their rewards before they are applied).
  absl::flat_hash_set<std::string> queued_events_ ABSL_GUARDED_BY(mu_);
  int64_t pushed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t handled_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stop_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  const std::shared_ptr<Tally> tally_ = std::make_shared<Tally>();
  std::thread thread_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_SHADOW_FEED_H_
