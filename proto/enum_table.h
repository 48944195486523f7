// One table per enum of the configuration proto: a row per value, the configuration's and
// core's, read in both directions (ToProto and FromProto), so that the two can never disagree.
// The configuration's *_UNSPECIFIED (0) has no row: it means the field's default.
#ifndef GRAPHBANDIT_PROTO_ENUM_TABLE_H_
#define GRAPHBANDIT_PROTO_ENUM_TABLE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace graphbandit::config {

template <typename Proto, typename Core>
struct EnumRow {
  Proto proto;
  Core core;
};

// The configuration's value of `value` (every core value has a row).
template <typename Proto, typename Core, size_t N>
Proto ToProto(const EnumRow<Proto, Core> (&table)[N], Core value) {
  for (const EnumRow<Proto, Core>& row : table) {
    if (row.core == value) return row.proto;
  }
  return Proto{};  // unreachable while the table is complete (server_test checks both ways)
}

// Sets `*out` to core's value of `value`; `unset` for 0 (*_UNSPECIFIED). Any other number
// (text format accepts numbers for enum fields) is refused, naming `field` and the values it
// accepts, from the enum's descriptor.
template <typename Proto, typename Core, size_t N>
absl::Status FromProto(const EnumRow<Proto, Core> (&table)[N], Proto value, Core unset,
                       absl::string_view field, Core* out) {
  if (value == Proto{}) {
    *out = unset;
    return absl::OkStatus();
  }
  for (const EnumRow<Proto, Core>& row : table) {
    if (row.proto == value) {
      *out = row.core;
      return absl::OkStatus();
    }
  }
  const google::protobuf::EnumDescriptor* descriptor = google::protobuf::GetEnumDescriptor<Proto>();
  std::vector<std::string> names;
  for (const EnumRow<Proto, Core>& row : table) {
    names.push_back(descriptor->FindValueByNumber(row.proto)->name());
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown %s %d: it must be one of %s (unset means %s)", field, static_cast<int>(value),
      absl::StrJoin(names, ", "), descriptor->FindValueByNumber(ToProto(table, unset))->name()));
}

}  // namespace graphbandit::config

#endif  // GRAPHBANDIT_PROTO_ENUM_TABLE_H_
