#include "core/model/model.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/graph/edge_list.h"
#include "core/learner/learner_factory.h"
#include "core/base/random.h"
#include "core/fit/refit.h"
#include "core/policy/selection.h"
#include "core/storage/coding.h"
#include "core/storage/log_reader.h"
#include "core/storage/snapshot_file.h"

namespace graphbandit {

struct Model::OpCompletion {
  Notification done;
  absl::Status status;
  EdgeEditResult result;
  AddUsersResult users;
  uint64_t seq = 0;
};

constexpr double FreshnessStats::kBounds[];

namespace {

// 3: with the hyper-parameters block; 2: without (the configured values apply).
constexpr uint8_t kStateVersion = 3;
constexpr uint8_t kOldestStateVersion = 2;

absl::Status CheckId(absl::string_view id, absl::string_view field) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " must not be empty"));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is %d bytes long; the limit is %d", field,
                                                      id.size(), kMaxIdBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(absl::Span<const double> values, absl::string_view field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d] is %s", field, i, std::isnan(values[i]) ? "NaN" : "infinite"));
    }
    if (std::abs(values[i]) > kMaxFeatureMagnitude) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d] is %g; feature values must lie in [-%g, %g] (rescale them)", field, i,
          values[i], kMaxFeatureMagnitude, kMaxFeatureMagnitude));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    const std::string partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrFormat("cannot create directory \"%s\": %s", partial, std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

std::string SegmentName(uint64_t first_seq) { return absl::StrFormat("log-%020d.log", first_seq); }
std::string SnapshotName(uint64_t seq) { return absl::StrFormat("snapshot-%020d.snap", seq); }

// Files "<prefix><20 digits><suffix>" in `dir`, by number.
std::vector<std::pair<uint64_t, std::string>> ListNumbered(const std::string& dir,
                                                           absl::string_view prefix,
                                                           absl::string_view suffix) {
  std::vector<std::pair<uint64_t, std::string>> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      absl::string_view name = e->d_name;
      if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, suffix)) continue;
      absl::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
      uint64_t number = 0;
      if (digits.size() == 20 && absl::SimpleAtoi(digits, &number)) {
        files.emplace_back(number, dir + "/" + std::string(name));
      }
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Moves a damaged or unusable file out of the way (kept for forensics, never read again).
std::string SetAside(const std::string& path, absl::string_view why) {
  std::string target = absl::StrCat(path, ".", why);
  for (int i = 1; access(target.c_str(), F_OK) == 0; ++i) target = absl::StrCat(path, ".", why, ".", i);
  std::rename(path.c_str(), target.c_str());
  return target;
}

int64_t ToMicros(absl::Time t) { return absl::ToUnixMicros(t); }

Decision DecisionOf(const DecideOp& op, const ModelOptions& options) {
  Decision d;
  d.event_id = op.event_id;
  d.model = options.name;
  d.policy = std::string(PolicyName(options.policy));
  d.model_version = op.model_version;
  for (const DecideOp::Arm& arm : op.arms) {
    ChosenArm c;
    c.candidate_index = arm.candidate_index;
    c.arm_id = arm.arm_id;
    c.mean = arm.mean;
    c.stddev = arm.stddev;
    c.score = arm.score;
    if (arm.has_probability) c.probability = arm.probability;
    d.arms.push_back(std::move(c));
  }
  return d;
}

std::unique_ptr<LedgerEntry> EntryOf(const DecideOp& op, const ModelOptions& options) {
  auto entry = std::make_unique<LedgerEntry>();
  entry->event_id = op.event_id;
  entry->fingerprint = op.fingerprint;
  entry->created = absl::FromUnixMicros(op.created_micros);
  entry->user_id = op.user;
  entry->context = op.context;
  for (const DecideOp::Arm& arm : op.arms) entry->arms.push_back(LedgerArm{arm.arm_id, arm.features, 0, 0.0});
  entry->decision = DecisionOf(op, options);
  return entry;
}

}  // namespace

absl::string_view RewardOutcomeName(RewardOutcome outcome) {
  switch (outcome) {
    case RewardOutcome::kAccepted:
      return "accepted";
    case RewardOutcome::kDuplicate:
      return "duplicate";
    case RewardOutcome::kLate:
      return "late";
    case RewardOutcome::kUnknownEvent:
      return "unknown_event";
  }
  return "unknown";
}

Model::Model(const ModelOptions& options, const Durability& durability)
    : options_(options),
      durability_(durability),
      ledger_(options.reward_window, options.max_decisions, options.effective_max_tombstones(),
              options.aggregation),
      baseline_(options.baseline_half_life) {
  hyper_.signal_variance = options.kernel_variance;
  hyper_.offset_variance = 0.0;
  hyper_.noise_variance = options.ridge;
  hyper_.rho = options.rho;
  hyper_.prior_mean = 0.0;
  kors_mu_factor_ = options.refit.kors_mu_factor;
  next_fit_at_ = NextFitAfter(0, options.refit);
}

Model::~Model() { Shutdown(); }

// ---------------------------------------------------------------------------------------------
// Opening and recovery.

absl::StatusOr<std::unique_ptr<Model>> Model::Open(const ModelOptions& options,
                                                   const std::string& state_dir,
                                                   const Durability& durability) {
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;
  // A model with nothing learned yet (configured dimensions applied).
  auto fresh = [&]() -> absl::StatusOr<std::unique_ptr<Model>> {
    std::unique_ptr<Model> model(new Model(options, durability));
    auto kernel = BuildUserKernel(model->graph_, options.user_kernel_options());
    if (!kernel.ok()) return kernel.status();
    model->user_kernel_ = *std::move(kernel);
    if (options.arm_dim > 0) {
      EdgeEditResult ignored;
      absl::Status s = model->Apply(FixDimensionsOp{options.context_dim, options.arm_dim}, &ignored);
      if (!s.ok()) return s;
    }
    return model;
  };

  std::unique_ptr<Model> model;
  RecoveryReport report;
  uint64_t next = 1;
  std::string dir;
  if (!state_dir.empty()) {
    dir = absl::StrCat(state_dir, "/", options.name);
    if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
    // The newest snapshot that verifies and loads; older ones are the fallback.
    auto snapshots = ListNumbered(dir, "snapshot-", ".snap");
    for (auto it = snapshots.rbegin(); it != snapshots.rend() && model == nullptr; ++it) {
      auto contents = storage::ReadSnapshotFile(it->second);
      absl::Status status = contents.status();
      std::unique_ptr<Model> candidate;
      if (status.ok()) {
        auto created = fresh();
        if (!created.ok()) return created.status();
        candidate = *std::move(created);
        status = candidate->LoadState(contents->payload);
        if (!status.ok()) {
          // The file's checksum is good, so this is not damage on disk: a configuration that
          // contradicts the snapshot (another policy, kernel or aggregation) or a format this
          // build does not know. Refuse to start rather than set learned state aside.
          return absl::FailedPreconditionError(absl::StrFormat(
              "model \"%s\": snapshot %s (intact) cannot be restored: %s. Restore the "
              "configuration it was written with, or move the state directory away to start over",
              options.name, it->second, status.message()));
        }
      }
      if (!status.ok()) {
        report.damage.push_back(absl::StrFormat("%s: %s; moved to %s", it->second,
                                                status.message(), SetAside(it->second, "corrupt")));
        continue;
      }
      model = std::move(candidate);
      report.snapshot_seq = contents->seq;
      next = contents->seq + 1;
    }
    if (model == nullptr) {
      auto created = fresh();
      if (!created.ok()) return created.status();
      model = *std::move(created);
    }
    model->dir_ = dir;
    if (report.snapshot_seq == 0) {
      // No snapshot was loaded. Starting from nothing is only right if the log still reaches
      // back to the first record (or there is no state at all); otherwise the model would
      // silently forget what it learned.
      auto segments = ListNumbered(dir, "log-", ".log");
      const bool log_from_start = !segments.empty() && segments.front().first == 1;
      if (!log_from_start && (!segments.empty() || !snapshots.empty())) {
        return absl::DataLossError(absl::StrFormat(
            "model \"%s\": no snapshot in %s could be read (%s) and the log does not reach back "
            "to record 1; refusing to start with an empty model. Restore a snapshot from backup, "
            "or move the directory away to start over",
            options.name, dir, absl::StrJoin(report.damage, "; ")));
      }
    }
    // Replay the log records after the snapshot, segment by segment, stopping at damage.
    auto segments = ListNumbered(dir, "log-", ".log");
    bool stop = false;
    for (size_t i = 0; i < segments.size(); ++i) {
      // Not a structured binding: the replay lambda below captures these (C++17, clang).
      const uint64_t first = segments[i].first;
      const std::string& path = segments[i].second;
      if (stop) {
        report.damage.push_back(absl::StrFormat("%s follows damaged or missing records; moved to %s",
                                                path, SetAside(path, "orphaned")));
        continue;
      }
      const uint64_t following = i + 1 < segments.size() ? segments[i + 1].first : UINT64_MAX;
      if (following <= next) continue;  // entirely covered by the snapshot
      if (first > next) {
        report.damage.push_back(absl::StrFormat(
            "log records %d to %d are missing (no segment holds them)", next, first - 1));
        stop = true;
        --i;  // set this segment aside too
        continue;
      }
      uint64_t seq = first;
      auto recovered = storage::RecoverLog(path, [&](uint8_t type, absl::string_view payload) {
        const uint64_t this_seq = seq++;
        if (this_seq < next) return absl::OkStatus();
        absl::StatusOr<ModelOp> op = DecodeOp(type, payload);
        if (!op.ok()) {
          return absl::DataLossError(absl::StrFormat("record %d of %s: %s", this_seq, path,
                                                     op.status().message()));
        }
        model->ApplyToLedger(*op);
        EdgeEditResult ignored;
        absl::Status applied = model->Apply(*op, &ignored);
        // An operation that failed when it arrived fails the same way now (and was reported
        // then): a refused graph edit, a reward that could not be learned.
        if (!applied.ok()) {
          if (std::holds_alternative<FixDimensionsOp>(*op)) return applied;
          ++report.records_refused;
        }
        ++report.records_replayed;
        next = this_seq + 1;
        return absl::OkStatus();
      });
      if (!recovered.ok()) {
        return absl::Status(recovered.status().code(),
                            absl::StrFormat("model \"%s\": recovery failed: %s", options.name,
                                            recovered.status().message()));
      }
      if (recovered->corruption.has_value()) {
        report.truncated = true;
        report.damage.push_back(absl::StrFormat(
            "%s: %s at offset %d; %d bytes after it were moved to %s", path,
            recovered->corruption->reason, recovered->corruption->offset,
            recovered->discarded_bytes, recovered->discarded_path));
        stop = true;  // nothing after damage is applied
      }
    }
  } else {
    auto created = fresh();
    if (!created.ok()) return created.status();
    model = *std::move(created);
  }
  model->recovery_ = std::move(report);
  {
    MutexLock lock(&model->queue_mu_);
    model->next_seq_ = next;
    model->applied_seq_ = next - 1;
    model->decided_seq_ = next - 1;
    model->rewards_held_ = model->learner_ != nullptr ? model->learner_->history_size() : 0;
    if (!dir.empty()) {
      if (absl::Status s = model->StartSegment(next); !s.ok()) return s;
    }
  }
  {
    MutexLock lock(&model->sync_mu_);
    model->synced_seq_ = next - 1;
  }
  model->Publish(next - 1);
  // After a restart the next fit waits for the rewards to grow as after a fit (replay does not
  // know when fits that changed nothing ran, and a restart should not start with a rebuild).
  model->next_fit_at_ =
      std::max(model->next_fit_at_, NextFitAfter(model->rewards_learned_, options.refit));
  if (options.refits_hyperparameters()) {
    model->fitter_ = std::make_unique<FitWorker>([m = model.get()] {
      MutexLock lock(&m->queue_mu_);
      m->fit_ready_ = true;
      m->queue_cv_.SignalAll();
    });
  }
  model->writer_ = std::thread([m = model.get()] { m->WriterLoop(); });
  if (!dir.empty() && durability.sync == Durability::Sync::kGroupCommit) {
    model->syncer_ = std::thread([m = model.get()] { m->SyncerLoop(); });
  }

  if (!options.edge_list_file.empty()) {
    // Applied as one logged edit of the edges that are missing or weighted differently, so an
    // unchanged file adds nothing to the log on restart.
    auto edges = ReadEdgeList(options.edge_list_file);
    if (!edges.ok()) return edges.status();
    SetEdgesOp changes;
    {
      MutexLock lock(&model->queue_mu_);  // the writer is idle: nothing is queued yet
      for (EdgeEdit& edge : *edges) {
        const int32_t a = model->registry_->Find(edge.user_a);
        const int32_t b = model->registry_->Find(edge.user_b);
        if (a < 0 || b < 0 || model->graph_.Weight(a, b) != edge.weight) {
          changes.edges.push_back(std::move(edge));
        }
      }
    }
    if (!changes.edges.empty()) {
      auto applied = model->SubmitAndWait(std::move(changes), absl::InfiniteFuture());
      if (!applied.ok()) return applied.status();
    }
  }
  return model;
}

