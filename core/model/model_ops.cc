#include "core/model/model_ops.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "core/fit/refit.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

using storage::Decoder;
using storage::Encoder;

// Bounds for decoding: far above anything the server accepts, low enough that a corrupted
// count cannot drive an absurd loop.
constexpr uint64_t kMaxItems = uint64_t{1} << 24;
constexpr size_t kMaxDoubles = size_t{1} << 24;

void PutObserve(Encoder* out, const ObserveOp& op) {
  out->PutString(op.event_id);
  out->PutString(op.arm_id);
  out->PutString(op.user);
  out->PutDoubles(op.context.data(), op.context.size());
  out->PutDoubles(op.features.data(), op.features.size());
  out->PutDouble(op.reward);
}

bool GetObserve(Decoder* in, ObserveOp* op) {
  return in->GetString(&op->event_id) && in->GetString(&op->arm_id) && in->GetString(&op->user) &&
         in->GetDoubles(&op->context, kMaxDoubles) && in->GetDoubles(&op->features, kMaxDoubles) &&
         in->GetDouble(&op->reward);
}

// What each observation carries besides its reward, after the record's other fields: the
// decision's candidates (policies that learn from whole decisions) and its evaluation record
// (core/policy/evaluation.h). Records whose observations carry neither end before it, as they
// did before this trailer existed, so older logs read unchanged. Per observation, a flags byte
// (1: candidates, 2: evaluation record; logs before the evaluation record wrote 0 or 1).
void PutObservationTrailer(Encoder* out, const std::vector<const ObserveOp*>& ops) {
  bool any = false;
  for (const ObserveOp* op : ops) {
    any = any || op->candidates != nullptr || op->evaluation != nullptr;
  }
  if (!any) return;
  out->PutU8(1);
  for (const ObserveOp* op : ops) {
    out->PutU8((op->candidates != nullptr ? 1 : 0) | (op->evaluation != nullptr ? 2 : 0));
    if (op->candidates != nullptr) {
      out->PutVarint64(static_cast<uint32_t>(op->chosen));
      PutCandidates(out, *op->candidates);
    }
    if (op->evaluation != nullptr) PutEvaluationRecord(out, *op->evaluation);
  }
}

bool GetObservationTrailer(Decoder* in, const std::vector<ObserveOp*>& ops) {
  if (in->done()) return true;
  uint8_t marker = 0;
  if (!in->GetU8(&marker) || marker != 1) return false;
  for (ObserveOp* op : ops) {
    uint8_t flags = 0;
    if (!in->GetU8(&flags) || flags > 3) return false;
    if ((flags & 1) != 0) {
      uint64_t chosen = 0;
      if (!in->GetVarint64(&chosen) || !GetCandidates(in, &op->candidates) ||
          chosen >= op->candidates->probabilities.size()) {
        return false;
      }
      op->chosen = static_cast<int32_t>(chosen);
    }
    if ((flags & 2) != 0) {
      auto record = std::make_shared<EvaluationRecord>();
      if (!GetEvaluationRecord(in, record.get())) return false;
      op->evaluation = std::move(record);
    }
  }
  return true;
}

std::vector<const ObserveOp*> Pointers(const std::vector<ObserveOp>& ops) {
  std::vector<const ObserveOp*> out;
  for (const ObserveOp& op : ops) out.push_back(&op);
  return out;
}

std::vector<ObserveOp*> Pointers(std::vector<ObserveOp>& ops) {
  std::vector<ObserveOp*> out;
  for (ObserveOp& op : ops) out.push_back(&op);
  return out;
}

void PutObserves(Encoder* out, const std::vector<ObserveOp>& ops) {
  out->PutVarint64(ops.size());
  for (const ObserveOp& op : ops) PutObserve(out, op);
}

bool GetObserves(Decoder* in, std::vector<ObserveOp>* ops) {
  uint64_t count = 0;
  if (!in->GetVarint64(&count) || count > in->remaining()) return false;
  ops->resize(count);
  for (ObserveOp& op : *ops) {
    if (!GetObserve(in, &op)) return false;
  }
  return true;
}

