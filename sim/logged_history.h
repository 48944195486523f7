// A model's logged decisions and rewards, as offline evaluation (sim/offline_replay.h) and
// export need them: read from a model's state directory (its log segments), or from DSJSON, the
// JSON lines Vowpal Wabbit reads with --dsjson (and Azure Personalizer exported its logs in).
//
// Only single-arm decisions logged with the evaluation share on (ModelConfig.evaluation) carry
// every candidate's id, features and logging probability (core/ledger/decision.h,
// LoggedCandidates); the others are counted, not kept, because no other policy can be evaluated
// on them without bias.
//
// The DSJSON this writes, one decision per line (the fields Vowpal Wabbit reads, in its order):
//   _label_cost         minus the reward the model learned for the decision
//   _label_probability  the probability with which the logging policy chose the logged arm
//   _label_Action       the logged arm, numbered from 1 in the order of `c._multi`
//   _labelIndex         the same, numbered from 0
//   _ba                 the request's baseline arm (numbered from 1), when it named one
//   _explored           true when the uniform evaluation share drew the arm (graphbandit's own
//                       field: Vowpal Wabbit ignores top-level fields it does not know)
//   Timestamp           when the decision was made (UTC, ISO 8601)
//   EventId             the decision's event id
//   a                   every arm, numbered from 1: the logged one first, then the others in
//                       candidate order
//   c                   the features: `user` (the user id, a categorical feature), namespace `x`
//                       (the context vector, keys "0", "1", ...), and `_multi`, one object per
//                       candidate with `id` (the arm id), namespace `f` (its feature vector) and
//                       `_q`, the model's posterior mean there when it decided (the reward model
//                       of the doubly robust estimates; Vowpal Wabbit ignores it)
//   p                   each arm's logging probability, in the order of `a`
//
// Reading DSJSON accepts any such line Vowpal Wabbit accepts for contextual bandits: a line
// without `_label_cost` (no reward yet) or with `_skipLearn` is skipped and counted; `pdrop`
// (the share of events the logger dropped) is kept as the event's weight 1 / (1 - pdrop) and
// written back on export, but the estimates weigh every line alike (right when the drop rate
// is the same throughout the file, as a sampling rate is). A line without `_explored` counts
// as drawn uniformly when every line of the file had equal probabilities for all its actions
// (and more than one). The
// user is `c.user` when it is a string, else one shared user. Features become dense vectors:
// each numeric feature (a key in a namespace) one coordinate and each string feature
// ("key": "value") one indicator coordinate per value seen, the columns numbered in the order
// the file first shows them (keys sorted within an object). An arm's id is its `id` (a string),
// else its `_tag` (Personalizer's action id), else its number; graphbandit's own `x` and `f`
// namespaces map back to the vectors they came from, so an exported log reads back as it was
// written.
#ifndef GRAPHBANDIT_SIM_LOGGED_HISTORY_H_
#define GRAPHBANDIT_SIM_LOGGED_HISTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/model_ops.h"

namespace graphbandit::replay {

struct LoggedEvent {
  std::string event_id;
  int64_t created_micros = 0;  // Unix time
  std::string user;
  std::vector<double> context;
  std::vector<std::string> ids;               // every candidate's arm id
  std::vector<std::vector<double>> features;  // every candidate's features
  std::vector<double> probabilities;          // every candidate's logging probability
  // Every candidate's posterior mean when the decision was made (NaN when not known).
  std::vector<double> means;
  int chosen = 0;         // the logged arm (a candidate index)
  int baseline = -1;      // the request's baseline arm, -1 for none
  bool explored = false;  // drawn by the uniform evaluation share
  double reward = 0.0;    // the reward the model learned
  double weight = 1.0;    // 1 / (1 - pdrop) for a DSJSON event with pdrop
};

struct LoggedHistory {
  std::string source;     // the state directory or file read
  bool from_log = false;  // a state directory's log (else DSJSON)
  // Rewarded decisions with every candidate, in the order their decisions were logged.
  std::vector<LoggedEvent> events;
  // The user graph the log builds (state directories: its graph edits, in order).
  std::vector<EdgeEdit> edges;
  // How far back the log reaches: the sequence numbers of its first and last records, and
  // whether the first is the model's first (older segments are removed after snapshots,
  // core/model/state_directory.h, so a long-lived model's log holds its recent past only).
  uint64_t first_seq = 0, last_seq = 0;
  bool from_start = true;
  // Decisions seen without every candidate (made without the evaluation share, slates, or
  // logged before candidates were), decisions without a reward, and learned rewards whose
  // decision is older than the log (or not a kept decision); DSJSON lines skipped.
  int64_t decisions_without_candidates = 0;
  int64_t decisions_without_reward = 0;
  int64_t rewards_without_decision = 0;
  int64_t lines_skipped = 0;
  // `edges` holds the graph edits as logged (an edit the model refused when it arrived, if
  // logged, is in it too); edits made before the log's first record are not (pass the graph
  // file then).
};

// Reads model `model`'s log under `state_dir` (the server's --state_dir; the model's directory
// is <state_dir>/<model>). Damaged records are skipped as recovery skips them (and a damaged
// tail ends the segment); fails if the directory holds no log.
absl::StatusOr<LoggedHistory> ReadStateDirectory(const std::string& state_dir,
                                                 const std::string& model);

// One DSJSON line for an event (see the top of this file). A figure that is not finite (a
// reward, a probability or a weight that is not known) is left out of the line rather than
// written as null (ParseDsjson reads a line without "_label_cost" as a decision not rewarded).
std::string ToDsjsonLine(const LoggedEvent& event);
// Writes every event, one line each.
absl::Status WriteDsjson(const LoggedHistory& history, const std::string& path);

// Reads DSJSON lines (see the top of this file). A malformed line fails with its line number.
absl::StatusOr<LoggedHistory> ParseDsjson(absl::string_view text, absl::string_view source);
absl::StatusOr<LoggedHistory> ReadDsjson(const std::string& path);

// What the history holds and how far back it reaches, in a few lines for people.
std::string DescribeHistory(const LoggedHistory& history);

}  // namespace graphbandit::replay

#endif  // GRAPHBANDIT_SIM_LOGGED_HISTORY_H_
