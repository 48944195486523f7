// One table per enum of the configuration proto: a row per value, the configuration's and
// core's, read in both directions (ToProto and FromProto), so that the two can never disagree.
// The configuration's *_UNSPECIFIED (0) has no row: it means the field's default.
#ifndef GRAPHBANDIT_PROTO_ENUM_TABLE_H_
#define GRAPHBANDIT_PROTO_ENUM_TABLE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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
  return Proto{};  // unreachable while the table is complete (config_test checks both ways)
}

// "one of A, B, C": the configuration's names of the table's rows, from the enum's descriptor.
template <typename Proto, typename Core, size_t N>
std::string TableNames(const EnumRow<Proto, Core> (&table)[N]) {
  const google::protobuf::EnumDescriptor* descriptor = google::protobuf::GetEnumDescriptor<Proto>();
  std::vector<std::string> names;
  for (const EnumRow<Proto, Core>& row : table) {
    names.push_back(descriptor->FindValueByNumber(row.proto)->name());
  }
  return absl::StrCat("one of ", absl::StrJoin(names, ", "));
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
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown %s %d: it must be %s (unset means %s)", field, static_cast<int>(value),
      TableNames(table), descriptor->FindValueByNumber(ToProto(table, unset))->name()));
}

// FromProto for a field without a default: 0 (*_UNSPECIFIED) is refused as well.
template <typename Proto, typename Core, size_t N>
absl::Status RequiredFromProto(const EnumRow<Proto, Core> (&table)[N], Proto value,
                               absl::string_view field, Core* out) {
  for (const EnumRow<Proto, Core>& row : table) {
    if (row.proto == value) {
      *out = row.core;
      return absl::OkStatus();
    }
  }
  if (value == Proto{}) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not set: it must be %s", field, TableNames(table)));
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown %s %d: it must be %s", field,
                                                    static_cast<int>(value), TableNames(table)));
}

}  // namespace graphbandit::config

#endif  // GRAPHBANDIT_PROTO_ENUM_TABLE_H_
