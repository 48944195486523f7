// Learner snapshots (Learner::SaveState / LoadState, core/storage/state_coding.h): a learner
// restored from a saved state must score bit-identically to the one that saved it, freeze
// identically, and keep learning identically (KORS coin flips, dictionary growth, ring-buffer wrap,
// re-draws, refreshes). Damaged states (truncated, flipped bytes, another learner's bytes, a
// payload with a valid checksum but damaged contents) must be rejected without crashing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/batched_nystrom_posterior.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/linear_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "core/storage/state_coding.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;

constexpr int kDim = 3;

// Eight users: a connected core 0..5 (a path plus a chord), users 6 and 7 isolated. The streams
// below also use users 8 and 9, beyond the graph.
UserGraph MakeGraph() {
  UserGraph graph;
  graph.EnsureUsers(8);
  for (int u = 0; u + 1 < 6; ++u) graph.SetEdge(u, u + 1, 1.0 + 0.5 * u);
  graph.SetEdge(0, 4, 0.7);
  return graph;
}

std::shared_ptr<const UserKernel> MakeKernel() { return *GreenFunction::Build(MakeGraph(), 0.3); }

const ArmKernel kArm{KernelType::kRbf, 1.0};

struct Stream {
  Eigen::MatrixXd x;  // kDim x t
  std::vector<int32_t> users;
  Eigen::VectorXd y;
};

// t observations by users 0..9; with `repeat_fraction` > 0 that share of them repeats one of 25
// fixed (point, user) pairs, so that KORS accepts exact duplicates of dictionary points.
Stream MakeStream(int t, uint64_t seed, double repeat_fraction = 0.0) {
  Rng rng(seed);
  const Eigen::MatrixXd pool = RandomMatrix(kDim, 25, rng);
  std::vector<int32_t> pool_users;
  for (int i = 0; i < pool.cols(); ++i) pool_users.push_back(static_cast<int32_t>(i % 10));
  Stream s;
  s.x.resize(kDim, t);
  s.y.resize(t);
  for (int i = 0; i < t; ++i) {
    if (rng.Uniform() < repeat_fraction) {
      const int j = static_cast<int>(rng.UniformInt(pool.cols()));
      s.x.col(i) = pool.col(j);
      s.users.push_back(pool_users[j]);
    } else {
      for (int k = 0; k < kDim; ++k) s.x(k, i) = rng.Normal();
      s.users.push_back(static_cast<int32_t>(rng.UniformInt(10)));
    }
    s.y(i) = std::sin(s.x(0, i)) + 0.1 * s.users.back() + 0.3 * rng.Normal();
  }
  return s;
}

void Feed(Learner& learner, const Stream& s, int from, int to) {
  for (int i = from; i < to; ++i) {
    ASSERT_TRUE(learner.Observe(s.users[i], s.x.col(i), s.y(i)).ok()) << i;
  }
}

std::string Save(const Learner& learner) {
  storage::Encoder out;
  learner.SaveState(&out);
  return out.Release();
}

// -1 when a == b, else the first offset where they differ (gtest would print whole states).
int64_t FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

// LoadState from exactly `bytes`, which must all be consumed.
absl::Status Load(Learner& learner, const std::string& bytes) {
  storage::Decoder in(bytes);
  absl::Status status = learner.LoadState(&in);
  if (status.ok() && !in.done()) return absl::InternalError("LoadState left bytes unread");
  return status;
}

std::vector<uint64_t> Bits(const Eigen::VectorXd& v) {
  std::vector<uint64_t> bits(v.size());
  if (v.size() > 0) std::memcpy(bits.data(), v.data(), sizeof(double) * v.size());
  return bits;
}

