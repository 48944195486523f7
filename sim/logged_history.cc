#include "sim/logged_history.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/model/state_directory.h"
#include "core/storage/log_reader.h"
#include "proto/json.h"
#include "sim/dsjson.pb.h"

namespace graphbandit::replay {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// A user for DSJSON events that name none (Personalizer's logs had no user).
constexpr char kSharedUser[] = "dsjson";
// More distinct features than this in one file is not a dense problem.
constexpr size_t kMaxColumns = 4096;

// ------------------------------------------------------------------------------------------
// State directories.

std::pair<std::string, std::string> Ordered(const std::string& a, const std::string& b) {
  return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
}

}  // namespace

absl::StatusOr<LoggedHistory> ReadStateDirectory(const std::string& state_dir,
                                                 const std::string& model) {
  const std::string path = absl::StrCat(state_dir, "/", model);
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(
        absl::StrFormat("%s is not a model's state directory (--state_dir is the server's, "
                        "--model the model's name)",
                        path));
  }
  absl::StatusOr<StateDirectory> dir = StateDirectory::Create(path);
  if (!dir.ok()) return dir.status();
  const std::vector<StateDirectory::File> segments = dir->Segments();
  if (segments.empty()) {
    return absl::NotFoundError(absl::StrFormat("%s holds no log segments", path));
  }
  LoggedHistory history;
  history.source = path;
  history.from_log = true;
  history.first_seq = segments.front().first;
  history.from_start = history.first_seq <= 1;
  std::vector<LoggedEvent> decided;
  std::vector<bool> rewarded;
  std::unordered_map<std::string, size_t> by_id;
  std::map<std::pair<std::string, std::string>, double> edges;
  uint64_t last = 0;
  std::unordered_set<std::string> without_candidates;  // decisions seen that cannot be kept
  for (const auto& [first, segment] : segments) {
    absl::StatusOr<std::unique_ptr<storage::LogReader>> reader = storage::LogReader::Open(segment);
    if (reader.status().code() == absl::StatusCode::kNotFound) {
      // Removed after a snapshot since the directory was listed: the log starts later.
      history.from_start = false;
      continue;
    }
    if (!reader.ok()) return reader.status();
    uint8_t type = 0;
    std::string payload;
    storage::ReadResult result;
    while ((result = (*reader)->Next(&type, &payload)) == storage::ReadResult::kRecord) {
      const uint64_t seq = (*reader)->seq();
      if (seq != 0 && seq <= last) continue;  // a repeat (only a damaged log holds one)
      last = std::max(last, seq);
      absl::StatusOr<ModelOp> op = DecodeOp(type, payload);
      if (!op.ok()) {
        return absl::DataLossError(
            absl::StrFormat("record %d of %s: %s", seq, segment, op.status().message()));
      }
      if (const auto* decide = std::get_if<DecideOp>(&*op)) {
        if (decide->logged == nullptr || decide->arms.size() != 1) {
          ++history.decisions_without_candidates;
          without_candidates.insert(decide->event_id);
          continue;
        }
        const double p = decide->logged->probabilities[decide->arms[0].candidate_index];
        if (!(p > 0.0 && p <= 1.0)) {
          return absl::DataLossError(
              absl::StrFormat("record %d of %s: decision %s was logged with probability %g", seq,
                              segment, decide->event_id, p));
        }
        LoggedEvent event;
        event.event_id = decide->event_id;
        event.created_micros = decide->created_micros;
        event.user = decide->user;
        event.context = decide->context;
        event.ids = decide->logged->ids;
        event.features = decide->logged->features;
        event.probabilities = decide->logged->probabilities;
        event.means = decide->logged->means;
        event.chosen = decide->arms[0].candidate_index;
        event.baseline = decide->baseline;
        event.explored = decide->explored;
        by_id[event.event_id] = decided.size();
        decided.push_back(std::move(event));
        rewarded.push_back(false);
      } else if (const auto* set = std::get_if<SetEdgesOp>(&*op)) {
        for (const EdgeEdit& e : set->edges) edges[Ordered(e.user_a, e.user_b)] = e.weight;
      } else if (const auto* remove = std::get_if<RemoveEdgesOp>(&*op)) {
        for (const auto& [a, b] : remove->pairs) edges.erase(Ordered(a, b));
      }
      for (const ObserveOp* observed : ObservationsOf(*op)) {
        auto it = by_id.find(observed->event_id);
        if (it == by_id.end()) {
          if (without_candidates.count(observed->event_id) == 0) ++history.rewards_without_decision;
          continue;
        }
        LoggedEvent& event = decided[it->second];
        if (rewarded[it->second] || observed->arm_id != event.ids[event.chosen]) continue;
        event.reward = observed->reward;
        rewarded[it->second] = true;
      }
    }
    if (result == storage::ReadResult::kCorruption && !(*reader)->io_status().ok()) {
      return (*reader)->io_status();  // a failed read, not damage: the rest is unread
    }
  }
  history.last_seq = last;
  for (size_t i = 0; i < decided.size(); ++i) {
    if (rewarded[i]) {
      history.events.push_back(std::move(decided[i]));
    } else {
      ++history.decisions_without_reward;
    }
  }
  for (const auto& [pair, weight] : edges) {
    history.edges.push_back(EdgeEdit{pair.first, pair.second, weight});
  }
  return history;
}