void Model::FailLogLocked(const std::string& what) {
  if (sync_error_.ok()) {
    sync_error_ = absl::UnavailableError(absl::StrFormat(
        "model \"%s\" cannot make its log durable (%s); it accepts no more changes until the "
        "server is restarted",
        options_.name, what));
    std::fprintf(stderr, "%s\n", sync_error_.ToString().c_str());
  }
  log_failed_.store(true);
  sync_cv_.SignalAll();
}

absl::Status Model::StartSegment(uint64_t first_seq) {
  // The new segment is opened first: if that fails the model keeps appending to the old one.
  auto writer = storage::LogWriter::Open(dir_ + "/" + SegmentName(first_seq));
  if (!writer.ok()) return writer.status();
  if (log_ != nullptr) {
    MutexLock lock(&sync_mu_);
    if (::fdatasync(sync_fd_) == 0) {
      ++log_syncs_;
      synced_seq_ = std::max(synced_seq_, next_seq_ - 1);
      sync_cv_.SignalAll();  // group-commit waiters covered by this sync
    } else {
      // Records in the old segment may be lost: stop acknowledging anything (fail-stop).
      FailLogLocked(absl::StrCat("fdatasync of the finished segment: ", std::strerror(errno)));
    }
    sync_fd_ = -1;
  }
  if (log_ != nullptr) log_->Close().IgnoreError();
  log_ = *std::move(writer);
  MutexLock lock(&sync_mu_);
  sync_fd_ = log_->fd();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Snapshots: the model's complete state at one sequence number.

std::string Model::SaveState(uint64_t seq, absl::string_view ledger) const {
  storage::Encoder out;
  out.PutU8(kStateVersion);
  out.PutFixed64(seq);
  out.PutU8(learner_ != nullptr ? 1 : 0);
  out.PutVarint64(static_cast<uint32_t>(scaling_.context_dim));
  out.PutVarint64(static_cast<uint32_t>(scaling_.arm_dim));
  out.PutVarint64(static_cast<uint64_t>(rewards_learned_));
  const int32_t users = registry_->size();
  out.PutVarint64(static_cast<uint64_t>(users));
  for (int32_t u = 0; u < users; ++u) out.PutString(registry_->Id(u));
  out.PutVarint64(static_cast<uint64_t>(graph_.num_edges()));
  for (int32_t u = 0; u < graph_.num_users(); ++u) {
    for (const auto& [v, w] : graph_.SortedNeighbours(u)) {
      if (v <= u) continue;
      out.PutVarint64(static_cast<uint64_t>(u));
      out.PutVarint64(static_cast<uint64_t>(v));
      out.PutDouble(w);
    }
  }
  // The user kernel was built over the graph's users at the last edit; users registered since
  // (by rewards) are outside it until the next edit. Restoring must build the same kernel.
  out.PutVarint64(static_cast<uint64_t>(users_at_rebuild_));
  // The hyper-parameters in use (version 3), before the learner that was built with them.
  out.PutDouble(hyper_.signal_variance);
  out.PutDouble(hyper_.offset_variance);
  out.PutDouble(hyper_.linear_variance);
  out.PutDouble(hyper_.user_variance);
  out.PutDoubles(hyper_.lengthscales.data(), hyper_.lengthscales.size());
  out.PutDouble(hyper_.noise_variance);
  out.PutDouble(hyper_.rho);
  out.PutDouble(hyper_.prior_mean);
  out.PutDouble(kors_mu_factor_);
  out.PutVarint64(static_cast<uint64_t>(next_fit_at_));
  out.PutVarint64(static_cast<uint64_t>(fits_applied_));
  out.PutVarint64(static_cast<uint64_t>(last_fit_rewards_));
  out.PutVarint64(static_cast<uint32_t>(last_fit_points_));
  out.PutDouble(last_fit_log_likelihood_);
  out.PutDouble(baseline_.value());
  out.PutVarint64(static_cast<uint64_t>(coarsenings_));
  if (learner_ != nullptr) learner_->SaveState(&out);
  // The ledger last, encoded when the snapshot began (SaveLedger).
  std::string payload = out.Release();
  payload.append(ledger.data(), ledger.size());
  return payload;
}

std::string Model::SaveLedger() const {
  storage::Encoder out;
  // Open decisions oldest first, then tombstones oldest first.
  out.PutU8(static_cast<uint8_t>(ledger_.aggregation()));
  out.PutVarint64(static_cast<uint64_t>(ledger_.expired_total()));
  out.PutVarint64(static_cast<uint64_t>(ledger_.size()));
  ledger_.ForEachEntry([&out](const LedgerEntry& e) {
    out.PutString(e.event_id);
    out.PutFixed64(e.fingerprint);
    out.PutFixed64(static_cast<uint64_t>(ToMicros(e.created)));
    out.PutString(e.user_id);
    out.PutDoubles(e.context.data(), e.context.size());
    out.PutVarint64(e.decision.model_version);
    out.PutVarint64(e.arms.size());
    for (size_t a = 0; a < e.arms.size(); ++a) {
      const LedgerArm& arm = e.arms[a];
      const ChosenArm& chosen = e.decision.arms[a];
      out.PutString(arm.arm_id);
      out.PutDoubles(arm.features.data(), arm.features.size());
      out.PutVarint64(static_cast<uint64_t>(arm.reports));
      out.PutDouble(arm.aggregate);
      out.PutVarint64(static_cast<uint32_t>(chosen.candidate_index));
      out.PutDouble(chosen.mean);
      out.PutDouble(chosen.stddev);
      out.PutDouble(chosen.score);
      out.PutU8(chosen.probability.has_value() ? 1 : 0);
      out.PutDouble(chosen.probability.value_or(0.0));
    }
  });
  out.PutVarint64(static_cast<uint64_t>(ledger_.tombstones()));
  ledger_.ForEachTombstone([&out](const Tombstone& t) {
    out.PutString(t.event_id);
    out.PutU8(static_cast<uint8_t>(t.how));
    out.PutFixed64(static_cast<uint64_t>(ToMicros(t.closed)));
  });
  return out.Release();
}

absl::Status Model::LoadState(absl::string_view payload) {
  storage::Decoder in(payload);
  auto bad = [](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("malformed snapshot: ", what));
  };
  uint8_t version = 0, has_learner = 0, aggregation = 0;
  uint64_t seq = 0, context_dim = 0, arm_dim = 0, learned = 0, users = 0, edges = 0;
  if (!in.GetU8(&version) || version < kOldestStateVersion || version > kStateVersion) {
    return bad(absl::StrFormat("format version %d (this build reads %d to %d)", version,
                               kOldestStateVersion, kStateVersion));
  }
  if (!in.GetFixed64(&seq) || !in.GetU8(&has_learner) || has_learner > 1 ||
      !in.GetVarint64(&context_dim) || !in.GetVarint64(&arm_dim) || !in.GetVarint64(&learned) ||
      !in.GetVarint64(&users) || users > in.remaining() || context_dim > INT32_MAX ||
      arm_dim > INT32_MAX) {
    return bad("header");
  }
  for (uint64_t u = 0; u < users; ++u) {
    std::string id;
    if (!in.GetString(&id)) return bad("users");
    bool added = false;
    if (registry_->FindOrAdd(id, &added) != static_cast<int32_t>(u) || !added) return bad("user ids");
  }
  if (!in.GetVarint64(&edges) || edges > in.remaining()) return bad("edge count");
  for (uint64_t e = 0; e < edges; ++e) {
    uint64_t a = 0, b = 0;
    double w = 0.0;
    if (!in.GetVarint64(&a) || !in.GetVarint64(&b) || !in.GetDouble(&w) || a >= users ||
        b >= users || a >= b || !(w > 0.0) || !std::isfinite(w)) {
      return bad("edges");
    }
    graph_.SetEdge(static_cast<int32_t>(a), static_cast<int32_t>(b), w);
  }
  uint64_t rebuild_users = 0;
  if (!in.GetVarint64(&rebuild_users) || rebuild_users > users) return bad("kernel users");
  bool rebuild_learner = false;
  if (version >= 3) {
    Hyperparameters h;
    std::vector<double> lengthscales;
    double factor = 0.0, log_likelihood = 0.0, baseline = 0.0;
    uint64_t coarsenings = 0;
    uint64_t next_fit = 0, fits = 0, last_rewards = 0, last_points = 0;
    if (!in.GetDouble(&h.signal_variance) || !in.GetDouble(&h.offset_variance) ||
        !in.GetDouble(&h.linear_variance) || !in.GetDouble(&h.user_variance) ||
        !in.GetDoubles(&lengthscales, 1u << 16) || !in.GetDouble(&h.noise_variance) ||
        !in.GetDouble(&h.rho) || !in.GetDouble(&h.prior_mean) || !in.GetDouble(&factor) ||
        !in.GetVarint64(&next_fit) || !in.GetVarint64(&fits) || !in.GetVarint64(&last_rewards) ||
        !in.GetVarint64(&last_points) || !in.GetDouble(&log_likelihood) ||
        !in.GetDouble(&baseline) || !std::isfinite(baseline) || !in.GetVarint64(&coarsenings) ||
        !(factor > 0.0 && factor <= kMaxKorsMuFactor) || next_fit > INT64_MAX ||
        fits > INT64_MAX || coarsenings > INT64_MAX || last_rewards > INT64_MAX ||
        last_points > INT32_MAX) {
      return bad("hyper-parameters");
    }
    h.lengthscales = Eigen::Map<const Eigen::VectorXd>(lengthscales.data(), lengthscales.size());
    if (!h.InRange()) return bad("hyper-parameters out of range");
    hyper_ = std::move(h);
    kors_mu_factor_ = factor;
    next_fit_at_ = static_cast<int64_t>(next_fit);
    fits_applied_ = static_cast<int64_t>(fits);
    last_fit_rewards_ = static_cast<int64_t>(last_rewards);
    last_fit_points_ = static_cast<int32_t>(last_points);
    last_fit_log_likelihood_ = log_likelihood;
    baseline_.set_value(baseline);
    coarsenings_ = static_cast<int64_t>(coarsenings);
    if (learner_ != nullptr) {
      // Dimensions fixed by the configuration: the fresh learner must use these values.
      if (hyper_.lengthscales.size() != scaling_.joint_dim()) return bad("length-scale count");
      scaling_.per_dimension = hyper_.lengthscales;
      rebuild_learner = true;
    }
  }
  // As live: the graph and the kernel cover the users known at the last edit.
  graph_.EnsureUsers(static_cast<int32_t>(rebuild_users));
  auto kernel = BuildUserKernel(graph_, CurrentUserKernelOptions());
  if (!kernel.ok()) {
    // The configured user kernel cannot serve this graph: a configuration change, not damage.
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": the configured user kernel cannot serve the snapshot's graph: %s",
        options_.name, kernel.status().message()));
  }
  user_kernel_ = *std::move(kernel);
  components_ = graph_.CountComponents();
  users_at_rebuild_ = graph_.num_users();
  if (rebuild_learner) {
    auto rebuilt = NewLearner();
    if (!rebuilt.ok()) return rebuilt.status();
    learner_ = *std::move(rebuilt);
  }
  if (has_learner == 1) {
    if (learner_ != nullptr &&
        (scaling_.context_dim != static_cast<int>(context_dim) || scaling_.arm_dim != static_cast<int>(arm_dim))) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the snapshot has dimensions (context %d, arms %d) but the configuration "
          "says (context %d, arms %d)",
          options_.name, context_dim, arm_dim, scaling_.context_dim, scaling_.arm_dim));
    }
    if (learner_ == nullptr) {
      EdgeEditResult ignored;
      absl::Status s = Apply(FixDimensionsOp{static_cast<int32_t>(context_dim),
                                             static_cast<int32_t>(arm_dim)},
                             &ignored);
      if (!s.ok()) return s;
    } else if (absl::Status s = learner_->SetGraph(graph_, user_kernel_); !s.ok()) {
      return bad(s.message());
    }
    if (absl::Status s = learner_->LoadState(&in); !s.ok()) return s;
  } else if (learner_ != nullptr) {
    // Dimensions fixed by the configuration, nothing learned yet: the learner sees the graph.
    if (absl::Status s = learner_->SetGraph(graph_, user_kernel_); !s.ok()) return bad(s.message());
  }
  rewards_learned_ = static_cast<int64_t>(learned);
  if (learner_ != nullptr && learner_->SupportsRefit() && version >= 3) {
    // Values the configuration fixes win over the snapshot's (the configuration may have
    // changed since): rebuild with them, as a logged fit would.
    const Hyperparameters configured = WithConfiguredValues(hyper_);
    if (!(configured == hyper_)) {
      std::fprintf(stderr, "model \"%s\": the configuration fixes hyper-parameters the snapshot "
                   "had otherwise (%s); rebuilding with %s\n", options_.name.c_str(),
                   hyper_.DebugString().c_str(), configured.DebugString().c_str());
      if (absl::Status s = SwitchHyperparameters(configured, kors_mu_factor_); !s.ok()) return s;
    }
  }
  uint64_t expired = 0, count = 0;
  if (!in.GetU8(&aggregation) || aggregation != static_cast<uint8_t>(options_.aggregation)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": the snapshot was taken with another ledger.aggregation", options_.name));
  }
  if (!in.GetVarint64(&expired) || !in.GetVarint64(&count) || count > in.remaining()) {
    return bad("ledger");
  }
  MutexLock lock(&ledger_mu_);
  ledger_.set_expired_total(static_cast<int64_t>(expired));
  for (uint64_t i = 0; i < count; ++i) {
    DecideOp op;
    uint64_t created = 0, version = 0, arms = 0;
    if (!in.GetString(&op.event_id) || !in.GetFixed64(&op.fingerprint) ||
        !in.GetFixed64(&created) || !in.GetString(&op.user) ||
        !in.GetDoubles(&op.context, 1u << 24) || !in.GetVarint64(&version) ||
        !in.GetVarint64(&arms) || arms > in.remaining()) {
      return bad("ledger entry");
    }
    op.created_micros = static_cast<int64_t>(created);
    op.model_version = version;
    std::vector<std::pair<uint64_t, double>> reports(arms);
    op.arms.resize(arms);
    for (uint64_t a = 0; a < arms; ++a) {
      DecideOp::Arm& arm = op.arms[a];
      uint64_t index = 0;
      uint8_t has_probability = 0;
      if (!in.GetString(&arm.arm_id) || !in.GetDoubles(&arm.features, 1u << 24) ||
          !in.GetVarint64(&reports[a].first) || !in.GetDouble(&reports[a].second) ||
          !in.GetVarint64(&index) || index > INT32_MAX || !in.GetDouble(&arm.mean) ||
          !in.GetDouble(&arm.stddev) || !in.GetDouble(&arm.score) ||
          !in.GetU8(&has_probability) || has_probability > 1 || !in.GetDouble(&arm.probability)) {
        return bad("ledger arm");
      }
      arm.candidate_index = static_cast<int32_t>(index);
      arm.has_probability = has_probability == 1;
    }
    auto entry = EntryOf(op, options_);
    for (uint64_t a = 0; a < arms; ++a) {
      entry->arms[a].reports = static_cast<int>(std::min<uint64_t>(reports[a].first, INT32_MAX));
      entry->arms[a].aggregate = reports[a].second;
    }
    if (ledger_.Find(op.event_id) != nullptr || ledger_.Full()) return bad("ledger entries");
    ledger_.Insert(std::move(entry));
  }
  if (!in.GetVarint64(&count) || count > in.remaining()) return bad("tombstones");
  for (uint64_t i = 0; i < count; ++i) {
    Tombstone t;
    uint8_t how = 0;
    uint64_t closed = 0;
    if (!in.GetString(&t.event_id) || !in.GetU8(&how) || how < 1 || how > 2 ||
        !in.GetFixed64(&closed)) {
      return bad("tombstone");
    }
    t.how = static_cast<ClosedAs>(how);
    t.closed = absl::FromUnixMicros(static_cast<int64_t>(closed));
    ledger_.RestoreTombstone(std::move(t));
  }
  if (!in.done()) return bad("trailing bytes");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Writer side.

