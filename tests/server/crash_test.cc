// Crash recovery of the real server: drive graphbandit-server (on loopback) with a bounded load,
// kill -9 it at random moments several times, restart it on the same state directory each time,
// and check that
//  * every reward acknowledged with ACCEPTED is learned, none twice: after the rewards whose
//    answer was lost in a crash are retried (ACCEPTED if the crash lost them, DUPLICATE if they
//    had been logged), the model's count of learned rewards equals the number of distinct
//    rewards acknowledged;
//  * a crash right after the load leaves a state that recovers bit-identically: the same probe
//    request gets the same means and standard deviations before the crash and after recovery;
//  * SIGTERM after all this stops the server with exit status 0.
// With a POLICY (e.g. SEMI_GRAPH_TS, whose rewards are learned with the selection probabilities
// of their decision) the default model uses it, the probe scores each candidate alone (a
// one-arm decision is forced, so the scores depend on the state only), and decisions left open
// across the final crash come back with the same arm and probability and are then learned.
//
// usage: crash_test SERVER_BINARY [SEED [POLICY]]
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "graphbandit/v1/bandit.grpc.pb.h"

namespace v1 = graphbandit::v1;

namespace {

constexpr int kCrashes = 5;
constexpr int kThreads = 3;
constexpr int kCandidates = 5;
constexpr int kUsers = 12;
constexpr int kMaxRoundsPerThread = 2000;  // per life of the server: the load is bounded

int failures = 0;
#define CHECK_THAT(cond, ...)                                                \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                     \
      std::fprintf(stderr, "\n");                                            \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

std::chrono::system_clock::time_point In(int milliseconds) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(milliseconds);
}

class ServerProcess {
 public:
  ServerProcess(std::string binary, std::string work)
      : binary_(std::move(binary)), work_(std::move(work)) {}
  ~ServerProcess() {
    if (pid_ > 0) Kill();
  }

