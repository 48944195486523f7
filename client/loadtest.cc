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
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/connection.h"
#include "sim/environment.h"
#include "sim/presets.h"
#include "sim/robustness.h"
#include "sim/task_environment.h"
#include "graphbandit/v1/bandit.grpc.pb.h"

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
ABSL_FLAG(double, env_exponent, 1.0, "p of the environment's user kernel (the paper's appendix uses 0.5).");
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

namespace v1 = graphbandit::v1;
using graphbandit::sim::Environment;

struct Sample {
  double regret = NAN;  // NaN: the round failed
  double select_ms = NAN;
  double reward_ms = NAN;
};

struct Percentiles {
  double p50 = NAN, p90 = NAN, p99 = NAN, mean = NAN, max = NAN;
  int64_t count = 0;
};

Percentiles Summarise(std::vector<double> values) {
  Percentiles p;
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  p.count = static_cast<int64_t>(values.size());
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  auto rank = [&values](double q) {  // nearest-rank percentile
    const size_t index = static_cast<size_t>(std::ceil(q * values.size()));
    return values[std::min(values.size() - 1, index == 0 ? 0 : index - 1)];
  };
  p.p50 = rank(0.50);
  p.p90 = rank(0.90);
  p.p99 = rank(0.99);
  p.max = values.back();
  double sum = 0.0;
  for (double v : values) sum += v;
  p.mean = sum / values.size();
  return p;
}

std::string Json(double v) { return std::isfinite(v) ? absl::StrFormat("%.6g", v) : "null"; }

std::string JsonPercentiles(const Percentiles& p) {
  return absl::StrFormat(R"({"count": %d, "p50": %s, "p90": %s, "p99": %s, "mean": %s, "max": %s})",
                         p.count, Json(p.p50), Json(p.p90), Json(p.p99), Json(p.mean), Json(p.max));
}

// Average regret over the completed rounds in [begin, end).
double AverageRegret(const std::vector<Sample>& samples, int64_t begin, int64_t end) {
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t r = std::max<int64_t>(begin, 0); r < std::min<int64_t>(end, samples.size()); ++r) {
    if (!std::isnan(samples[r].regret)) {
      sum += samples[r].regret;
      ++count;
    }
  }
  return count > 0 ? sum / count : NAN;
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms));
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "graphbandit-loadtest: %s\n", message.c_str());
  return 1;
}

std::string StatusText(const grpc::Status& status) {
  return absl::StrFormat("%d (%s)", status.error_code(), status.error_message());
}

}  // namespace