void Model::ApplyToLedger(const ModelOp& op) {
  MutexLock lock(&ledger_mu_);
  if (const auto* decide = std::get_if<DecideOp>(&op)) {
    if (ledger_.Find(decide->event_id) != nullptr) return;
    if (ledger_.Full()) {  // cannot happen: live, a CloseOp made room first
      if (LedgerEntry* victim = ledger_.OldestCompleted()) {
        ledger_.Close(victim, ClosedAs::kCompleted, absl::FromUnixMicros(decide->created_micros));
      } else {
        return;
      }
    }
    ledger_.Insert(EntryOf(*decide, options_));
  } else if (const auto* reward = std::get_if<RewardOp>(&op)) {
    LedgerEntry* entry = ledger_.Find(reward->event_id);
    if (entry != nullptr && reward->arm >= 0 && reward->arm < static_cast<int>(entry->arms.size())) {
      ledger_.Report(entry, reward->arm, reward->reward);
    }
  } else if (const auto* close = std::get_if<CloseOp>(&op)) {
    if (LedgerEntry* entry = ledger_.Find(close->event_id)) {
      ledger_.Close(entry, static_cast<ClosedAs>(close->how),
                    absl::FromUnixMicros(close->closed_micros));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hyper-parameters (writer side).

UserKernelOptions Model::CurrentUserKernelOptions() const {
  UserKernelOptions o = options_.user_kernel_options();
  o.rho = hyper_.rho;
  return o;
}

KernelShape Model::CurrentShape() const {
  KernelShape shape;
  shape.kernel = options_.kernel;
  shape.user_kernel = CurrentUserKernelOptions();
  shape.context_dim = scaling_.context_dim;
  shape.arm_dim = scaling_.arm_dim;
  shape.fixed_kors_mu = options_.kors_mu;
  return shape;
}

absl::StatusOr<std::unique_ptr<Learner>> Model::NewLearner() const {
  return MakeLearner(options_, scaling_.joint_dim(), graph_, user_kernel_, &hyper_,
                     kors_mu_factor_);
}

Hyperparameters Model::WithConfiguredValues(Hyperparameters h) const {
  const bool fits = options_.refits_hyperparameters();
  const RefitOptions& r = options_.refit;
  if (!fits || !r.fit_signal_variance) h.signal_variance = options_.kernel_variance;
  if (!fits || !r.fit_offset_variance) h.offset_variance = 0.0;
  if (!fits || !r.fit_linear_variance || options_.kernel == KernelType::kLinear) {
    h.linear_variance = 0.0;
  }
  if (!fits || !r.fit_user_variance) h.user_variance = 0.0;
  if (!fits || !r.fit_noise_variance) h.noise_variance = options_.ridge;
  if (!fits || !r.fit_rho) h.rho = options_.rho;
  if (!fits || !r.fit_prior_mean) h.prior_mean = 0.0;
  for (Eigen::Index d = 0; d < h.lengthscales.size(); ++d) {
    const bool context = d < scaling_.context_dim;
    if (!fits || !(context ? r.fit_context_lengthscale : r.fit_arm_lengthscale)) {
      h.lengthscales(d) = context ? options_.context_lengthscale : options_.arm_lengthscale;
    }
  }
  return h;
}

absl::Status Model::SwitchHyperparameters(const Hyperparameters& values, double kors_mu_factor) {
  if (learner_ == nullptr || !learner_->SupportsRefit()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": hyper-parameters for a model whose policy has none to fit",
        options_.name));
  }
  // The rebuild can only fail on a numerical breakdown; keep the learner's state to fall back.
  storage::Encoder backup;
  learner_->SaveState(&backup);
  FeatureScaling scaling = scaling_;
  std::shared_ptr<const UserKernel> users = user_kernel_;
  absl::Status status = graphbandit::ApplyHyperparameters(
      values, CurrentShape(), kors_mu_factor, graph_, &scaling, &users, learner_.get());
  if (!status.ok()) {
    auto restored = NewLearner();
    if (restored.ok()) {
      const std::string bytes = backup.Release();
      storage::Decoder in(bytes);
      if ((*restored)->LoadState(&in).ok()) learner_ = *std::move(restored);
    }
    return absl::InternalError(absl::StrFormat(
        "model \"%s\": fitted hyper-parameters not applied (%s); keeping %s", options_.name,
        status.message(), hyper_.DebugString()));
  }
  scaling_ = std::move(scaling);
  user_kernel_ = std::move(users);
  hyper_ = values;
  kors_mu_factor_ = kors_mu_factor;
  return absl::OkStatus();
}

absl::Status Model::ApplyHyperparameters(const HyperparametersOp& op) {
  hyperparameters_queued_ = false;
  // The configuration always wins: a value it fixes now replaces the logged one (the log may
  // have been written under another configuration).
  if (absl::Status s = SwitchHyperparameters(WithConfiguredValues(op.values), op.kors_mu_factor);
      !s.ok()) {
    return s;
  }
  if (op.reason == HyperparametersOp::Reason::kDictionaryFull) {
    ++coarsenings_;
    return absl::OkStatus();
  }
  ++fits_applied_;
  last_fit_rewards_ = op.fitted_at;
  last_fit_points_ = op.points;
  last_fit_log_likelihood_ = op.log_likelihood;
  next_fit_at_ = std::max(next_fit_at_, NextFitAfter(op.fitted_at, options_.refit));
  return absl::OkStatus();
}

void Model::AfterBatch() {
  if (learner_ == nullptr || !learner_->SupportsRefit()) return;
  // Decisions about the values in use wait until a logged change of them is applied (a fit
  // finished now would be gated against, and a fit started now would start from, values about
  // to be replaced; a fit logged after a coarsening would undo it).
  if (hyperparameters_queued_) return;
  // That change held a place among the fits in flight (QueueHyperparameters) until the
  // decisions below are taken: a fit due now starts before WaitForFits can see none in flight.
  const bool release = hyperparameters_queued_hold_;
  hyperparameters_queued_hold_ = false;
  DecideFits();
  if (release) {
    MutexLock lock(&queue_mu_);
    --fits_in_flight_;
    queue_cv_.SignalAll();
  }
}

bool Model::QueueHyperparameters(HyperparametersOp op) {
  MutexLock lock(&queue_mu_);
  absl::StatusOr<uint64_t> seq = AppendLocked(std::move(op), nullptr, absl::InfinitePast());
  if (!seq.ok()) {
    if (!stopping_) {
      MutexLock stats(&stats_mu_);
      ++fits_failed_;
      std::fprintf(stderr, "model \"%s\": hyper-parameters not logged: %s\n",
                   options_.name.c_str(), std::string(seq.status().message()).c_str());
    }
    return false;
  }
  hyperparameters_queued_ = true;
  hyperparameters_queued_hold_ = true;
  ++fits_in_flight_;
  return true;
}

void Model::DecideFits() {
  // A full Nystrom dictionary is rebuilt with a coarser KORS mu (core/fit/refit.h), logged like a
  // fit so that replay rebuilds at the same place. Only when mu follows the noise variance.
  const bool nystrom =
      options_.policy == PolicyKind::kEkUcb || options_.policy == PolicyKind::kEkTs;
  if (nystrom && options_.coarsen_full_dictionary && options_.kors_mu == 0.0 &&
      learner_->dictionary_size() >= options_.max_dictionary_size) {
    const double coarser = CoarserKorsMuFactor(kors_mu_factor_);
    if (coarser > 0.0) {
      HyperparametersOp op;
      op.reason = HyperparametersOp::Reason::kDictionaryFull;
      op.values = hyper_;
      op.kors_mu_factor = coarser;
      op.fitted_at = last_fit_rewards_;
      MutexLock ledger(&ledger_mu_);
      if (QueueHyperparameters(std::move(op))) return;
    }
  }
  if (fitter_ == nullptr) return;
  if (std::optional<FitWorker::Outcome> outcome = fitter_->Take()) {
    FinishFit(*std::move(outcome));
    if (hyperparameters_queued_) return;
  }
  if (rewards_learned_ >= next_fit_at_ && !fitter_->busy()) StartFit();
}

void Model::StartFit() {
  FitWorker::Job job;
  job.data = SpreadRawObservations(*learner_, scaling_, options_.refit.max_points);
  next_fit_at_ = NextFitAfter(rewards_learned_, options_.refit);
  if (job.data.y.size() < 2) return;
  const KernelShape shape = CurrentShape();
  job.spec = MakeFitSpec(options_.refit, shape);
  if (job.spec.fit_rho) {
    job.graph = std::make_shared<const UserGraph>(graph_);  // the writer goes on editing its own
  } else {
    job.fixed_users = user_kernel_;
  }
  job.start = hyper_;
  job.fitted_at = rewards_learned_;
  if (fitter_->Start(std::move(job))) {
    MutexLock lock(&queue_mu_);
    ++fits_in_flight_;
  }
}

void Model::FinishFit(FitWorker::Outcome outcome) {
  // However it ends, this fit is no longer in flight once this returns (an applied fit's record
  // is queued by then, so WaitForFits also waits for it to be applied).
  struct Landed {
    Model* model;
    ~Landed() {
      MutexLock lock(&model->queue_mu_);
      --model->fits_in_flight_;
      model->queue_cv_.SignalAll();
    }
  } landed{this};
  if (!outcome.result.ok()) {
    MutexLock lock(&stats_mu_);
    if (outcome.result.status().code() == absl::StatusCode::kFailedPrecondition) {
      ++fits_skipped_;  // nothing to fit yet, e.g. every reward equal
    } else if (outcome.result.status().code() != absl::StatusCode::kCancelled) {
      ++fits_failed_;
      std::fprintf(stderr, "model \"%s\": hyper-parameter fit failed: %s\n",
                   options_.name.c_str(), std::string(outcome.result.status().message()).c_str());
    }
    return;
  }
  const FitResult& fit = *outcome.result;
  {
    MutexLock lock(&stats_mu_);
    fit_seconds_ += fit.seconds;
    if (!FitImproves(fit, options_.refit) ||
        !MateriallyDifferent(hyper_, fit.values, options_.refit.min_change)) {
      ++fits_unchanged_;
      return;
    }
  }
  HyperparametersOp op;
  op.values = fit.values;
  op.kors_mu_factor = kors_mu_factor_;
  op.fitted_at = outcome.fitted_at;
  op.points = fit.points;
  op.log_likelihood = fit.log_likelihood;
  // Logged like every other change (the log tail moves under the ledger lock), then applied by
  // this writer in log order with the next batch.
  MutexLock ledger(&ledger_mu_);
  QueueHyperparameters(std::move(op));
}

absl::Status Model::Apply(const ModelOp& op, EdgeEditResult* result) {
  struct Undo {
    int32_t a, b;
    double weight;  // 0: there was no edge
  };
  std::vector<Undo> undo;  // graph edits, to revert if the new graph cannot be served
  auto registered = [this](const std::string& id, bool* added = nullptr) {
    bool fresh = false;
    const int32_t index = registry_->FindOrAdd(id, &fresh);
    if (fresh) {
      MutexLock lock(&queue_mu_);
      reserved_users_.erase(id);
    }
    if (added != nullptr) *added = fresh;
    return index;
  };
  if (const auto* fix = std::get_if<FixDimensionsOp>(&op)) {
    if (learner_ != nullptr) {
      if (fix->context_dim == scaling_.context_dim && fix->arm_dim == scaling_.arm_dim) {
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the log fixes dimensions (context %d, arms %d) but the model has "
          "(context %d, arms %d)",
          options_.name, fix->context_dim, fix->arm_dim, scaling_.context_dim, scaling_.arm_dim));
    }
    scaling_ = FeatureScaling{fix->context_dim, fix->arm_dim, options_.context_lengthscale,
                              options_.arm_lengthscale, Eigen::VectorXd()};
    if (hyper_.lengthscales.size() == scaling_.joint_dim()) {
      scaling_.per_dimension = hyper_.lengthscales;  // restored from a snapshot
    } else {
      hyper_.lengthscales = scaling_.lengthscales();
    }
    auto learner = NewLearner();
    if (!learner.ok()) return learner.status();
    learner_ = *std::move(learner);
    MutexLock lock(&queue_mu_);
    dims_ = Dimensions{true, fix->context_dim, fix->arm_dim};
    return absl::OkStatus();
  } else if (const auto* hyper = std::get_if<HyperparametersOp>(&op)) {
    return ApplyHyperparameters(*hyper);
  } else if (const auto* add = std::get_if<AddUsersOp>(&op)) {
    for (const std::string& user : add->users) {
      bool added = false;
      registered(user, &added);
      if (added) {
        ++result->users_added;
      } else {
        ++result->unchanged;
      }
    }
  } else if (const auto* set = std::get_if<SetEdgesOp>(&op)) {
    for (const EdgeEdit& edge : set->edges) {
      bool added_a = false, added_b = false;
      const int32_t a = registered(edge.user_a, &added_a);
      const int32_t b = registered(edge.user_b, &added_b);
      result->users_added += (added_a ? 1 : 0) + (added_b ? 1 : 0);
      const double old_weight = graph_.Weight(a, b);
      if (old_weight == 0.0) {
        ++result->changed;
      } else {
        ++result->unchanged;
      }
      if (old_weight != edge.weight) {
        undo.push_back({a, b, old_weight});
        graph_.SetEdge(a, b, edge.weight);
      }
    }
  } else if (const auto* remove = std::get_if<RemoveEdgesOp>(&op)) {
    for (const auto& [user_a, user_b] : remove->pairs) {
      const int32_t a = registry_->Find(user_a), b = registry_->Find(user_b);
      const double old_weight = graph_.Weight(a, b);
      if (graph_.RemoveEdge(a, b)) {
        ++result->changed;
        undo.push_back({a, b, old_weight});
      } else {
        ++result->unchanged;
      }
    }
  } else {
    // Rewards learned now (a reward with the FIRST rule, a closing decision, an observation).
    absl::Status status;
    for (const ObserveOp* observe : ObservationsOf(op)) {
      if (learner_ == nullptr) {
        status = absl::FailedPreconditionError("a reward was logged before the dimensions were fixed");
        continue;
      }
      if (static_cast<int>(observe->context.size()) != scaling_.context_dim ||
          static_cast<int>(observe->features.size()) != scaling_.arm_dim) {
        status = absl::FailedPreconditionError(absl::StrFormat(
            "a logged reward has %d context and %d arm values; the model expects %d and %d",
            observe->context.size(), observe->features.size(), scaling_.context_dim,
            scaling_.arm_dim));
        continue;
      }
      const int32_t user = registered(observe->user);
      Eigen::VectorXd point(scaling_.joint_dim());
      scaling_.Apply(observe->context.data(), observe->features.data(), point.data());
      // A drifting baseline is taken out before learning (core/learner/baseline_tracker.h).
      double prediction = 0.0;
      if (baseline_.enabled()) {
        Eigen::VectorXd mean, sd;
        learner_->Score(user, point, &mean, &sd);
        prediction = mean(0);
      }
      const double target = baseline_.Target(observe->reward);
      absl::Status learned = learner_->Observe(user, point, target);
      if (learned.ok()) {
        ++rewards_learned_;
        baseline_.Update(target, prediction);
      } else {
        status = learned;
      }
    }
    return status;
  }
  graph_.EnsureUsers(registry_->size());
  if (!undo.empty()) {
    // Every graph edit rebuilds at once, so that the sequence of rebuilds (and hence the state)
    // depends on the log alone, not on how the writer batched operations. A graph the user
    // kernel or the learner cannot serve is refused as a whole and the model keeps the
    // previous graph; replaying the log refuses it again the same way.
    auto kernel = BuildUserKernel(graph_, CurrentUserKernelOptions());
    absl::Status status = kernel.status();
    if (status.ok() && learner_ != nullptr) status = learner_->SetGraph(graph_, *kernel);
    if (!status.ok()) {
      for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
        if (it->weight == 0.0) {
          graph_.RemoveEdge(it->a, it->b);
        } else {
          graph_.SetEdge(it->a, it->b, it->weight);
        }
      }
      if (learner_ != nullptr) learner_->SetGraph(graph_, user_kernel_).IgnoreError();
      return absl::FailedPreconditionError(absl::StrCat(
          "model \"", options_.name, "\" cannot use the edited graph: ", status.message()));
    }
    user_kernel_ = *std::move(kernel);
    components_ = graph_.CountComponents();
    users_at_rebuild_ = graph_.num_users();
  }
  result->edges = graph_.num_edges();
  return absl::OkStatus();
}