struct EncodeVisitor {
  Encoder* out;
  void operator()(const FixDimensionsOp& op) const {
    out->PutVarint64(static_cast<uint32_t>(op.context_dim));
    out->PutVarint64(static_cast<uint32_t>(op.arm_dim));
    // Written only when there are named-feature inputs: a record without them reads as before.
    if (op.context_slots != 0 || op.arm_slots != 0) {
      out->PutVarint64(static_cast<uint32_t>(op.context_slots));
      out->PutVarint64(static_cast<uint32_t>(op.arm_slots));
    }
  }
  void operator()(const AddUsersOp& op) const {
    out->PutVarint64(op.users.size());
    for (const auto& user : op.users) out->PutString(user);
  }
  void operator()(const SetEdgesOp& op) const {
    out->PutVarint64(op.edges.size());
    for (const auto& edge : op.edges) {
      out->PutString(edge.user_a);
      out->PutString(edge.user_b);
      out->PutDouble(edge.weight);
    }
  }
  void operator()(const RemoveEdgesOp& op) const {
    out->PutVarint64(op.pairs.size());
    for (const auto& [a, b] : op.pairs) {
      out->PutString(a);
      out->PutString(b);
    }
  }
  void operator()(const ObserveOp& op) const {
    PutObserve(out, op);
    PutObservationTrailer(out, {&op});
  }
  void operator()(const DecideOp& op) const {
    out->PutString(op.event_id);
    out->PutFixed64(op.fingerprint);
    out->PutFixed64(static_cast<uint64_t>(op.created_micros));
    out->PutString(op.user);
    out->PutDoubles(op.context.data(), op.context.size());
    out->PutVarint64(op.arms.size());
    for (const DecideOp::Arm& arm : op.arms) {
      out->PutString(arm.arm_id);
      out->PutDoubles(arm.features.data(), arm.features.size());
      out->PutVarint64(static_cast<uint32_t>(arm.candidate_index));
      out->PutDouble(arm.mean);
      out->PutDouble(arm.stddev);
      out->PutDouble(arm.score);
      out->PutU8(arm.has_probability ? 1 : 0);
      out->PutDouble(arm.probability);
    }
    out->PutVarint64(op.model_version);
    // Optional trailing sections, each after a marker, in marker order (older records end
    // before them).
    if (op.candidates != nullptr) {
      out->PutU8(1);
      PutCandidates(out, *op.candidates);
    }
    if (op.deferred || op.baseline >= 0) {
      out->PutU8(2);
      out->PutU8(op.deferred ? 1 : 0);
      out->PutVarint64(static_cast<uint64_t>(op.baseline + 1));
    }
    if (op.explored || op.evaluation != nullptr) {
      out->PutU8(3);
      out->PutU8(op.explored ? 1 : 0);
      out->PutU8(op.evaluation != nullptr ? 1 : 0);
      if (op.evaluation != nullptr) PutEvaluationRecord(out, *op.evaluation);
    }
    if (op.logged != nullptr) {
      out->PutU8(4);
      out->PutVarint64(op.logged->ids.size());
      for (size_t i = 0; i < op.logged->ids.size(); ++i) {
        out->PutString(op.logged->ids[i]);
        out->PutDoubles(op.logged->features[i].data(), op.logged->features[i].size());
        out->PutDouble(op.logged->probabilities[i]);
        out->PutDouble(op.logged->means[i]);
      }
    }
  }
  void operator()(const ActivateOp& op) const {
    out->PutString(op.event_id);
    PutObserves(out, op.learn);
    PutObservationTrailer(out, Pointers(op.learn));
  }
  void operator()(const RewardOp& op) const {
    out->PutString(op.event_id);
    out->PutVarint64(static_cast<uint32_t>(op.arm));
    out->PutDouble(op.reward);
    PutObserves(out, op.learn);
    PutObservationTrailer(out, Pointers(op.learn));
  }
  void operator()(const CloseOp& op) const {
    out->PutString(op.event_id);
    out->PutU8(op.how);
    out->PutFixed64(static_cast<uint64_t>(op.closed_micros));
    PutObserves(out, op.learn);
    PutObservationTrailer(out, Pointers(op.learn));
  }
  void operator()(const HyperparametersOp& op) const {
    out->PutU8(static_cast<uint8_t>(op.reason));
    out->PutDouble(op.values.signal_variance);
    out->PutDouble(op.values.offset_variance);
    out->PutDouble(op.values.linear_variance);
    out->PutDouble(op.values.user_variance);
    out->PutDoubles(op.values.lengthscales.data(), op.values.lengthscales.size());
    out->PutDouble(op.values.noise_variance);
    out->PutDouble(op.values.rho);
    out->PutDouble(op.values.prior_mean);
    out->PutDouble(op.kors_mu_factor);
    out->PutVarint64(static_cast<uint64_t>(op.fitted_at));
    out->PutVarint64(static_cast<uint32_t>(op.points));
    out->PutDouble(op.log_likelihood);
    out->PutDouble(op.values.community_variance);  // after the fields of older records
  }
  void operator()(const LearnOp& op) const { out->PutVarint64(static_cast<uint64_t>(op.through)); }
  void operator()(const FeatureScalingOp& op) const {
    out->PutVarint64(op.entries.size());
    for (const FeatureScalingOp::Entry& e : op.entries) {
      out->PutU8(e.context ? 1 : 0);
      out->PutFixed64(e.key);
      out->PutDouble(e.scale.center);
      out->PutDouble(e.scale.spread);
      out->PutVarint64(static_cast<uint64_t>(e.scale.count));
    }
  }
  void operator()(const ServingModeOp& op) const {
    out->PutU8(op.apprentice ? 1 : 0);
    out->PutU8(static_cast<uint8_t>(op.reason));
    out->PutDouble(op.rule.margin);
    out->PutVarint64(static_cast<uint64_t>(op.rule.min_decisions));
  }
};