// Means and standard deviations of both scorers agree to the last bit on random points, for
// users in the graph, isolated, beyond the graph and unknown.
void ExpectSameScores(const Scorer& a, const Scorer& b, uint64_t seed, const std::string& where) {
  Rng rng(seed);
  const Eigen::MatrixXd q = RandomMatrix(kDim, 9, rng);
  for (int32_t user : {0, 1, 3, 5, 6, 9, 12, kUnknownUser}) {
    Eigen::VectorXd mean_a, sd_a, mean_b, sd_b;
    a.Score(user, q, &mean_a, &sd_a);
    b.Score(user, q, &mean_b, &sd_b);
    ASSERT_EQ(mean_a.size(), q.cols());
    EXPECT_EQ(Bits(mean_a), Bits(mean_b)) << where << ", user " << user;
    EXPECT_EQ(Bits(sd_a), Bits(sd_b)) << where << ", user " << user;
    EXPECT_TRUE(mean_a.allFinite() && sd_a.allFinite()) << where << ", user " << user;
  }
}

// Trains a on s[0, saved), restores b from a's state, then checks (a) scores, (b) learning on
// s[saved, end) and (c) frozen scorers, all bit-identical; saving again gives the same bytes.
// `check` compares learner-specific counters (and may assert on their progress); it gets a
// "before" flag.
template <typename L>
void CheckRoundTrip(const std::function<std::unique_ptr<L>()>& make, const Stream& s, int saved,
                    const std::function<void(const L&, const L&, bool)>& check) {
  std::unique_ptr<L> a = make();
  Feed(*a, s, 0, saved);
  const std::string bytes = Save(*a);
  std::unique_ptr<L> b = make();
  ASSERT_TRUE(Load(*b, bytes).ok()) << Load(*make(), bytes);
  EXPECT_EQ(FirstDifference(Save(*b), bytes), -1)
      << "re-saving a restored learner changes the bytes";
  EXPECT_EQ(a->history_size(), b->history_size());
  EXPECT_EQ(a->dictionary_size(), b->dictionary_size());
  check(*a, *b, true);
  ExpectSameScores(*a, *b, 1, "after restore");
  ExpectSameScores(*a->Freeze(), *b->Freeze(), 2, "frozen after restore");

  const int total = static_cast<int>(s.users.size());
  for (int i = saved; i < total; ++i) {
    ASSERT_TRUE(a->Observe(s.users[i], s.x.col(i), s.y(i)).ok()) << i;
    ASSERT_TRUE(b->Observe(s.users[i], s.x.col(i), s.y(i)).ok()) << i;
    if ((i - saved) % 50 == 49) {
      ExpectSameScores(*a, *b, 100 + i, "continued to " + std::to_string(i));
      EXPECT_EQ(a->dictionary_size(), b->dictionary_size()) << i;
    }
  }
  EXPECT_EQ(a->history_size(), b->history_size());
  EXPECT_EQ(a->dictionary_size(), b->dictionary_size());
  check(*a, *b, false);
  ExpectSameScores(*a, *b, 3, "at the end");
  ExpectSameScores(*a->Freeze(), *b->Freeze(), 4, "frozen at the end");
  EXPECT_EQ(FirstDifference(Save(*a), Save(*b)), -1) << "the continued states differ";
}

void ExpectSameNystromStats(const NystromPosterior& a, const NystromPosterior& b) {
  const NystromStats& x = a.stats();
  const NystromStats& y = b.stats();
  EXPECT_EQ(x.kors_accepted, y.kors_accepted);
  EXPECT_EQ(x.merged_duplicates, y.merged_duplicates);
  EXPECT_EQ(x.skipped_dependent, y.skipped_dependent);
  EXPECT_EQ(x.skipped_full, y.skipped_full);
  EXPECT_EQ(x.evicted, y.evicted);
  EXPECT_EQ(x.downdate_failures, y.downdate_failures);
  EXPECT_EQ(a.observations(), b.observations());
  EXPECT_EQ(a.dictionary_users(), b.dictionary_users());
  EXPECT_EQ(Bits(Eigen::Map<const Eigen::VectorXd>(a.dictionary_weights().data(),
                                                   a.dictionary_weights().size())),
            Bits(Eigen::Map<const Eigen::VectorXd>(b.dictionary_weights().data(),
                                                   b.dictionary_weights().size())));
}

NystromOptions PartialDictionaryOptions() {
  NystromOptions o;
  o.ridge = 0.2;
  o.kors_mu = 0.05;
  o.kors_gamma = 1.0;
  o.seed = 7;
  o.max_history = 150;  // a ring buffer that wraps before and after the snapshot
  return o;
}

