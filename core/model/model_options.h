// Everything that defines one model, in core's own terms (the server maps its protobuf
// configuration onto this; see server/config.cc). Defaults are the documented defaults of
// proto/graphbandit/v1/config.proto.
#ifndef GRAPHBANDIT_CORE_MODEL_MODEL_OPTIONS_H_
#define GRAPHBANDIT_CORE_MODEL_MODEL_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/features/feature_catalog.h"
#include "core/features/named_features.h"
#include "core/fit/refit.h"
#include "core/graph/spectral_embedding.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/confidence_bound_posterior.h"
#include "core/learner/lk_gp_options.h"
#include "core/ledger/decision_ledger.h"
#include "core/policy/apprentice.h"
#include "core/policy/selection.h"

namespace graphbandit {

inline constexpr double kDefaultBaselineHalfLife = 50.0;

enum class PolicyKind {
  kEkUcb,
  kEkTs,
  kGpUcb,
  kGpTs,
  kLinUcbPerUser,
  kLinUcbPooled,
  kGraphUcb,
  kGobLin,
  kBatchedNystromUcb,
  // Thompson sampling on per-user linear preferences (core/learner/semi_parametric_ts.h; SG
  // paper): SemiGraphTS (centred, graph-adjusted), SemiTS (centred, per user) and LinTS
  // (uncentred, per user). One arm per decision; each decision's selection probabilities are
  // logged with it and used when its reward is learned.
  kSemiGraphTs,
  kSemiTs,
  kLinTs,
  // The papers' baselines that a model is never configured with (the configuration proto
  // cannot name them); the simulator builds them with the same factory
  // (core/learner/learner_factory.h).
  kLkGpUcb,  // exact GP with the LK paper's lambda schedule and grid phase (research.lk)
  kLkGpTs,   // the same with Thompson sampling
  kRandom,   // a uniformly random choice
  // GraphUCB-Local (Yang et al. 2020; the SG paper's GraphUCB): per-user ridge statistics pulled
  // towards the graph neighbours' estimates, chosen by UCB (core/learner/semi_parametric_ts.h).
  // Its cost per decision grows with the user's degree, not with the graph's size.
  kGraphUcbLocal,
};

// The largest nystrom.max_learn_batch a model accepts (a batch's work and memory grow with it).
inline constexpr int kMaxLearnBatchLimit = 1024;
// graph.community_dims: at most this many embedding dimensions (SpectralEmbedding::Build).
inline constexpr int kMaxCommunityDims = SpectralEmbedding::kMaxDims;

// BATCHED_NYSTROM_UCB served by a model re-draws at most once per this growth of its history.
inline constexpr double kServedBatchedMinGrowth = 0.05;

// EK policies served by a model grow their dictionary in batches of m / this many points
// (NystromOptions::growth_batch_divisor; at most kMaxGrowthBatch). Measured on the robustness
// tasks: batches of m/16 cost regret on the Erdos-Renyi tasks (1.23 against 1.03 times per-user
// LinUCB growing point by point); m/64 keeps batches small while the history is scanned once
// per batch.
inline constexpr int kServedGrowthBatchDivisor = 64;

// Settings of the papers' algorithms that a served model fixes: the simulator changes them to
// run the algorithms as published; the server's configuration cannot (server/config.cc never
// sets them), so a served model always has these defaults.
struct ResearchOptions {
  // kLkGpUcb / kLkGpTs: the learner's whole configuration (its ridge, schedule and grid).
  LkGpOptions lk;
  // EK policies: 0 grows the dictionary point by point, as the EK paper does.
  int growth_batch_divisor = kServedGrowthBatchDivisor;
  // EK policies: spread a batch's pass over the history across the rewards that follow
  // (NystromOptions::spread_growth_scan); false scans it all when the batch fills, as the paper.
  bool spread_growth_scan = true;
  // EK policies: a fit whose rebuild costs at least this many multiply-adds (history x m^2) is
  // spread over the rewards that follow (NystromOptions::spread_refit_work); negative: never.
  double spread_refit_work = 4e9;
  // BATCHED_NYSTROM_UCB: 0 re-draws whenever the paper's rule says so.
  double batched_min_growth = kServedBatchedMinGrowth;
  // BATCHED_NYSTROM_UCB: false leaves the dictionary unbounded, as the paper does.
  bool batched_bounded = true;
  // SEMI_GRAPH_TS: Gamma_j with the extra lambda I of the SG authors' code (docs/algorithms.md
  // §5.4).
  bool semi_code_gamma = false;
};

absl::string_view PolicyName(PolicyKind policy);

struct ModelOptions {
  std::string name = "default";
  PolicyKind policy = PolicyKind::kEkUcb;

