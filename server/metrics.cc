#include "server/metrics.h"

#include <prometheus/metric_family.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "core/fit/refit.h"
#include "core/model/model.h"

namespace graphbandit::server {
namespace {

// Latency buckets from 50 us to 5 s; a unary SelectArm on loopback is well under 1 ms.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0};
  return *buckets;
}

class ModelCollector : public prometheus::Collectable {
 public:
  explicit ModelCollector(const Engine* engine) : engine_(engine) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    struct Series {
      const char* name;
      const char* help;
      prometheus::MetricType type;
      double (*value)(const ModelStats&);
    };
    static const Series kSeries[] = {
        {"graphbandit_decisions_total", "Decisions made by SelectArm since the server started.",
         prometheus::MetricType::Counter, [](const ModelStats& s) { return double(s.decisions); }},
        {"graphbandit_dictionary_size", "Nystrom dictionary size m (0 for exact-GP models).",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.view.dictionary_size); }},
        {"graphbandit_dictionary_points_refused_total",
         "Points the Nystrom dictionary could not take because it was at its cap.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.view.dictionary_points_refused); }},
        {"graphbandit_users", "Users registered in the model's graph.",
         prometheus::MetricType::Gauge, [](const ModelStats& s) { return double(s.users); }},
        {"graphbandit_graph_edges", "Undirected edges in the model's user graph.",
         prometheus::MetricType::Gauge, [](const ModelStats& s) { return double(s.view.edges); }},
        {"graphbandit_pending_decisions", "Decisions waiting for at least one reward.",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.pending_decisions); }},
        {"graphbandit_ledger_decisions",
         "Decisions held by the ledger (pending and recently completed).",
         prometheus::MetricType::Gauge, [](const ModelStats& s) { return double(s.ledger_size); }},
        {"graphbandit_decisions_expired_total",
         "Decisions whose reward window ended with an arm still unrewarded.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.expired_decisions); }},
        {"graphbandit_rewards_learned",
         "Rewards the model has learned from over its logged history.",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.view.rewards_learned); }},
        {"graphbandit_model_version",
         "Version (last applied log sequence number) of the served state.",
         prometheus::MetricType::Gauge, [](const ModelStats& s) { return double(s.view.version); }},
        {"graphbandit_reward_baseline",
         "Drifting reward baseline subtracted before learning (0 when off).",
         prometheus::MetricType::Gauge, [](const ModelStats& s) { return s.view.baseline; }},
        {"graphbandit_queued_operations", "Logged operations waiting for the model's writer.",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.queued_operations); }},
        {"graphbandit_rewards_staged",
         "Accepted rewards applied and waiting for their learning batch.",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.view.rewards_staged); }},
        {"graphbandit_shared_log_read_position",
         "Cluster mode: position of the last record this node read from the model's shared "
         "log (0 on a single node).",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.shared_log_seq); }},
        {"graphbandit_shared_log_apply_lag",
         "Cluster mode: records this node has read from the shared log but not applied yet "
         "(how stale its decisions are, in records; 0 on a single node).",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) {
           return s.replicated && s.shared_log_seq > s.view.version
                      ? double(s.shared_log_seq - s.view.version)
                      : 0.0;
         }},
        {"graphbandit_shared_log_records_unreadable_total",
         "Cluster mode: shared-log records this build could not read and skipped (a newer "
         "build's records: the node diverges from the others).",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.records_unreadable); }},
        {"graphbandit_log_syncs_total",
         "fdatasync calls on the model's log since the server started.",
         prometheus::MetricType::Counter, [](const ModelStats& s) { return double(s.log_syncs); }},
        {"graphbandit_unlogged_decisions_total",
         "Decisions served while the model could not write its log (SelectArm's logged: "
         "false); their rewards are UNKNOWN_EVENT.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.unlogged_decisions); }},
        {"graphbandit_log_degraded_episodes_total",
         "Times the model's log became unwritable (full disk, I/O error) since the server "
         "started.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.log.degraded_episodes); }},
        {"graphbandit_log_repair_attempts_total",
         "Failed attempts to make the model's log writable again (retried with back-off).",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.log.repair_attempts); }},
        {"graphbandit_writes_delayed_total",
         "Rewards and graph edits that waited because the model's writer was behind by half "
         "the snapshot cadence (back-pressure).",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.writes_delayed); }},
        {"graphbandit_writes_refused_behind_total",
         "Rewards and graph edits refused with RESOURCE_EXHAUSTED because the writer did not "
         "catch up within their deadline.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.writes_refused_behind); }},
        {"graphbandit_decisions_paced_total",
         "Decisions that waited for the writer because learning was "
         "durability.max_learning_lag_ms behind (each waits at most that long, then is served; "
         "single-node models, 0 in cluster mode).",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.decisions_paced); }},
        {"graphbandit_decision_pacing_seconds_total",
         "Time decisions spent waiting for the writer under the learning-lag bound, summed.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return s.decision_pacing_seconds; }},
        {"graphbandit_recovery_seconds",
         "Wall time the model's recovery took at the last start (snapshot load and log "
         "replay).",
         prometheus::MetricType::Gauge, [](const ModelStats& s) { return s.recovery.seconds; }},
        {"graphbandit_recovery_records_replayed",
         "Log records replayed after the snapshot at the last start.",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.recovery.records_replayed); }},
        {"graphbandit_snapshots_written_total",
         "Snapshots of the model state written since the server started.",
         prometheus::MetricType::Counter,
         [](const ModelStats& s) { return double(s.snapshots_written); }},
        {"graphbandit_last_snapshot_seq",
         "Log sequence number covered by the newest snapshot written by this process (0: none "
         "yet).",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) { return double(s.last_snapshot_seq); }},
        {"graphbandit_last_snapshot_timestamp_seconds",
         "Unix time of the newest snapshot written by this process (0: none yet).",
         prometheus::MetricType::Gauge,
         [](const ModelStats& s) {
           return s.last_snapshot_time == absl::InfinitePast()
                      ? 0.0
                      : absl::ToDoubleSeconds(s.last_snapshot_time - absl::UnixEpoch());
         }},
    };
    std::vector<ModelStats> stats;
    std::vector<std::string> names = engine_->ModelNames();
    for (const std::string& name : names) stats.push_back((*engine_->FindModel(name))->Stats());
    std::vector<prometheus::MetricFamily> families;
    for (const Series& series : kSeries) {
      prometheus::MetricFamily family{series.name, series.help, series.type, {}};
      for (size_t i = 0; i < names.size(); ++i) {
        prometheus::ClientMetric metric;
        metric.label = {{"model", names[i]}};
        if (series.type == prometheus::MetricType::Counter) {
          metric.counter.value = series.value(stats[i]);
        } else {
          metric.gauge.value = series.value(stats[i]);
        }
        family.metric.push_back(std::move(metric));
      }
      families.push_back(std::move(family));
    }
    // Degraded: 1 while the model cannot write its log, labelled with why (disk_full,
    // disk_quota, read_only_filesystem, io_error, log_error); 0 with an empty reason otherwise.
    prometheus::MetricFamily degraded{
        "graphbandit_model_degraded",
        "1 while the model cannot write its log: decisions are served unlogged, writes are "
        "refused with UNAVAILABLE, and the log is repaired automatically; reason says why.",
        prometheus::MetricType::Gauge,
        {}};
    for (size_t i = 0; i < names.size(); ++i) {
      prometheus::ClientMetric metric;
      metric.label = {{"model", names[i]}, {"reason", stats[i].log.reason}};
      metric.gauge.value = stats[i].log.degraded ? 1.0 : 0.0;
      degraded.metric.push_back(std::move(metric));
    }
    families.push_back(std::move(degraded));
    // Off-policy estimates (core/policy/evaluation.h): every policy's value by each estimator
    // with its 95% interval, and the decisions and effective sample size behind it. A policy
    // without enough decisions has no value series yet.
    prometheus::MetricFamily value{
        "graphbandit_policy_value",
        "Estimated mean reward per decision of a policy on this model's logged decisions, by "
        "estimator (ips, snips, dr) with its 95% interval (bound: estimate, lower, upper).",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily evaluated{"graphbandit_policy_value_decisions",
                                       "Decisions the policy value estimates average over.",
                                       prometheus::MetricType::Gauge,
                                       {}};
    prometheus::MetricFamily ess{
        "graphbandit_policy_value_effective_sample_size",
        "Effective sample size of the importance weights behind a policy's estimates.",
        prometheus::MetricType::Gauge,
        {}};
    // Each model's estimates, then its challengers' own policies under their names
    // (core/model/shadow_feed.h); a challenger also reports its own policy under its name.
    auto index_of = [&names](const std::string& name) {
      return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    };
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<std::pair<std::string, PolicyValue>> values;
      for (const PolicyValue& v : stats[i].view.policy_values) {
        values.emplace_back(EvaluatedPolicyName(v.policy), v);
      }
      std::vector<std::string> challengers;
      if (!(*engine_->FindModel(names[i]))->options().shadow_of.empty()) {
        challengers.push_back(names[i]);
      }
      for (const ShadowFeed* feed : engine_->Challengers(names[i])) {
        challengers.push_back(feed->challenger()->name());
      }
      for (const std::string& challenger : challengers) {
        const size_t c = index_of(challenger);
        if (c < stats.size() && stats[c].view.own_value.has_value()) {
          values.emplace_back(challenger, *stats[c].view.own_value);
        }
      }
      for (const auto& entry : values) {
        const std::string& policy = entry.first;
        const PolicyValue& v = entry.second;
        auto add = [&](prometheus::MetricFamily& family, double x,
                       std::map<std::string, std::string> labels) {
          prometheus::ClientMetric metric;
          labels["model"] = names[i];
          labels["policy"] = policy;
          for (const auto& [name, text] : labels) metric.label.push_back({name, text});
          metric.gauge.value = x;
          family.metric.push_back(std::move(metric));
        };
        add(evaluated, static_cast<double>(v.decisions), {});
        add(ess, v.effective_sample_size, {});
        if (!v.valid) continue;
        for (const auto& [estimator, interval] :
             {std::pair{"ips", &v.ips}, std::pair{"snips", &v.snips}, std::pair{"dr", &v.dr}}) {
          add(value, interval->estimate, {{"estimator", estimator}, {"bound", "estimate"}});
          add(value, interval->lower, {{"estimator", estimator}, {"bound", "lower"}});
          add(value, interval->upper, {{"estimator", estimator}, {"bound", "upper"}});
        }
      }
    }
    families.push_back(std::move(value));
    families.push_back(std::move(evaluated));
    families.push_back(std::move(ess));
    // What each challenger did with what its leader was sent.
    prometheus::MetricFamily shadowed{
        "graphbandit_challenger_operations_total",
        "Decisions, rewards and activations a challenger (ModelConfig.shadow_of) was sent by "
        "its leader, by outcome: applied, failed (refused by the challenger, a decision it could "
        "not log, or a decision unknown or closed there) or dropped (its queue full, or the "
        "server stopping).",
        prometheus::MetricType::Counter,
        {}};
    for (const std::string& leader : names) {
      for (const ShadowFeed* feed : engine_->Challengers(leader)) {
        const ShadowCounts counts = feed->counts();
        for (int kind = 0; kind < ShadowCounts::kKinds; ++kind) {
          static constexpr const char* kKindNames[] = {"decision", "reward", "activation"};
          for (const auto& [outcome, n] : {std::pair{"applied", counts.applied[kind]},
                                           std::pair{"failed", counts.failed[kind]},
                                           std::pair{"dropped", counts.dropped[kind]}}) {
            prometheus::ClientMetric metric;
            metric.label = {{"leader", leader},
                            {"model", feed->challenger()->name()},
                            {"operation", kKindNames[kind]},
                            {"outcome", outcome}};
            metric.counter.value = static_cast<double>(n);
            shadowed.metric.push_back(std::move(metric));
          }
        }
      }
    }
    families.push_back(std::move(shadowed));
    // Learning health (core/model/learning_health.h): one series per check.
    prometheus::MetricFamily healthy{
        "graphbandit_learning_healthy",
        "1 when the model passes the learning check (keeps_up, signal, fits, reward_trend), 0 "
        "when not: DescribeModel's learning says what is wrong.",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily snr{
        "graphbandit_signal_to_noise",
        "Prior variance of the reward function over the noise variance, for the "
        "hyper-parameters in use (kernel policies).",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily recent{"graphbandit_recent_reward",
                                    "Mean of the rewards learned lately (half-life 1,000 rewards).",
                                    prometheus::MetricType::Gauge,
                                    {}};
    for (size_t i = 0; i < names.size(); ++i) {
      for (const LearningHealth::Check& check : stats[i].learning.checks) {
        prometheus::ClientMetric metric;
        metric.label = {{"check", check.name}, {"model", names[i]}};
        metric.gauge.value = check.ok ? 1.0 : 0.0;
        healthy.metric.push_back(std::move(metric));
      }
      if (stats[i].view.hyperparameters.has_value()) {
        prometheus::ClientMetric metric;
        metric.label = {{"model", names[i]}};
        metric.gauge.value = stats[i].view.hyperparameters->signal_to_noise;
        snr.metric.push_back(std::move(metric));
      }
      if (stats[i].view.recent_weight > 0.0) {
        prometheus::ClientMetric metric;
        metric.label = {{"model", names[i]}};
        metric.gauge.value = stats[i].view.recent_reward;
        recent.metric.push_back(std::move(metric));
      }
    }
    families.push_back(std::move(healthy));
    families.push_back(std::move(snr));
    families.push_back(std::move(recent));
    // Apprentice mode (core/policy/apprentice.h): the mode, and the lift over the baseline it
    // is judged by.
    prometheus::MetricFamily apprentice{
        "graphbandit_apprentice",
        "1 while the model is an apprentice (serving the request's baseline arm), 0 while it "
        "serves itself.",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily lift{
        "graphbandit_apprentice_lift",
        "The model's own policy's estimated lift in mean reward over the baseline arm during its "
        "apprenticeship (doubly robust, paired), with its 95% interval (bound: estimate, lower, "
        "upper).",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily lift_decisions{
        "graphbandit_apprentice_lift_decisions",
        "Rewarded decisions of the apprenticeship the lift is estimated from.",
        prometheus::MetricType::Gauge,
        {}};
    for (size_t i = 0; i < names.size(); ++i) {
      const ModelView& view = stats[i].view;
      auto add = [&](prometheus::MetricFamily& family, double x,
                     std::vector<prometheus::ClientMetric::Label> labels) {
        prometheus::ClientMetric metric;
        metric.label = std::move(labels);
        metric.label.push_back({"model", names[i]});
        metric.gauge.value = x;
        family.metric.push_back(std::move(metric));
      };
      add(apprentice, view.apprentice ? 1.0 : 0.0, {});
      add(lift_decisions, static_cast<double>(view.lift.decisions), {});
      if (view.lift.valid) {
        add(lift, view.lift.lift.estimate, {{"bound", "estimate"}});
        add(lift, view.lift.lift.lower, {{"bound", "lower"}});
        add(lift, view.lift.lift.upper, {{"bound", "upper"}});
      }
    }
    families.push_back(std::move(apprentice));
    families.push_back(std::move(lift));
    families.push_back(std::move(lift_decisions));
    // Records recovery could not use at the last start, by kind: lost to damage in the middle
    // of the log, or intact but dropped because their decision was lost (or a repeat).
    for (const auto& [name, help, pick] :
         {std::tuple<const char*, const char*,
                     const std::map<std::string, int64_t>& (*)(const ModelStats&)>{
              "graphbandit_recovery_records_lost",
              "Log records destroyed by damage in the middle of the log at the last start, by "
              "kind (unknown: the damage hit the record's header).",
              [](const ModelStats& s) -> const std::map<std::string, int64_t>& {
                return s.recovery.records_lost;
              }},
          {"graphbandit_recovery_records_dropped",
           "Intact log records not applied at the last start because a record they depend on "
           "was lost (a reward or close whose decision was lost), by kind.",
           [](const ModelStats& s) -> const std::map<std::string, int64_t>& {
             return s.recovery.records_dropped;
           }}}) {
      prometheus::MetricFamily family{name, help, prometheus::MetricType::Gauge, {}};
      for (size_t i = 0; i < names.size(); ++i) {
        for (const auto& [kind, count] : pick(stats[i])) {
          prometheus::ClientMetric metric;
          metric.label = {{"model", names[i]}, {"kind", kind}};
          metric.gauge.value = static_cast<double>(count);
          family.metric.push_back(std::move(metric));
        }
      }
      families.push_back(std::move(family));
    }
    // Freshness: from acknowledging a reward to publishing a state that has learned it.
    prometheus::MetricFamily freshness{
        "graphbandit_state_freshness_seconds",
        "Time from acknowledging a reward to serving decisions from a state that learned it.",
        prometheus::MetricType::Histogram,
        {}};
    for (size_t i = 0; i < names.size(); ++i) {
      const FreshnessStats& f = stats[i].freshness;
      prometheus::ClientMetric metric;
      metric.label = {{"model", names[i]}};
      metric.histogram.sample_count = static_cast<uint64_t>(f.count);
      metric.histogram.sample_sum = f.sum;
      for (int b = 0; b < FreshnessStats::kBuckets; ++b) {
        metric.histogram.bucket.push_back(
            {static_cast<uint64_t>(f.buckets[b]), FreshnessStats::kBounds[b]});
      }
      metric.histogram.bucket.push_back(
          {static_cast<uint64_t>(f.count), std::numeric_limits<double>::infinity()});
      freshness.metric.push_back(std::move(metric));
    }
    families.push_back(std::move(freshness));
    // Ledger capacity (ledger.max_decisions), labelled with the reward aggregation because it
    // decides what fills the ledger for good: with FIRST a completed decision gives its slot up
    // to a new one, so only graphbandit_pending_decisions can exhaust it; with SUM/MAX/LAST every
    // decision holds its slot until its window ends, so graphbandit_ledger_decisions can.
    prometheus::MetricFamily capacity{
        "graphbandit_ledger_capacity",
        "Decisions the ledger can hold (ledger.max_decisions); SelectArm fails with "
        "RESOURCE_EXHAUSTED when no slot can be freed.",
        prometheus::MetricType::Gauge,
        {}};
    for (const std::string& name : names) {
      const ModelOptions& options = (*engine_->FindModel(name))->options();
      prometheus::ClientMetric metric;
      metric.label = {{"model", name},
                      {"aggregation", std::string(AggregationName(options.aggregation))}};
      metric.gauge.value = static_cast<double>(options.max_decisions);
      capacity.metric.push_back(std::move(metric));
    }
    families.push_back(std::move(capacity));
    // Hyper-parameters in use (kernel models), one series per parameter; length-scales per
    // input dimension up to kMaxPerDimensionLengthscales dimensions (the most a fit gives
    // separate values), else one series for the context and one for the arm features: the
    // labels stay bounded whatever the feature dimension.
    prometheus::MetricFamily hyper{
        "graphbandit_hyperparameter",
        "Kernel hyper-parameters the served state uses (fitted or configured), by parameter.",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily fits{
        "graphbandit_hyperparameter_fits_total",
        "Hyper-parameter fits finished, by outcome: applied (logged and applied), unchanged "
        "(no value moved enough, or the likelihood did not gain a nat per fitted parameter), "
        "skipped (nothing to fit yet), failed.",
        prometheus::MetricType::Counter,
        {}};
    prometheus::MetricFamily fit_seconds{
        "graphbandit_hyperparameter_fit_seconds_total",
        "Wall-clock time of hyper-parameter fits on the helper thread, including the pauses that "
        "keep a fit to hyperparameters.fit_cpu_share of a core.",
        prometheus::MetricType::Counter,
        {}};
    prometheus::MetricFamily fits_in_flight{
        "graphbandit_hyperparameter_fits_in_flight",
        "Hyper-parameter fits started and not yet logged or dropped: while one is in flight the "
        "model may still change without new traffic.",
        prometheus::MetricType::Gauge,
        {}};
    for (size_t i = 0; i < names.size(); ++i) {
      const ModelStats& st = stats[i];
      auto add = [&](prometheus::MetricFamily* family, const std::string& label,
                     const std::string& value_label, double value) {
        prometheus::ClientMetric metric;
        metric.label = {{"model", names[i]}, {label, value_label}};
        if (family->type == prometheus::MetricType::Counter) {
          metric.counter.value = value;
        } else {
          metric.gauge.value = value;
        }
        family->metric.push_back(std::move(metric));
      };
      if (st.view.hyperparameters.has_value()) {
        const Hyperparameters& h = st.view.hyperparameters->values;
        add(&hyper, "parameter", "signal_variance", h.signal_variance);
        add(&hyper, "parameter", "offset_variance", h.offset_variance);
        add(&hyper, "parameter", "linear_variance", h.linear_variance);
        add(&hyper, "parameter", "user_variance", h.user_variance);
        add(&hyper, "parameter", "community_variance", h.community_variance);
        add(&hyper, "parameter", "noise_variance", h.noise_variance);
        add(&hyper, "parameter", "rho", h.rho);
        add(&hyper, "parameter", "prior_mean", h.prior_mean);
        add(&hyper, "parameter", "kors_mu", st.view.hyperparameters->kors_mu);
        add(&hyper, "parameter", "exploration_width", st.view.exploration_width);
        const bool per_dimension = h.lengthscales.size() <= kMaxPerDimensionLengthscales;
        for (Eigen::Index d = 0; d < h.lengthscales.size(); ++d) {
          const bool context = d < st.view.context_dim;
          if (!per_dimension) {  // one value per kind: its first dimension
            if (d == 0 || d == st.view.context_dim) {
              add(&hyper, "parameter", context ? "context_lengthscale" : "arm_lengthscale",
                  h.lengthscales(d));
            }
            continue;
          }
          add(&hyper, "parameter",
              context ? "context_lengthscale_" + std::to_string(d)
                      : "arm_lengthscale_" + std::to_string(d - st.view.context_dim),
              h.lengthscales(d));
        }
      }
      add(&fits, "outcome", "applied", double(st.fits_applied));
      add(&fits, "outcome", "unchanged", double(st.fits_unchanged));
      add(&fits, "outcome", "skipped", double(st.fits_skipped));
      add(&fits, "outcome", "failed", double(st.fits_failed));
      prometheus::ClientMetric seconds;
      seconds.label = {{"model", names[i]}};
      seconds.counter.value = st.fit_seconds;
      fit_seconds.metric.push_back(std::move(seconds));
      prometheus::ClientMetric in_flight;
      in_flight.label = {{"model", names[i]}};
      in_flight.gauge.value = st.fits_in_flight;
      fits_in_flight.metric.push_back(std::move(in_flight));
    }
    families.push_back(std::move(hyper));
    families.push_back(std::move(fits));
    families.push_back(std::move(fit_seconds));
    families.push_back(std::move(fits_in_flight));
    prometheus::MetricFamily info{"graphbandit_build_info",
                                  "Build information; always 1.",
                                  prometheus::MetricType::Gauge,
                                  {}};
    prometheus::ClientMetric one;
    one.label = {{"version", "0.1.0"}};
    one.gauge.value = 1.0;
    info.metric.push_back(one);
    families.push_back(std::move(info));
    return families;
  }

 private:
  const Engine* engine_;
};

}  // namespace

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// The process's own CPU time and resident memory, under the names Prometheus's client libraries
// give them (process_cpu_seconds_total, process_resident_memory_bytes), so that dashboards and
// capacity arithmetic ("CPU per decision": graphbandit-loadgen reads this counter before and
// after its run) work without a node exporter. prometheus-cpp has no process collector.
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    rusage usage{};
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
      const auto seconds = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
      };
      prometheus::ClientMetric metric;
      metric.counter.value = seconds(usage.ru_utime) + seconds(usage.ru_stime);
      families.push_back({"process_cpu_seconds_total",
                          "User and system CPU time the server process has used, in seconds.",
                          prometheus::MetricType::Counter,
                          {std::move(metric)}});
    }
    // /proc/self/statm: total and resident pages.
    if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
      long total = 0, resident = 0;
      const bool read = std::fscanf(statm, "%ld %ld", &total, &resident) == 2;
      std::fclose(statm);
      if (read) {
        prometheus::ClientMetric metric;
        metric.gauge.value =
            static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
        families.push_back({"process_resident_memory_bytes",
                            "Resident memory of the server process, in bytes.",
                            prometheus::MetricType::Gauge,
                            {std::move(metric)}});
      }
    }
    return families;
  }
};