TEST(LearnerStateTest, AnEmptyMatrixOfManyRowsRoundTripsAtTheEndOfAState) {
  // An empty dictionary of 300-dimensional points is a few bytes, with nothing after it.
  storage::Encoder out;
  PutMatrix(&out, Eigen::MatrixXd(300, 0));
  const std::string bytes = out.Release();
  storage::Decoder in(bytes);
  Eigen::MatrixXd m;
  ASSERT_TRUE(GetMatrix(&in, &m));
  EXPECT_EQ(m.rows(), 300);
  EXPECT_EQ(m.cols(), 0);
  // An empty matrix whose other extent no model has is still refused.
  storage::Encoder huge;
  PutCount(&huge, int64_t{1} << 30);
  PutCount(&huge, 0);
  const std::string huge_bytes = huge.Release();
  storage::Decoder huge_in(huge_bytes);
  EXPECT_FALSE(GetMatrix(&huge_in, &m));
}

TEST(LearnerStateTest, AnEmptyNystromLearnerOfManyDimensionsRoundTrips) {
  const auto kernel = MakeKernel();
  NystromPosterior saved(200, kArm, kernel, PartialDictionaryOptions());
  storage::Encoder out;
  saved.SaveState(&out);
  const std::string bytes = out.Release();
  NystromPosterior restored(200, kArm, kernel, PartialDictionaryOptions());
  storage::Decoder in(bytes);
  ASSERT_TRUE(restored.LoadState(&in).ok());
  EXPECT_EQ(restored.dictionary_size(), 0);
}

TEST(LearnerStateTest, NystromPartialDictionaryWithWrappedHistory) {
  const Stream s = MakeStream(600, 11, /*repeat_fraction=*/0.4);
  const auto kernel = MakeKernel();
  const NystromOptions options = PartialDictionaryOptions();
  int64_t dictionary_at_save = 0;
  CheckRoundTrip<NystromPosterior>(
      [&] { return std::make_unique<NystromPosterior>(kDim, kArm, kernel, options); }, s, 310,
      [&](const NystromPosterior& a, const NystromPosterior& b, bool before) {
        ExpectSameNystromStats(a, b);
        if (before) {
          dictionary_at_save = a.dictionary_size();
          EXPECT_GT(a.stats().merged_duplicates, 0);
          EXPECT_GT(a.stats().evicted, 0);  // the ring has wrapped
          EXPECT_LT(a.dictionary_size(), a.observations());
          EXPECT_GT(a.dictionary_size(), 5);
        } else {
          EXPECT_GT(a.dictionary_size(), dictionary_at_save);  // growth after the restore
        }
      });
}

TEST(LearnerStateTest, NystromSlidingWindow) {
  const Stream s = MakeStream(500, 12, /*repeat_fraction=*/0.2);
  const auto kernel = MakeKernel();
  NystromOptions options = PartialDictionaryOptions();
  options.max_history = 120;
  options.forget_evicted = true;
  int64_t dictionary_at_save = 0;
  CheckRoundTrip<NystromPosterior>(
      [&] { return std::make_unique<NystromPosterior>(kDim, kArm, kernel, options); }, s, 250,
      [&](const NystromPosterior& a, const NystromPosterior& b, bool before) {
        ExpectSameNystromStats(a, b);
        if (before) {
          dictionary_at_save = a.dictionary_size();
          EXPECT_GT(a.stats().evicted, 100);
        } else {
          EXPECT_GT(a.dictionary_size(), dictionary_at_save);
        }
      });
}

