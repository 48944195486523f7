// graphbandit-microbench: Google Benchmark microbenchmarks of the decisions' and the writer's hot
// paths, each beside the machine's own yardsticks measured in the same run:
//
//   BM_Score/m/C       a published EK state (Laplacian multi-user kernel over d = 16 features,
//                      dictionary of m points) scoring C candidates: Freeze()->Score(), counted
//                      as F = 2 C m^2 + 2 C m d flops, the request's work with the full m x m
//                      form. Scoring uses the form's symmetry and needs about C m^2 + 2 C m d
//                      of them (core/linalg/variance_form.h: the triangular product and the
//                      kernel, not counting the O(C m) dot products); the table prints that
//                      rate too, as "executed".
//   BM_ScoreExplained/m/C  the same scoring (single precision where allowed) and then the best
//                      candidate's mean explained (SelectArmRequest.explain): compare with
//                      BM_Score/m/C/1 of the same run.
//   BM_EigenProduct    an Eigen product of the same shape, (m x m) (m x C): 2 C m^2 flops.
//   BM_Update/m        one reward learned by the same state at a full dictionary (the rank-one
//                      update of M's factor, the variance form's correction, KORS's leverage
//                      score), counted as 6 m^2 flops: the factor's rotation sweep (~4 m^2) and
//                      the correction's two triangular solves (~2 m^2).
//   BM_LearnBatchAlone/m/k  the same on 200 users without edges (the load generator's default
//                      workload): each batch is learned on its users' block of the factors.
//   BM_EigenRankOne/m  Eigen's rank-one update of an m x m symmetric matrix (m^2 flops).
//   BM_FmaPeak         independent fused multiply-adds in vector registers: one core's peak.
//   BM_FormRebuild/m/c the scoring form formed exactly from the factors of K_ZZ and M (m x m),
//                      the writer's step every max(1,024, 32 m) updates and at each applied
//                      fit: O(m^3) for one component (c = 1); for c = 200 components (the load
//                      generator's users without edges) block by block.
//   BM_FormGrow/m/k    the same form grown from m - k to m points by bordering (dictionary
//                      growth, O(m^2 k)); compare with BM_FormRebuild/m/1, which growth used to
//                      run.
//   BM_UserKernel/n/c  the user kernel built for a graph of n users in communities of 100 with
//                      about 4 neighbours each, as every graph edit and applied fit builds it:
//                      the Green's function's sparse factorisation alone (c = 0), or with the
//                      community part's spectral embedding in 8 dimensions (c = 1).
//
// After the runs a table states, per (m, C), the scoring rate as a ratio of the product's and
// as a fraction of the FMA peak. Flags are Google Benchmark's (--benchmark_filter,
// --benchmark_min_time, --benchmark_format=json, ...); PERFORMANCE.md has the commands.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/base/random.h"
#include "core/graph/green_function.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"
#include "core/learner/baseline_tracker.h"
#include "core/learner/nystrom_posterior.h"
#include "core/model/model_options.h"
#include "core/policy/decision_step.h"