// ------------------------------------------------------------------------------------------
// Writing DSJSON.

namespace {

// {"0": v_0, "1": v_1, ...}: a vector as DSJSON features (a value that is not finite is null).
Struct VectorFeatures(const std::vector<double>& values) {
  Struct out;
  for (size_t i = 0; i < values.size(); ++i) {
    (*out.mutable_fields())[absl::StrCat(i)] = json::Number(values[i]);
  }
  return out;
}

}  // namespace

std::string ToDsjsonLine(const LoggedEvent& event) {
  const int n = static_cast<int>(event.ids.size());
  std::vector<int> order = {event.chosen};  // the logged arm first, then the others
  for (int i = 0; i < n; ++i) {
    if (i != event.chosen) order.push_back(i);
  }
  sim::dsjson::Event line;
  // A figure that is not known (not finite) is left out.
  if (std::isfinite(event.reward)) line.set_label_cost(-event.reward);
  if (std::isfinite(event.probabilities[event.chosen])) {
    line.set_label_probability(event.probabilities[event.chosen]);
  }
  line.set_label_action(event.chosen + 1);
  line.set_label_index(event.chosen);
  if (event.baseline >= 0) line.add_baseline_action(event.baseline + 1);
  line.set_explored(event.explored);
  if (event.weight != 1.0 && std::isfinite(event.weight)) line.set_pdrop(1.0 - 1.0 / event.weight);
  line.set_timestamp(absl::FormatTime(
      "%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixMicros(event.created_micros), absl::UTCTimeZone()));
  line.set_event_id(event.event_id);
  for (const int i : order) line.add_actions(i + 1);
  sim::dsjson::Context& context = *line.mutable_context();
  context.set_user(event.user);
  *context.mutable_context() = VectorFeatures(event.context);
  for (int i = 0; i < n; ++i) {
    sim::dsjson::Action& action = *context.add_multi();
    action.set_id(event.ids[i]);
    *action.mutable_features() = VectorFeatures(event.features[i]);
    if (i < static_cast<int>(event.means.size()) && std::isfinite(event.means[i])) {
      action.set_mean(event.means[i]);
    }
  }
  const bool all_known = std::all_of(event.probabilities.begin(), event.probabilities.end(),
                                     [](double p) { return std::isfinite(p); });
  if (all_known) {
    for (const int i : order) line.add_probabilities(event.probabilities[i]);
  }
  return json::Print(line);
}

absl::Status WriteDsjson(const LoggedHistory& history, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  for (const LoggedEvent& event : history.events) out << ToDsjsonLine(event) << '\n';
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------------------
// Reading DSJSON.

namespace {

// Feature columns, numbered in the order they are first seen.
class Columns {
 public:
  int Of(const std::string& name) {
    auto [it, added] = index_.emplace(name, static_cast<int>(index_.size()));
    return it->second;
  }
  size_t size() const { return index_.size(); }

 private:
  std::unordered_map<std::string, int> index_;
};

using SparseFeatures = std::vector<std::pair<int, double>>;

// A namespace's features, as Vowpal Wabbit reads them: a number is a feature with that value,
// a string a feature named "key=value" with value 1, true a feature with value 1 (false and
// null none), a nested object a namespace, an array of numbers anonymous features by position.
// Keys starting with '_' are not features.
absl::Status Flatten(const Struct& object, const std::string& prefix, Columns* columns,
                     SparseFeatures* out) {
  // Sorted, so that columns are numbered the same whatever order the parser kept.
  std::vector<std::pair<std::string, const Value*>> fields;
  for (const auto& [key, value] : object.fields()) fields.emplace_back(key, &value);
  std::sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) {
    // Numeric keys ("0", "1", ..., "10") in numeric order.
    const bool da = !a.first.empty() && std::isdigit(static_cast<unsigned char>(a.first[0]));
    const bool db = !b.first.empty() && std::isdigit(static_cast<unsigned char>(b.first[0]));
    if (da && db && a.first.size() != b.first.size()) return a.first.size() < b.first.size();
    return a.first < b.first;
  });
  for (const auto& [key, value] : fields) {
    if (!key.empty() && key[0] == '_') continue;
    const std::string name = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
    switch (value->kind_case()) {
      case Value::kNumberValue:
        out->emplace_back(columns->Of(name), value->number_value());
        break;
      case Value::kStringValue:
        out->emplace_back(columns->Of(absl::StrCat(name, "=", value->string_value())), 1.0);
        break;
      case Value::kBoolValue:
        if (value->bool_value()) out->emplace_back(columns->Of(name), 1.0);
        break;
      case Value::kStructValue:
        if (absl::Status s = Flatten(value->struct_value(), name, columns, out); !s.ok()) {
          return s;
        }
        break;
      case Value::kListValue: {
        // Numbers: anonymous features by position; objects: more features of the namespace;
        // strings: indicators.
        const ListValue& list = value->list_value();
        for (int i = 0; i < list.values_size(); ++i) {
          const Value& item = list.values(i);
          if (item.kind_case() == Value::kNumberValue) {
            out->emplace_back(columns->Of(absl::StrCat(name, "[", i, "]")), item.number_value());
          } else if (item.kind_case() == Value::kStructValue) {
            if (absl::Status s = Flatten(item.struct_value(), name, columns, out); !s.ok()) {
              return s;
            }
          } else if (item.kind_case() == Value::kStringValue) {
            out->emplace_back(columns->Of(absl::StrCat(name, "=", item.string_value())), 1.0);
          } else if (item.kind_case() != Value::kNullValue) {
            return absl::InvalidArgumentError(
                absl::StrFormat("feature \"%s\" holds an array of arrays or booleans", name));
          }
        }
        break;
      }
      default:
        break;  // null
    }
  }
  if (columns->size() > kMaxColumns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("more than %d distinct features: not a dense problem", kMaxColumns));
  }
  return absl::OkStatus();
}

std::vector<double> Dense(const SparseFeatures& features, size_t size) {
  std::vector<double> out(size, 0.0);
  for (const auto& [column, value] : features) out[column] += value;
  return out;
}

struct ParsedLine {
  LoggedEvent event;                 // without features yet
  bool flagged = false;              // the line says whether it was drawn uniformly
  bool equal_probabilities = false;  // unflagged: every action had the same probability
  SparseFeatures context;
  std::vector<SparseFeatures> arms;
};

const Value* Field(const Struct& object, const std::string& key) {
  auto it = object.fields().find(key);
  return it == object.fields().end() ? nullptr : &it->second;
}

bool Integer(const Value& v, int64_t* out) {
  if (v.kind_case() != Value::kNumberValue) return false;
  const double d = v.number_value();
  if (!(d == std::floor(d)) || std::abs(d) > 1e9) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

// Fills `parsed` from one line; *skip when the line holds no learnable event.
absl::Status ParseLine(const std::string& line, Columns* context_columns, Columns* arm_columns,
                       ParsedLine* parsed, bool* skip) {
  Struct root;
  if (auto s = google::protobuf::util::JsonStringToMessage(line, &root); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", s.message().ToString()));
  }
  LoggedEvent& event = parsed->event;
  const Value* skip_learn = Field(root, "_skipLearn");
  const Value* cost = Field(root, "_label_cost");
  if ((skip_learn != nullptr && skip_learn->bool_value()) || cost == nullptr) {
    *skip = true;
    return absl::OkStatus();
  }
  *skip = false;
  if (cost->kind_case() != Value::kNumberValue) {
    return absl::InvalidArgumentError("_label_cost is not a number");
  }
  event.reward = -cost->number_value();
  const Value* c = Field(root, "c");
  if (c == nullptr || c->kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError("no context object \"c\"");
  }
  const Value* multi = Field(c->struct_value(), "_multi");
  if (multi == nullptr || multi->kind_case() != Value::kListValue ||
      multi->list_value().values_size() == 0) {
    return absl::InvalidArgumentError("\"c\" has no actions (\"_multi\")");
  }
  const int n = multi->list_value().values_size();
  // The user, the shared features, each action's id and features.
  const Value* user = Field(c->struct_value(), "user");
  event.user = user != nullptr && user->kind_case() == Value::kStringValue ? user->string_value()
                                                                           : kSharedUser;
  Struct shared = c->struct_value();
  shared.mutable_fields()->erase("user");
  if (absl::Status s = Flatten(shared, "", context_columns, &parsed->context); !s.ok()) return s;
  for (int i = 0; i < n; ++i) {
    const Value& action = multi->list_value().values(i);
    if (action.kind_case() != Value::kStructValue) {
      return absl::InvalidArgumentError(absl::StrFormat("action %d is not an object", i + 1));
    }
    Struct features = action.struct_value();
    // The arm id: graphbandit's "id", else the _tag Personalizer wrote, else the number.
    const Value* id = Field(features, "id");
    const Value* tag = Field(features, "_tag");
    if (id != nullptr && id->kind_case() == Value::kStringValue) {
      event.ids.push_back(id->string_value());
      features.mutable_fields()->erase("id");
    } else if (tag != nullptr && tag->kind_case() == Value::kStringValue) {
      event.ids.push_back(tag->string_value());
    } else {
      event.ids.push_back(absl::StrCat(i + 1));
    }
    const Value* q = Field(features, "_q");
    event.means.push_back(q != nullptr && q->kind_case() == Value::kNumberValue ? q->number_value()
                                                                                : std::nan(""));
    parsed->arms.emplace_back();
    if (absl::Status s = Flatten(features, "", arm_columns, &parsed->arms.back()); !s.ok()) {
      return s;
    }
  }
  // The logged action: _labelIndex (from 0), else _label_Action (from 1), else a[0].
  std::vector<int64_t> actions;
  if (const Value* a = Field(root, "a"); a != nullptr && a->kind_case() == Value::kListValue) {
    for (const Value& v : a->list_value().values()) {
      int64_t k = 0;
      if (!Integer(v, &k) || k < 1 || k > n) {
        return absl::InvalidArgumentError(absl::StrFormat("\"a\" names an action not in 1..%d", n));
      }
      if (std::find(actions.begin(), actions.end(), k) != actions.end()) {
        return absl::InvalidArgumentError(absl::StrFormat("\"a\" names action %d twice", k));
      }
      actions.push_back(k);
    }
  }
  int64_t chosen = -1;
  if (const Value* index = Field(root, "_labelIndex")) {
    if (!Integer(*index, &chosen)) return absl::InvalidArgumentError("bad _labelIndex");
  } else if (const Value* action = Field(root, "_label_Action")) {
    if (!Integer(*action, &chosen)) return absl::InvalidArgumentError("bad _label_Action");
    --chosen;
  } else if (!actions.empty()) {
    chosen = actions[0] - 1;
  }
  if (chosen < 0 || chosen >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the logged action is not one of the %d actions", n));
  }
  event.chosen = static_cast<int>(chosen);
  // Probabilities: p (or _p) aligned with a; the logged one's from _label_probability.
  event.probabilities.assign(n, std::nan(""));
  const Value* p = Field(root, "p");
  if (p == nullptr) p = Field(root, "_p");
  if (p != nullptr) {
    if (p->kind_case() != Value::kListValue ||
        p->list_value().values_size() != static_cast<int>(actions.size())) {
      return absl::InvalidArgumentError("\"p\" is not a list as long as \"a\"");
    }
    for (size_t j = 0; j < actions.size(); ++j) {
      const Value& v = p->list_value().values(static_cast<int>(j));
      if (v.kind_case() != Value::kNumberValue || !(v.number_value() >= 0.0) ||
          v.number_value() > 1.0) {
        return absl::InvalidArgumentError("\"p\" holds something else than a probability");
      }
      event.probabilities[actions[j] - 1] = v.number_value();
    }
  }
  if (const Value* q = Field(root, "_label_probability")) {
    if (q->kind_case() != Value::kNumberValue) {
      return absl::InvalidArgumentError("_label_probability is not a number");
    }
    event.probabilities[event.chosen] = q->number_value();
  }
  const double logged = event.probabilities[event.chosen];
  if (!(logged > 0.0 && logged <= 1.0)) {
    return absl::InvalidArgumentError(
        "the logged action's probability is missing or outside (0, 1]");
  }
  if (const Value* ba = Field(root, "_ba");
      ba != nullptr && ba->kind_case() == Value::kListValue && ba->list_value().values_size() > 0) {
    int64_t b = 0;
    if (!Integer(ba->list_value().values(0), &b) || b < 1 || b > n) {
      return absl::InvalidArgumentError("_ba names an action not in the line");
    }
    event.baseline = static_cast<int>(b - 1);
  }
  if (const Value* explored = Field(root, "_explored")) {
    event.explored = explored->bool_value();
    parsed->flagged = true;
  } else {
    // No flag (not written by graphbandit): uniform if every line of the file is (see
    // ParseDsjson).
    parsed->equal_probabilities =
        n > 1 && std::all_of(event.probabilities.begin(), event.probabilities.end(),
                             [&](double q) { return q == logged; });
  }
  if (const Value* pdrop = Field(root, "pdrop")) {
    const double drop = pdrop->number_value();
    if (!(drop >= 0.0 && drop < 1.0)) {
      return absl::InvalidArgumentError("pdrop must be in [0, 1)");
    }
    event.weight = 1.0 / (1.0 - drop);
  }
  if (const Value* id = Field(root, "EventId"); id != nullptr) event.event_id = id->string_value();
  if (const Value* t = Field(root, "Timestamp"); t != nullptr) {
    absl::Time when;
    std::string error;
    if (absl::ParseTime(absl::RFC3339_full, t->string_value(), &when, &error)) {
      event.created_micros = absl::ToUnixMicros(when);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoggedHistory> ParseDsjson(absl::string_view text, absl::string_view source) {
  LoggedHistory history;
  history.source = std::string(source);
  Columns context_columns, arm_columns;
  std::vector<ParsedLine> lines;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (raw.empty() || raw[0] != '{') continue;  // Vowpal Wabbit skips such lines too
    ParsedLine parsed;
    bool skip = false;
    if (absl::Status s =
            ParseLine(std::string(raw), &context_columns, &arm_columns, &parsed, &skip);
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s line %d: %s", source, number, s.message()));
    }
    if (skip) {
      ++history.lines_skipped;
      continue;
    }
    if (parsed.event.event_id.empty()) parsed.event.event_id = absl::StrCat("line-", number);
    lines.push_back(std::move(parsed));
  }
  // Lines that do not say whether the share drew them count as uniform only if every line of
  // the file was logged uniformly: a uniform line in a non-uniform log may be one whose
  // context made the policy indifferent, and keeping just those would select contexts.
  const bool all_uniform = std::all_of(lines.begin(), lines.end(), [](const ParsedLine& l) {
    return l.flagged || l.equal_probabilities;
  });
  for (ParsedLine& line : lines) {
    if (!line.flagged) line.event.explored = all_uniform && line.equal_probabilities;
  }
  for (ParsedLine& line : lines) {
    line.event.context = Dense(line.context, context_columns.size());
    for (const SparseFeatures& arm : line.arms) {
      line.event.features.push_back(Dense(arm, arm_columns.size()));
    }
    history.events.push_back(std::move(line.event));
  }
  history.first_seq = 1;
  history.last_seq = static_cast<uint64_t>(number);
  return history;
}

absl::StatusOr<LoggedHistory> ReadDsjson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseDsjson(text.str(), path);
}

std::string DescribeHistory(const LoggedHistory& history) {
  std::string out = absl::StrFormat("%s: %d rewarded decisions with every candidate",
                                    history.source, history.events.size());
  if (!history.events.empty() && history.events.back().created_micros != 0) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  ", from %s to %s",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                   absl::FromUnixMicros(history.events.front().created_micros),
                                   absl::UTCTimeZone()),
                  absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                   absl::FromUnixMicros(history.events.back().created_micros),
                                   absl::UTCTimeZone())));
  }
  absl::StrAppend(&out, "\n");
  if (!history.from_log) {
    absl::StrAppend(&out, absl::StrFormat("  %d lines without a reward or marked _skipLearn\n",
                                          history.lines_skipped));
    return out;
  }
  if (history.from_start) {
    absl::StrAppend(&out, absl::StrFormat("  the log reaches back to the model's first record "
                                          "(records 1 to %d)\n",
                                          history.last_seq));
  } else {
    absl::StrAppend(&out,
                    absl::StrFormat("  the log reaches back to record %d only: the records before "
                                    "were removed after snapshots, and so were the graph edits "
                                    "among them (pass --graph)\n",
                                    history.first_seq));
  }
  absl::StrAppend(
      &out, absl::StrFormat("  %d decisions without every candidate (made without "
                            "the evaluation share, or slates); %d without a reward; "
                            "%d rewards of decisions older than the log\n",
                            history.decisions_without_candidates, history.decisions_without_reward,
                            history.rewards_without_decision));
  return out;
}

}  // namespace graphbandit::replay