TEST(LearnerStateTest, NystromUnboundedHistoryAndForcedAccept) {
  // force_accept is part of the state: set it just before saving.
  const Stream s = MakeStream(400, 13, 0.3);
  const auto kernel = MakeKernel();
  NystromOptions options = PartialDictionaryOptions();
  options.max_history = 0;
  options.max_dictionary_size = 40;  // fills up: skipped_full counts
  auto make = [&] { return std::make_unique<NystromPosterior>(kDim, kArm, kernel, options); };
  auto a = make();
  Feed(*a, s, 0, 200);
  a->set_force_accept(true);
  auto b = make();
  ASSERT_TRUE(Load(*b, Save(*a)).ok());
  for (int i = 200; i < 400; ++i) {
    ASSERT_TRUE(a->Observe(s.users[i], s.x.col(i), s.y(i)).ok());
    ASSERT_TRUE(b->Observe(s.users[i], s.x.col(i), s.y(i)).ok());
  }
  ExpectSameNystromStats(*a, *b);
  EXPECT_GT(a->stats().skipped_full, 0);
  EXPECT_EQ(a->dictionary_size(), 40);
  ExpectSameScores(*a, *b, 5, "unbounded");
  EXPECT_EQ(FirstDifference(Save(*a), Save(*b)), -1);
}

TEST(LearnerStateTest, ExactGp) {
  const Stream s = MakeStream(400, 21);
  const auto kernel = MakeKernel();
  CheckRoundTrip<ExactGpPosterior>(
      [&] { return std::make_unique<ExactGpPosterior>(kDim, kArm, kernel, 0.2); }, s, 200,
      [](const ExactGpPosterior& a, const ExactGpPosterior& b, bool) {
        EXPECT_EQ(Bits(Eigen::VectorXd::Constant(1, a.LogDetGain())),
                  Bits(Eigen::VectorXd::Constant(1, b.LogDetGain())));
        EXPECT_EQ(a.ridge(), b.ridge());
        EXPECT_EQ(a.history_users(), b.history_users());
      });
}

TEST(LearnerStateTest, ExactGpRidgeIsPartOfTheState) {
  const Stream s = MakeStream(160, 22);
  const auto kernel = MakeKernel();
  ExactGpPosterior a(kDim, kArm, kernel, 0.2);
  Feed(a, s, 0, 80);
  ASSERT_TRUE(a.SetRidge(0.35).ok());  // refactored from the history
  ExactGpPosterior b(kDim, kArm, kernel, 0.2);
  ASSERT_TRUE(Load(b, Save(a)).ok());
  EXPECT_EQ(b.ridge(), 0.35);
  Feed(a, s, 80, 160);
  Feed(b, s, 80, 160);
  ExpectSameScores(a, b, 6, "after SetRidge");
  EXPECT_EQ(FirstDifference(Save(a), Save(b)), -1);
}

LinearOptions LinearOptionsFor(LinearOptions::Prior prior) {
  LinearOptions o;
  o.prior = prior;
  o.lambda = 0.7;
  o.rho = 0.3;
  o.refresh_interval = 25;  // refreshes happen both before and after the snapshot
  return o;
}

TEST(LearnerStateTest, LinearAllPriorsWithAGraph) {
  const Stream s = MakeStream(600, 31);
  const UserGraph graph = MakeGraph();
  for (LinearOptions::Prior prior : {LinearOptions::Prior::kPerUser, LinearOptions::Prior::kPooled,
                                     LinearOptions::Prior::kGraph}) {
    SCOPED_TRACE(std::string(LinearPriorName(prior)));
    const LinearOptions options = LinearOptionsFor(prior);
    int64_t refreshes_at_save = 0;
    CheckRoundTrip<LinearUcbPosterior>(
        [&] {
          auto learner = std::make_unique<LinearUcbPosterior>(kDim, options);
          EXPECT_TRUE(learner->SetGraph(graph, nullptr).ok());
          return learner;
        },
        s, 300,
        [&](const LinearUcbPosterior& a, const LinearUcbPosterior& b, bool before) {
          EXPECT_EQ(a.refreshes(), b.refreshes());
          EXPECT_EQ(a.num_components(), b.num_components());
          if (before) {
            refreshes_at_save = a.refreshes();
            EXPECT_GT(refreshes_at_save, 0);
          } else {
            EXPECT_GT(a.refreshes(), refreshes_at_save);
          }
        });
  }
}