int main(int argc, char** argv) {
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "client/loadtest.cc") ||
           graphbandit::client::IsConnectionFlagFile(std::string(path).c_str());
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "plays a synthetic graph environment (ALGORITHMS.md §1.9: random user graph, item pool,\n"
      "rewards drawn from the Laplacian multi-user kernel, noisy rewards) against a running\n"
      "server and prints throughput, latency percentiles (p50/p90/p99) and regret.\n"
      "Example: graphbandit-loadtest --target=127.0.0.1:50051 --rounds=10000 --concurrency=4 "
      "--users=20");
  absl::ParseCommandLine(argc, argv);
  const int64_t rounds = absl::GetFlag(FLAGS_rounds);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int64_t window = absl::GetFlag(FLAGS_window);
  const int64_t compare = absl::GetFlag(FLAGS_compare_window);
  if (rounds < 1 || concurrency < 1 || window < 1 || compare < 1) {
    return Fail("--rounds, --concurrency, --window and --compare_window must be >= 1");
  }

  if (absl::GetFlag(FLAGS_list_tasks)) {
    for (const auto& [name, options] : graphbandit::sim::RobustnessTaskOptions()) {
      std::printf("%-16s %s\n", name.c_str(), options.label.c_str());
    }
    return 0;
  }
  graphbandit::sim::EnvironmentOptions env_options;
  env_options.users = absl::GetFlag(FLAGS_users);
  env_options.pool = absl::GetFlag(FLAGS_pool);
  env_options.candidates = absl::GetFlag(FLAGS_candidates);
  env_options.dim = absl::GetFlag(FLAGS_dim);
  env_options.rho = absl::GetFlag(FLAGS_env_rho);
  env_options.exponent = absl::GetFlag(FLAGS_env_exponent);
  env_options.seed = absl::GetFlag(FLAGS_seed);
  auto graph_kind = graphbandit::sim::ParseGraphKind(absl::GetFlag(FLAGS_graph));
  if (!graph_kind.ok()) return Fail(std::string(graph_kind.status().message()));
  env_options.graph = *graph_kind;
  auto reward_kind = graphbandit::sim::ParseRewardKind(absl::GetFlag(FLAGS_reward_model));
  if (!reward_kind.ok()) return Fail(std::string(reward_kind.status().message()));
  env_options.reward = *reward_kind;
  std::unique_ptr<graphbandit::sim::SimEnvironment> env_holder;
  std::string environment_json;
  if (const std::string task = absl::GetFlag(FLAGS_task); !task.empty()) {
    std::optional<graphbandit::sim::TaskOptions> found;
    for (const auto& [name, options] : graphbandit::sim::RobustnessTaskOptions()) {
      if (name == task) found = options;
    }
    if (!found) return Fail(absl::StrFormat("unknown --task \"%s\" (see --list_tasks)", task));
    found->seed = env_options.seed;
    auto created = graphbandit::sim::TaskEnvironment::Create(*found);
    if (!created.ok()) return Fail(std::string(created.status().message()));
    env_holder = std::make_unique<graphbandit::sim::TaskEnvironment>(*std::move(created));
    environment_json = absl::StrFormat(
        R"({"task": "%s", "label": "%s", "users": %d, "edges": %d, "candidates": %d, "dim": %d, "context_dim": %d, "seed": %d})",
        task, found->label, found->users, env_holder->edges().size(), found->candidates,
        found->dim, found->context_dim, found->seed);
  } else {
    auto created = Environment::Create(env_options);
    if (!created.ok()) return Fail(std::string(created.status().message()));
    auto lk = std::make_unique<Environment>(*std::move(created));
    environment_json = absl::StrFormat(
        R"({"users": %d, "pool": %d, "candidates": %d, "dim": %d, "graph": "%s", "edges": %d, "reward_model": "%s", "rho": %g, "exponent": %g, "noise_std": %g, "seed": %d})",
        env_options.users, env_options.pool, env_options.candidates, env_options.dim,
        absl::GetFlag(FLAGS_graph), lk->edges().size(), absl::GetFlag(FLAGS_reward_model),
        env_options.rho, env_options.exponent, lk->noise_std(), env_options.seed);
    env_holder = std::move(lk);
  }
  const graphbandit::sim::SimEnvironment& env = *env_holder;
  const int env_users = env.users();
  const int env_context = env.context_dim();
  const int env_dim = env.arm_dim();

  std::string prefix = absl::GetFlag(FLAGS_user_prefix);
  if (prefix.empty()) {
    std::random_device device;
    prefix = absl::StrFormat("lt-%08x-", device());
  }
  auto user_id = [&prefix](int u) { return absl::StrCat(prefix, "u", u); };
  auto item_id = [](int i) { return absl::StrCat("item", i); };
  const std::string target = absl::GetFlag(FLAGS_target);
  const std::string model = absl::GetFlag(FLAGS_model);

  const absl::StatusOr<graphbandit::client::Connection> connection =
      graphbandit::client::ConnectFromFlags(target);
  if (!connection.ok()) return Fail(std::string(connection.status().message()));
  const std::shared_ptr<grpc::Channel>& channel = connection->channel;
  if (!channel->WaitForConnected(Deadline())) {
    return Fail(absl::StrFormat("cannot reach a server at %s", target));
  }
  auto bandit = v1::BanditService::NewStub(channel);
  auto admin = v1::AdminService::NewStub(channel);

  // The model must accept this environment's features.
  uint64_t learned_before = 0;
  {
    grpc::ClientContext context;
    connection->Authorize(&context, "graphbandit.v1.AdminService");
    context.set_deadline(Deadline());
    v1::DescribeModelRequest request;
    request.set_model(model);
    v1::ModelDescription description;
    grpc::Status status = admin->DescribeModel(&context, request, &description);
    if (!status.ok()) return Fail("DescribeModel failed: " + StatusText(status));
    if (description.dimensions_fixed() &&
        (description.context_dim() != static_cast<uint32_t>(env_context) ||
         description.arm_feature_dim() != static_cast<uint32_t>(env_dim))) {
      return Fail(absl::StrFormat(
          "model \"%s\" takes %d context values and %d arm features; this environment sends %d "
          "and %d. Use another --model (or --dim for the default environment).",
          description.name(), description.context_dim(), description.arm_feature_dim(),
          env_context, env_dim));
    }
    learned_before = description.rewards_learned();
  }
  // Register the environment's user graph.
  {
    grpc::ClientContext context;
    connection->Authorize(&context, "graphbandit.v1.AdminService");
    context.set_deadline(Deadline());
    v1::AddUsersRequest request;
    request.set_model(model);
    for (int u = 0; u < env_users; ++u) request.add_user_ids(user_id(u));
    v1::AddUsersResponse response;
    grpc::Status status = admin->AddUsers(&context, request, &response);
    if (!status.ok()) return Fail("AddUsers failed: " + StatusText(status));
  }
  constexpr size_t kEdgesPerCall = 10000;
  for (size_t start = 0; start < env.edges().size(); start += kEdgesPerCall) {
    grpc::ClientContext context;
    connection->Authorize(&context, "graphbandit.v1.AdminService");
    context.set_deadline(Deadline() + std::chrono::seconds(60));  // may trigger a rebuild
    v1::AddEdgesRequest request;
    request.set_model(model);
    for (size_t e = start; e < std::min(env.edges().size(), start + kEdgesPerCall); ++e) {
      v1::Edge* edge = request.add_edges();
      edge->set_user_a(user_id(env.edges()[e].a));
      edge->set_user_b(user_id(env.edges()[e].b));
      edge->set_weight(env.edges()[e].weight);
    }
    v1::AddEdgesResponse response;
    grpc::Status status = admin->AddEdges(&context, request, &response);
    if (!status.ok()) return Fail("AddEdges failed: " + StatusText(status));
  }
  std::printf("registered %d users (%s0..%d) and %zu edges on model \"%s\" at %s\n",
              env_users, user_id(0).substr(0, user_id(0).size() - 1).c_str(),
              env_users - 1, env.edges().size(), model.empty() ? "(default)" : model.c_str(),
              target.c_str());

  std::vector<Sample> samples(rounds);
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> next_round{0};
  absl::Mutex errors_mu;
  std::map<std::string, int64_t> errors;
  const auto start = std::chrono::steady_clock::now();
  const auto stop_at = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(absl::GetFlag(FLAGS_max_seconds)));
  auto elapsed_ms = [](std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
  };
  auto record_error = [&](const std::string& rpc, const grpc::Status& status) {
    absl::MutexLock lock(&errors_mu);
    ++errors[absl::StrCat(rpc, " ", status.error_code())];
  };

  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (;;) {
        const int64_t r = next_round.fetch_add(1);
        if (r >= rounds || std::chrono::steady_clock::now() > stop_at) return;
        const graphbandit::sim::Round round = env.MakeRound(static_cast<uint64_t>(r));
        v1::SelectArmRequest select;
        select.set_model(model);
        select.set_user_id(user_id(round.user));
        for (int i = 0; i < round.context.size(); ++i) select.add_context(round.context(i));
        for (Eigen::Index k = 0; k < round.arms.cols(); ++k) {
          v1::Arm* arm = select.add_candidates();
          // Pool items keep their id; fresh candidates get one of their own.
          arm->set_id(k < static_cast<Eigen::Index>(round.items.size())
                          ? item_id(round.items[k])
                          : absl::StrCat("r", r, "-c", k));
          for (int i = 0; i < env_dim; ++i) arm->add_features(round.arms(i, k));
        }
        v1::SelectArmResponse decision;
        auto t0 = std::chrono::steady_clock::now();
        grpc::ClientContext select_context;
        connection->Authorize(&select_context, "graphbandit.v1.BanditService");
        select_context.set_deadline(Deadline());
        grpc::Status status = bandit->SelectArm(&select_context, select, &decision);
        samples[r].select_ms = elapsed_ms(t0);
        if (!status.ok() || decision.arms_size() != 1) {
          record_error("SelectArm", status);
          continue;
        }
        const int slot = static_cast<int>(decision.arms(0).candidate_index());
        v1::ReportRewardRequest report;
        report.set_event_id(decision.event_id());
        report.set_model(model);
        report.set_reward(env.Reward(round, slot));
        v1::ReportRewardResponse outcome;
        t0 = std::chrono::steady_clock::now();
        grpc::ClientContext reward_context;
        connection->Authorize(&reward_context, "graphbandit.v1.BanditService");
        reward_context.set_deadline(Deadline());
        status = bandit->ReportReward(&reward_context, report, &outcome);
        samples[r].reward_ms = elapsed_ms(t0);
        if (!status.ok() || outcome.outcome() != v1::ACCEPTED) {
          record_error("ReportReward", status.ok() ? grpc::Status(grpc::StatusCode::UNKNOWN,
                                                                  "reward not accepted")
                                                   : status);
          continue;
        }
        samples[r].regret = env.Regret(round, slot);
        accepted.fetch_add(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  const double seconds = elapsed_ms(start) / 1000.0;

  int64_t completed = 0;
  double cumulative = 0.0;
  std::vector<double> select_ms, reward_ms;
  for (const Sample& s : samples) {
    if (!std::isnan(s.regret)) {
      ++completed;
      cumulative += s.regret;
    }
    select_ms.push_back(s.select_ms);
    reward_ms.push_back(s.reward_ms);
  }
  const Percentiles select_p = Summarise(select_ms), reward_p = Summarise(reward_ms);
  const int64_t played = std::min<int64_t>(next_round.load(), rounds);
  const double first = AverageRegret(samples, 0, compare);
  const double last = AverageRegret(samples, played - compare, played);

  // Rewards are learned asynchronously: give the model up to --learn_wait_seconds to apply
  // what is queued, then compare what it learned with what it acknowledged.
  v1::ModelDescription after;
  const auto wait_until =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(1000 * absl::GetFlag(FLAGS_learn_wait_seconds)));
  for (;;) {
    grpc::ClientContext context;
    connection->Authorize(&context, "graphbandit.v1.AdminService");
    context.set_deadline(Deadline());
    v1::DescribeModelRequest request;
    request.set_model(model);
    const bool described = admin->DescribeModel(&context, request, &after).ok();
    if (!described || after.queued_operations() == 0 ||
        std::chrono::steady_clock::now() > wait_until) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int64_t learned = static_cast<int64_t>(after.rewards_learned()) -
                          static_cast<int64_t>(learned_before);

  std::printf("rounds: %lld completed of %lld requested, %lld failed, concurrency %d, %.2f s\n",
              static_cast<long long>(completed), static_cast<long long>(rounds),
              static_cast<long long>(played - completed), concurrency, seconds);
  std::printf("throughput: %.1f rounds/s (%.1f RPC/s)\n", completed / seconds,
              2.0 * completed / seconds);
  std::printf("latency SelectArm    (ms): p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", select_p.p50,
              select_p.p90, select_p.p99, select_p.max);
  std::printf("latency ReportReward (ms): p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", reward_p.p50,
              reward_p.p90, reward_p.p99, reward_p.max);
  std::printf("cumulative regret: %.4f\n", cumulative);
  std::printf("average regret per window of %lld rounds:\n", static_cast<long long>(window));
  std::string windows_json;
  for (int64_t begin = 0; begin < played; begin += window) {
    const int64_t end = std::min(begin + window, played);
    const double average = AverageRegret(samples, begin, end);
    std::printf("  rounds %6lld-%-6lld %.5f\n", static_cast<long long>(begin),
                static_cast<long long>(end - 1), average);
    absl::StrAppend(&windows_json, windows_json.empty() ? "" : ", ",
                    absl::StrFormat(R"({"start": %d, "end": %d, "average": %s})", begin, end,
                                    Json(average)));
  }
  std::printf("average regret: first %lld rounds %.5f, last %lld rounds %.5f, last/first %.3f\n",
              static_cast<long long>(compare), first, static_cast<long long>(compare), last,
              last / first);
  std::printf("model after the run: %llu rewards learned, dictionary size %llu, %llu users\n",
              static_cast<unsigned long long>(after.rewards_learned()),
              static_cast<unsigned long long>(after.dictionary_size()),
              static_cast<unsigned long long>(after.users()));
  std::printf("learned during the run: %lld of %lld acknowledged rewards%s\n",
              static_cast<long long>(learned), static_cast<long long>(accepted.load()),
              learned >= accepted.load() ? "" : " (NOT ALL LEARNED)");
  std::vector<std::string> error_items;
  for (const auto& [key, count] : errors) {
    std::printf("errors: %s x %lld\n", key.c_str(), static_cast<long long>(count));
    error_items.push_back(absl::StrFormat("\"%s\": %d", key, count));
  }

  if (const std::string path = absl::GetFlag(FLAGS_report_json); !path.empty()) {
    std::ofstream out(path);
    out << "{\n"
        << absl::StrFormat(R"(  "target": "%s", "model": "%s", "user_prefix": "%s",)", target, model, prefix) << "\n"
        << absl::StrFormat(R"(  "rounds_requested": %d, "rounds_completed": %d, "rounds_failed": %d, "concurrency": %d,)",
                           rounds, completed, played - completed, concurrency) << "\n"
        << absl::StrFormat(R"(  "environment": %s,)", environment_json) << "\n"
        << absl::StrFormat(R"(  "elapsed_seconds": %s,)", Json(seconds)) << "\n"
        << absl::StrFormat(R"(  "throughput": {"rounds_per_second": %s, "rpcs_per_second": %s},)",
                           Json(completed / seconds), Json(2.0 * completed / seconds)) << "\n"
        << absl::StrFormat(R"(  "latency_ms": {"select_arm": %s, "report_reward": %s},)",
                           JsonPercentiles(select_p), JsonPercentiles(reward_p)) << "\n"
        << absl::StrFormat(R"(  "regret": {"cumulative": %s, "window": %d, "windows": [%s], "compare_window": %d, "first_average": %s, "last_average": %s, "last_over_first": %s},)",
                           Json(cumulative), window, windows_json, compare, Json(first), Json(last), Json(last / first)) << "\n"
        << absl::StrFormat(R"(  "model_after": {"rewards_learned": %d, "dictionary_size": %d, "users": %d, "edges": %d},)",
                           after.rewards_learned(), after.dictionary_size(), after.users(), after.edges()) << "\n"
        << absl::StrFormat(R"(  "learned": {"acknowledged": %d, "learned": %d},)", accepted.load(), learned) << "\n"
        << "  \"errors\": {" << absl::StrJoin(error_items, ", ") << "}\n"
        << "}\n";
    if (!out) return Fail(absl::StrFormat("cannot write %s", path));
  }
  if (learned < accepted.load()) return 4;
  return completed == rounds ? 0 : 3;
}