void Model::Publish(uint64_t version) {
  auto view = std::make_shared<ModelView>();
  view->version = version;
  if (learner_ != nullptr) {
    view->scorer = learner_->Freeze();
    view->scaling = scaling_;
    view->context_dim = scaling_.context_dim;
    view->arm_dim = scaling_.arm_dim;
    view->dimensions_fixed = true;
    view->history_size = learner_->history_size();
    view->dictionary_size = learner_->dictionary_size();
    view->dictionary_points_refused = learner_->dictionary_points_refused();
    if (options_.kernel_policy()) {
      HyperparameterView h;
      h.values = hyper_;
      h.kors_mu = learner_->kors_mu();  // what the learner uses, not what the rule says
      h.fits_applied = fits_applied_;
      h.last_fit_rewards = last_fit_rewards_;
      h.last_fit_points = last_fit_points_;
      h.last_fit_log_likelihood = last_fit_log_likelihood_;
      h.coarsenings = coarsenings_;
      view->hyperparameters = std::move(h);
    }
    if (options_.exploration_width != ExplorationWidth::kStddev) {
      view->exploration_width =
          ExplorationWidthFor(options_.exploration_width, learner_->InformationGain(),
                              learner_->MeanNormSquared());
    }
  }
  view->rewards_learned = rewards_learned_;
  view->baseline = baseline_.value();
  view->edges = graph_.num_edges();
  view->graph_users = registry_->size();
  // Users registered since the last rebuild have no edges: each is a component of its own.
  view->graph_components = components_ + (view->graph_users - users_at_rebuild_);
  MutexLock lock(&view_mu_);
  view_ = std::move(view);
}