namespace graphbandit {
namespace {

constexpr int kDim = 16;
constexpr int kUsers = 50;

std::shared_ptr<const UserKernel> RingOfFriends() {
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  for (int u = 0; u < kUsers; ++u) graph.SetEdge(u, (u + 1) % kUsers, 1.0);
  return *GreenFunction::Build(graph, 0.1);
}

// The load generator's default workload instead: 200 users without edges, each its own
// component, so that a batch is learned on its users' block of the factors.
constexpr int kLoneUsers = 200;
std::shared_ptr<const UserKernel> UsersWithoutEdges() {
  UserGraph graph;
  graph.EnsureUsers(kLoneUsers);
  return *GreenFunction::Build(graph, 0.1);
}
std::shared_ptr<const UserKernel> Users(bool alone) {
  return alone ? UsersWithoutEdges() : RingOfFriends();
}
int UserCount(bool alone) { return alone ? kLoneUsers : kUsers; }

NystromOptions StateOptions(int m, bool single) {
  NystromOptions options;
  options.max_dictionary_size = m;
  options.seed = 3;
  options.single_precision = single;
  // Grown as served (core/model/model_options.h): batches of m / 64 rows, so that building a
  // state of thousands of points takes seconds.
  options.growth_batch_divisor = kServedGrowthBatchDivisor;
  options.spread_growth_scan = true;
  return options;
}

// An EK state whose dictionary holds exactly m points (every point forced in, then the cap),
// having learned `rewards` observations in all; scoring in single precision where the state
// allows it (`single`, as served) or always in double precision.
std::unique_ptr<NystromPosterior> TrainedState(int m, int rewards, bool single = false,
                                               bool alone = false) {
  auto learner = std::make_unique<NystromPosterior>(kDim, ArmKernel(KernelType::kRbf, 1.0),
                                                    Users(alone), StateOptions(m, single));
  Rng rng(11);
  Eigen::VectorXd point(kDim);
  for (int t = 0; t < std::max(m, rewards); ++t) {
    for (int i = 0; i < kDim; ++i) point(i) = rng.Normal() * 0.7;
    if (t < m) learner->set_force_accept(true);
    const int user = static_cast<int>(rng.UniformInt(UserCount(alone)));
    if (!learner->Observe(user, point, std::sin(point.sum()) + 0.1 * rng.Normal()).ok()) {
      std::fprintf(stderr, "microbench: training failed\n");
      std::exit(1);
    }
  }
  if (!learner->FlushPendingDictionary().ok() || learner->dictionary_size() != m) {
    std::fprintf(stderr, "microbench: the dictionary did not reach %d points\n", m);
    std::exit(1);
  }
  return learner;
}

Eigen::MatrixXd Candidates(int c, uint64_t seed) {
  Rng rng(seed);
  Eigen::MatrixXd points(kDim, c);
  for (Eigen::Index j = 0; j < points.size(); ++j) points.data()[j] = rng.Normal() * 0.7;
  return points;
}

double ScoreFlops(int m, int c) { return 2.0 * c * m * m + 2.0 * c * m * kDim; }

// The same learned state scoring in the other precision (a copy through its snapshot bytes).
std::unique_ptr<NystromPosterior> Copy(const NystromPosterior& learner, bool single,
                                       bool alone = false) {
  const int m = static_cast<int>(learner.options().max_dictionary_size);
  auto copy = std::make_unique<NystromPosterior>(kDim, ArmKernel(KernelType::kRbf, 1.0),
                                                 Users(alone), StateOptions(m, single));
  storage::Encoder out;
  learner.SaveState(&out);
  const std::string bytes = out.Release();
  storage::Decoder in(bytes);
  if (!copy->LoadState(&in).ok()) {
    std::fprintf(stderr, "microbench: copying a state failed\n");
    std::exit(1);
  }
  return copy;
}

// One trained state per m (built once: thousands of points take seconds), in each precision.
const NystromPosterior& CachedState(int m, bool single, bool alone = false) {
  static auto* cache = new std::map<std::tuple<int, bool, bool>, std::unique_ptr<NystromPosterior>>;
  auto& slot = (*cache)[{m, single, alone}];
  if (slot == nullptr) {
    auto& base = (*cache)[{m, false, alone}];
    if (base == nullptr) base = TrainedState(m, 2 * m, false, alone);
    if (single) slot = Copy(*base, true, alone);
  }
  return *slot;
}

void BM_Score(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), c = static_cast<int>(state.range(1));
  const bool single = state.range(2) != 0;
  const NystromPosterior& learner = CachedState(m, single);
  const std::shared_ptr<const Scorer> scorer = learner.Freeze();
  const Eigen::MatrixXd points = Candidates(c, 5);
  Eigen::VectorXd mean, stddev;
  for (auto _ : state) {
    scorer->Score(7, points, &mean, &stddev);
    benchmark::DoNotOptimize(stddev.data());
  }
  // Single precision is what the state's own check allows: say when it refused.
  state.SetLabel(!single ? "double"
                 : learner.stats().single_error <= VarianceForm::kSingleTolerance
                     ? "single"
                     : "single refused: double");
  state.counters["dictionary"] = static_cast<double>(learner.dictionary_size());
  state.counters["FLOPS"] =
      benchmark::Counter(ScoreFlops(m, c), benchmark::Counter::kIsIterationInvariantRate);
}

// SelectArmRequest.explain's extra work beside BM_Score's: the published state scores C
// candidates (in single precision where allowed, as served) and then explains the best one's
// mean (core/learner/mean_explanation.h: the arm kernel against the m dictionary points, the
// user factors, the top 5 points and users), as a decision of one arm does.
void BM_ScoreExplained(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), c = static_cast<int>(state.range(1));
  const NystromPosterior& learner = CachedState(m, /*single=*/true);
  const std::shared_ptr<const Scorer> scorer = learner.Freeze();
  const Eigen::MatrixXd points = Candidates(c, 5);
  Eigen::VectorXd mean, stddev;
  MeanExplanation parts;
  for (auto _ : state) {
    scorer->Score(7, points, &mean, &stddev);
    Eigen::Index best = 0;
    (mean + stddev).maxCoeff(&best);
    scorer->ExplainMean(7, points.col(best), 5, &parts);
    benchmark::DoNotOptimize(parts.own);
  }
  state.counters["dictionary"] = static_cast<double>(learner.dictionary_size());
}

