// graphbandit-loadtest: plays a synthetic graph environment (sim/environment.h, or with
// --task one of the robustness tasks of sim/task_environment.h) against a running server
// and reports throughput, latency percentiles, regret, and whether the model learned every
// reward it acknowledged.
//
// It first registers the environment's users and edges through the administration calls, then
// runs --rounds rounds with --concurrency closed-loop workers. Round r always shows the same
// user and candidates (a pure function of --seed and r), whichever worker plays it. A round is
// SelectArm (one arm) followed by ReportReward with the environment's noisy reward; its regret
// is the best candidate's mean reward minus the chosen one's.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "client/connection.h"
#include "client/loadtest/report.h"
#include "client/loadtest/session.h"
#include "sim/environment.h"
#include "sim/presets.h"
#include "sim/robustness.h"
#include "sim/task_environment.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "HOST:PORT of the graphbandit server.");
ABSL_FLAG(std::string, model, "", "Model to play against; empty is the server's default model.");
ABSL_FLAG(int64_t, rounds, 10000, "Rounds to play (each one SelectArm plus one ReportReward).");
ABSL_FLAG(int32_t, concurrency, 4, "Concurrent closed-loop workers.");
ABSL_FLAG(int32_t, users, 20, "Users in the environment's graph.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the environment (graph, items, rewards, rounds).");
ABSL_FLAG(int32_t, pool, 20, "Items in the environment's pool (M).");
ABSL_FLAG(int32_t, candidates, 5, "Candidates shown per round (M_t <= pool).");
ABSL_FLAG(int32_t, dim, 10, "Item feature dimension d.");
ABSL_FLAG(std::string, graph, "er", "User graph: er (Erdos-Renyi p=0.2), rbf or sbm.");
ABSL_FLAG(std::string, reward_model, "gp",
          "Reward regime: gp (Laplacian-kernel GP draw), representer, or linear (Linear-GOB).");
ABSL_FLAG(double, env_rho, 0.01, "rho of the environment's user kernel (L + rho I)^-p.");
ABSL_FLAG(double, env_exponent, 1.0,
          "p of the environment's user kernel (the paper's appendix uses 0.5).");
ABSL_FLAG(int64_t, window, 1000, "Rounds per window in the regret-over-time table.");
ABSL_FLAG(int64_t, compare_window, 2000,
          "Size of the first and last blocks of rounds whose average regret is compared.");
ABSL_FLAG(std::string, report_json, "", "Also write the report as JSON to this file.");
ABSL_FLAG(int32_t, deadline_ms, 5000, "Deadline of every RPC.");
ABSL_FLAG(double, max_seconds, 900, "Stop starting new rounds after this many seconds.");
ABSL_FLAG(double, learn_wait_seconds, 30,
          "After the run, wait at most this long for the model to learn what it acknowledged.");
ABSL_FLAG(std::string, task, "",
          "Play one of the robustness preset's tasks instead (fresh candidates every round; "
          "--users, --pool, --candidates, --dim, --graph, --reward_model and --env_* are then "
          "ignored). Names: see --list_tasks.");
ABSL_FLAG(bool, list_tasks, false, "List the --task names and exit.");
ABSL_FLAG(std::string, user_prefix, "",
          "Prefix of the user ids registered on the server; empty picks a fresh random one so "
          "that runs do not share users.");