void Model::ApplyBatch(std::deque<Pending>* batch) {
  if (batch->empty()) return;
  for (Pending& pending : *batch) {
    EdgeEditResult result;
    absl::Status status = Apply(pending.op, &result);
    if (!status.ok()) {
      std::fprintf(stderr, "model \"%s\": operation %llu not applied: %s\n",
                   options_.name.c_str(), static_cast<unsigned long long>(pending.seq),
                   std::string(status.message()).c_str());
    }
    if (pending.completion != nullptr) {
      pending.completion->status = status;
      pending.completion->result = result;
    }
  }
  Publish(batch->back().seq);
  const absl::Time published = absl::Now();
  {
    MutexLock lock(&stats_mu_);
    for (const Pending& pending : *batch) {
      if (pending.acknowledged == absl::InfinitePast()) continue;
      const double seconds = absl::ToDoubleSeconds(published - pending.acknowledged);
      ++freshness_.count;
      freshness_.sum += seconds;
      for (int b = 0; b < FreshnessStats::kBuckets; ++b) {
        if (seconds <= FreshnessStats::kBounds[b]) ++freshness_.buckets[b];
      }
    }
  }
  applied_for_snapshot_ += batch->size();
  {
    MutexLock lock(&queue_mu_);
    applied_seq_ = batch->back().seq;
    queue_cv_.SignalAll();
  }
  for (Pending& pending : *batch) {
    if (pending.completion != nullptr) pending.completion->done.Notify();
  }
  batch->clear();
}

void Model::ApplyUpTo(uint64_t seq) {
  for (;;) {
    std::deque<Pending> batch;
    {
      MutexLock lock(&queue_mu_);
      while (!queue_.empty() && queue_.front().seq <= seq) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (batch.empty()) return;
    ApplyBatch(&batch);
  }
}

absl::StatusOr<Model::PreparedSnapshot> Model::BeginSnapshotLocked() {
  PreparedSnapshot prepared;
  {
    MutexLock lock(&queue_mu_);
    prepared.seq = next_seq_ - 1;
  }
  if (dir_.empty()) return prepared;
  prepared.ledger = SaveLedger();
  MutexLock lock(&queue_mu_);
  if (absl::Status s = StartSegment(prepared.seq + 1); !s.ok()) return s;
  return prepared;
}

absl::StatusOr<Model::PreparedSnapshot> Model::CompleteSnapshotState(
    absl::StatusOr<PreparedSnapshot> prepared) {
  if (!prepared.ok()) return prepared;
  // The writer applies what was logged up to the snapshot's sequence number (and nothing
  // after it), so the graph and the learner are at the same point as the ledger copy.
  ApplyUpTo(prepared->seq);
  applied_for_snapshot_ = 0;  // the records up to here are in this snapshot
  if (!dir_.empty()) prepared->payload = SaveState(prepared->seq, prepared->ledger);
  prepared->ledger.clear();
  return prepared;
}

absl::StatusOr<uint64_t> Model::FinishSnapshot(absl::StatusOr<PreparedSnapshot> prepared) {
  if (!prepared.ok()) return prepared.status();
  if (dir_.empty()) return prepared->seq;
  // If writing fails, the previous snapshot and every log segment since it are still there.
  absl::Status status = storage::WriteSnapshotFile(dir_ + "/" + SnapshotName(prepared->seq),
                                                   prepared->seq, prepared->payload);
  if (!status.ok()) return status;
  RemoveOldFiles(prepared->seq);
  MutexLock lock(&stats_mu_);
  ++snapshots_written_;
  last_snapshot_seq_ = prepared->seq;
  last_snapshot_time_ = absl::Now();
  return prepared->seq;
}

void Model::RemoveOldFiles(uint64_t newest) {
  // Keep the two newest snapshots and every segment needed to replay from the older one.
  auto snapshots = ListNumbered(dir_, "snapshot-", ".snap");
  uint64_t keep_from = 0;
  int kept = 0;
  for (auto it = snapshots.rbegin(); it != snapshots.rend(); ++it) {
    if (it->first > newest) continue;
    if (kept < 2) {
      keep_from = it->first;
      ++kept;
    } else {
      ::unlink(it->second.c_str());
    }
  }
  if (kept < 2) return;  // nothing to fall back on yet: keep every segment
  auto segments = ListNumbered(dir_, "log-", ".log");
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    if (segments[i + 1].first <= keep_from + 1) ::unlink(segments[i].second.c_str());
  }
}

void Model::WriterLoop() {
  for (;;) {
    std::deque<Pending> batch;
    bool snapshot = false;
    std::shared_ptr<const std::function<void()>> hook;
    {
      MutexLock lock(&queue_mu_);
      queue_cv_.Wait(&queue_mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !queue_.empty() || stopping_ || snapshot_requested_ || fit_ready_;
      });
      if (queue_.empty() && stopping_) return;  // everything logged is applied
      batch.swap(queue_);
      snapshot = snapshot_requested_;
      fit_ready_ = false;
      hook = after_apply_hook_;
    }
    ApplyBatch(&batch);
    if (hook != nullptr) (*hook)();
    AfterBatch();
    MarkDecided();
    const bool due = durability_.snapshot_every_records > 0 &&
                     static_cast<int64_t>(applied_for_snapshot_) >= durability_.snapshot_every_records;
    if (!snapshot && !due) continue;
    // Only the ledger is copied under the ledger lock (decisions and rewards wait that long);
    // learning up to the snapshot point, serializing and writing happen without it.
    absl::StatusOr<PreparedSnapshot> prepared;
    {
      MutexLock ledger(&ledger_mu_);
      prepared = BeginSnapshotLocked();
    }
    const absl::StatusOr<uint64_t> taken =
        FinishSnapshot(CompleteSnapshotState(std::move(prepared)));
    if (!taken.ok()) {
      std::fprintf(stderr, "model \"%s\": snapshot failed: %s\n", options_.name.c_str(),
                   std::string(taken.status().message()).c_str());
    }
    // The snapshot applied what was logged up to its point: decide fits for that too.
    AfterBatch();
    MarkDecided();
    std::vector<std::shared_ptr<OpCompletion>> waiters;
    {
      MutexLock lock(&queue_mu_);
      snapshot_requested_ = false;
      waiters.swap(snapshot_waiters_);
    }
    for (auto& waiter : waiters) {
      waiter->status = taken.status();
      waiter->seq = taken.ok() ? *taken : 0;
      waiter->done.Notify();
    }
  }
}

void Model::SyncerLoop() {
  for (;;) {
    {
      MutexLock lock(&sync_mu_);
      sync_cv_.WaitFor(&sync_mu_, durability_.group_commit_interval,
                       [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return syncer_stop_; });
      if (syncer_stop_) return;
    }
    uint64_t target;
    {
      MutexLock lock(&queue_mu_);
      target = next_seq_ - 1;
    }
    MutexLock lock(&sync_mu_);
    if (target > synced_seq_ && sync_fd_ >= 0 && sync_error_.ok()) {
      if (::fdatasync(sync_fd_) == 0) {
        ++log_syncs_;
        synced_seq_ = target;
      } else {
        FailLogLocked(absl::StrCat("fdatasync: ", std::strerror(errno)));
      }
    }
    sync_cv_.SignalAll();  // also when a segment rotation already synced the waiters' records
  }
}

