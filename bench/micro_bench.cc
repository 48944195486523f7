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
//   BM_EigenProduct    an Eigen product of the same shape, (m x m) (m x C): 2 C m^2 flops.
//   BM_Update/m        one reward learned by the same state at a full dictionary (the rank-one
//                      update of M's factor, the variance form's correction, KORS's leverage
//                      score), counted as 6 m^2 flops: the factor's rotation sweep (~4 m^2) and
//                      the correction's two triangular solves (~2 m^2).
//   BM_EigenRankOne/m  Eigen's rank-one update of an m x m symmetric matrix (m^2 flops).
//   BM_FmaPeak         independent fused multiply-adds in vector registers: one core's peak.
//   BM_FormRebuild/m   the scoring form formed exactly from the factors of K_ZZ and M (m x m),
//                      the writer's O(m^3) step every max(1,024, 8 m) updates.
//   BM_FormGrow/m/k    the same form grown from m - k to m points by bordering (dictionary
//                      growth, O(m^2 k)); compare with BM_FormRebuild/m, which growth used to run.
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
#include <utility>
#include <vector>

#include "core/base/random.h"
#include "core/graph/green_function.h"
#include "core/graph/user_graph.h"
#include "core/learner/nystrom_posterior.h"

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

// An EK state whose dictionary holds exactly m points (every point forced in, then the cap),
// having learned `rewards` observations in all.
std::unique_ptr<NystromPosterior> TrainedState(int m, int rewards) {
  NystromOptions options;
  options.max_dictionary_size = m;
  options.seed = 3;
  auto learner = std::make_unique<NystromPosterior>(kDim, ArmKernel(KernelType::kRbf, 1.0),
                                                    RingOfFriends(), options);
  Rng rng(11);
  Eigen::VectorXd point(kDim);
  for (int t = 0; t < std::max(m, rewards); ++t) {
    for (int i = 0; i < kDim; ++i) point(i) = rng.Normal() * 0.7;
    if (t < m) learner->set_force_accept(true);
    const int user = static_cast<int>(rng.UniformInt(kUsers));
    if (!learner->Observe(user, point, std::sin(point.sum()) + 0.1 * rng.Normal()).ok()) {
      std::fprintf(stderr, "microbench: training failed\n");
      std::exit(1);
    }
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
// The arithmetic scoring needs: the triangular half of the form's product, and the kernel.
double ExecutedScoreFlops(int m, int c) { return 1.0 * c * m * m + 2.0 * c * m * kDim; }

void BM_Score(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), c = static_cast<int>(state.range(1));
  const auto learner = TrainedState(m, 2 * m);
  const std::shared_ptr<const Scorer> scorer = learner->Freeze();
  const Eigen::MatrixXd points = Candidates(c, 5);
  Eigen::VectorXd mean, stddev;
  for (auto _ : state) {
    scorer->Score(7, points, &mean, &stddev);
    benchmark::DoNotOptimize(stddev.data());
  }
  state.counters["dictionary"] = static_cast<double>(learner->dictionary_size());
  state.counters["FLOPS"] =
      benchmark::Counter(ScoreFlops(m, c), benchmark::Counter::kIsIterationInvariantRate);
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
  const auto learner = TrainedState(m, m + 16);
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
struct FormFactors {
  Eigen::MatrixXd chol_zz, chol_m;
  static constexpr double kRidge = 0.5;
  explicit FormFactors(int m) {
    Rng rng(23);
    Eigen::MatrixXd x(kDim, m), g(m, 2 * m);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = rng.Normal();
    for (Eigen::Index i = 0; i < g.size(); ++i) g.data()[i] = rng.Normal() * 0.1;
    Eigen::MatrixXd k(m, m);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) k(i, j) = std::exp(-0.05 * (x.col(i) - x.col(j)).squaredNorm());
    }
    k.diagonal().array() += 1e-3;
    chol_zz = k.llt().matrixL();
    chol_m = Eigen::MatrixXd((kRidge * k + g * g.transpose()).llt().matrixL());
  }
};

void BM_FormRebuild(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const FormFactors f(m);
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

const std::vector<int64_t> kSizes = {64, 256, 1024};
const std::vector<int64_t> kCandidates = {10, 100, 500};

BENCHMARK(BM_FmaPeak);
BENCHMARK(BM_Score)->ArgsProduct({kSizes, kCandidates})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EigenProduct)->ArgsProduct({kSizes, kCandidates})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Update)->ArgsProduct({kSizes})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EigenRankOne)->ArgsProduct({kSizes})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FormRebuild)->ArgsProduct({kSizes})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FormGrow)->ArgsProduct({kSizes, {1, 16}})->Unit(benchmark::kMicrosecond);

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
        "score counts F = 2 C m^2 + 2 C m d per request; \"executed\" counts the C m^2 + 2 C m d "
        "of the symmetric form's triangular product and the kernel (not the O(C m) dot "
        "products)\n");
    std::printf("%6s %5s %14s %16s %18s %14s %18s %16s\n", "m", "C", "score GFLOP/s",
                "product GFLOP/s", "score / product", "score / peak", "executed GFLOP/s",
                "executed / peak");
    for (int64_t m : kSizes) {
      for (int64_t c : kCandidates) {
        const std::string shape = std::to_string(m) + "/" + std::to_string(c);
        const double score = Rate("BM_Score/" + shape), product = Rate("BM_EigenProduct/" + shape);
        if (score <= 0.0 || product <= 0.0) continue;
        const double executed = score *
                                ExecutedScoreFlops(static_cast<int>(m), static_cast<int>(c)) /
                                ScoreFlops(static_cast<int>(m), static_cast<int>(c));
        std::printf("%6lld %5lld %14.1f %16.1f %18.2f %14.2f %18.1f %16.2f\n",
                    static_cast<long long>(m), static_cast<long long>(c), score / 1e9,
                    product / 1e9, score / product, peak > 0.0 ? score / peak : 0.0, executed / 1e9,
                    peak > 0.0 ? executed / peak : 0.0);
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
  }

 private:
  double Rate(const std::string& name) const {
    auto it = rates_.find(name);
    return it == rates_.end() ? 0.0 : it->second;
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
