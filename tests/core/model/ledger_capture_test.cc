// DecisionLedger::Capture and EncodeLedger: a snapshot's ledger is captured under the ledger lock
// and encoded later, while the live ledger goes on changing; what is encoded must be the ledger
// as it was at the capture, byte for byte.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/ledger_records.h"
#include "core/model/model_options.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

constexpr int kTombstones = 6;

std::unique_ptr<LedgerEntry> Entry(int i, int arms) {
  auto entry = std::make_unique<LedgerEntry>();
  entry->event_id = absl::StrCat("an-event-id-longer-than-short-string-storage-", i);
  entry->fingerprint = 1000 + static_cast<uint64_t>(i);
  entry->created = absl::FromUnixSeconds(1'700'000'000 + i);
  entry->user_id = absl::StrCat("user-", i % 3);
  entry->context = {0.5 * i, -1.0};
  entry->decision.model_version = 7 + static_cast<uint64_t>(i);
  for (int a = 0; a < arms; ++a) {
    const std::string id = absl::StrCat("arm-", i, "-", a);
    entry->arms.push_back(LedgerArm{id, {0.25 * a, 1.0 + i}, 0, 0.0});
    ChosenArm chosen;
    chosen.candidate_index = a;
    chosen.arm_id = id;
    chosen.mean = 0.1 * i;
    chosen.stddev = 0.2;
    chosen.score = 0.3 + a;
    entry->decision.arms.push_back(chosen);
  }
  return entry;
}

// The same history for every ledger built with it: ten decisions (one keeps its candidates, as
// policies that learn from the whole decision do), some rewarded (SUM: repeats add up), four
// closed (tombstones).
void Fill(DecisionLedger* ledger) {
  for (int i = 0; i < 10; ++i) {
    std::unique_ptr<LedgerEntry> entry = Entry(i, 1 + i % 2);
    if (i == 5) {
      auto candidates = std::make_shared<DecisionCandidates>();
      candidates->features = {{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}};
      candidates->probabilities = {0.25, 0.5, 0.25};
      entry->decision.candidates = std::move(candidates);
    }
    ledger->Insert(std::move(entry));
  }
  ledger->Report(ledger->Find(Entry(1, 1)->event_id), 0, 2.0);
  ledger->Report(ledger->Find(Entry(3, 1)->event_id), 1, -1.5);
  for (int i : {0, 4, 6, 8}) {
    ledger->Close(ledger->Find(Entry(i, 1)->event_id), ClosedAs::kExpired,
                  absl::FromUnixSeconds(1'800'000'000 + i));
  }
}

TEST(LedgerCaptureTest, EncodesTheLedgerAsItWasWhenCaptured) {
  DecisionLedger live(absl::Minutes(10), 100, kTombstones, Aggregation::kSum);
  DecisionLedger twin(absl::Minutes(10), 100, kTombstones, Aggregation::kSum);
  Fill(&live);
  Fill(&twin);
  const LedgerCapture capture = live.Capture();
  ASSERT_EQ(capture.entries.size(), 6u);
  ASSERT_EQ(capture.tombstones.size(), 4u);

  // The live ledger moves on: a reward changes an arm's aggregate, two decisions close (their
  // entries are destroyed in the ledger, the oldest tombstones are evicted past the cap), a new
  // decision arrives.
  const std::string rewarded = Entry(1, 1)->event_id;
  live.Report(live.Find(rewarded), 0, 5.0);
  for (int i : {1, 3}) {
    live.Close(live.Find(Entry(i, 1)->event_id), ClosedAs::kCompleted,
               absl::FromUnixSeconds(1'900'000'000 + i));
  }
  live.RestoreTombstone(Tombstone{"late", ClosedAs::kExpired, absl::FromUnixSeconds(5)});
  live.Insert(Entry(42, 2));
  ASSERT_EQ(live.tombstones(), kTombstones);

  const std::string encoded = EncodeLedger(capture);
  EXPECT_EQ(encoded, EncodeLedger(twin.Capture()));
  EXPECT_NE(encoded, EncodeLedger(live.Capture()));

  // And it restores to that ledger (DecodeLedger is the reader of every existing snapshot).
  ModelOptions options;
  options.aggregation = Aggregation::kSum;
  DecisionLedger restored(absl::Minutes(10), 100, kTombstones, Aggregation::kSum);
  storage::Decoder in(encoded);
  ASSERT_TRUE(DecodeLedger(&in, options, &restored).ok());
  EXPECT_EQ(restored.size(), 6);
  EXPECT_EQ(restored.tombstones(), 4);
  const LedgerEntry* entry = restored.Find(rewarded);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->arms[0].reports, 1);
  EXPECT_EQ(entry->arms[0].aggregate, 2.0);
  EXPECT_NE(restored.Find(Entry(3, 1)->event_id), nullptr);
  const LedgerEntry* with_candidates = restored.Find(Entry(5, 1)->event_id);
  ASSERT_NE(with_candidates, nullptr);
  ASSERT_NE(with_candidates->decision.candidates, nullptr);
  EXPECT_EQ(with_candidates->decision.candidates->features[2], (std::vector<double>{5.0, 6.0}));
  EXPECT_EQ(with_candidates->decision.candidates->probabilities[1], 0.5);
  EXPECT_EQ(restored.Find(Entry(42, 1)->event_id), nullptr);
  EXPECT_NE(restored.FindClosed(Entry(0, 1)->event_id), nullptr);
  EXPECT_EQ(restored.FindClosed("late"), nullptr);
}

TEST(LedgerCaptureTest, KeepsClosedDecisionsAliveOnlyUntilReleased) {
  DecisionLedger ledger(absl::Minutes(10), 100, kTombstones, Aggregation::kFirst);
  ledger.Insert(Entry(0, 1));
  std::weak_ptr<const LedgerEntry> watched;
  {
    LedgerCapture capture = ledger.Capture();
    ASSERT_EQ(capture.entries.size(), 1u);
    watched = capture.entries[0];
    ledger.Close(ledger.Find(Entry(0, 1)->event_id), ClosedAs::kCompleted, absl::UnixEpoch());
    EXPECT_EQ(ledger.size(), 0);
    EXPECT_FALSE(watched.expired());  // the capture still encodes it
    EXPECT_EQ(capture.entries[0]->user_id, "user-0");
  }
  EXPECT_TRUE(watched.expired());  // nothing else held it
}

}  // namespace
}  // namespace graphbandit
