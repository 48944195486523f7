#include <memory>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proto/enum_table.h"
#include "sim/lastfm_environment.h"
#include "sim/mm_environment.h"
#include "sim/navigation.h"
#include "sim/preset.pb.h"
#include "sim/preset_loader.h"
#include "sim/preset_loader_internal.h"
#include "sim/robustness.h"
#include "sim/sg_environment.h"
#include "sim/task_environment.h"

// The environments of a preset file: each `environment { ... }` message becomes an
// EnvironmentSpec (split from preset_loader.cc, which parses the rest of the file).
namespace graphbandit::sim {
namespace {

namespace pb = ::graphbandit::sim::v1;

// ---- Environments ---------------------------------------------------------------------------

std::string& LastFmDirectoryStorage() {
  static auto* dir = new std::string;
  return *dir;
}

// An environment whose every run is an `Env` (Environment or TaskEnvironment) created from
// `options` with the run's seed.
template <typename Env, typename Options>
EnvironmentSpec SeededSpec(std::string label, const Options& options) {
  EnvironmentSpec spec;
  spec.label = std::move(label);
  spec.make = [options](uint64_t seed) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
    Options seeded = options;
    seeded.seed = seed;
    auto env = Env::Create(seeded);
    if (!env.ok()) return env.status();
    return std::unique_ptr<SimEnvironment>(new Env(*std::move(env)));
  };
  return spec;
}

constexpr config::EnumRow<pb::LkEnvironment::Reward, RewardKind> kLkRewards[] = {
    {pb::LkEnvironment::GP_DRAW, RewardKind::kGpDraw},
    {pb::LkEnvironment::REPRESENTER, RewardKind::kRepresenter},
    {pb::LkEnvironment::LINEAR_GOB, RewardKind::kLinearGob},
};

constexpr config::EnumRow<pb::LkEnvironment::Graph, GraphKind> kLkGraphs[] = {
    {pb::LkEnvironment::ERDOS_RENYI, GraphKind::kErdosRenyi},
    {pb::LkEnvironment::RBF, GraphKind::kRbf},
    {pb::LkEnvironment::SBM, GraphKind::kSbm},
};

// The appendix's exponent (LK F.1.2), the default of LkEnvironment.exponent.
constexpr double kAppendixExponent = 0.5;

absl::StatusOr<EnvironmentSpec> LkEnvironmentSpec(const pb::LkEnvironment& e) {
  if (e.level() != "easy" && e.level() != "medium" && e.level() != "hard") {
    return absl::InvalidArgumentError(
        absl::StrFormat("lk.level \"%s\" must be easy, medium or hard", absl::CEscape(e.level())));
  }
  if (e.users() < 1) return absl::InvalidArgumentError("lk.users must be at least 1");
  if (e.switch_round() < 0) return absl::InvalidArgumentError("lk.switch_round is negative");
  RewardKind reward;
  if (absl::Status s = config::RequiredFromProto(kLkRewards, e.reward(), "lk.reward", &reward);
      !s.ok()) {
    return s;
  }
  GraphKind graph;
  if (absl::Status s = config::RequiredFromProto(kLkGraphs, e.graph(), "lk.graph", &graph);
      !s.ok()) {
    return s;
  }
  EnvironmentOptions options = LkTask(e.level(), e.users(), reward, graph);
  options.exponent = e.has_exponent() ? e.exponent() : kAppendixExponent;
  if (e.has_reward_scale()) {
    if (!(e.reward_scale() > 0.0) || !std::isfinite(e.reward_scale())) {
      return absl::InvalidArgumentError("lk.reward_scale must be a finite number > 0");
    }
    options.reward_scale = e.reward_scale();
  }
  if (e.has_candidates()) {
    if (e.candidates() < 1 || e.candidates() > options.pool) {
      return absl::InvalidArgumentError(
          absl::StrFormat("lk.candidates must be between 1 and the pool size %d", options.pool));
    }
    options.candidates = e.candidates();
  }
  options.switch_round = e.switch_round();
  std::string label = absl::StrFormat("%s %s n=%d", e.level(),
                                      reward == RewardKind::kGpDraw        ? "GP-draw ER"
                                      : reward == RewardKind::kRepresenter ? "representer ER"
                                                                           : "Linear-GOB ER",
                                      e.users());
  if (graph != GraphKind::kErdosRenyi) {
    label = absl::StrFormat("%s %s %s n=%d", e.level(),
                            reward == RewardKind::kGpDraw ? "GP-draw" : "representer",
                            graph == GraphKind::kRbf ? "RBF" : "SBM", e.users());
  }
  if (options.reward_scale != 1.0) {
    absl::StrAppend(&label, absl::StrFormat(" rewards x%g", options.reward_scale));
  }
  return SeededSpec<Environment>(std::move(label), options);
}

}  // namespace