// What the writer does for one batch of k rewards: a full dictionary of m points,
// single-precision scoring where allowed, the drifting-baseline tracker on, then the publish
// (Freeze). Counted as 6 m^2 flops per reward, the performance target's yardstick: the rank-k
// factor update and the form's correction (the solves with the k rewards' columns), KORS's leverage
// scores and the form's folds and exact rebuilds come to about 8 m^2.
void LearnBatches(benchmark::State& state, int m, int k, bool alone = false) {
  const auto learner = Copy(CachedState(m, false, alone), /*single=*/true, alone);
  BaselineTracker baseline(kDefaultBaselineHalfLife);
  Rng rng(19);
  std::vector<int32_t> users(k);
  std::vector<Eigen::VectorXd> points(k, Eigen::VectorXd(kDim));
  std::vector<double> rewards(k);
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < kDim; ++j) points[i](j) = rng.Normal() * 0.7;
      users[i] = static_cast<int32_t>(rng.UniformInt(UserCount(alone)));
      rewards[i] = std::sin(points[i].sum()) + 0.1 * rng.Normal();
    }
    state.ResumeTiming();
    if (!LearnRewards(*learner, baseline, users, points, rewards).ok()) {
      state.SkipWithError("learning failed");
      break;
    }
    benchmark::DoNotOptimize(learner->Freeze().get());
  }
  state.SetItemsProcessed(state.iterations() * k);
  state.counters["batch"] = k;
  state.counters["dictionary"] = static_cast<double>(learner->dictionary_size());
  state.counters["FLOPS"] =
      benchmark::Counter(6.0 * m * m * k, benchmark::Counter::kIsIterationInvariantRate);
}

// Batches of the served nystrom.max_learn_batch: the size batches reach under load (the writer
// learns what arrived while it learned the previous batch).
void BM_Learn(benchmark::State& state) {
  LearnBatches(state, static_cast<int>(state.range(0)), ModelOptions().max_learn_batch);
}