// ---------------------------------------------------------------------------------------------
// Submission side.

absl::StatusOr<uint64_t> Model::AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                             absl::Time acknowledged) {
  if (stopping_) {
    return absl::UnavailableError(absl::StrFormat("model \"%s\" is shutting down", options_.name));
  }
  if (!dir_.empty()) {
    // Fail-stop: after a failed write or sync nothing more is acknowledged (a later record
    // could follow a torn one, and a retried fsync can falsely succeed).
    if (log_ == nullptr || log_failed_.load()) {
      MutexLock lock(&sync_mu_);
      return sync_error_.ok() ? absl::UnavailableError(absl::StrFormat(
                                    "model \"%s\" has no open log", options_.name))
                              : sync_error_;
    }
    absl::Status status = log_->Append(static_cast<uint8_t>(TypeOf(op)), EncodeOp(op));
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      // Refused before anything was written (a record over the format's size limit).
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": this change is too large to log: %s", options_.name, status.message()));
    }
    if (!status.ok()) {
      MutexLock lock(&sync_mu_);
      FailLogLocked(absl::StrCat("write: ", status.message()));
      return sync_error_;
    }
  }
  const uint64_t seq = next_seq_++;
  rewards_held_ += static_cast<int64_t>(ObservationsOf(op).size());
  queue_.push_back(Pending{seq, std::move(op), std::move(completion), acknowledged});
  queue_cv_.SignalAll();
  return seq;
}

absl::StatusOr<uint64_t> Model::Append(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                       absl::Time acknowledged) {
  MutexLock lock(&queue_mu_);
  return AppendLocked(std::move(op), std::move(completion), acknowledged);
}

absl::Status Model::WaitDurable(uint64_t seq, absl::Time deadline) {
  if (dir_.empty() || durability_.sync == Durability::Sync::kOs) return absl::OkStatus();
  if (durability_.sync == Durability::Sync::kEveryRecord) {
    uint64_t target;
    {
      MutexLock lock(&queue_mu_);
      target = next_seq_ - 1;
    }
    MutexLock lock(&sync_mu_);
    if (!sync_error_.ok()) return sync_error_;  // never trust a sync retried after a failure
    if (synced_seq_ >= seq) return absl::OkStatus();
    // One fdatasync covers every record written before it: concurrent callers share it.
    if (sync_fd_ < 0 || ::fdatasync(sync_fd_) != 0) {
      FailLogLocked(absl::StrCat("fdatasync: ", std::strerror(errno)));
      return sync_error_;
    }
    ++log_syncs_;
    synced_seq_ = std::max(synced_seq_, target);
    return absl::OkStatus();
  }
  MutexLock lock(&sync_mu_);
  const bool durable = sync_cv_.WaitUntil(&sync_mu_, deadline, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return synced_seq_ >= seq || !sync_error_.ok();
  });
  if (!sync_error_.ok()) return sync_error_;
  if (!durable) {
    return absl::DeadlineExceededError(
        "the deadline passed before the record was on disk; it may still become durable (a "
        "retry answers DUPLICATE then)");
  }
  return absl::OkStatus();
}

absl::StatusOr<EdgeEditResult> Model::SubmitAndWait(ModelOp op, absl::Time deadline) {
  auto completion = std::make_shared<OpCompletion>();
  uint64_t seq = 0;
  {
    MutexLock ledger(&ledger_mu_);  // the log tail only moves under the ledger lock
    auto appended = Append(std::move(op), completion, absl::InfinitePast());
    if (!appended.ok()) return appended.status();
    seq = *appended;
  }
  if (!completion->done.WaitUntil(deadline)) {
    return absl::DeadlineExceededError("the deadline passed before the edit was applied");
  }
  if (!completion->status.ok()) return completion->status;
  if (absl::Status s = WaitDurable(seq, deadline); !s.ok()) return s;
  return completion->result;
}

Model::Dimensions Model::CurrentDimensions() const {
  MutexLock lock(&queue_mu_);
  return dims_;
}

absl::Status Model::EnsureDimensions(int context_dim, int arm_dim) {
  auto completion = std::make_shared<OpCompletion>();
  {
    MutexLock ledger(&ledger_mu_);
    MutexLock lock(&queue_mu_);
    if (dims_.fixed) return absl::OkStatus();  // a concurrent request fixed them; re-validated
    dims_ = Dimensions{true, context_dim, arm_dim};
    auto seq = AppendLocked(FixDimensionsOp{context_dim, arm_dim}, completion, absl::InfinitePast());
    if (!seq.ok()) {
      dims_ = Dimensions{};
      return seq.status();
    }
  }
  completion->done.Wait();
  return completion->status;
}

absl::Status Model::ValidateRequest(const DecisionRequest& request, const Dimensions& dims) const {
  if (absl::Status s = CheckId(request.user_id, "user_id"); !s.ok()) return s;
  const int n = static_cast<int>(request.candidates.size());
  if (n == 0) return absl::InvalidArgumentError("candidates must not be empty");
  if (n > options_.max_candidates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d candidates exceed model \"%s\"'s limit of %d (limits.max_candidates)",
                        n, options_.name, options_.max_candidates));
  }
  if (request.slate_size < 1) return absl::InvalidArgumentError("slate_size must be at least 1");
  if (request.slate_size > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slate_size %d exceeds the number of candidates (%d)", request.slate_size, n));
  }
  const int expected_context = dims.fixed ? dims.context_dim : -1;
  if (expected_context >= 0 && static_cast<int>(request.context.size()) != expected_context) {
    return absl::InvalidArgumentError(absl::StrFormat("context has %d values; model \"%s\" expects %d",
                                                      request.context.size(), options_.name,
                                                      expected_context));
  }
  if (!dims.fixed && static_cast<int>(request.context.size()) > options_.max_feature_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "context has %d values; the limit is %d (limits.max_feature_dim)", request.context.size(),
        options_.max_feature_dim));
  }
  if (absl::Status s = CheckFinite(request.context, "context"); !s.ok()) return s;

  const int expected_arm = dims.fixed ? dims.arm_dim
                                      : static_cast<int>(request.candidates[0].features.size());
  if (!dims.fixed) {
    if (expected_arm == 0) {
      return absl::InvalidArgumentError(
          "candidates[0] has no features; every candidate needs at least one");
    }
    if (expected_arm > options_.max_feature_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "candidates have %d features; the limit is %d (limits.max_feature_dim)", expected_arm,
          options_.max_feature_dim));
    }
  }
  absl::flat_hash_map<absl::string_view, int> seen;
  seen.reserve(n);
  for (int i = 0; i < n; ++i) {
    const CandidateRef& candidate = request.candidates[i];
    const std::string field = absl::StrFormat("candidates[%d].id", i);
    if (absl::Status s = CheckId(candidate.id, field); !s.ok()) return s;
    auto [it, inserted] = seen.emplace(candidate.id, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "duplicate arm id %s: candidates[%d] and candidates[%d]", QuoteId(candidate.id),
          it->second, i));
    }
    if (static_cast<int>(candidate.features.size()) != expected_arm) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "candidates[%d] (%s) has %d features; %s %d", i, QuoteId(candidate.id),
          candidate.features.size(),
          dims.fixed ? absl::StrFormat("model \"%s\" expects", options_.name)
                     : std::string("candidates[0] has"),
          expected_arm));
    }
    if (absl::Status s = CheckFinite(candidate.features,
                                     absl::StrFormat("candidates[%d] (%s) features", i,
                                                     QuoteId(candidate.id)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Decision> Model::Decide(const DecisionRequest& request, const std::string& event_id) {
  Dimensions dims = CurrentDimensions();
  if (absl::Status s = ValidateRequest(request, dims); !s.ok()) return s;
  if (!dims.fixed) {
    absl::Status s = EnsureDimensions(static_cast<int>(request.context.size()),
                                      static_cast<int>(request.candidates[0].features.size()));
    if (!s.ok()) return s;
    dims = CurrentDimensions();
    if (s = ValidateRequest(request, dims); !s.ok()) return s;
  }
  std::shared_ptr<const ModelView> view = View();
  if (view->scorer == nullptr) {  // another request is fixing the dimensions right now
    WaitForWriter();
    view = View();
    if (view->scorer == nullptr) return absl::InternalError("model has no posterior");
  }
  const int n = static_cast<int>(request.candidates.size());
  Eigen::MatrixXd points(view->scaling.joint_dim(), n);
  for (int i = 0; i < n; ++i) {
    view->scaling.Apply(request.context.data(), request.candidates[i].features.data(),
                        points.col(i).data());
  }
  Eigen::VectorXd mean, stddev;
  view->scorer->Score(registry_->Find(request.user_id), points, &mean, &stddev);
  mean.array() += view->baseline;  // the same for every candidate: reported, not ranked by
  if (!mean.allFinite() || !stddev.allFinite()) {
    return absl::InternalError("the posterior produced a non-finite score");
  }
  Rng rng(StableHash(event_id, options_.seed));
  const std::vector<RankedChoice> slate =
      SelectSlate(SelectionRuleFor(options_), options_.exploration * view->exploration_width, mean,
                  stddev, request.slate_size, rng);
  Decision decision;
  decision.event_id = event_id;
  decision.model = options_.name;
  decision.policy = std::string(PolicyName(options_.policy));
  decision.model_version = view->version;
  for (const RankedChoice& choice : slate) {
    ChosenArm arm;
    arm.candidate_index = choice.candidate;
    arm.arm_id = std::string(request.candidates[choice.candidate].id);
    arm.mean = mean(choice.candidate);
    arm.stddev = stddev(choice.candidate);
    arm.score = choice.score;
    arm.probability = choice.probability;
    decision.arms.push_back(std::move(arm));
  }
  return decision;
}

absl::StatusOr<Decision> Model::Select(const DecisionRequest& request, const std::string& event_id,
                                       bool client_event_id, uint64_t fingerprint, absl::Time now) {
  // A retry: the stored decision, unchanged.
  auto known = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_) -> std::optional<absl::StatusOr<Decision>> {
    if (!client_event_id) return std::nullopt;
    if (LedgerEntry* entry = ledger_.Find(event_id)) {
      if (entry->fingerprint != fingerprint) {
        return absl::StatusOr<Decision>(absl::AlreadyExistsError(absl::StrFormat(
            "event_id %s was already used for a different request on model \"%s\"",
            QuoteId(event_id), options_.name)));
      }
      Decision stored = entry->decision;
      stored.replayed = true;
      return absl::StatusOr<Decision>(stored);
    }
    if (ledger_.FindClosed(event_id) != nullptr) {
      return absl::StatusOr<Decision>(absl::AlreadyExistsError(absl::StrFormat(
          "event_id %s was already used on model \"%s\" and its decision is closed",
          QuoteId(event_id), options_.name)));
    }
    return std::nullopt;
  };
  {
    MutexLock lock(&ledger_mu_);
    if (auto answer = known()) return *answer;
    if (ledger_.Full() && ledger_.OldestCompleted() == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions); "
          "report rewards or let them expire",
          options_.name, options_.max_decisions));
    }
  }
  absl::StatusOr<Decision> decision = Decide(request, event_id);
  if (!decision.ok()) return decision.status();

  DecideOp op;
  op.event_id = event_id;
  op.fingerprint = fingerprint;
  op.created_micros = ToMicros(now);
  op.user = std::string(request.user_id);
  op.context.assign(request.context.begin(), request.context.end());
  op.model_version = decision->model_version;
  for (const ChosenArm& arm : decision->arms) {
    const CandidateRef& candidate = request.candidates[arm.candidate_index];
    DecideOp::Arm logged;
    logged.arm_id = arm.arm_id;
    logged.features.assign(candidate.features.begin(), candidate.features.end());
    logged.candidate_index = arm.candidate_index;
    logged.mean = arm.mean;
    logged.stddev = arm.stddev;
    logged.score = arm.score;
    logged.has_probability = arm.probability.has_value();
    logged.probability = arm.probability.value_or(0.0);
    op.arms.push_back(std::move(logged));
  }
  MutexLock lock(&ledger_mu_);
  if (auto answer = known()) return *answer;  // a concurrent request with the same id won
  if (ledger_.Full()) {
    LedgerEntry* victim = ledger_.OldestCompleted();
    if (victim == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions)",
          options_.name, options_.max_decisions));
    }
    if (absl::Status s = CloseLocked(victim, ClosedAs::kCompleted, now); !s.ok()) return s;
  }
  auto entry = EntryOf(op, options_);
  entry->decision = *decision;
  if (auto seq = Append(std::move(op), nullptr, absl::InfinitePast()); !seq.ok()) return seq.status();
  ledger_.Insert(std::move(entry));
  decisions_.fetch_add(1, std::memory_order_relaxed);
  return decision;
}

