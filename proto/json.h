// JSON documents for the project's reports, built as google.protobuf.Struct values and printed
// by protobuf's JSON printer (quoting, escapes and the shortest text that reads back as the same
// double are protobuf's). A figure that is not finite is JSON null. An object's keys print in
// sorted order (byte order: "10" before "2"), so equal documents print the same text; a
// document whose key order matters (DSJSON) is a message of its own instead.
#ifndef GRAPHBANDIT_PROTO_JSON_H_
#define GRAPHBANDIT_PROTO_JSON_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/struct.pb.h"

namespace graphbandit::json {

using Value = google::protobuf::Value;

Value Null();
Value Number(double v);    // null unless finite
Value Integer(int64_t v);  // a JSON number: exact up to 2^53 (counts, sizes), rounded beyond
Value Text(absl::string_view s);
Value Bool(bool b);
// An object of (key, value) pairs; a later pair replaces an earlier one with the same key.
Value Object(std::initializer_list<std::pair<absl::string_view, Value>> fields);
// Sets `key` of `object` to `value` (a value that is not an object becomes an empty one first).
void Set(Value* object, absl::string_view key, Value value);
// An empty list; Append adds to one (a value that is not a list becomes an empty one first).
Value List();
void Append(Value* list, Value value);

// One line of JSON: `message` printed by protobuf's JSON printer (a Value prints as the JSON
// value it holds). Fields of a message print under their json_name, in field-number order;
// map and Struct keys in sorted order.
std::string Print(const google::protobuf::Message& message);

}  // namespace graphbandit::json

#endif  // GRAPHBANDIT_PROTO_JSON_H_