ServerMetrics::ServerMetrics(const Engine* engine)
    : registry_(std::make_shared<prometheus::Registry>()),
      model_collector_(std::make_shared<ModelCollector>(engine)),
      process_collector_(std::make_shared<ProcessCollector>()),
      rpc_requests_(prometheus::BuildCounter()
                        .Name("graphbandit_rpc_requests_total")
                        .Help("RPCs handled, by method and gRPC status code.")
                        .Register(*registry_)),
      rpc_duration_(prometheus::BuildHistogram()
                        .Name("graphbandit_rpc_duration_seconds")
                        .Help("Time spent handling an RPC, by method and gRPC status code.")
                        .Register(*registry_)),
      rewards_(prometheus::BuildCounter()
                   .Name("graphbandit_rewards_total")
                   .Help("Rewards reported, per arm, by model and outcome (accepted, duplicate, "
                         "unknown_event; model is empty for unknown events).")
                   .Register(*registry_)) {}

void ServerMetrics::RecordRpc(const std::string& method, grpc::StatusCode code, double seconds) {
  RpcSeries series;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = rpc_series_.try_emplace({method, static_cast<int>(code)});
    if (inserted) {
      const prometheus::Labels labels = {{"method", method}, {"code", StatusCodeName(code)}};
      it->second.requests = &rpc_requests_.Add(labels);
      it->second.duration = &rpc_duration_.Add(labels, LatencyBuckets());
    }
    series = it->second;
  }
  series.requests->Increment();
  series.duration->Observe(seconds);
}

void ServerMetrics::RecordReward(const std::string& model, RewardOutcome outcome) {
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = reward_series_.try_emplace({model, static_cast<int>(outcome)});
    if (inserted) {
      it->second =
          &rewards_.Add({{"model", model}, {"outcome", std::string(RewardOutcomeName(outcome))}});
    }
    counter = it->second;
  }
  counter->Increment();
}

}  // namespace graphbandit::server
