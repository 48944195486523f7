#include "sim/runner.h"

#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/base/random.h"
#include "core/policy/decision_step.h"
#include "core/policy/evaluation.h"

namespace graphbandit::sim {
namespace {

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

// CPU time this thread has used (seconds).
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

RunOutput Run(const RunSpec& spec, std::atomic<int64_t>* steps_done) {
  const double heap_at_start = static_cast<double>(mallinfo2().uordblks);
  RunOutput out;
  out.result.environment = spec.environment;
  out.result.policy = spec.policy.name;
  out.result.seed = spec.seed;
  auto env = spec.make_environment(spec.seed);
  if (!env.ok()) {
    out.error = std::string(env.status().message());
    return out;
  }
  const auto* navigation = dynamic_cast<const NavigationEnvironment*>(env->get());
  if (spec.policy.route.has_value() != (navigation != nullptr)) {
    out.error = "ROUTE policies run on the navigation environment, and only they do";
    return out;
  }
  if (navigation != nullptr) {
    RouteRun run = RunRoutes(*navigation, *spec.policy.route, spec.rounds, spec.sample_points,
                             spec.seed, steps_done);
    out.error = run.error;
    out.result.steps = std::move(run.steps);
    out.result.cumulative_regret = std::move(run.cumulative_regret);
    out.result.auxiliary = std::move(run.distinct_routes);
    out.result.seconds_per_step = run.seconds_per_step;
    return out;
  }
  auto policy = MakeRunPolicy(spec.policy, **env, spec.rounds, spec.seed);
  if (!policy.ok()) {
    out.error = std::string(policy.status().message());
    return out;
  }
  // Tie-breaks and Thompson draws: a stream per seed, independent of the environment and shared
  // by every policy (common random numbers: two names for one algorithm make the same choices).
  uint64_t mix = spec.seed * 0x9E3779B97F4A7C15ULL ^ 0x5EED5EED5EED5EEDULL;
  Rng rng(SplitMix64(mix));

  int next_sample = 1;
  auto sample_step = [&spec](int k) {  // the k-th sampled round (1-based), same grid for all runs
    return static_cast<int64_t>(
        std::ceil(static_cast<double>(k) * spec.rounds / spec.sample_points));
  };
  double cumulative = 0.0, total_seconds = 0.0, window_total = 0.0;
  double decision_cpu = 0.0, learn_cpu = 0.0, fit_cpu = 0.0;
  int64_t window_steps = 0, rewards_learned = 0;
  const int slate_size = std::max(1, spec.slate_size);
  std::vector<double> sorted_means;
  Eigen::MatrixXd points;
  ScoredSlate scored;
  std::vector<const double*> arms;
  const bool evaluate = spec.evaluation_epsilon > 0.0;
  if (evaluate && slate_size != 1) {
    out.error = "off-policy evaluation needs slate_size 1";
    return out;
  }
  PolicyEvaluator evaluator;
  Eigen::VectorXd every_probability;
  std::vector<double> truth(kEvaluatedPolicies, 0.0);
  int64_t evaluated = 0;
  double cpu_at_start = ThreadCpuSeconds();
  // An experiment's initial pull (SimEnvironment::PriorRound) is played and learned as round -1,
  // outside the regret, the timings and the evaluation.
  const std::optional<Round> prior = (*env)->PriorRound();
  for (int64_t t = prior.has_value() ? -1 : 0; t < spec.rounds; ++t) {
    const Round round = t < 0 ? *prior : (*env)->MakeRound(static_cast<uint64_t>(t));
    const int n = static_cast<int>(round.arms.cols());
    arms.resize(n);
    for (int k = 0; k < n; ++k) arms[k] = round.arms.col(k).data();
    const int32_t user = policy->pooled ? 0 : round.user;
    // Each phase of the step (choosing, learning each reward, the refits after it) is timed on
    // the wall clock and on the thread's CPU clock. The CPU clock is a system call (about a
    // microsecond): its stamps are outside the wall intervals, and the environment's reward
    // draws are between phases, in none of them.
    double seconds = 0.0, cpu_mark = 0.0;
    std::chrono::steady_clock::time_point wall_mark;
    const auto start_phase = [&] {
      cpu_mark = ThreadCpuSeconds();
      wall_mark = std::chrono::steady_clock::now();
    };
    const auto stop_phase = [&](double* cpu_sum) {
      const auto wall_now = std::chrono::steady_clock::now();
      const double cpu_now = ThreadCpuSeconds();
      seconds += std::chrono::duration<double>(wall_now - wall_mark).count();
      *cpu_sum += cpu_now - cpu_mark;
    };
    start_phase();
    // The decision and learning steps the server's model takes (core/policy/decision_step.h).
    CandidatePoints(policy->scaling, round.context.data(), arms, policy->intercept, &points);
    const DecisionRule rule = DecisionRuleOf(*policy, rewards_learned);
    // Draws as a model does: a stream per decision, from the model's seed and the event id
    // (unless the policy shares the run's stream).
    std::optional<Rng> decision_rng;
    if (policy->model_seed.has_value()) {
      decision_rng.emplace(DecisionStream(SimEventId(t), *policy->model_seed));
    }
    Rng& decide_rng = decision_rng.has_value() ? *decision_rng : rng;
    absl::Status status = DecideSlate(*policy->learner, user, points, rule, slate_size, decide_rng,
                                      /*probabilities=*/evaluate, &scored);
    bool explored = false;
    if (status.ok() && evaluate) {
      // The model's evaluation share (core/model/model_decide.cc), with every candidate's
      // probability for the truth.
      Rng coin = EvaluationCoin(SimEventId(t), spec.seed);
      explored = MixUniformShare(spec.evaluation_epsilon, rule, slate_size, coin, decide_rng,
                                 &scored, &every_probability);
    }
    const int chosen = status.ok() ? scored.slate[0].candidate : 0;
    stop_phase(&decision_cpu);
    double first_reward = 0.0;
    if (status.ok() && policy->learner->LearnsFromDecisions()) {
      const double reward = (*env)->Reward(round, chosen);
      first_reward = reward;
      start_phase();
      status = LearnDecision(*policy->learner, user, points, scored.propensities, chosen, reward);
      stop_phase(&learn_cpu);
      ++rewards_learned;
    } else if (status.ok()) {
      // Semi-bandit feedback: every arm of the slate is learned on its own, best first (as a
      // model learns a slate's arm rewards).
      for (const RankedChoice& arm : scored.slate) {
        const double reward = (*env)->Reward(round, arm.candidate);
        if (&arm == &scored.slate[0]) first_reward = reward;
        start_phase();
        status = LearnReward(*policy->learner, policy->baseline, user, points.col(arm.candidate),
                             reward);
        stop_phase(&learn_cpu);
        if (!status.ok()) break;
        ++rewards_learned;
        if (policy->refitter != nullptr) {
          start_phase();
          status = policy->refitter->AfterObservation(policy->learner.get(), &policy->scaling);
          stop_phase(&fit_cpu);
          if (!status.ok()) break;
        }
      }
    }
    if (status.ok() && policy->refitter != nullptr && policy->learner->LearnsFromDecisions()) {
      start_phase();
      status = policy->refitter->AfterObservation(policy->learner.get(), &policy->scaling);
      stop_phase(&fit_cpu);
    }
    if (!status.ok()) {
      out.error = absl::StrFormat("round %d: %s", t, status.message());
      return out;
    }
    if (t < 0) {  // the prior round: learned, and counted nowhere
      decision_cpu = learn_cpu = fit_cpu = 0.0;
      cpu_at_start = ThreadCpuSeconds();
      continue;
    }
    total_seconds += seconds;
    if (evaluate) {
      const EvaluationRecord record = MakeEvaluationRecord(
          scored.mean, chosen, *scored.slate[0].probability, explored, -1, /*off_policy=*/true);
      evaluator.Add(record, first_reward);
      // The truth: each policy's expected reward on this decision (the drifting offset too).
      const Eigen::VectorXd expected = round.means.array() + round.offset;
      const double best = scored.mean.maxCoeff();
      double greedy = 0.0, ties = 0.0;
      for (int k = 0; k < n; ++k) {
        if (scored.mean(k) != best) continue;
        greedy += expected(k);
        ties += 1.0;
      }
      truth[0] += every_probability.dot(expected);
      truth[1] += expected.mean();
      truth[2] += greedy / ties;
      truth[3] += expected(0);
      ++evaluated;
    }
    if (spec.record_choices) out.choices.push_back(chosen);
    if (slate_size == 1) {
      cumulative += (*env)->Regret(round, chosen);
    } else {
      sorted_means.assign(round.means.data(), round.means.data() + round.means.size());
      std::sort(sorted_means.begin(), sorted_means.end(), std::greater<double>());
      for (int k = 0; k < slate_size; ++k) {
        cumulative += sorted_means[k] - round.means(scored.slate[k].candidate);
      }
    }
    if (spec.timing_window > 0) {
      window_total += seconds;
      if (++window_steps == spec.timing_window) {
        out.window_seconds.push_back(window_total / static_cast<double>(window_steps));
        window_total = 0.0;
        window_steps = 0;
      }
    }
    while (next_sample <= spec.sample_points && sample_step(next_sample) == t + 1) {
      out.result.steps.push_back(t + 1);
      out.result.cumulative_regret.push_back(cumulative);
      if (policy->has_dictionary)
        out.result.auxiliary.push_back(static_cast<double>(policy->learner->dictionary_size()));
      ++next_sample;
    }
    if (steps_done != nullptr) steps_done->fetch_add(1, std::memory_order_relaxed);
  }
  out.cpu_seconds_per_step = (ThreadCpuSeconds() - cpu_at_start) / static_cast<double>(spec.rounds);
  out.result.seconds_per_step = total_seconds / static_cast<double>(spec.rounds);
  if (evaluate) {
    out.policy_values = evaluator.Values();
    for (double& x : truth) x /= static_cast<double>(std::max<int64_t>(evaluated, 1));
    out.policy_truth = std::move(truth);
  }
  out.decision_cpu_per_step = decision_cpu / static_cast<double>(spec.rounds);
  out.learn_cpu_per_step = learn_cpu / static_cast<double>(spec.rounds);
  out.fit_cpu_per_step = fit_cpu / static_cast<double>(spec.rounds);
  out.heap_growth_bytes = static_cast<double>(mallinfo2().uordblks) - heap_at_start;
  return out;
}

std::vector<RunOutput> RunAll(const std::vector<RunSpec>& specs, int jobs, bool show_progress) {
  std::vector<RunOutput> outputs(specs.size());
  int64_t total_steps = 0;
  for (const RunSpec& spec : specs) total_steps += spec.rounds;
  std::atomic<size_t> next{0};
  std::atomic<size_t> finished{0};
  std::atomic<int64_t> steps{0};
  std::atomic<bool> done{false};
  const auto start = std::chrono::steady_clock::now();

  std::thread monitor([&] {
    if (!show_progress) return;
    const bool tty = isatty(STDERR_FILENO) != 0;
    auto last_line = start;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double fraction = total_steps > 0 ? double(steps.load()) / double(total_steps) : 1.0;
      const int width = 30, filled = static_cast<int>(fraction * width);
      const std::string bar = std::string(filled, '=') + std::string(width - filled, ' ');
      const std::string line =
          absl::StrFormat("[%s] %5.1f%%  %d/%d runs  %s elapsed, ~%s left", bar, 100.0 * fraction,
                          finished.load(), specs.size(), Duration(elapsed),
                          Duration(fraction > 0 ? elapsed * (1.0 - fraction) / fraction : NAN));
      if (tty) {
        std::fprintf(stderr, "\r%s", line.c_str());
      } else if (now - last_line > std::chrono::seconds(30)) {  // logs: a line now and then
        std::fprintf(stderr, "%s\n", line.c_str());
        last_line = now;
      }
    }
    if (tty) std::fprintf(stderr, "\n");
  });

  std::vector<std::thread> workers;
  for (int j = 0; j < std::max(1, jobs); ++j) {
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
        outputs[i] = Run(specs[i], &steps);
        finished.fetch_add(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  done.store(true);
  monitor.join();
  return outputs;
}

}  // namespace graphbandit::sim