ObserveOp Model::Observation(const LedgerEntry& entry, int arm, double reward) const {
  return ObserveOp{entry.event_id, entry.arms[arm].arm_id, entry.user_id, entry.context,
                   entry.arms[arm].features, reward};
}

std::vector<ObserveOp> Model::ClosingObservations(const LedgerEntry& entry) const {
  std::vector<ObserveOp> learn;
  for (size_t a = 0; a < entry.arms.size(); ++a) {
    const LedgerArm& arm = entry.arms[a];
    if (arm.reports > 0) {
      // FIRST learned it when it arrived; the other rules learn their aggregate now.
      if (options_.aggregation != Aggregation::kFirst) {
        learn.push_back(Observation(entry, static_cast<int>(a), arm.aggregate));
      }
    } else if (options_.default_reward.has_value()) {
      learn.push_back(Observation(entry, static_cast<int>(a), *options_.default_reward));
    }
  }
  return learn;
}

absl::Status Model::CloseLocked(LedgerEntry* entry, ClosedAs how, absl::Time now) {
  CloseOp op;
  op.event_id = entry->event_id;
  op.how = static_cast<uint8_t>(how);
  op.closed_micros = ToMicros(now);
  op.learn = ClosingObservations(*entry);
  const absl::Time acknowledged = op.learn.empty() ? absl::InfinitePast() : now;
  auto seq = Append(std::move(op), nullptr, acknowledged);
  if (!seq.ok()) return seq.status();
  ledger_.Close(entry, how, now);
  return absl::OkStatus();
}

absl::StatusOr<RewardResult> Model::Reward(const RewardRequest& request, absl::Time now,
                                           absl::Time deadline) {
  RewardResult result;
  uint64_t last_seq = 0;
  // A DUPLICATE or LATE answer says "already recorded": it waits until everything logged so far
  // (the original report or close included) is durable, like the first answer did.
  uint64_t wait_for = 0;
  const auto logged_so_far = [this]() {
    MutexLock queue(&queue_mu_);
    return next_seq_ - 1;
  };
  absl::StatusOr<RewardResult> answer = [&]() -> absl::StatusOr<RewardResult> {
    MutexLock lock(&ledger_mu_);
    LedgerEntry* entry = ledger_.Find(request.event_id);
    if (entry == nullptr) {
      const Tombstone* closed = ledger_.FindClosed(request.event_id);
      if (closed == nullptr) return result;  // unknown
      // Closed: by its window (late), or complete and evicted (a repeat is a duplicate).
      result.model = options_.name;
      result.outcome = closed->how == ClosedAs::kExpired ? RewardOutcome::kLate
                                                         : RewardOutcome::kDuplicate;
      if (request.reward.has_value()) {
        result.arm_outcomes.emplace_back("", result.outcome);
      }
      for (const auto& [arm_id, reward] : request.arm_rewards) {
        result.arm_outcomes.emplace_back(arm_id, result.outcome);
      }
      wait_for = logged_so_far();
      return result;
    }
    result.model = options_.name;
    std::vector<std::pair<int, double>> slots;  // (arm index, reward)
    if (request.reward.has_value()) {
      if (entry->arms.size() != 1) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "event_id %s returned %d arms; report each arm's reward in arm_rewards",
            QuoteId(request.event_id), entry->arms.size()));
      }
      slots.emplace_back(0, *request.reward);
    } else {
      for (const auto& [arm_id, reward] : request.arm_rewards) {
        int index = -1;
        for (size_t a = 0; a < entry->arms.size(); ++a) {
          if (entry->arms[a].arm_id == arm_id) index = static_cast<int>(a);
        }
        if (index < 0) {
          std::vector<std::string> returned;
          for (const LedgerArm& arm : entry->arms) returned.push_back(QuoteId(arm.arm_id));
          return absl::InvalidArgumentError(absl::StrFormat(
              "arm %s was not returned by event_id %s (it returned %s)", QuoteId(arm_id),
              QuoteId(request.event_id), absl::StrJoin(returned, ", ")));
        }
        slots.emplace_back(index, reward);
      }
    }
    for (const auto& [index, reward] : slots) {
      if (std::abs(reward) > options_.reward_bound) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "reward %g for arm %s is outside [-%g, %g] (model \"%s\" limits.reward_bound)",
            reward, QuoteId(entry->arms[index].arm_id), options_.reward_bound,
            options_.reward_bound, options_.name));
      }
    }
    // Which reports are accepted, and what they log.
    const bool first = options_.aggregation == Aggregation::kFirst;
    std::vector<RewardOp> ops;
    std::vector<std::pair<int, double>> accepted;
    for (const auto& [index, reward] : slots) {
      const LedgerArm& arm = entry->arms[index];
      const bool duplicate = first && (arm.reports > 0 ||
                                       std::any_of(accepted.begin(), accepted.end(),
                                                   [i = index](const auto& a) { return a.first == i; }));
      result.arm_outcomes.emplace_back(arm.arm_id, duplicate ? RewardOutcome::kDuplicate
                                                             : RewardOutcome::kAccepted);
      if (duplicate) continue;
      RewardOp op{entry->event_id, index, reward, {}};
      if (first) op.learn.push_back(Observation(*entry, index, reward));
      ops.push_back(std::move(op));
      accepted.emplace_back(index, reward);
    }
    {
      MutexLock queue(&queue_mu_);
      if (!ops.empty() && first) {
        // Capacity checks before anything is logged: the exact GP's size, the user table.
        if (options_.exact() && rewards_held_ + static_cast<int64_t>(ops.size()) >
                                    options_.exact_max_observations) {
          return absl::ResourceExhaustedError(absl::StrFormat(
              "model \"%s\" (exact GP) holds %d observations, its limit "
              "(exact_gp.max_observations is %d); use an EK policy for long-running models",
              options_.name, rewards_held_, options_.exact_max_observations));
        }
        if (registry_->Find(entry->user_id) < 0 && !reserved_users_.contains(entry->user_id)) {
          if (registry_->size() + static_cast<int64_t>(reserved_users_.size()) + 1 > options_.max_users) {
            return absl::ResourceExhaustedError(absl::StrFormat(
                "model \"%s\" has reached its limit of %d users (limits.max_users)", options_.name,
                options_.max_users));
          }
          reserved_users_.insert(entry->user_id);
        }
      }
      for (size_t i = 0; i < ops.size(); ++i) {
        auto seq = AppendLocked(std::move(ops[i]), nullptr, first ? now : absl::InfinitePast());
        if (!seq.ok()) {
          // The ones logged so far stay accepted (replay will learn them); report the failure.
          for (size_t j = 0; j < i; ++j) ledger_.Report(entry, accepted[j].first, accepted[j].second);
          return seq.status();
        }
        last_seq = *seq;
      }
    }
    for (const auto& [index, reward] : accepted) ledger_.Report(entry, index, reward);
    result.outcome = accepted.empty() ? RewardOutcome::kDuplicate : RewardOutcome::kAccepted;
    if (accepted.empty()) wait_for = logged_so_far();
    return result;
  }();
  if (!answer.ok()) return answer.status();
  result = *std::move(answer);
  if (last_seq > 0) wait_for = last_seq;
  if (wait_for > 0) {
    if (absl::Status s = WaitDurable(wait_for, deadline); !s.ok()) return s;
  }
  return result;
}

bool Model::Knows(const std::string& event_id) {
  MutexLock lock(&ledger_mu_);
  return ledger_.Find(event_id) != nullptr || ledger_.FindClosed(event_id) != nullptr;
}

int Model::ExpireDue(absl::Time now) {
  MutexLock lock(&ledger_mu_);
  int closed = 0;
  for (LedgerEntry* entry : ledger_.Due(now)) {
    // With FIRST, a decision whose every arm has its reward is complete: a repeat is a
    // duplicate, not late. Otherwise the window decides (SUM/MAX/LAST accept reports until it).
    const ClosedAs how = options_.aggregation == Aggregation::kFirst && entry->unreported == 0
                             ? ClosedAs::kCompleted
                             : ClosedAs::kExpired;
    absl::Status status = CloseLocked(entry, how, now);
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      // This close cannot be logged (too large): close it without learning, rather than let
      // it hold every later decision in the ledger.
      std::fprintf(stderr, "model \"%s\": decision %s closed without learning: %s\n",
                   options_.name.c_str(), QuoteId(entry->event_id).c_str(),
                   std::string(status.message()).c_str());
      CloseOp bare;
      bare.event_id = entry->event_id;
      bare.how = static_cast<uint8_t>(how);
      bare.closed_micros = ToMicros(now);
      if (!Append(std::move(bare), nullptr, absl::InfinitePast()).ok()) break;
      ledger_.Close(entry, how, now);
      ++closed;
      continue;
    }
    if (!status.ok()) break;  // shutting down, or the log failed (fail-stop)
    ++closed;
  }
  return closed;
}

