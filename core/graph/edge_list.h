// Reading user-graph edge lists: one edge per line, "user_a user_b [weight]" separated by spaces
// or tabs, weight 1 when omitted; blank lines and lines starting with '#' are skipped. A pair
// that appears more than once (in either order, as in files that list both directions) keeps
// the weight of its last appearance.
#ifndef GRAPHBANDIT_CORE_GRAPH_EDGE_LIST_H_
#define GRAPHBANDIT_CORE_GRAPH_EDGE_LIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/model_ops.h"

namespace graphbandit {

absl::StatusOr<std::vector<EdgeEdit>> ParseEdgeList(absl::string_view text,
                                                    absl::string_view source_name);
absl::StatusOr<std::vector<EdgeEdit>> ReadEdgeList(const std::string& path);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_GRAPH_EDGE_LIST_H_