namespace {

namespace loadtest = graphbandit::loadtest;
namespace sim = graphbandit::sim;

int Fail(const std::string& message) {
  std::fprintf(stderr, "graphbandit-loadtest: %s\n", message.c_str());
  return 1;
}

int Fail(const absl::Status& status) { return Fail(std::string(status.message())); }

void ParseFlags(int argc, char** argv) {
  graphbandit::client::ParseCommandLine(
      argc, argv, "client/loadtest.cc",
      "graphbandit-loadtest: plays a synthetic graph environment (as in the paper \"Laplacian\n"
      "Kernelized Bandit\": random user graph, item pool, rewards drawn from the Laplacian\n"
      "multi-user kernel, noisy rewards) against a running server and prints throughput,\n"
      "latency percentiles (p50/p90/p99) and regret.\n"
      "Usage: graphbandit-loadtest --target=HOST:PORT [--rounds=N] [--concurrency=C] [...]\n"
      "Example: graphbandit-loadtest --target=127.0.0.1:50051 --rounds=10000 --concurrency=4 "
      "--users=20");
}

// The report's settings from the flags (the environment comes later), or what is wrong.
absl::StatusOr<loadtest::ReportSettings> SettingsFromFlags() {
  loadtest::ReportSettings settings;
  settings.target = absl::GetFlag(FLAGS_target);
  settings.model = absl::GetFlag(FLAGS_model);
  settings.rounds = absl::GetFlag(FLAGS_rounds);
  settings.concurrency = absl::GetFlag(FLAGS_concurrency);
  settings.window = absl::GetFlag(FLAGS_window);
  settings.compare_window = absl::GetFlag(FLAGS_compare_window);
  if (settings.rounds < 1 || settings.concurrency < 1 || settings.window < 1 ||
      settings.compare_window < 1) {
    return absl::InvalidArgumentError(
        "--rounds, --concurrency, --window and --compare_window must be >= 1");
  }
  settings.user_prefix = absl::GetFlag(FLAGS_user_prefix);
  if (settings.user_prefix.empty()) {
    std::random_device device;
    settings.user_prefix = absl::StrFormat("lt-%08x-", device());
  }
  return settings;
}

void ListTasks() {
  for (const auto& [name, options] : sim::RobustnessTaskOptions()) {
    std::printf("%-16s %s\n", name.c_str(), options.label.c_str());
  }
}

// The environment to play, and its description for the report.
struct PlayedEnvironment {
  std::unique_ptr<sim::SimEnvironment> env;
  loadtest::Environment description;
};

// --task: one of the robustness preset's tasks.
absl::StatusOr<PlayedEnvironment> RobustnessTask(const std::string& task, uint64_t seed) {
  std::optional<sim::TaskOptions> found;
  for (const auto& [name, options] : sim::RobustnessTaskOptions()) {
    if (name == task) found = options;
  }
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown --task \"%s\" (see --list_tasks)", task));
  }
  found->seed = seed;
  auto created = sim::TaskEnvironment::Create(*found);
  if (!created.ok()) return created.status();
  PlayedEnvironment played;
  played.env = std::make_unique<sim::TaskEnvironment>(*std::move(created));
  loadtest::Environment& d = played.description;
  d.set_task(task);
  d.set_label(found->label);
  d.set_users(found->users);
  d.set_edges(static_cast<int64_t>(played.env->edges().size()));
  d.set_candidates(found->candidates);
  d.set_dim(found->dim);
  d.set_context_dim(found->context_dim);
  d.set_seed(found->seed);
  return played;
}

// The default environment's options: --users, --pool, --candidates, --dim, --graph,
// --reward_model, --env_* and --seed (checked even with --task, as they always were).
absl::StatusOr<sim::EnvironmentOptions> EnvironmentOptionsFromFlags() {
  sim::EnvironmentOptions options;
  options.users = absl::GetFlag(FLAGS_users);
  options.pool = absl::GetFlag(FLAGS_pool);
  options.candidates = absl::GetFlag(FLAGS_candidates);
  options.dim = absl::GetFlag(FLAGS_dim);
  options.rho = absl::GetFlag(FLAGS_env_rho);
  options.exponent = absl::GetFlag(FLAGS_env_exponent);
  options.seed = absl::GetFlag(FLAGS_seed);
  auto graph_kind = sim::ParseGraphKind(absl::GetFlag(FLAGS_graph));
  if (!graph_kind.ok()) return graph_kind.status();
  options.graph = *graph_kind;
  auto reward_kind = sim::ParseRewardKind(absl::GetFlag(FLAGS_reward_model));
  if (!reward_kind.ok()) return reward_kind.status();
  options.reward = *reward_kind;
  return options;
}

