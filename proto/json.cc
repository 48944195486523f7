#include "proto/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace graphbandit::json {
namespace {

constexpr char kTypeUrlPrefix[] = "type.googleapis.com";

}  // namespace

Value Null() {
  Value v;
  v.set_null_value(google::protobuf::NULL_VALUE);
  return v;
}

Value Number(double v) {
  if (!std::isfinite(v)) return Null();
  Value out;
  out.set_number_value(v);
  return out;
}

Value Integer(int64_t v) { return Number(static_cast<double>(v)); }

Value Text(absl::string_view s) {
  Value v;
  v.set_string_value(std::string(s));
  return v;
}

Value Bool(bool b) {
  Value v;
  v.set_bool_value(b);
  return v;
}

Value Object(std::initializer_list<std::pair<absl::string_view, Value>> fields) {
  Value v;
  v.mutable_struct_value();
  for (const auto& [key, value] : fields) Set(&v, key, value);
  return v;
}

void Set(Value* object, absl::string_view key, Value value) {
  (*object->mutable_struct_value()->mutable_fields())[std::string(key)] = std::move(value);
}

Value List() {
  Value v;
  v.mutable_list_value();
  return v;
}

void Append(Value* list, Value value) {
  *list->mutable_list_value()->add_values() = std::move(value);
}

std::string Print(const google::protobuf::Message& message) {
  // protobuf's printer works from the binary encoding; encoded deterministically, an object's
  // keys (a Struct is a map) come out sorted, so equal documents print the same text.
  std::string binary;
  {
    google::protobuf::io::StringOutputStream stream(&binary);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializePartialToCodedStream(&coded);
  }
  static google::protobuf::util::TypeResolver* const resolver =
      google::protobuf::util::NewTypeResolverForDescriptorPool(
          kTypeUrlPrefix, google::protobuf::DescriptorPool::generated_pool());
  std::string out;
  const auto printed = google::protobuf::util::BinaryToJsonString(
      resolver, absl::StrCat(kTypeUrlPrefix, "/", message.GetDescriptor()->full_name()), binary,
      &out);
  if (!printed.ok()) {
    // Only a non-finite double fails to print, and Number never holds one: a programming error.
    std::fprintf(stderr, "json::Print: %s\n", printed.ToString().c_str());
    std::abort();
  }
  return out;
}

}  // namespace graphbandit::json