TEST(LearnerStateTest, LinearGraphRestoredIntoALearnerWithoutTheGraph) {
  // The components come from the state, not from a SetGraph call on the restored learner.
  const Stream s = MakeStream(300, 32);
  LinearOptions options = LinearOptionsFor(LinearOptions::Prior::kGraph);
  options.refresh_interval = 0;  // automatic period
  LinearUcbPosterior a(kDim, options);
  ASSERT_TRUE(a.SetGraph(MakeGraph(), nullptr).ok());
  Feed(a, s, 0, 150);
  LinearUcbPosterior b(kDim, options);
  ASSERT_TRUE(Load(b, Save(a)).ok());
  Feed(a, s, 150, 300);
  Feed(b, s, 150, 300);
  ExpectSameScores(a, b, 7, "graph from the state");
  EXPECT_EQ(FirstDifference(Save(a), Save(b)), -1);
}

TEST(LearnerStateTest, BatchedNystromAfterSeveralRedraws) {
  const Stream s = MakeStream(300, 41);
  const auto kernel = MakeKernel();
  BatchedNystromOptions options;
  options.ridge = 0.5;
  options.threshold = 4.0;
  options.oversampling = 3.0;
  options.seed = 9;
  int64_t redraws_at_save = 0;
  CheckRoundTrip<BatchedNystromPosterior>(
      [&] { return std::make_unique<BatchedNystromPosterior>(kDim, kArm, kernel, options); }, s,
      150,
      [&](const BatchedNystromPosterior& a, const BatchedNystromPosterior& b, bool before) {
        EXPECT_EQ(a.redraws(), b.redraws());
        EXPECT_EQ(a.jittered(), b.jittered());
        if (before) {
          redraws_at_save = a.redraws();
          EXPECT_GT(redraws_at_save, 2);
        } else {
          EXPECT_GT(a.redraws(), redraws_at_save);
        }
      });
}

// ---------------------------------------------------------------------------------------------
// Damaged states.

struct Saved {
  std::string name;
  std::string bytes;
  std::function<std::unique_ptr<Learner>()> make;
};

std::vector<Saved> SavedStates() {
  const auto kernel = MakeKernel();
  const Stream s = MakeStream(60, 51, 0.4);
  std::vector<Saved> saved;
  auto add = [&](const std::string& name, std::function<std::unique_ptr<Learner>()> make) {
    std::unique_ptr<Learner> learner = make();
    for (int i = 0; i < 60; ++i) {
      EXPECT_TRUE(learner->Observe(s.users[i], s.x.col(i), s.y(i)).ok());
    }
    saved.push_back({name, Save(*learner), make});
  };
  NystromOptions nystrom = PartialDictionaryOptions();
  nystrom.max_history = 40;
  add("nystrom", [=] { return std::make_unique<NystromPosterior>(kDim, kArm, kernel, nystrom); });
  add("exact_gp", [=] { return std::make_unique<ExactGpPosterior>(kDim, kArm, kernel, 0.2); });
  add("linear", [] {
    auto learner =
        std::make_unique<LinearUcbPosterior>(kDim, LinearOptionsFor(LinearOptions::Prior::kGraph));
    EXPECT_TRUE(learner->SetGraph(MakeGraph(), nullptr).ok());
    return learner;
  });
  BatchedNystromOptions batched;
  batched.threshold = 2.0;
  add("batched",
      [=] { return std::make_unique<BatchedNystromPosterior>(kDim, kArm, kernel, batched); });
  return saved;
}

// Scores something after a successful load, to catch states that decode but are unusable.
void ScoreOnce(const Learner& learner) {
  Rng rng(3);
  const Eigen::MatrixXd q = RandomMatrix(kDim, 4, rng);
  Eigen::VectorXd mean, sd;
  for (int32_t user : {0, 7, kUnknownUser}) learner.Score(user, q, &mean, &sd);
  learner.Freeze()->Score(0, q, &mean, &sd);
}