absl::Status Malformed(OpType type) {
  return absl::DataLossError(
      absl::StrFormat("malformed log record of type %d", static_cast<int>(type)));
}

}  // namespace

void PutCandidates(storage::Encoder* out, const DecisionCandidates& candidates) {
  out->PutVarint64(candidates.probabilities.size());
  for (size_t i = 0; i < candidates.probabilities.size(); ++i) {
    out->PutDoubles(candidates.features[i].data(), candidates.features[i].size());
    out->PutDouble(candidates.probabilities[i]);
  }
}

bool GetCandidates(storage::Decoder* in, std::shared_ptr<const DecisionCandidates>* candidates) {
  uint64_t count = 0;
  if (!in->GetVarint64(&count) || count == 0 || count > in->remaining()) return false;
  auto out = std::make_shared<DecisionCandidates>();
  out->features.resize(count);
  out->probabilities.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (!in->GetDoubles(&out->features[i], kMaxDoubles) || !in->GetDouble(&out->probabilities[i])) {
      return false;
    }
  }
  *candidates = std::move(out);
  return true;
}

std::vector<const ObserveOp*> ObservationsOf(const ModelOp& op) {
  std::vector<const ObserveOp*> out;
  if (const auto* observe = std::get_if<ObserveOp>(&op)) out.push_back(observe);
  if (const auto* reward = std::get_if<RewardOp>(&op)) {
    for (const ObserveOp& o : reward->learn) out.push_back(&o);
  }
  if (const auto* close = std::get_if<CloseOp>(&op)) {
    for (const ObserveOp& o : close->learn) out.push_back(&o);
  }
  if (const auto* activate = std::get_if<ActivateOp>(&op)) {
    for (const ObserveOp& o : activate->learn) out.push_back(&o);
  }
  return out;
}

OpType TypeOf(const ModelOp& op) {
  return static_cast<OpType>(op.index() + 1);  // the variant order follows OpType
}