  // The kernel's hyper-parameters: the values a model starts with; those that refit.fit_*
  // leaves free are then fitted from the data (core/fit/refit.h).
  KernelType kernel = KernelType::kRbf;
  double kernel_variance = 1.0;
  double arm_lengthscale = 1.0;
  double context_lengthscale = 1.0;

  double rho = 0.1;  // Laplacian regulariser of the user kernel
  UserKernelKind user_kernel = UserKernelKind::kLaplacianInverse;
  double heat_tau = 1.0;  // heat user kernel exp(-tau L)
  int spectral_dims = 8;  // spectral RBF user kernel: eigenvectors used
  // The Laplacian-inverse user kernel's community part (UserKernelOptions): its embedding's
  // dimensions, 0 = none. Its variance is a fitted hyper-parameter (refit.fit_community_variance).
  int community_dims = 8;
  std::string edge_list_file;  // applied as an AddEdges at every start
  double ridge = 0.1;          // lambda, the GP noise variance
  double exploration = 0.5;    // beta (UCB) or nu (Thompson sampling), times the width
  ExplorationWidth exploration_width = ExplorationWidth::kStddev;
  // kGpUcbTheorem and kBayesUcb widths: the CGP paper's schedules (core/policy/combinatorial.h).
  IndexSchedule index_schedule;
  // Kernel policies: the constant prior mean of the reward (the starting value of its fit, or
  // the value itself when refit.fit_prior_mean is off).
  double prior_mean = 0.0;
  // GP_UCB: a provable confidence bound of the tighter-bounds paper in place of mean +
  // exploration * stddev (core/learner/confidence_bound_posterior.h); kTuned keeps the latter.
  // With a bound, exploration multiplies the bound's width (1: the bound itself) and the
  // kernel's hyper-parameters are not fitted (the bound is valid for the kernel it is given).
  ConfidenceBoundOptions confidence = [] {
    ConfidenceBoundOptions c;
    c.bound = ConfidenceBound::kTuned;
    return c;
  }();
  // Half-life in rewards of the drifting-baseline tracker (core/learner/baseline_tracker.h); 0:
  // off.
  double baseline_half_life = kDefaultBaselineHalfLife;
  // Share of decisions drawn uniformly from the candidates (core/policy/evaluation.h); 0: none.
  double evaluation_epsilon = 0.0;
  // SelectArmRequest.explain names other users (core/model/explanations.h); off: their ids are
  // withheld.
  bool explain_names_users = false;
  // Apprentice mode (core/policy/apprentice.h): whether a model without state starts as one, and
  // when it switches by itself.
  bool apprentice_start = false;
  ApprenticeRule apprentice;
  // A challenger (core/model/shadow_feed.h): the leader whose decisions and rewards it learns
  // from without serving. Empty: a model that serves.
  std::string shadow_of;
  // Whether this configuration lets the model be an apprentice: its lift is estimated from the
  // evaluation share, and a policy that samples whole parameter vectors learns from the
  // probabilities of its own draws.
  bool apprentice_possible() const { return evaluation_epsilon > 0.0 && !samples_parameters(); }
  // Whether this policy's decisions can be explained (a kernel policy whose mean is a sum over
  // past decisions: EK_UCB, EK_TS, GP_UCB, GP_TS).
  bool explains() const {
    return policy == PolicyKind::kEkUcb || policy == PolicyKind::kEkTs ||
           policy == PolicyKind::kGpUcb || policy == PolicyKind::kGpTs;
  }
  // Hyper-parameter fitting (kernel policies only; see refits_hyperparameters()).
  RefitOptions refit = DefaultRefit();