TEST(LearnerStateCorruptionTest, TruncatedStatesAreRejected) {
  for (const Saved& saved : SavedStates()) {
    const size_t n = saved.bytes.size();
    const size_t step = std::max<size_t>(1, n / 1500);
    for (size_t len = 0; len < n; len += (len < 64 ? 1 : step)) {
      auto learner = saved.make();
      const absl::Status status = Load(*learner, saved.bytes.substr(0, len));
      EXPECT_TRUE(absl::IsDataLoss(status)) << saved.name << " cut at " << len << ": " << status;
    }
  }
}

TEST(LearnerStateCorruptionTest, FlippedBytesAreRejected) {
  for (const Saved& saved : SavedStates()) {
    const size_t n = saved.bytes.size();
    const size_t step = std::max<size_t>(1, n / 700);
    for (size_t pos = 0; pos < n; pos += (pos < 64 ? 1 : step)) {
      for (uint8_t mask : {0x01, 0x80, 0xff}) {
        std::string bytes = saved.bytes;
        bytes[pos] = static_cast<char>(static_cast<uint8_t>(bytes[pos]) ^ mask);
        auto learner = saved.make();
        const absl::Status status = Load(*learner, bytes);
        EXPECT_TRUE(absl::IsDataLoss(status))
            << saved.name << " byte " << pos << " ^ " << int{mask} << ": " << status;
      }
    }
  }
}

TEST(LearnerStateCorruptionTest, AnotherLearnersStateIsRejected) {
  const std::vector<Saved> states = SavedStates();
  for (const Saved& reader : states) {
    for (const Saved& writer : states) {
      if (reader.name == writer.name) continue;
      auto learner = reader.make();
      const absl::Status status = Load(*learner, writer.bytes);
      EXPECT_TRUE(absl::IsDataLoss(status)) << writer.name << " read as " << reader.name;
    }
    // What a learner without snapshot support writes.
    storage::Encoder unsupported;
    LearnerStateTag tag = LearnerStateTag::kUnsupported;
    unsupported.PutU8(static_cast<uint8_t>(tag));
    auto learner = reader.make();
    EXPECT_TRUE(absl::IsDataLoss(Load(*learner, unsupported.Release()))) << reader.name;
    EXPECT_TRUE(absl::IsDataLoss(Load(*learner, ""))) << reader.name;
  }
}

TEST(LearnerStateCorruptionTest, DifferentConstructionIsRejected) {
  const auto kernel = MakeKernel();
  const Stream s = MakeStream(50, 52);
  NystromOptions options = PartialDictionaryOptions();
  NystromPosterior a(kDim, kArm, kernel, options);
  Feed(a, s, 0, 50);
  options.max_history = 0;  // another history capacity
  NystromPosterior b(kDim, kArm, kernel, options);
  EXPECT_TRUE(absl::IsDataLoss(Load(b, Save(a))));
  NystromPosterior c(kDim + 1, kArm, kernel, PartialDictionaryOptions());  // another dimension
  EXPECT_TRUE(absl::IsDataLoss(Load(c, Save(a))));
}

// Damage inside the payload behind a recomputed, valid checksum: what the structural checks
// alone must survive. Truncations must fail; flips may decode (a flipped mantissa is a valid
// state) but must never crash, and a state that loads must be usable.
TEST(LearnerStateCorruptionTest, DamagedPayloadWithValidChecksumNeverCrashes) {
  for (const Saved& saved : SavedStates()) {
    storage::Decoder in(saved.bytes);
    uint8_t tag = 0, version = 0;
    std::string payload;
    ASSERT_TRUE(in.GetU8(&tag) && in.GetU8(&version) && in.GetString(&payload));
    auto reframe = [&](absl::string_view p) {
      storage::Encoder out;
      PutStateFrame(&out, static_cast<LearnerStateTag>(tag), version, p);
      return out.Release();
    };
    {  // the untouched payload round-trips
      auto learner = saved.make();
      ASSERT_TRUE(Load(*learner, reframe(payload)).ok()) << saved.name;
    }
    const size_t n = payload.size();
    const size_t step = std::max<size_t>(1, n / 1000);
    for (size_t len = 0; len < n; len += (len < 64 ? 1 : step)) {
      auto learner = saved.make();
      const absl::Status status = Load(*learner, reframe(payload.substr(0, len)));
      EXPECT_TRUE(absl::IsDataLoss(status)) << saved.name << " payload cut at " << len;
    }
    int loaded = 0, rejected = 0;
    for (size_t pos = 0; pos < n; pos += (pos < 96 ? 1 : step)) {
      for (uint8_t mask : {0x01, 0x40, 0x80, 0xff}) {
        std::string damaged = payload;
        damaged[pos] = static_cast<char>(static_cast<uint8_t>(damaged[pos]) ^ mask);
        auto learner = saved.make();
        const absl::Status status = Load(*learner, reframe(damaged));
        if (status.ok()) {
          ++loaded;
          ScoreOnce(*learner);
        } else {
          ++rejected;
          EXPECT_TRUE(absl::IsDataLoss(status)) << status;
        }
      }
    }
    EXPECT_GT(rejected, 0) << saved.name;
    // Extra bytes after a valid payload.
    auto learner = saved.make();
    EXPECT_TRUE(absl::IsDataLoss(Load(*learner, reframe(payload + std::string(1, '\0')))));
  }
}

