#include "client/loadtest/generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/base/random.h"

namespace graphbandit::loadtest {
namespace {

namespace v1 = ::graphbandit::v1;
using client::NameModel;
using client::StatusCodeName;

}  // namespace

Workload BuildWorkload(const LoadOptions& options, int ring) {
  const int c = options.candidates, d = options.dim;
  const int items = std::max(options.items, c);
  Rng rng(options.seed);
  std::vector<Eigen::VectorXd> pool(items);
  for (auto& f : pool) {
    f.resize(d);
    for (int i = 0; i < d; ++i) f(i) = rng.Normal() * 0.5;
  }
  Workload w;
  w.direction.resize(d);
  for (int i = 0; i < d; ++i) w.direction(i) = rng.Normal();
  w.direction /= std::max(w.direction.norm(), 1e-9);
  const bool named = options.named_features;
  auto number = [](v1::FeatureNamespace* ns, std::string name, double value) {
    v1::NamedFeature* feature = ns->add_features();
    feature->set_name(std::move(name));
    feature->mutable_value()->set_number(value);
  };
  for (int r = 0; r < ring; ++r) {
    v1::SelectArmRequest request;
    request.set_model(options.model);
    request.set_user_id(absl::StrCat("u", rng.UniformInt(options.users)));
    v1::FeatureNamespace* context = nullptr;
    if (named && options.context_dim > 0) {
      context = request.add_context_features();
      context->set_name("ctx");
    }
    for (int i = 0; i < options.context_dim; ++i) {
      const double value = rng.Normal() * 0.5;
      if (named) {
        number(context, absl::StrCat("c", i), value);
      } else {
        request.add_context(value);
      }
    }
    request.set_slate_size(static_cast<uint32_t>(options.slate_size));
    std::vector<Eigen::VectorXd> chosen;
    // C distinct items: a partial Fisher-Yates shuffle of the pool's indices.
    std::vector<int> index(items);
    for (int i = 0; i < items; ++i) index[i] = i;
    for (int j = 0; j < c; ++j) {
      std::swap(index[j], index[j + rng.UniformInt(items - j)]);
      v1::Arm* arm = request.add_candidates();
      arm->set_id(absl::StrCat("item", index[j]));
      if (named) {
        v1::FeatureNamespace* item = arm->add_named_features();
        item->set_name("item");
        v1::NamedFeature* id = item->add_features();
        id->set_name("id");
        id->mutable_value()->set_text(arm->id());
        for (int i = 0; i < d; ++i) number(item, absl::StrCat("f", i), pool[index[j]](i));
      } else {
        for (int i = 0; i < d; ++i) arm->add_features(pool[index[j]](i));
      }
      chosen.push_back(pool[index[j]]);
    }
    w.requests.push_back(std::move(request));
    w.features.push_back(std::move(chosen));
  }
  return w;
}

Generator::Generator(LoadOptions options, std::vector<client::Connection> channels,
                     Workload workload)
    : options_(std::move(options)),
      channels_(std::move(channels)),
      workload_(std::move(workload)),
      calls_(options_.client_threads) {
  for (const client::Connection& c : channels_) {
    bandit_.push_back(v1::BanditService::NewStub(c.channel));
    admin_.push_back(v1::AdminService::NewStub(c.channel));
    health_.push_back(grpc::health::v1::Health::NewStub(c.channel));
  }
}

Summary Generator::Baseline(int concurrency, double seconds, double rate) {
  SharedTally tally;
  const auto start = Clock::now();
  const auto end = start + ToDuration(seconds);
  Flight flight;
  if (rate > 0) {
    const OpenLoopSchedule schedule(start, rate);
    for (int64_t i = 0;; ++i) {
      if (schedule.Due(i) >= end) break;
      const auto intended = schedule.WaitFor(i);
      flight.WaitBelow(concurrency);
      if (OpenLoopSchedule::Late(intended)) {
        std::lock_guard<std::mutex> lock(tally.mu);
        ++tally.tally.late_sends;
      }
      CheckHealth(static_cast<size_t>(i), intended, /*chain_until=*/start, &tally, &flight);
    }
  } else {
    for (int w = 0; w < concurrency; ++w) {
      CheckHealth(static_cast<size_t>(w), Clock::now(), end, &tally, &flight);
    }
  }
  flight.WaitIdle();
  return Summarise("grpc.health.v1.Health/Check", std::move(tally.tally),
                   rate > 0 ? seconds : Seconds(Clock::now() - start));
}

void Generator::RunPhase(double seconds, int64_t max_requests, bool measure) {
  const bool open = options_.open_loop;
  const int concurrency = std::max(1, options_.concurrency);
  const double rate = options_.rate;
  Phase phase;
  phase.start = Clock::now();
  phase.end = phase.start + ToDuration(seconds);
  phase.max_requests = max_requests;
  phase_started_ = phase.start;
  measuring_ = measure;
  if (open) {
    // The schedule: request i is due at start + i / rate. A request that finds `concurrency`
    // calls in flight waits for one to finish; its latency still counts from when it was due.
    const OpenLoopSchedule schedule(phase.start, rate);
    for (int64_t i = 0;; ++i) {
      if (max_requests > 0 && i >= max_requests) break;
      if (schedule.Due(i) >= phase.end) break;
      const auto intended = schedule.WaitFor(i);
      phase.flight.WaitBelow(concurrency);
      if (OpenLoopSchedule::Late(intended)) {
        std::lock_guard<std::mutex> lock(phase.select.mu);
        ++phase.select.tally.late_sends;
      }
      Decide(static_cast<size_t>(i), intended, &phase, /*chain=*/false);
    }
  } else {
    for (int w = 0; w < concurrency; ++w) {
      const int64_t i = phase.issued.fetch_add(1);
      if (max_requests > 0 && i >= max_requests) break;
      Decide(static_cast<size_t>(i), Clock::now(), &phase, /*chain=*/true);
    }
  }
  phase.flight.WaitIdle();
  const double elapsed = Seconds(Clock::now() - phase.start);
  if (!measure) return;
  select_ = Summarise("graphbandit.v1.BanditService/SelectArm", std::move(phase.select.tally),
                      open ? seconds : elapsed);
  measured_seconds_ = open ? seconds : elapsed;
}

void Generator::StartRewards() {
  reward_timer_ = std::thread([this] {
    for (;;) {
      PendingReward pending;
      {
        std::unique_lock<std::mutex> lock(reward_mu_);
        for (;;) {
          if (!rewards_.empty()) {
            const auto due = rewards_.top().due;
            if (due <= Clock::now()) break;
            reward_cv_.wait_until(lock, due);
            continue;
          }
          if (rewards_stopping_) return;
          reward_cv_.wait(lock);
        }
        pending = rewards_.top();
        rewards_.pop();
      }
      SendReward(std::move(pending));
    }
  });
}

void Generator::StopRewards() {
  {
    std::lock_guard<std::mutex> lock(reward_mu_);
    rewards_stopping_ = true;
  }
  reward_cv_.notify_all();
  if (reward_timer_.joinable()) reward_timer_.join();
  reward_flight_.WaitIdle();
}

void Generator::NoteSlowest(double seconds) {
  const int64_t micros = static_cast<int64_t>(seconds * 1e6);
  int64_t seen = slowest_micros_.load(std::memory_order_relaxed);
  while (micros > seen && !slowest_micros_.compare_exchange_weak(seen, micros)) {
  }
}

void Generator::Progress(const std::atomic<bool>& running) {
  int64_t last_decisions = 0, last_rewards = 0;
  auto last = Clock::now();
  while (running.load()) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto now = Clock::now();
    const int64_t d = decisions_.load(), r = rewards_sent_.load();
    const double dt = Seconds(now - last);
    const double slowest_ms = 1e-3 * static_cast<double>(slowest_micros_.exchange(0));
    std::fprintf(stderr,
                 "[%6.1fs %s] SelectArm %8.0f/s (slowest %7.1f ms)  ReportReward %8.0f/s  "
                 "errors %lld\n",
                 Seconds(now - phase_started_.load()), measuring_ ? "measure" : "warm-up",
                 static_cast<double>(d - last_decisions) / dt, slowest_ms,
                 static_cast<double>(r - last_rewards) / dt,
                 static_cast<long long>(errors_.load()));
    last_decisions = d;
    last_rewards = r;
    last = now;
  }
}