  double kors_mu = 0.0;  // 0: use ridge
  double kors_epsilon = 0.5;
  double kors_gamma = 1.0;
  int max_dictionary_size = 1000;
  // EK policies: rebuild a full dictionary with a coarser KORS mu (core/fit/refit.h). Off by
  // default: within 5,000 rounds it had more regret than refusing points on 6 of the 8
  // robustness tasks (docs/model.md, "When the dictionary is full").
  bool coarsen_full_dictionary = false;
  // EK policies: rewards learned together at most (a LearnOp's batch, core/model/learned_state.h;
  // rank-k updates). 1 learns each reward alone.
  int max_learn_batch = 128;
  // EK policies: a batch is logged once max_learn_batch rewards wait or the oldest has waited
  // this long since its record was logged (0: after every batch of records the writer applied,
  // however few). It also bounds how long the writer leaves decisions and staged rewards
  // queued to apply them in groups (at most Model::kMaxApplyDelay; 0: not at all).
  absl::Duration max_learn_delay = absl::Milliseconds(50);
  // EK policies: score in single precision while it agrees with double precision on the
  // state's probe points (NystromOptions::single_precision); false always scores in double.
  bool single_precision_scoring = true;
  int64_t max_history = 0;      // EK policies: retained observations (0 = all)
  bool forget_evicted = false;  // EK policies: sliding window
  int exact_max_observations = 2000;
  double linear_lambda = 1.0;  // linear policies; lambda of the semi-parametric ones
  // Linear policies (and LIN_TS): every point gets a trailing constant 1, so that each user's
  // constant offset is learned instead of being forced through the features.
  bool linear_intercept = true;
  // Semi-parametric policies: how the arm is drawn and the selection probabilities estimated
  // (core/policy/selection.h), and from how many parameter draws.
  PropensityRule propensity_rule = PropensityRule::kMultinomial;
  int propensity_draws = kDefaultPropensityDraws;
  double batched_threshold = 10.0;
  double batched_oversampling = 10.0;

  // arm_dim > 0 fixes the dimensions; arm_dim == 0 (and context_dim == 0) lets the model's
  // first valid decision fix them.
  int context_dim = 0;
  int arm_dim = 0;
  uint64_t seed = 1;

  int max_candidates = 1000;
  int max_feature_dim = 4096;
  int64_t max_users = 10'000'000;
  double reward_bound = 1e9;
  int max_graph_edits_per_call = 100'000;

  absl::Duration reward_window = absl::Minutes(10);
  int64_t max_decisions = 1'000'000;
  int64_t max_tombstones = 0;  // closed decisions remembered (LATE/DUPLICATE); 0 = max_decisions
  Aggregation aggregation = Aggregation::kFirst;
  std::optional<double> default_reward;  // learned for arms without a reward when a window ends

  ResearchOptions research;

  // Named features (core/features): hashed into context_slots / arm_slots inputs after the dense
  // ones. Configured: the model has those inputs from the start; else it gets the default
  // counts when its first decision carries named features, and none otherwise.
  struct DeclaredFeature {
    bool context = true;  // else a candidate's
    std::string name_space;
    std::string name;
    FeatureKind kind = FeatureKind::kNumeric;
  };
  struct FeatureOptions {
    static constexpr int kDefaultSlots = 64;
    static constexpr int kMaxSlots = 65536;
    bool configured = false;
    int context_slots = kDefaultSlots;
    int arm_slots = kDefaultSlots;
    std::vector<DeclaredFeature> declared;
    bool declared_only = false;
    FeatureLimits limits;
    int max_listed_features = 4096;
  };
  FeatureOptions features;