TEST(LearnerStateTest, StatesConcatenateAndLeaveTheDecoderAfterTheirFrame) {
  const std::vector<Saved> states = SavedStates();
  storage::Encoder out;
  out.PutString("header");
  for (size_t i = 0; i < states.size(); ++i) out.PutString(std::string());
  for (const Saved& saved : states) {
    // Re-save through a fresh learner to append to a shared encoder.
    auto learner = saved.make();
    ASSERT_TRUE(Load(*learner, saved.bytes).ok());
    learner->SaveState(&out);
  }
  out.PutFixed32(0xfeedbeef);
  const std::string all = out.Release();
  storage::Decoder in(all);
  std::string header;
  ASSERT_TRUE(in.GetString(&header));
  for (size_t i = 0; i < states.size(); ++i) ASSERT_TRUE(in.GetString(&header));
  for (const Saved& saved : states) {
    auto learner = saved.make();
    ASSERT_TRUE(learner->LoadState(&in).ok()) << saved.name;
    EXPECT_EQ(FirstDifference(Save(*learner), saved.bytes), -1) << saved.name;
  }
  uint32_t trailer = 0;
  ASSERT_TRUE(in.GetFixed32(&trailer));
  EXPECT_EQ(trailer, 0xfeedbeefu);
  EXPECT_TRUE(in.done());
}

TEST(StateCodingTest, HugeDeclaredSizesAreRejectedBeforeAllocating) {
  {  // a matrix claiming 2^30 x 2^30 doubles
    storage::Encoder out;
    PutCount(&out, int64_t{1} << 30);
    PutCount(&out, int64_t{1} << 30);
    out.PutDouble(1.0);
    const std::string bytes = out.Release();
    storage::Decoder in(bytes);
    Eigen::MatrixXd m;
    EXPECT_FALSE(GetMatrix(&in, &m));
  }
  {  // a Cholesky factor of size 0 with a huge capacity
    storage::Encoder out;
    PutCount(&out, 0);
    PutCount(&out, int64_t{1} << 40);
    const std::string bytes = out.Release();
    storage::Decoder in(bytes);
    CholeskyFactor f;
    EXPECT_FALSE(GetCholesky(&in, 64, &f));
  }
  {  // a history claiming 2^40 entries
    HistoryBuffer history(kDim, 0);
    storage::Encoder out;
    for (int64_t v : {int64_t{0}, int64_t{kDim}, int64_t{1} << 40, int64_t{1} << 40, int64_t{0}}) {
      PutCount(&out, v);
    }
    const std::string bytes = out.Release();
    storage::Decoder in(bytes);
    EXPECT_FALSE(GetHistory(&in, &history));
  }
  {  // a lower triangle of n = 2^31 - 1
    storage::Encoder out;
    PutCount(&out, (int64_t{1} << 31) - 1);
    const std::string bytes = out.Release();
    storage::Decoder in(bytes);
    Eigen::MatrixXd m;
    EXPECT_FALSE(GetLowerTriangle(&in, &m));
  }
}