absl::StatusOr<PlayedEnvironment> SyntheticEnvironment(const sim::EnvironmentOptions& options) {
  auto created = sim::Environment::Create(options);
  if (!created.ok()) return created.status();
  auto env = std::make_unique<sim::Environment>(*std::move(created));
  PlayedEnvironment played;
  loadtest::Environment& d = played.description;
  d.set_users(options.users);
  d.set_pool(options.pool);
  d.set_candidates(options.candidates);
  d.set_dim(options.dim);
  d.set_graph(absl::GetFlag(FLAGS_graph));
  d.set_edges(static_cast<int64_t>(env->edges().size()));
  d.set_reward_model(absl::GetFlag(FLAGS_reward_model));
  d.set_rho(options.rho);
  d.set_exponent(options.exponent);
  d.set_noise_std(env->noise_std());
  d.set_seed(options.seed);
  played.env = std::move(env);
  return played;
}

absl::StatusOr<PlayedEnvironment> EnvironmentFromFlags() {
  absl::StatusOr<sim::EnvironmentOptions> options = EnvironmentOptionsFromFlags();
  if (!options.ok()) return options.status();
  const std::string task = absl::GetFlag(FLAGS_task);
  return task.empty() ? SyntheticEnvironment(*options) : RobustnessTask(task, options->seed);
}

absl::StatusOr<loadtest::Session> Connect(const loadtest::ReportSettings& settings) {
  absl::StatusOr<graphbandit::client::Connection> connection =
      graphbandit::client::ConnectFromFlags(settings.target);
  if (!connection.ok()) return connection.status();
  return loadtest::Session::Connect(*std::move(connection), settings.target, settings.model,
                                    std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms)));
}

}  // namespace

int main(int argc, char** argv) {
  ParseFlags(argc, argv);
  absl::StatusOr<loadtest::ReportSettings> settings = SettingsFromFlags();
  if (!settings.ok()) return Fail(settings.status());
  if (absl::GetFlag(FLAGS_list_tasks)) {
    ListTasks();
    return 0;
  }
  absl::StatusOr<PlayedEnvironment> played = EnvironmentFromFlags();
  if (!played.ok()) return Fail(played.status());
  const sim::SimEnvironment& env = *played->env;
  settings->environment = played->description;
  const loadtest::Naming naming{settings->user_prefix};

  absl::StatusOr<loadtest::Session> session = Connect(*settings);
  if (!session.ok()) return Fail(session.status());
  absl::StatusOr<graphbandit::v1::ModelDescription> before = session->CheckModel(env);
  if (!before.ok()) return Fail(before.status());
  if (absl::Status status = session->RegisterGraph(env, naming); !status.ok()) return Fail(status);
  const std::string first_user = naming.UserId(0);
  std::printf("registered %d users (%s0..%d) and %zu edges on model \"%s\" at %s\n", env.users(),
              first_user.substr(0, first_user.size() - 1).c_str(), env.users() - 1,
              env.edges().size(), settings->model.empty() ? "(default)" : settings->model.c_str(),
              settings->target.c_str());

  const loadtest::RunResult run = session->Run(env, naming, settings->rounds, settings->concurrency,
                                               absl::GetFlag(FLAGS_max_seconds));
  const graphbandit::v1::ModelDescription after =
      session->WaitForLearning(absl::GetFlag(FLAGS_learn_wait_seconds));

  const loadtest::Report report = loadtest::BuildReport(*settings, run, *before, after);
  loadtest::PrintReport(report);
  if (const std::string path = absl::GetFlag(FLAGS_report_json); !path.empty()) {
    if (absl::Status status = loadtest::WriteReportJson(report, path); !status.ok()) {
      return Fail(status);
    }
  }
  return loadtest::ExitCode(report);
}