absl::Status Generator::AddRingGraph(int users, int degree) {
  const auto call = [this](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    channels_[0].Authorize(&context, "graphbandit.v1.AdminService");
    NameModel(&context, options_.model);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (admin_[0].get()->*method)(&context, request, response);
  };
  v1::AddUsersRequest add_users;
  add_users.set_model(options_.model);
  for (int u = 0; u < users; ++u) add_users.add_user_ids(absl::StrCat("u", u));
  v1::AddUsersResponse users_added;
  grpc::Status status = call(&v1::AdminService::Stub::AddUsers, add_users, &users_added);
  if (!status.ok())
    return absl::UnavailableError(absl::StrCat("AddUsers: ", status.error_message()));
  v1::AddEdgesRequest add_edges;
  add_edges.set_model(options_.model);
  for (int u = 0; u < users; ++u) {
    for (int step = 1; step <= (degree + 1) / 2 && step < users; ++step) {
      const int v = (u + step) % users;
      if (v == u || (2 * step == users && u >= v)) continue;  // each edge once
      v1::Edge* edge = add_edges.add_edges();
      edge->set_user_a(absl::StrCat("u", u));
      edge->set_user_b(absl::StrCat("u", v));
      edge->set_weight(1.0);
    }
  }
  v1::AddEdgesResponse edges_added;
  status = call(&v1::AdminService::Stub::AddEdges, add_edges, &edges_added);
  if (!status.ok())
    return absl::UnavailableError(absl::StrCat("AddEdges: ", status.error_message()));
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelDescription> Generator::Describe() {
  grpc::ClientContext context;
  channels_[0].Authorize(&context, "graphbandit.v1.AdminService");
  NameModel(&context, options_.model);
  context.set_deadline(std::chrono::system_clock::now() + Deadline());
  v1::DescribeModelRequest request;
  request.set_model(options_.model);
  v1::ModelDescription response;
  const grpc::Status status = admin_[0]->DescribeModel(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("DescribeModel: ", status.error_message()));
  }
  return response;
}