// A frame whose payload is encoded in place is the frame PutStateFrame writes around the same
// payload encoded apart, byte for byte, after whatever the buffer already held; and it reads back.
TEST(StateCodingTest, AFrameEncodedInPlaceEqualsOneCopiedIn) {
  Rng rng(11);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(testing::RandomSpd(7, rng)).ok());
  HistoryBuffer h(3, 9);
  for (int i = 0; i < 20; ++i) h.Append(Eigen::Vector3d(i, -i, 0.25 * i), i % 4, 0.5 * i);
  const auto encode = [&](storage::Encoder* e) {
    e->PutVarint64(300);
    PutCholesky(e, f);
    PutHistory(e, h);
    e->PutString("tail");
  };
  storage::Encoder apart;
  encode(&apart);
  const std::string payload = apart.Release();

  storage::Encoder copied, in_place;
  copied.PutString("prefix");
  in_place.PutString("prefix");
  PutStateFrame(&copied, LearnerStateTag::kNystrom, 4, payload);
  PutStateFrameOf(&in_place, LearnerStateTag::kNystrom, 4, encode);
  EXPECT_EQ(in_place.data(), copied.data());
  storage::Encoder counted = storage::Encoder::Counting();
  counted.PutString("prefix");
  PutStateFrameOf(&counted, LearnerStateTag::kNystrom, 4, encode);
  EXPECT_EQ(counted.size(), copied.size());

  const std::string bytes = in_place.Release();
  storage::Decoder in(bytes);
  std::string prefix, read;
  ASSERT_TRUE(in.GetString(&prefix));
  ASSERT_TRUE(GetStateFrame(&in, LearnerStateTag::kNystrom, 4, &read).ok());
  EXPECT_EQ(read, payload);
  EXPECT_TRUE(in.done());
}

TEST(StateCodingTest, CholeskyAndHistoryRoundTripExactly) {
  Rng rng(5);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(testing::RandomSpd(5, rng)).ok());
  ASSERT_TRUE(f.Append(Eigen::VectorXd::Constant(5, 0.01), 50.0).ok());
  f.Truncate(4);  // capacity 10 or more, size 4
  storage::Encoder out;
  PutCholesky(&out, f);
  HistoryBuffer h(2, 5);
  for (int i = 0; i < 13; ++i) h.Append(Eigen::Vector2d(i, -i), i, 0.5 * i);
  PutHistory(&out, h);
  const std::string bytes = out.Release();

  storage::Decoder in(bytes);
  CholeskyFactor g;
  ASSERT_TRUE(GetCholesky(&in, 1000, &g));
  EXPECT_EQ(g.size(), f.size());
  EXPECT_EQ(g.capacity(), f.capacity());
  EXPECT_EQ(Eigen::MatrixXd(g.matrix()), Eigen::MatrixXd(f.matrix()));
  HistoryBuffer k(2, 5);
  ASSERT_TRUE(GetHistory(&in, &k));
  EXPECT_TRUE(in.done());
  EXPECT_EQ(k.head(), h.head());
  EXPECT_EQ(k.total(), h.total());
  ASSERT_EQ(k.size(), h.size());
  for (int64_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(k.point(i), h.point(i));
    EXPECT_EQ(k.user(i), h.user(i));
    EXPECT_EQ(k.reward(i), h.reward(i));
  }
  std::vector<int64_t> runs_h, runs_k;
  h.ForEachBlock(3, [&](const auto&, const int32_t* users, const double*, int64_t len) {
    runs_h.push_back(users[0]);
    runs_h.push_back(len);
  });
  k.ForEachBlock(3, [&](const auto&, const int32_t* users, const double*, int64_t len) {
    runs_k.push_back(users[0]);
    runs_k.push_back(len);
  });
  EXPECT_EQ(runs_h, runs_k);
  HistoryBuffer wrong(2, 6);  // another capacity
  storage::Decoder again(bytes);
  ASSERT_TRUE(GetCholesky(&again, 1000, &g));
  EXPECT_FALSE(GetHistory(&again, &wrong));
}

}  // namespace
}  // namespace graphbandit
