// Azure Personalizer's features (a list of JSON objects per context and per action) as named
// features (core/features/named_features.h), following Personalizer's own reading of them (its
// SDK hands them to Vowpal Wabbit):
//
//   - a key whose value is an object names a namespace; that object's entries are its features,
//     and an object nested deeper is flattened into names joined by '.' ({"a": {"b": 1}} inside
//     namespace n is feature "a.b" of n);
//   - any other key of a top-level object is a feature of the default namespace "";
//   - a string is categorical; a number numeric; true the number 1; false, null, an empty list,
//     empty keys and keys beginning with '_' add nothing (Personalizer ignores the last too);
//   - a list of strings is a list feature; a list of numbers gives the numeric features
//     name[0], name[1], ...; a list mixing kinds, or holding objects or lists, is refused.
//
// Several objects may add to one namespace; a feature given twice is refused. Namespaces come
// out in byte order of their names, and features likewise within each, and keys are read in
// byte order (so an error names the first bad key in that order), so that the same request
// always reads the same way: a JSON object's keys have no order.
#ifndef GRAPHBANDIT_SERVER_PERSONALIZER_FEATURES_H_
#define GRAPHBANDIT_SERVER_PERSONALIZER_FEATURES_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/features/named_features.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/struct.pb.h"

namespace graphbandit::server {

// Named features read from a request. `namespaces` holds views into the request's strings and
// into `names` (the names flattening builds), so it is valid while both live; not copyable.
struct FlattenedFeatures {
  FlattenedFeatures() = default;
  FlattenedFeatures(const FlattenedFeatures&) = delete;
  FlattenedFeatures& operator=(const FlattenedFeatures&) = delete;

  std::deque<std::string> names;
  std::vector<FeatureNamespace> namespaces;
};

// Reads `objects` into *out (cleared first). An error is INVALID_ARGUMENT naming the JSON path
// under `field` (e.g. `actions[2].features[0].device.os`); the limits of ValidateNamedFeatures
// are checked separately, on the result.
absl::Status FlattenPersonalizerFeatures(
    const google::protobuf::RepeatedPtrField<google::protobuf::Struct>& objects,
    absl::string_view field, FlattenedFeatures* out);

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_PERSONALIZER_FEATURES_H_
