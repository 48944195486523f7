#include "core/graph/edge_list.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/model/model_options.h"

namespace graphbandit {

absl::StatusOr<std::vector<EdgeEdit>> ParseEdgeList(absl::string_view text,
                                                    absl::string_view source_name) {
  std::vector<EdgeEdit> edges;
  absl::flat_hash_map<std::pair<std::string, std::string>, size_t> index;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);  // also drops a CR of CRLF files
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s line %d: %s", source_name, line_number, what));
    };
    if (fields.size() < 2 || fields.size() > 3) {
      return error("expected \"user_a user_b [weight]\"");
    }
    EdgeEdit edge{std::string(fields[0]), std::string(fields[1]), 1.0};
    if (fields.size() == 3 && !absl::SimpleAtod(fields[2], &edge.weight)) {
      return error(absl::StrFormat("weight \"%s\" is not a number", fields[2]));
    }
    if (!(edge.weight >= kMinEdgeWeight && edge.weight <= kMaxEdgeWeight)) {
      return error(absl::StrFormat("weight must lie in [%g, %g]", kMinEdgeWeight, kMaxEdgeWeight));
    }
    if (edge.user_a == edge.user_b) return error("an edge must join two different users");
    if (edge.user_a.size() > kMaxIdBytes || edge.user_b.size() > kMaxIdBytes) {
      return error(absl::StrFormat("user ids are limited to %d bytes", kMaxIdBytes));
    }
    auto key = edge.user_a < edge.user_b ? std::make_pair(edge.user_a, edge.user_b)
                                         : std::make_pair(edge.user_b, edge.user_a);
    auto [it, inserted] = index.try_emplace(std::move(key), edges.size());
    if (inserted) {
      edges.push_back(std::move(edge));
    } else {
      edges[it->second].weight = edge.weight;
    }
  }
  return edges;
}

absl::StatusOr<std::vector<EdgeEdit>> ReadEdgeList(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open edge list \"%s\"", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseEdgeList(buffer.str(), path);
}

}  // namespace graphbandit