// The same at m = 1,024 with smaller batches: below saturation a batch closes when its oldest
// reward has waited nystrom.max_learn_delay (about rate x 50 ms rewards by default), and the
// work per batch that does not shrink with k (publishing, the kept single-precision copies, the
// solves' and panels' set-up) is then shared by fewer rewards. 256 batches each: at the small
// sizes that is less than a cycle of the form's exact rebuild (its share, about m^2 / 8
// multiply-adds per reward, is left out there).
void BM_LearnBatch(benchmark::State& state) {
  LearnBatches(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
}

// BM_LearnBatch on the load generator's workload (users without edges): the batch's users'
// block of the factors instead of the whole (still counted as 6 m^2 flops per reward, so its
// FLOPS counter is not a rate of work done; read its time).
void BM_LearnBatchAlone(benchmark::State& state) {
  LearnBatches(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
               /*alone=*/true);
}

// The writer's share of a snapshot at m = 1,024 (users without edges): serializing the learner's
// state (the history, the factors, the scoring form). The checksum, the ledger and the write
// are the background thread's (core/model/snapshots.h).
void BM_SaveState(benchmark::State& state) {
  const auto learner = Copy(CachedState(1024, false, true), true, true);
  size_t bytes = 0;
  for (auto _ : state) {
    storage::Encoder e;
    learner->SaveState(&e);
    bytes = e.size();
    benchmark::DoNotOptimize(e.data().data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

void BM_EigenProduct(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), c = static_cast<int>(state.range(1));
  const Eigen::MatrixXd a = Eigen::MatrixXd::Random(m, m), b = Eigen::MatrixXd::Random(m, c);
  Eigen::MatrixXd out(m, c);
  for (auto _ : state) {
    out.noalias() = a * b;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * c * m * m, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Update(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const auto learner = Copy(CachedState(m, false), false);
  Rng rng(17);
  Eigen::VectorXd point(kDim);
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kDim; ++i) point(i) = rng.Normal() * 0.7;
    const int user = static_cast<int>(rng.UniformInt(kUsers));
    state.ResumeTiming();
    benchmark::DoNotOptimize(learner->Observe(user, point, 0.5).ok());
  }
  state.counters["dictionary"] = static_cast<double>(learner->dictionary_size());
  state.counters["FLOPS"] =
      benchmark::Counter(6.0 * m * m, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_EigenRankOne(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  Eigen::MatrixXd a = Eigen::MatrixXd::Identity(m, m);
  const Eigen::VectorXd v = Eigen::VectorXd::Random(m) * 1e-3;
  for (auto _ : state) {
    a.selfadjointView<Eigen::Lower>().rankUpdate(v);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(1.0 * m * m, benchmark::Counter::kIsIterationInvariantRate);
}

// Twelve independent FMA chains in the widest registers the build may use: enough in flight to
// cover the FMA units' latency times their count on current x86 cores.
void BM_FmaPeak(benchmark::State& state) {
  constexpr int kChains = 12;
  constexpr int kSteps = 4096;
#if defined(__AVX512F__)
  using Vec = __m512d;
  constexpr int kLanes = 8;
  const auto splat = [](double x) { return _mm512_set1_pd(x); };
  const auto fma = [](Vec a, Vec b, Vec c) { return _mm512_fmadd_pd(a, b, c); };
#elif defined(__FMA__)
  using Vec = __m256d;
  constexpr int kLanes = 4;
  const auto splat = [](double x) { return _mm256_set1_pd(x); };
  const auto fma = [](Vec a, Vec b, Vec c) { return _mm256_fmadd_pd(a, b, c); };
#else
  using Vec = __m128d;  // SSE2 has no FMA: a multiply and an add, counted as two flops
  constexpr int kLanes = 2;
  const auto splat = [](double x) { return _mm_set1_pd(x); };
  const auto fma = [](Vec a, Vec b, Vec c) { return _mm_add_pd(_mm_mul_pd(a, b), c); };
#endif
  Vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = splat(1.0 + i * 1e-3);
  const Vec mul = splat(0.999999), add = splat(1e-7);
  for (auto _ : state) {
    for (int s = 0; s < kSteps; ++s) {
      for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], mul, add);
    }
    for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  state.SetLabel(std::to_string(kLanes * 64) + "-bit vectors");
  state.counters["FLOPS"] = benchmark::Counter(2.0 * kLanes * kChains * kSteps,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// Lower factors of a kernel-like K (m x m) and of M = ridge K + G G^T, as the learner holds them.
// With components > 1, point i belongs to component i % components and every entry between
// components is zero, as for dictionary points of users in separate graph components.
struct FormFactors {
  Eigen::MatrixXd chol_zz, chol_m;
  static constexpr double kRidge = 0.5;
  explicit FormFactors(int m, int components = 1) {
    Rng rng(23);
    Eigen::MatrixXd x(kDim, m), g(m, 2 * m);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = rng.Normal();
    for (Eigen::Index i = 0; i < g.size(); ++i) g.data()[i] = rng.Normal() * 0.1;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < 2 * m; ++j) {
        if (i % components != j % components) g(i, j) = 0.0;
      }
    }
    Eigen::MatrixXd k(m, m);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        k(i, j) = i % components != j % components
                      ? 0.0
                      : std::exp(-0.05 * (x.col(i) - x.col(j)).squaredNorm());
      }
    }
    k.diagonal().array() += 1e-3;
    chol_zz = k.llt().matrixL();
    chol_m = Eigen::MatrixXd((kRidge * k + g * g.transpose()).llt().matrixL());
  }
};

void BM_FormRebuild(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const FormFactors f(m, static_cast<int>(state.range(1)));
  VarianceForm form;
  for (auto _ : state) {
    form.Rebuild(f.chol_zz, f.chol_m, FormFactors::kRidge);
    benchmark::DoNotOptimize(form.snapshot().base.get());
  }
}

void BM_FormGrow(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), k = static_cast<int>(state.range(1));
  const FormFactors f(m);
  VarianceForm before;  // the form for the leading m - k points
  before.Rebuild(f.chol_zz.topLeftCorner(m - k, m - k), f.chol_m.topLeftCorner(m - k, m - k),
                 FormFactors::kRidge);
  for (auto _ : state) {
    VarianceForm form = before;  // shares the base; Grow makes a new one and leaves it
    form.Grow(f.chol_zz, f.chol_m, FormFactors::kRidge);
    benchmark::DoNotOptimize(form.snapshot().base.get());
  }
}

void BM_UserKernel(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool community = state.range(1) != 0;
  Rng rng(5);
  UserGraph graph;
  graph.EnsureUsers(n);
  const int blocks = std::max(1, n / 100);
  for (int u = 0; u < n; ++u) {
    for (int k = 0; k < 2; ++k) {  // two edges drawn per user: about 4 neighbours each
      const int v = rng.Uniform() < 0.9
                        ? static_cast<int>(rng.UniformInt(n / blocks)) * blocks + u % blocks
                        : static_cast<int>(rng.UniformInt(n));
      if (v != u && v < n) graph.SetEdge(u, v, 1.0);
    }
  }
  UserKernelOptions options;
  options.rho = 0.1;
  options.community_dims = community ? 8 : 0;
  options.community_variance = community ? 1.0 : 0.0;
  for (auto _ : state) {
    auto kernel = BuildUserKernel(graph, options);
    if (!kernel.ok()) {
      state.SkipWithError(std::string(kernel.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize((*kernel)->ColumnOf(0).Diagonal());
  }
}

const std::vector<int64_t> kSizes = {64, 256, 1024};
const std::vector<int64_t> kCandidates = {10, 50, 100, 500};
const std::vector<int64_t> kLearnSizes = {256, 1024, 4096};
// BM_LearnBatch's batch sizes at m = 1,024 (the served max_learn_batch is the largest).
const std::vector<int64_t> kLearnBatchSizes = {8, 16, 48, 128};

BENCHMARK(BM_FmaPeak);
BENCHMARK(BM_Score)
    ->ArgsProduct({kSizes, kCandidates, {0, 1}})
    ->Args({4096, 50, 0})
    ->Args({4096, 50, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ScoreExplained)->ArgsProduct({kSizes, kCandidates})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EigenProduct)->ArgsProduct({kSizes, kCandidates})->Unit(benchmark::kMicrosecond);
// At m <= 1,024, one whole cycle of the form's exact rebuild (every 32 m updates), so that its
// share is counted; at m = 4,096 (a cycle of 131,072 updates) 64 batches, without it.
BENCHMARK(BM_Learn)->Arg(256)->Iterations(128)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Learn)->Arg(1024)->Iterations(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Learn)->Arg(4096)->Iterations(64)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LearnBatch)
    ->ArgsProduct({{1024}, kLearnBatchSizes})
    ->Iterations(256)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LearnBatchAlone)
    ->ArgsProduct({{1024}, kLearnBatchSizes})
    ->Iterations(256)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Update)->ArgsProduct({kSizes})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EigenRankOne)->ArgsProduct({kSizes})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FormRebuild)->ArgsProduct({kSizes, {1, 200}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FormGrow)->ArgsProduct({kSizes, {1, 16}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SaveState)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_UserKernel)->ArgsProduct({{1000, 10000}, {0, 1}})->Unit(benchmark::kMillisecond);

// Keeps every run's FLOPS counter for the closing table, and prints as the console reporter.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      auto it = run.counters.find("FLOPS");
      if (it != run.counters.end()) rates_[run.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios() const {
    const double peak = Rate("BM_FmaPeak");
    std::printf("\nOne core's FMA peak (this run): %.1f GFLOP/s\n", peak / 1e9);
    std::printf(
        "score counts F = 2 C m^2 + 2 C m d per request (what the full form's product needs; "
        "scoring runs the symmetric half); \"single\" is the same state scoring in single "
        "precision\n");
    std::printf("%6s %5s %15s %15s %16s %16s %16s %14s\n", "m", "C", "double GFLOP/s",
                "single GFLOP/s", "product GFLOP/s", "double / product", "single / double",
                "single / peak");
    std::vector<int64_t> sizes = kSizes;
    sizes.push_back(4096);
    for (int64_t m : sizes) {
      for (int64_t c : kCandidates) {
        const std::string shape = std::to_string(m) + "/" + std::to_string(c);
        const double score = Rate("BM_Score/" + shape + "/0");
        const double single = Rate("BM_Score/" + shape + "/1");
        const double product = Rate("BM_EigenProduct/" + shape);
        if (score <= 0.0) continue;
        std::printf("%6lld %5lld %15.1f %15.1f %16.1f %16.2f %16.2f %14.2f\n",
                    static_cast<long long>(m), static_cast<long long>(c), score / 1e9, single / 1e9,
                    product / 1e9, product > 0.0 ? score / product : 0.0, single / score,
                    peak > 0.0 ? single / peak : 0.0);
      }
    }
    std::printf("%6s %14s %18s %14s\n", "m", "update GFLOP/s", "Eigen rank-one", "update / peak");
    for (int64_t m : kSizes) {
      const double update = Rate("BM_Update/" + std::to_string(m));
      const double rank_one = Rate("BM_EigenRankOne/" + std::to_string(m));
      if (update <= 0.0) continue;
      std::printf("%6lld %14.2f %18.2f %14.2f\n", static_cast<long long>(m), update / 1e9,
                  rank_one / 1e9, peak > 0.0 ? update / peak : 0.0);
    }
    std::printf(
        "learn: rewards learned per second in the served batches (BM_Learn), times 6 m^2, against "
        "the FMA peak of this run\n");
    std::printf("%6s %6s %12s %18s %14s\n", "m", "batch", "rewards/s", "x 6 m^2 GFLOP/s",
                "/ FMA peak");
    for (int64_t m : kLearnSizes) {
      const double flops = Rate("BM_Learn/" + std::to_string(m));
      if (flops <= 0.0) continue;
      const double rewards = flops / (6.0 * static_cast<double>(m) * static_cast<double>(m));
      std::printf("%6lld %6d %12.0f %18.1f %14.3f\n", static_cast<long long>(m),
                  ModelOptions().max_learn_batch, rewards, flops / 1e9,
                  peak > 0.0 ? flops / peak : 0.0);
    }
    std::printf("learn at m = 1024 by batch size (BM_LearnBatch, BM_LearnBatchAlone)\n");
    std::printf("%6s %14s %16s %12s\n", "batch", "ms per batch", "us per reward", "rewards/s");
    for (const char* name : {"BM_LearnBatch", "BM_LearnBatchAlone"}) {
      for (int64_t k : kLearnBatchSizes) {
        const double flops = Rate(std::string(name) + "/1024/" + std::to_string(k));
        if (flops <= 0.0) continue;
        const double rewards = flops / (6.0 * 1024.0 * 1024.0);
        std::printf("%6lld %14.2f %16.1f %12.0f  %s\n", static_cast<long long>(k),
                    1e3 * static_cast<double>(k) / rewards, 1e6 / rewards, rewards,
                    std::string(name) == "BM_LearnBatch" ? "ring of 50 users (one component)"
                                                         : "200 users without edges");
      }
    }
  }

 private:
  // The rate of the run named `name`, or of `name` with Google Benchmark's suffixes
  // ("/iterations:N", "/min_time:T").
  double Rate(const std::string& name) const {
    for (const auto& [run, rate] : rates_) {
      if (run == name ||
          (run.size() > name.size() && run.compare(0, name.size(), name) == 0 &&
           run[name.size()] == '/' && run.find(':', name.size()) != std::string::npos)) {
        return rate;
      }
    }
    return 0.0;
  }
  std::map<std::string, double> rates_;
};

}  // namespace
}  // namespace graphbandit

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 64;
  graphbandit::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
