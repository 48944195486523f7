#include "core/model_ops.h"

#include "absl/strings/str_format.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

using storage::Decoder;
using storage::Encoder;

// Bounds for decoding: far above anything the server accepts, low enough that a corrupted
// count cannot drive an absurd loop.
constexpr uint64_t kMaxItems = uint64_t{1} << 24;
constexpr size_t kMaxDoubles = size_t{1} << 24;

struct EncodeVisitor {
  Encoder* out;
  void operator()(const FixDimensionsOp& op) const {
    out->PutVarint64(static_cast<uint32_t>(op.context_dim));
    out->PutVarint64(static_cast<uint32_t>(op.arm_dim));
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
    out->PutString(op.event_id);
    out->PutString(op.arm_id);
    out->PutString(op.user);
    out->PutDoubles(op.context.data(), op.context.size());
    out->PutDoubles(op.features.data(), op.features.size());
    out->PutDouble(op.reward);
  }
};

absl::Status Malformed(OpType type) {
  return absl::DataLossError(
      absl::StrFormat("malformed log record of type %d", static_cast<int>(type)));
}

}  // namespace

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
      uint64_t context = 0, arm = 0;
      if (!in.GetVarint64(&context) || !in.GetVarint64(&arm) || context > INT32_MAX ||
          arm > INT32_MAX || !in.done()) {
        return Malformed(type);
      }
      return FixDimensionsOp{static_cast<int32_t>(context), static_cast<int32_t>(arm)};
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
      if (!in.GetString(&op.event_id) || !in.GetString(&op.arm_id) || !in.GetString(&op.user) ||
          !in.GetDoubles(&op.context, kMaxDoubles) || !in.GetDoubles(&op.features, kMaxDoubles) ||
          !in.GetDouble(&op.reward) || !in.done()) {
        return Malformed(type);
      }
      return op;
    }
  }
  return absl::DataLossError(absl::StrFormat("unknown log record type %d", raw_type));
}

}  // namespace graphbandit