absl::StatusOr<AddUsersResult> Model::AddUsers(absl::Span<const std::string> users,
                                               absl::Time deadline) {
  if (users.empty()) return absl::InvalidArgumentError("user_ids must not be empty");
  if (static_cast<int64_t>(users.size()) > options_.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d users exceed the limit of %d per call (limits.max_graph_edits_per_call)",
        users.size(), options_.max_graph_edits_per_call));
  }
  for (size_t i = 0; i < users.size(); ++i) {
    if (absl::Status s = CheckId(users[i], absl::StrFormat("user_ids[%d]", i)); !s.ok()) return s;
  }
  std::vector<std::string> fresh = ReserveUsers(std::vector<std::string>(users.begin(), users.end()));
  if (fresh.size() == 1 && fresh[0].empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adding these users would exceed model \"%s\"'s limit of %d (limits.max_users)",
        options_.name, options_.max_users));
  }
  auto applied = SubmitAndWait(AddUsersOp{std::vector<std::string>(users.begin(), users.end())},
                               deadline);
  if (!applied.ok()) return applied.status();
  AddUsersResult result;
  result.added = applied->users_added;
  result.already_present = static_cast<int>(users.size()) - result.added;
  result.users = registry_->size();
  return result;
}

std::vector<std::string> Model::ReserveUsers(const std::vector<std::string>& ids) {
  MutexLock lock(&queue_mu_);
  absl::flat_hash_set<std::string> fresh;
  for (const std::string& id : ids) {
    if (registry_->Find(id) < 0 && !reserved_users_.contains(id)) fresh.insert(id);
  }
  if (registry_->size() + static_cast<int64_t>(reserved_users_.size() + fresh.size()) >
      options_.max_users) {
    return {std::string()};  // refused
  }
  for (const std::string& id : fresh) reserved_users_.insert(id);
  return std::vector<std::string>(fresh.begin(), fresh.end());
}

absl::StatusOr<EdgeEditResult> Model::AddEdges(std::vector<EdgeEdit> edges, absl::Time deadline) {
  if (edges.empty()) return absl::InvalidArgumentError("edges must not be empty");
  if (static_cast<int64_t>(edges.size()) > options_.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d edges exceed the limit of %d per call (limits.max_graph_edits_per_call)",
        edges.size(), options_.max_graph_edits_per_call));
  }
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, size_t> pairs;
  std::vector<std::string> ids;
  for (size_t i = 0; i < edges.size(); ++i) {
    const EdgeEdit& e = edges[i];
    for (const std::string* user : {&e.user_a, &e.user_b}) {
      absl::Status s = CheckId(*user, absl::StrFormat("edges[%d].%s", i,
                                                      user == &e.user_a ? "user_a" : "user_b"));
      if (!s.ok()) return s;
    }
    if (e.user_a == e.user_b) {
      return absl::InvalidArgumentError(
          absl::StrFormat("edges[%d] joins user %s to itself", i, QuoteId(e.user_a)));
    }
    if (!(e.weight >= kMinEdgeWeight && e.weight <= kMaxEdgeWeight)) {  // also NaN
      return absl::InvalidArgumentError(absl::StrFormat(
          "edges[%d].weight must lie in [%g, %g], got %g", i, kMinEdgeWeight, kMaxEdgeWeight,
          e.weight));
    }
    auto key = e.user_a < e.user_b ? std::make_pair(absl::string_view(e.user_a), absl::string_view(e.user_b))
                                   : std::make_pair(absl::string_view(e.user_b), absl::string_view(e.user_a));
    auto [it, inserted] = pairs.emplace(key, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "edges[%d] repeats the pair (%s, %s) of edges[%d]", i, QuoteId(e.user_a),
          QuoteId(e.user_b), it->second));
    }
    ids.push_back(e.user_a);
    ids.push_back(e.user_b);
  }
  std::vector<std::string> fresh = ReserveUsers(ids);
  if (fresh.size() == 1 && fresh[0].empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "these edges would take model \"%s\" past its limit of %d users (limits.max_users)",
        options_.name, options_.max_users));
  }
  return SubmitAndWait(SetEdgesOp{std::move(edges)}, deadline);
}

absl::StatusOr<EdgeEditResult> Model::RemoveEdges(
    std::vector<std::pair<std::string, std::string>> pairs, absl::Time deadline) {
  if (pairs.empty()) return absl::InvalidArgumentError("edges must not be empty");
  if (static_cast<int64_t>(pairs.size()) > options_.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d edges exceed the limit of %d per call (limits.max_graph_edits_per_call)",
        pairs.size(), options_.max_graph_edits_per_call));
  }
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, size_t> seen;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [a, b] = pairs[i];
    if (absl::Status s = CheckId(a, absl::StrFormat("edges[%d].user_a", i)); !s.ok()) return s;
    if (absl::Status s = CheckId(b, absl::StrFormat("edges[%d].user_b", i)); !s.ok()) return s;
    auto key = a < b ? std::make_pair(absl::string_view(a), absl::string_view(b))
                     : std::make_pair(absl::string_view(b), absl::string_view(a));
    auto [it, inserted] = seen.emplace(key, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "edges[%d] repeats the pair (%s, %s) of edges[%d]", i, QuoteId(a), QuoteId(b),
          it->second));
    }
  }
  return SubmitAndWait(RemoveEdgesOp{std::move(pairs)}, deadline);
}

// ---------------------------------------------------------------------------------------------

std::shared_ptr<const ModelView> Model::View() const {
  MutexLock lock(&view_mu_);
  return view_;
}

ModelStats Model::Stats() const {
  ModelStats stats;
  stats.view = *View();
  stats.users = registry_->size();
  stats.decisions = decisions_.load(std::memory_order_relaxed);
  {
    MutexLock lock(&ledger_mu_);
    stats.pending_decisions = ledger_.pending();
    stats.ledger_size = ledger_.size();
    stats.expired_decisions = ledger_.expired_total();
  }
  {
    MutexLock lock(&queue_mu_);
    // Logged but not yet published (a batch the writer is applying is no longer in queue_).
    stats.queued_operations = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
  }
  stats.log_syncs = log_syncs_.load(std::memory_order_relaxed);
  MutexLock lock(&stats_mu_);
  stats.snapshots_written = snapshots_written_;
  stats.last_snapshot_seq = last_snapshot_seq_;
  stats.last_snapshot_time = last_snapshot_time_;
  stats.freshness = freshness_;
  stats.fits_applied = stats.view.hyperparameters.has_value()
                           ? stats.view.hyperparameters->fits_applied
                           : 0;
  stats.fits_unchanged = fits_unchanged_;
  stats.fits_skipped = fits_skipped_;
  stats.fits_failed = fits_failed_;
  stats.fit_seconds = fit_seconds_;
  return stats;
}

void Model::SetAfterApplyHookForTesting(std::function<void()> hook) {
  MutexLock lock(&queue_mu_);
  after_apply_hook_ = hook ? std::make_shared<const std::function<void()>>(std::move(hook))
                           : nullptr;
}

void Model::MarkDecided() {
  MutexLock lock(&queue_mu_);
  decided_seq_ = applied_seq_;
  queue_cv_.SignalAll();
}

void Model::WaitForFits() {
  MutexLock lock(&queue_mu_);
  for (;;) {
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return fits_in_flight_ == 0 || stopping_;
    });
    // Not only applied: the writer must also have decided, after applying, whether a fit is
    // due (AfterBatch), or a fit about to start would be missed here.
    const uint64_t target = next_seq_ - 1;
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return decided_seq_ >= target || (stopping_ && queue_.empty());
    });
    if (fits_in_flight_ == 0 || stopping_) return;
  }
}

void Model::WaitForWriter() {
  MutexLock lock(&queue_mu_);
  const uint64_t target = next_seq_ - 1;
  queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return applied_seq_ >= target || (stopping_ && queue_.empty());
  });
}

absl::StatusOr<uint64_t> Model::Snapshot() {
  auto waiter = std::make_shared<OpCompletion>();
  {
    MutexLock lock(&queue_mu_);
    if (stopping_) return absl::UnavailableError("the model is shutting down");
    snapshot_requested_ = true;
    snapshot_waiters_.push_back(waiter);
    queue_cv_.SignalAll();
  }
  waiter->done.Wait();
  if (!waiter->status.ok()) return waiter->status;
  return waiter->seq;
}

void Model::Shutdown() {
  {
    MutexLock lock(&queue_mu_);
    if (stopped_) return;
  }
  // A fit in progress is cancelled: its result would not be applied any more.
  if (fitter_ != nullptr) fitter_->Stop();
  {
    MutexLock lock(&queue_mu_);
    stopping_ = true;
    queue_cv_.SignalAll();
  }
  if (writer_.joinable()) writer_.join();
  {
    // Snapshot requests the writer did not get to.
    std::vector<std::shared_ptr<OpCompletion>> waiters;
    {
      MutexLock lock(&queue_mu_);
      waiters.swap(snapshot_waiters_);
    }
    for (auto& waiter : waiters) {
      waiter->status = absl::UnavailableError("the model is shutting down");
      waiter->done.Notify();
    }
  }
  {
    // The writer has applied everything; a final snapshot if anything changed since the last.
    MutexLock ledger(&ledger_mu_);
    if (!dir_.empty() && applied_for_snapshot_ > 0) {
      {
        MutexLock lock(&queue_mu_);
        stopping_ = false;  // let the snapshot's segment rotation through
      }
      auto taken = FinishSnapshot(CompleteSnapshotState(BeginSnapshotLocked()));
      if (!taken.ok()) {
        std::fprintf(stderr, "model \"%s\": final snapshot failed: %s\n", options_.name.c_str(),
                     std::string(taken.status().message()).c_str());
      }
      MutexLock lock(&queue_mu_);
      stopping_ = true;
      queue_cv_.SignalAll();  // waiters (WaitForFits, WaitForWriter) see stopping_ again
    }
  }
  {
    MutexLock lock(&sync_mu_);
    syncer_stop_ = true;
    sync_cv_.SignalAll();
  }
  if (syncer_.joinable()) syncer_.join();
  MutexLock lock(&queue_mu_);
  if (log_ != nullptr) {
    MutexLock sync(&sync_mu_);
    absl::Status status = log_->Sync();
    if (status.ok()) {
      synced_seq_ = next_seq_ - 1;
    } else {
      FailLogLocked(absl::StrCat("final sync: ", status.message()));
    }
    sync_cv_.SignalAll();  // rewards still waiting for a group commit get their answer
    if (status.ok()) status = log_->Close();
    if (!status.ok()) {
      std::fprintf(stderr, "model \"%s\": closing the log: %s\n", options_.name.c_str(),
                   std::string(status.message()).c_str());
    }
    sync_fd_ = -1;
    log_.reset();
  }
  stopped_ = true;
}

}  // namespace graphbandit