std::string EncodeOp(const ModelOp& op) {
  Encoder encoder;
  std::visit(EncodeVisitor{&encoder}, op);
  return encoder.Release();
}

absl::StatusOr<ModelOp> DecodeOp(uint8_t raw_type, absl::string_view payload) {
  Decoder in(payload);
  const OpType type = static_cast<OpType>(raw_type);
  uint64_t count = 0;
  switch (type) {
    case OpType::kFixDimensions: {
      uint64_t context = 0, arm = 0, context_slots = 0, arm_slots = 0;
      if (!in.GetVarint64(&context) || !in.GetVarint64(&arm) || context > INT32_MAX ||
          arm > INT32_MAX) {
        return Malformed(type);
      }
      if (!in.done() &&
          (!in.GetVarint64(&context_slots) || !in.GetVarint64(&arm_slots) ||
           context_slots > context || arm_slots > arm || context_slots + arm_slots == 0)) {
        return Malformed(type);
      }
      if (!in.done()) return Malformed(type);
      return FixDimensionsOp{static_cast<int32_t>(context), static_cast<int32_t>(arm),
                             static_cast<int32_t>(context_slots), static_cast<int32_t>(arm_slots)};
    }
    case OpType::kAddUsers: {
      AddUsersOp op;
      if (!in.GetVarint64(&count) || count > kMaxItems || count > in.remaining()) {
        return Malformed(type);
      }
      op.users.resize(count);
      for (auto& user : op.users) {
        if (!in.GetString(&user)) return Malformed(type);
      }
      if (!in.done()) return Malformed(type);
      return op;
    }
    case OpType::kSetEdges: {
      SetEdgesOp op;
      if (!in.GetVarint64(&count) || count > kMaxItems || count > in.remaining()) {
        return Malformed(type);
      }
      for (uint64_t i = 0; i < count; ++i) {
        EdgeEdit edge;
        if (!in.GetString(&edge.user_a) || !in.GetString(&edge.user_b) ||
            !in.GetDouble(&edge.weight)) {
          return Malformed(type);
        }
        op.edges.push_back(std::move(edge));
      }
      if (!in.done()) return Malformed(type);
      return op;
    }
    case OpType::kRemoveEdges: {
      RemoveEdgesOp op;
      if (!in.GetVarint64(&count) || count > kMaxItems || count > in.remaining()) {
        return Malformed(type);
      }
      for (uint64_t i = 0; i < count; ++i) {
        std::pair<std::string, std::string> pair;
        if (!in.GetString(&pair.first) || !in.GetString(&pair.second)) return Malformed(type);
        op.pairs.push_back(std::move(pair));
      }
      if (!in.done()) return Malformed(type);
      return op;
    }
    case OpType::kObserve: {
      ObserveOp op;
      if (!GetObserve(&in, &op) || !GetObservationTrailer(&in, {&op}) || !in.done()) {
        return Malformed(type);
      }
      return op;
    }
    case OpType::kDecide: {
      DecideOp op;
      uint64_t created = 0, version = 0;
      if (!in.GetString(&op.event_id) || !in.GetFixed64(&op.fingerprint) ||
          !in.GetFixed64(&created) || !in.GetString(&op.user) ||
          !in.GetDoubles(&op.context, kMaxDoubles) || !in.GetVarint64(&count) ||
          count > in.remaining()) {
        return Malformed(type);
      }
      op.created_micros = static_cast<int64_t>(created);
      op.arms.resize(count);
      for (DecideOp::Arm& arm : op.arms) {
        uint64_t index = 0;
        uint8_t has_probability = 0;
        if (!in.GetString(&arm.arm_id) || !in.GetDoubles(&arm.features, kMaxDoubles) ||
            !in.GetVarint64(&index) || index > INT32_MAX || !in.GetDouble(&arm.mean) ||
            !in.GetDouble(&arm.stddev) || !in.GetDouble(&arm.score) ||
            !in.GetU8(&has_probability) || has_probability > 1 || !in.GetDouble(&arm.probability)) {
          return Malformed(type);
        }
        arm.candidate_index = static_cast<int32_t>(index);
        arm.has_probability = has_probability == 1;
      }
      if (!in.GetVarint64(&version)) return Malformed(type);
      uint8_t last_marker = 0;
      while (!in.done()) {
        uint8_t marker = 0;
        if (!in.GetU8(&marker) || marker <= last_marker) return Malformed(type);
        last_marker = marker;
        if (marker == 1) {
          if (!GetCandidates(&in, &op.candidates)) return Malformed(type);
        } else if (marker == 2) {
          uint8_t deferred = 0;
          uint64_t baseline = 0;
          if (!in.GetU8(&deferred) || deferred > 1 || !in.GetVarint64(&baseline) ||
              baseline > static_cast<uint64_t>(INT32_MAX)) {
            return Malformed(type);
          }
          op.deferred = deferred == 1;
          op.baseline = static_cast<int32_t>(baseline) - 1;
        } else if (marker == 3) {
          uint8_t explored = 0, has_record = 0;
          if (!in.GetU8(&explored) || explored > 1 || !in.GetU8(&has_record) || has_record > 1) {
            return Malformed(type);
          }
          op.explored = explored == 1;
          if (has_record == 1) {
            auto record = std::make_shared<EvaluationRecord>();
            if (!GetEvaluationRecord(&in, record.get()) || op.arms.size() != 1) {
              return Malformed(type);
            }
            op.evaluation = std::move(record);
          }
        } else if (marker == 4) {
          uint64_t n = 0;
          if (!in.GetVarint64(&n) || n == 0 || n > in.remaining() || op.arms.size() != 1 ||
              op.arms[0].candidate_index >= static_cast<int64_t>(n)) {
            return Malformed(type);
          }
          auto logged = std::make_shared<LoggedCandidates>();
          logged->ids.resize(n);
          logged->features.resize(n);
          logged->probabilities.resize(n);
          logged->means.resize(n);
          for (uint64_t i = 0; i < n; ++i) {
            if (!in.GetString(&logged->ids[i]) ||
                !in.GetDoubles(&logged->features[i], kMaxDoubles) ||
                !in.GetDouble(&logged->probabilities[i]) || !in.GetDouble(&logged->means[i])) {
              return Malformed(type);
            }
          }
          op.logged = std::move(logged);
        } else {
          return Malformed(type);
        }
      }
      op.model_version = version;
      return op;
    }
    case OpType::kReward: {
      RewardOp op;
      uint64_t arm = 0;
      if (!in.GetString(&op.event_id) || !in.GetVarint64(&arm) || arm > INT32_MAX ||
          !in.GetDouble(&op.reward) || !GetObserves(&in, &op.learn) || op.learn.size() > 1 ||
          !GetObservationTrailer(&in, Pointers(op.learn)) || !in.done()) {
        return Malformed(type);
      }
      op.arm = static_cast<int32_t>(arm);
      return op;
    }
    case OpType::kActivate: {
      ActivateOp op;
      if (!in.GetString(&op.event_id) || !GetObserves(&in, &op.learn) ||
          !GetObservationTrailer(&in, Pointers(op.learn)) || !in.done()) {
        return Malformed(type);
      }
      return op;
    }
    case OpType::kClose: {
      CloseOp op;
      uint64_t closed = 0;
      if (!in.GetString(&op.event_id) || !in.GetU8(&op.how) || op.how < 1 || op.how > 2 ||
          !in.GetFixed64(&closed) || !GetObserves(&in, &op.learn) ||
          !GetObservationTrailer(&in, Pointers(op.learn)) || !in.done()) {
        return Malformed(type);
      }
      op.closed_micros = static_cast<int64_t>(closed);
      return op;
    }
    case OpType::kHyperparameters: {
      HyperparametersOp op;
      std::vector<double> lengthscales;
      uint64_t fitted_at = 0, points = 0;
      uint8_t reason = 0;
      if (!in.GetU8(&reason) || reason > 1 || !in.GetDouble(&op.values.signal_variance) ||
          !in.GetDouble(&op.values.offset_variance) || !in.GetDouble(&op.values.linear_variance) ||
          !in.GetDouble(&op.values.user_variance) || !in.GetDoubles(&lengthscales, kMaxDoubles) ||
          !in.GetDouble(&op.values.noise_variance) || !in.GetDouble(&op.values.rho) ||
          !in.GetDouble(&op.values.prior_mean) || !in.GetDouble(&op.kors_mu_factor) ||
          !in.GetVarint64(&fitted_at) || fitted_at > INT64_MAX || !in.GetVarint64(&points) ||
          points > INT32_MAX || !in.GetDouble(&op.log_likelihood)) {
        return Malformed(type);
      }
      // Records written before the community variance existed end here (0, the only value
      // then).
      op.values.community_variance = 0.0;
      if (!in.done() && (!in.GetDouble(&op.values.community_variance) || !in.done())) {
        return Malformed(type);
      }
      op.values.lengthscales =
          Eigen::Map<const Eigen::VectorXd>(lengthscales.data(), lengthscales.size());
      op.reason = static_cast<HyperparametersOp::Reason>(reason);
      op.fitted_at = static_cast<int64_t>(fitted_at);
      op.points = static_cast<int32_t>(points);
      // Values out of range are refused when applied, live and in replay alike (not damage).
      if (!(op.kors_mu_factor > 0.0) || op.kors_mu_factor > kMaxKorsMuFactor) {
        return Malformed(type);
      }
      return op;
    }
    case OpType::kLearn: {
      LearnOp op;
      uint64_t through = 0;
      if (!in.GetVarint64(&through) || through > INT64_MAX || !in.done()) return Malformed(type);
      op.through = static_cast<int64_t>(through);
      return op;
    }
    case OpType::kFeatureScaling: {
      FeatureScalingOp op;
      if (!in.GetVarint64(&count) || count == 0 || count > kMaxItems || count > in.remaining()) {
        return Malformed(type);
      }
      op.entries.resize(count);
      for (FeatureScalingOp::Entry& e : op.entries) {
        uint8_t side = 0;
        uint64_t seen = 0;
        if (!in.GetU8(&side) || side > 1 || !in.GetFixed64(&e.key) ||
            !in.GetDouble(&e.scale.center) || !in.GetDouble(&e.scale.spread) ||
            !in.GetVarint64(&seen) || seen == 0 || seen > (uint64_t{1} << 62) ||
            !std::isfinite(e.scale.center) || !std::isfinite(e.scale.spread) ||
            !(e.scale.spread > 0.0)) {
          return Malformed(type);
        }
        e.context = side == 1;
        e.scale.count = static_cast<int64_t>(seen);
      }
      if (!in.done()) return Malformed(type);
      return op;
    }
    case OpType::kServingMode: {
      uint8_t apprentice = 0, reason = 0;
      uint64_t min_decisions = 0;
      ServingModeOp op;
      if (!in.GetU8(&apprentice) || apprentice > 1 || !in.GetU8(&reason) ||
          (reason != static_cast<uint8_t>(ServingSwitch::kAdmin) &&
           reason != static_cast<uint8_t>(ServingSwitch::kStart)) ||
          !in.GetDouble(&op.rule.margin) || !std::isfinite(op.rule.margin) ||
          !in.GetVarint64(&min_decisions) || min_decisions < 2 || min_decisions > INT64_MAX ||
          !in.done()) {
        return Malformed(type);
      }
      op.apprentice = apprentice == 1;
      op.reason = static_cast<ServingSwitch>(reason);
      op.rule.min_decisions = static_cast<int64_t>(min_decisions);
      return op;
    }
  }
  return absl::DataLossError(absl::StrFormat("unknown log record type %d", raw_type));
}

}  // namespace graphbandit