void Generator::Record(SharedTally* shared, const grpc::Status& status, double latency) {
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    ++shared->tally.codes[StatusCodeName(status.error_code())];
    if (status.ok()) shared->tally.latencies.push_back(latency);
  }
  if (!status.ok()) errors_.fetch_add(1);
}

void Generator::CheckHealth(size_t i, Clock::time_point due, Clock::time_point chain_until,
                            SharedTally* tally, Flight* flight) {
  struct Call {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    Clock::time_point due;
  };
  auto* call = new Call;
  call->context.set_deadline(std::chrono::system_clock::now() + Deadline());
  call->due = due;
  flight->Add();
  calls_.Start(
      health_[i % health_.size()]->PrepareAsyncCheck(&call->context, call->request, calls_.cq()),
      &call->response, [this, call, i, chain_until, tally, flight](const grpc::Status& status) {
        Record(tally, status, Seconds(Clock::now() - call->due));
        delete call;
        // The next call of the chain is due when it is sent, after this one's bookkeeping.
        if (const auto now = Clock::now(); now < chain_until) {
          CheckHealth(i + 1, now, chain_until, tally, flight);
        }
        flight->Done();
      });
}

void Generator::Decide(size_t i, Clock::time_point intended, Phase* phase, bool chain) {
  struct Call {
    grpc::ClientContext context;
    v1::SelectArmResponse response;
  };
  auto* call = new Call;
  const size_t r = i % workload_.requests.size();
  const size_t channel = i % bandit_.size();
  channels_[channel].Authorize(&call->context, "graphbandit.v1.BanditService");
  NameModel(&call->context, options_.model);
  call->context.set_deadline(std::chrono::system_clock::now() + Deadline());
  phase->flight.Add();
  calls_.Start(
      bandit_[channel]->PrepareAsyncSelectArm(&call->context, workload_.requests[r], calls_.cq()),
      &call->response, [this, call, i, r, intended, phase, chain](const grpc::Status& status) {
        const double latency = Seconds(Clock::now() - intended);
        Record(&phase->select, status, latency);
        decisions_.fetch_add(1, std::memory_order_relaxed);
        NoteSlowest(latency);
        if (status.ok()) Reward(i, r, call->response);
        delete call;
        if (chain && Clock::now() < phase->end) {
          const int64_t next = phase->issued.fetch_add(1);
          if (phase->max_requests <= 0 || next < phase->max_requests) {
            Decide(static_cast<size_t>(next), Clock::now(), phase, true);
          }
        }
        phase->flight.Done();
      });
}