  static RefitOptions DefaultRefit() {
    RefitOptions r;
    r.enabled = true;
    return r;
  }

  bool exact() const { return policy == PolicyKind::kGpUcb || policy == PolicyKind::kGpTs; }
  bool kernel_policy() const {
    return policy == PolicyKind::kEkUcb || policy == PolicyKind::kEkTs || exact();
  }
  // Whether this model fits hyper-parameters: a kernel policy with fitting on.
  bool refits_hyperparameters() const {
    return refit.enabled && kernel_policy() && confidence.bound == ConfidenceBound::kTuned;
  }
  bool thompson() const {
    return policy == PolicyKind::kEkTs || policy == PolicyKind::kGpTs ||
           policy == PolicyKind::kLkGpTs;
  }
  // Whether learner points carry the intercept's constant 1 (see linear_intercept).
  bool intercept() const {
    const bool linear = policy == PolicyKind::kLinUcbPerUser ||
                        policy == PolicyKind::kLinUcbPooled || policy == PolicyKind::kGraphUcb ||
                        policy == PolicyKind::kGobLin || policy == PolicyKind::kLinTs ||
                        policy == PolicyKind::kGraphUcbLocal;
    return linear_intercept && linear;
  }
  // Draws a parameter per decision and records every candidate's selection probability.
  bool samples_parameters() const {
    return policy == PolicyKind::kSemiGraphTs || policy == PolicyKind::kSemiTs ||
           policy == PolicyKind::kLinTs;
  }
  // The drifting-baseline tracker's half-life as used: off for the parameter-sampling policies
  // (the semi-parametric ones are immune to a baseline by construction, and LinTS is run as
  // published).
  double effective_baseline_half_life() const {
    return samples_parameters() ? 0.0 : baseline_half_life;
  }
  // The kinds a model can be configured with (not the papers' baselines).
  bool servable() const {
    return policy != PolicyKind::kLkGpUcb && policy != PolicyKind::kLkGpTs &&
           policy != PolicyKind::kRandom && policy != PolicyKind::kGraphUcbLocal;
  }
  // KORS mu before any fit (core/fit/refit.h, KorsMu).
  double effective_kors_mu() const { return KorsMu(kors_mu, refit.kors_mu_factor, ridge); }
  int64_t effective_max_tombstones() const {
    return max_tombstones > 0 ? max_tombstones : max_decisions;
  }
  UserKernelOptions user_kernel_options() const {
    UserKernelOptions o;
    o.kind = user_kernel;
    o.rho = rho;
    o.heat_tau = heat_tau;
    o.spectral_dims = spectral_dims;
    o.community_dims = community_dims;
    return o;
  }
};

// Checks ranges (positive length-scales, rho, ridge...). Messages name the field.
absl::Status ValidateModelOptions(const ModelOptions& options);

// Model names double as directory names: 1..64 characters from [A-Za-z0-9_.-], not "." or "..".
bool IsValidModelName(absl::string_view name);

// An id quoted for an error message: C-escaped, cut after 64 bytes.
std::string QuoteId(absl::string_view id);

// Ids (users, arms): 1..256 bytes.
inline constexpr size_t kMaxIdBytes = 256;
// Edge weights: the Laplacian stays well conditioned (and its factorisation meaningful) when
// weights lie within twelve orders of magnitude of each other.
inline constexpr double kMinEdgeWeight = 1e-6;
inline constexpr double kMaxEdgeWeight = 1e6;
// Feature and context values: beyond this, kernels and scaling lose all precision.
inline constexpr double kMaxFeatureMagnitude = 1e6;
// Client event ids: 1..128 printable ASCII characters.
inline constexpr size_t kMaxEventIdBytes = 128;

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_MODEL_OPTIONS_H_