  bool Start() {
    const std::string ports = work_ + "/ports";
    std::filesystem::remove(ports);
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = work_ + "/server.log";
      FILE* out = std::freopen(log.c_str(), "a", stderr);
      (void)out;
      const std::string state = "--state_dir=" + work_ + "/state";
      const std::string config = "--config=" + work_ + "/config.textproto";
      const std::string port_file = "--port_file=" + ports;
      execl(binary_.c_str(), binary_.c_str(), "--listen=127.0.0.1:0",
            "--metrics_listen=", state.c_str(), config.c_str(), port_file.c_str(),
            static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 300; ++i) {  // up to 30 s
      std::ifstream in(ports);
      int grpc_port = 0;
      if (in >> grpc_port && grpc_port > 0) {
        target_ = "127.0.0.1:" + std::to_string(grpc_port);
        return true;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  void Kill() {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // SIGTERM; returns the exit status (-1 if it did not exit normally within 60 s).
  int Terminate() {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    Kill();
    return -1;
  }

  const std::string& target() const { return target_; }

 private:
  std::string binary_;
  std::string work_;
  pid_t pid_ = -1;
  std::string target_;
};

// Deterministic candidate features and rewards: arm a's reward for user u.
std::vector<double> Features(int arm) {
  return {std::cos(arm * 1.3), std::sin(arm * 1.3), 0.2 * arm};
}
double RewardFor(int user, int arm) { return ((user * 3 + arm * 5) % 7) / 7.0; }

v1::SelectArmRequest Request(int user, const std::string& event_id, int slate) {
  v1::SelectArmRequest request;
  request.set_user_id("u" + std::to_string(user));
  for (int a = 0; a < kCandidates; ++a) {
    v1::Arm* arm = request.add_candidates();
    arm->set_id("arm" + std::to_string(a));
    for (double x : Features(a)) arm->add_features(x);
  }
  request.set_slate_size(slate);
  if (!event_id.empty()) request.set_event_id(event_id);
  return request;
}

struct Ledger {
  absl::Mutex mu;
  // Distinct rewards answered ACCEPTED (or DUPLICATE on a retry).
  int64_t acknowledged ABSL_GUARDED_BY(mu) = 0;
  // Sent, answer lost.
  std::vector<std::pair<std::string, double>> in_doubt ABSL_GUARDED_BY(mu);
};

// One load thread for one life of the server: SelectArm then ReportReward until the server
// dies or `stop` is set.
void Load(const std::string& target, int cycle, int thread, std::atomic<bool>* stop,
          Ledger* ledger) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::BanditService::NewStub(channel);
  for (int i = 0; i < kMaxRoundsPerThread && !stop->load(); ++i) {
    const int user = (i * 7 + thread * 5 + cycle) % kUsers;
    const std::string event_id =
        "c" + std::to_string(cycle) + "-t" + std::to_string(thread) + "-" + std::to_string(i);
    grpc::ClientContext select_context;
    select_context.set_deadline(In(5000));
    v1::SelectArmResponse decision;
    if (!stub->SelectArm(&select_context, Request(user, event_id, 1), &decision).ok()) return;
    const int arm = std::atoi(decision.arms(0).arm_id().c_str() + 3);
    const double reward = RewardFor(user, arm);
    v1::ReportRewardRequest report;
    report.set_event_id(event_id);
    report.set_reward(reward);
    grpc::ClientContext reward_context;
    reward_context.set_deadline(In(5000));
    v1::ReportRewardResponse answer;
    const grpc::Status status = stub->ReportReward(&reward_context, report, &answer);
    absl::MutexLock lock(&ledger->mu);
    if (!status.ok()) {
      ledger->in_doubt.emplace_back(event_id, reward);
      return;
    }
    CHECK_THAT(answer.outcome() == v1::ACCEPTED, "event %s: outcome %d", event_id.c_str(),
               answer.outcome());
    ++ledger->acknowledged;
  }
}

std::unique_ptr<v1::AdminService::Stub> Admin(const std::string& target) {
  return v1::AdminService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

// Waits until the writer has applied everything logged; returns the model description.
v1::ModelDescription Settled(const std::string& target) {
  auto admin = Admin(target);
  v1::ModelDescription description;
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext context;
    context.set_deadline(In(5000));
    description.Clear();
    if (admin->DescribeModel(&context, v1::DescribeModelRequest(), &description).ok() &&
        description.queued_operations() == 0 && description.rewards_staged() == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return description;
}

// The means and deviations of every candidate for three users: one slate of all of them, or
// (one_at_a_time, for policies that show one arm) a one-candidate decision per candidate.
std::vector<double> Probe(const std::string& target, bool one_at_a_time) {
  auto stub =
      v1::BanditService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  std::vector<double> scores;
  for (int user : {0, 5, 11}) {
    std::vector<v1::SelectArmRequest> requests;
    if (one_at_a_time) {
      for (int a = 0; a < kCandidates; ++a) {
        v1::SelectArmRequest one = Request(user, "", 1);
        v1::Arm only = one.candidates(a);
        one.clear_candidates();
        *one.add_candidates() = only;
        requests.push_back(one);
      }
    } else {
      requests.push_back(Request(user, "", kCandidates));
    }
    for (const v1::SelectArmRequest& request : requests) {
      grpc::ClientContext context;
      context.set_deadline(In(5000));
      v1::SelectArmResponse response;
      const grpc::Status status = stub->SelectArm(&context, request, &response);
      CHECK_THAT(status.ok(), "probe: %s", status.error_message().c_str());
      for (const v1::RankedArm& arm : response.arms()) {
        scores.push_back(arm.mean());
        scores.push_back(arm.stddev());
      }
    }
  }
  return scores;
}

// Decisions for three users, left open: (event id, arm, selection probability).
struct OpenDecision {
  std::string event_id, arm;
  double probability = 0.0;
};

std::vector<OpenDecision> Decide(const std::string& target) {
  auto stub =
      v1::BanditService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  std::vector<OpenDecision> decisions;
  for (int user : {1, 4, 7}) {
    const std::string event_id = "open-u" + std::to_string(user);
    grpc::ClientContext context;
    context.set_deadline(In(5000));
    v1::SelectArmResponse response;
    const grpc::Status status = stub->SelectArm(&context, Request(user, event_id, 1), &response);
    CHECK_THAT(status.ok() && response.arms_size() == 1, "open decision: %s",
               status.error_message().c_str());
    if (!status.ok() || response.arms_size() != 1) continue;
    decisions.push_back(
        {event_id, response.arms(0).arm_id(), response.arms(0).selection_probability()});
  }
  return decisions;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SERVER_BINARY [SEED]\n", argv[0]);
    return 2;
  }
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 20261121u;
  const std::string policy = argc > 3 ? argv[3] : "";
  const bool one_arm = !policy.empty();
  std::mt19937 rng(seed);
  char pattern[] = "/tmp/graphbandit-crash.XXXXXX";
  const std::string work = mkdtemp(pattern);
  {
    // Frequent snapshots, so that crashes land before, during and after them.
    std::ofstream config(work + "/config.textproto");
    config << "durability { snapshot_every_records: 300 }\n";
    if (!policy.empty()) {
      config << "models { name: \"default\" policy: " << policy
             << " ledger { aggregation: FIRST } }\n";
    }
  }
  std::printf("crash test: seed %u, policy %s, work dir %s\n", seed,
              policy.empty() ? "default" : policy.c_str(), work.c_str());

  ServerProcess server(argv[1], work);
  Ledger ledger;
  const auto started = std::chrono::steady_clock::now();
  for (int cycle = 0; cycle <= kCrashes; ++cycle) {
    if (!server.Start()) {
      std::fprintf(stderr, "FAILED: the server did not start (cycle %d); its log:\n", cycle);
      std::system(("cat " + work + "/server.log >&2").c_str());
      return 1;
    }
    if (cycle == 0) {  // a graph, so that users share what they learn
      auto admin = Admin(server.target());
      v1::AddEdgesRequest edges;
      for (int u = 0; u + 1 < kUsers; u += 2) {
        v1::Edge* edge = edges.add_edges();
        edge->set_user_a("u" + std::to_string(u));
        edge->set_user_b("u" + std::to_string(u + 1));
        edge->set_weight(1.0);
      }
      grpc::ClientContext context;
      context.set_deadline(In(10000));
      v1::AddEdgesResponse added;
      const grpc::Status status = admin->AddEdges(&context, edges, &added);
      CHECK_THAT(status.ok(), "AddEdges: %s", status.error_message().c_str());
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back(Load, server.target(), cycle, t, &stop, &ledger);
    }
    if (cycle < kCrashes) {
      std::uniform_int_distribution<int> moment(100, 900);
      const int ms = moment(rng);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      server.Kill();
      for (auto& t : threads) t.join();
      absl::MutexLock lock(&ledger.mu);
      std::printf("crash %d after %d ms: %lld rewards acknowledged so far, %zu in doubt\n",
                  cycle + 1, ms, static_cast<long long>(ledger.acknowledged),
                  ledger.in_doubt.size());
      continue;
    }
    // The last life: finish the load, settle, probe, then crash right after.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
    for (auto& t : threads) t.join();
  }
  // The load threads are gone; the lock states that the ledger is read here alone.
  absl::MutexLock ledger_lock(&ledger.mu);

  // Retry the rewards whose answers were lost: each is either learned already (DUPLICATE) or
  // not (ACCEPTED now); either way it is acknowledged exactly once.
  {
    auto stub = v1::BanditService::NewStub(
        grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
    int duplicates = 0, accepted = 0;
    for (const auto& [event_id, reward] : ledger.in_doubt) {
      v1::ReportRewardRequest report;
      report.set_event_id(event_id);
      report.set_reward(reward);
      grpc::ClientContext context;
      context.set_deadline(In(5000));
      v1::ReportRewardResponse answer;
      const grpc::Status status = stub->ReportReward(&context, report, &answer);
      CHECK_THAT(status.ok(), "retry of %s: %s", event_id.c_str(), status.error_message().c_str());
      CHECK_THAT(answer.outcome() == v1::ACCEPTED || answer.outcome() == v1::DUPLICATE,
                 "retry of %s: outcome %d (the decision must have survived)", event_id.c_str(),
                 answer.outcome());
      answer.outcome() == v1::DUPLICATE ? ++duplicates : ++accepted;
      ++ledger.acknowledged;
    }
    std::printf(
        "%zu rewards in doubt retried: %d had been logged (DUPLICATE), %d had not (ACCEPTED)\n",
        ledger.in_doubt.size(), duplicates, accepted);
  }
  const v1::ModelDescription settled = Settled(server.target());
  std::printf("acknowledged %lld rewards; the model has learned %lld\n",
              static_cast<long long>(ledger.acknowledged),
              static_cast<long long>(settled.rewards_learned()));
  CHECK_THAT(static_cast<int64_t>(settled.rewards_learned()) == ledger.acknowledged,
             "learned %lld != acknowledged %lld", static_cast<long long>(settled.rewards_learned()),
             static_cast<long long>(ledger.acknowledged));
  CHECK_THAT(ledger.acknowledged > 100, "too little load to mean anything: %lld",
             static_cast<long long>(ledger.acknowledged));

  // Bit-identical recovery: probe, kill -9, restart, probe again.
  const std::vector<OpenDecision> open = Decide(server.target());
  const std::vector<double> before = Probe(server.target(), one_arm);
  server.Kill();
  CHECK_THAT(server.Start(), "restart after the final crash");
  const std::vector<double> after = Probe(server.target(), one_arm);
  CHECK_THAT(before == after, "probe scores differ after recovery");
  // The open decisions survived with their arm and probability (a retry returns the stored
  // decision), and their rewards are learned now.
  {
    const std::vector<OpenDecision> again = Decide(server.target());
    CHECK_THAT(again.size() == open.size(), "open decisions: %zu of %zu", again.size(),
               open.size());
    auto stub = v1::BanditService::NewStub(
        grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
    for (size_t i = 0; i < open.size() && i < again.size(); ++i) {
      CHECK_THAT(again[i].arm == open[i].arm && again[i].probability == open[i].probability,
                 "%s: arm %s p %.17g before the crash, %s p %.17g after", open[i].event_id.c_str(),
                 open[i].arm.c_str(), open[i].probability, again[i].arm.c_str(),
                 again[i].probability);
      v1::ReportRewardRequest report;
      report.set_event_id(open[i].event_id);
      report.set_reward(0.5);
      grpc::ClientContext context;
      context.set_deadline(In(5000));
      v1::ReportRewardResponse answer;
      const grpc::Status status = stub->ReportReward(&context, report, &answer);
      CHECK_THAT(status.ok() && answer.outcome() == v1::ACCEPTED, "reward for %s: %s / %d",
                 open[i].event_id.c_str(), status.error_message().c_str(), answer.outcome());
      if (status.ok() && answer.outcome() == v1::ACCEPTED) ++ledger.acknowledged;
    }
    std::printf("%zu decisions open across the crash: same arm and probability after it\n",
                open.size());
  }
  const v1::ModelDescription recovered = Settled(server.target());
  CHECK_THAT(static_cast<int64_t>(recovered.rewards_learned()) == ledger.acknowledged,
             "after the final crash: learned %lld",
             static_cast<long long>(recovered.rewards_learned()));
  if (before == after) {
    std::printf(
        "probe: %zu means and deviations bit-identical before the crash and after recovery\n",
        before.size());
  }

  const int exit_status = server.Terminate();
  CHECK_THAT(exit_status == 0, "SIGTERM: exit status %d", exit_status);
  std::ifstream log(work + "/server.log");
  std::string line;
  while (std::getline(log, line)) {
    if (line.find("WARNING") != std::string::npos ||
        line.find("snapshot at record") != std::string::npos) {
      std::printf("  server: %s\n", line.c_str());
    }
  }
  std::printf("%.1f s in all\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (failures == 0) {
    std::filesystem::remove_all(work);
    std::printf("PASS\n");
    return 0;
  }
  std::fprintf(stderr, "%d check(s) failed; state and server log kept in %s\n", failures,
               work.c_str());
  return 1;
}