void Generator::Reward(size_t i, size_t r, const v1::SelectArmResponse& response) {
  Rng rng(options_.seed * 0x9E3779B97F4A7C15ULL + i);
  if (rng.Uniform() >= options_.reward_ratio) return;
  PendingReward pending;
  pending.event_id = response.event_id();
  for (const v1::RankedArm& arm : response.arms()) {
    const size_t k = arm.candidate_index();
    if (k >= workload_.features[r].size()) continue;
    const double value = 0.5 +
                         0.4 * std::tanh(workload_.direction.dot(workload_.features[r][k]) * 2.0) +
                         0.05 * rng.Normal();
    pending.arms.emplace_back(arm.arm_id(), value);
  }
  const double delay_ms = options_.reward_delay_ms;
  if (delay_ms <= 0) {
    SendReward(std::move(pending));
    return;
  }
  pending.due = Clock::now() + ToDuration(delay_ms / 1e3);
  {
    std::lock_guard<std::mutex> lock(reward_mu_);
    rewards_.push(std::move(pending));
  }
  reward_cv_.notify_one();
}

void Generator::SendReward(PendingReward pending) {
  struct Call {
    grpc::ClientContext context;
    v1::ReportRewardRequest request;
    v1::ReportRewardResponse response;
    Clock::time_point sent;
  };
  auto* call = new Call;
  call->request.set_model(options_.model);
  call->request.set_event_id(pending.event_id);
  if (pending.arms.size() == 1) {
    call->request.set_reward(pending.arms[0].second);
  } else {
    for (const auto& [id, value] : pending.arms) {
      v1::ArmReward* arm = call->request.add_arm_rewards();
      arm->set_arm_id(id);
      arm->set_reward(value);
    }
  }
  const size_t channel = static_cast<size_t>(rewards_sent_.fetch_add(1)) % bandit_.size();
  channels_[channel].Authorize(&call->context, "graphbandit.v1.BanditService");
  NameModel(&call->context, options_.model);
  call->context.set_deadline(std::chrono::system_clock::now() + Deadline());
  call->sent = Clock::now();
  reward_flight_.Add();
  calls_.Start(
      bandit_[channel]->PrepareAsyncReportReward(&call->context, call->request, calls_.cq()),
      &call->response, [this, call](const grpc::Status& status) {
        const double latency = Seconds(Clock::now() - call->sent);
        if (measuring_) {
          Record(&reward_tally_, status, latency);
        } else if (!status.ok()) {
          errors_.fetch_add(1);
        }
        if (status.ok()) {
          int64_t accepted = 0;
          std::lock_guard<std::mutex> lock(reward_tally_.mu);
          auto count = [&](v1::RewardOutcome o) {
            ++outcomes_[v1::RewardOutcome_Name(o)];
            if (o == v1::ACCEPTED) ++accepted;
          };
          if (call->response.arm_outcomes_size() > 0) {
            for (const auto& arm : call->response.arm_outcomes()) count(arm.outcome());
          } else {
            count(call->response.outcome());
          }
          accepted_total_.fetch_add(accepted);
        }
        delete call;
        reward_flight_.Done();
      });
}

}  // namespace graphbandit::loadtest