namespace internal {

absl::StatusOr<EnvironmentSpec> ToEnvironmentSpec(const pb::Environment& e) {
  absl::StatusOr<EnvironmentSpec> spec;
  switch (e.kind_case()) {
    case pb::Environment::kLk:
      spec = LkEnvironmentSpec(e.lk());
      break;
    case pb::Environment::kEk:
      switch (e.ek()) {
        case pb::BUMP:
          spec = EkEnvironmentSpec(EkKind::kBump, e.fixed_instance());
          break;
        case pb::CHESSBOARD:
          spec = EkEnvironmentSpec(EkKind::kChessboard, e.fixed_instance());
          break;
        case pb::STEP_DIAGONAL:
          spec = EkEnvironmentSpec(EkKind::kStepDiagonal, e.fixed_instance());
          break;
        default:
          return absl::InvalidArgumentError("ek must be BUMP, CHESSBOARD or STEP_DIAGONAL");
      }
      break;
    case pb::Environment::kRobustnessTask: {
      std::vector<std::string> names;
      for (const auto& [name, options] : RobustnessTaskOptions()) {
        if (name == e.robustness_task()) {
          spec = SeededSpec<TaskEnvironment>(options.label, options);
          break;
        }
        names.push_back(name);
      }
      if (names.size() == RobustnessTaskOptions().size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("unknown robustness_task \"%s\" (known: %s)",
                            absl::CEscape(e.robustness_task()), absl::StrJoin(names, ", ")));
      }
      break;
    }
    case pb::Environment::kSg: {
      const pb::SgEnvironment& g = e.sg();
      SgOptions options;
      options.non_stationary = !g.stationary();
      if (g.has_users()) options.users = g.users();
      if (g.has_arms()) options.arms = g.arms();
      if (g.has_dim()) options.dim = g.dim();
      if (g.has_er_probability()) options.er_probability = g.er_probability();
      if (g.has_gamma()) options.gamma = g.gamma();
      if (auto probe = SgEnvironment::Create(options); !probe.ok()) return probe.status();
      spec = SeededSpec<SgEnvironment>(
          absl::StrFormat("SG %s", options.non_stationary ? "non-stationary" : "stationary"),
          options);
      break;
    }
    case pb::Environment::kLastfm: {
      const pb::LastFmEnvironment& l = e.lastfm();
      const std::string dir =
          l.data_dir().empty() ? "../shared/data/hetrec2011-lastfm-2k" : l.data_dir();
      const int dim = l.has_dim() ? l.dim() : 25, arms = l.has_arms() ? l.arms() : 25;
      if (dim < 1 || arms < 1)
        return absl::InvalidArgumentError("lastfm: dim and arms must be >= 1");
      // Loaded once, at the first run, and shared by every run (they differ in their rounds).
      struct Shared {
        absl::Mutex mu;
        std::shared_ptr<const LastFmData> data;
        absl::Status status;
        bool loaded = false;
      };
      auto shared = std::make_shared<Shared>();
      EnvironmentSpec lastfm;
      lastfm.label = "Last.fm";
      lastfm.make = [shared, dir, dim,
                     arms](uint64_t seed) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
        absl::MutexLock lock(&shared->mu);
        if (!shared->loaded) {
          const std::string& override_dir = LastFmDirectoryOverride();
          auto data = LoadLastFm(override_dir.empty() ? dir : override_dir, dim);
          shared->loaded = true;
          if (data.ok()) {
            shared->data = *std::move(data);
          } else {
            shared->status = data.status();
          }
        }
        if (!shared->status.ok()) return shared->status;
        return std::unique_ptr<SimEnvironment>(new LastFmEnvironment(shared->data, arms, seed));
      };
      spec = std::move(lastfm);
      break;
    }
    case pb::Environment::kMm: {
      const pb::MmEnvironment& m = e.mm();
      MmOptions options;
      options.kernel = m.kernel() == pb::MmEnvironment::MATERN52   ? KernelType::kMatern52
                       : m.kernel() == pb::MmEnvironment::MATERN32 ? KernelType::kMatern32
                                                                   : KernelType::kRbf;
      options.lengthscale = m.lengthscale();
      if (m.has_dim()) options.dim = m.dim();
      if (auto probe = MmEnvironment::Create(options); !probe.ok()) return probe.status();
      spec = SeededSpec<MmEnvironment>(
          absl::StrFormat("%s l=%g",
                          options.kernel == KernelType::kRbf        ? "RBF"
                          : options.kernel == KernelType::kMatern52 ? "Matern-5/2"
                                                                    : "Matern-3/2",
                          options.lengthscale),
          options);
      break;
    }
    case pb::Environment::kNavigation: {
      const pb::NavigationEnvironment& n = e.navigation();
      NavigationOptions options;
      if (n.has_rows()) options.rows = n.rows();
      if (n.has_cols()) options.cols = n.cols();
      if (n.has_prior_lengthscale()) options.prior_lengthscale = n.prior_lengthscale();
      if (n.has_relief()) options.relief = n.relief();
      if (auto probe = NavigationEnvironment::Create(options, 0); !probe.ok()) {
        return probe.status();
      }
      EnvironmentSpec navigation;
      navigation.label = absl::StrFormat("navigation %dx%d", options.rows, options.cols);
      if (options.relief != NavigationOptions().relief) {
        absl::StrAppend(&navigation.label, absl::StrFormat(" relief %g m", options.relief));
      }
      if (options.prior_lengthscale != 1.0) {
        absl::StrAppend(&navigation.label,
                        absl::StrFormat(" prior l=%g", options.prior_lengthscale));
      }
      navigation.make =
          [options](uint64_t seed) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
        auto env = NavigationEnvironment::Create(options, seed);
        if (!env.ok()) return env.status();
        return std::unique_ptr<SimEnvironment>(std::move(*env));
      };
      spec = std::move(navigation);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          "sets none of lk, ek, robustness_task, sg, lastfm, mm and navigation");
  }
  if (e.fixed_instance() && !(e.kind_case() == pb::Environment::kEk && e.ek() == pb::BUMP)) {
    return absl::InvalidArgumentError(
        "fixed_instance is the EK authors' Bump instance: it needs ek: BUMP");
  }
  if (spec.ok() && !e.label().empty()) spec->label = e.label();
  return spec;
}

}  // namespace internal

void OverrideLastFmDirectory(const std::string& dir) { LastFmDirectoryStorage() = dir; }

const std::string& LastFmDirectoryOverride() { return LastFmDirectoryStorage(); }
}  // namespace graphbandit::sim
