// Fuzz target: recovery from a state directory (log reader, record decoding, replay, snapshot
// loading). Bytes become a model's state directory in one of three shapes:
//  0: a log segment with arbitrary bytes (optionally after a valid magic), so that the record
//     framing and checksums are attacked;
//  1: a log segment of well-framed records with valid checksums but arbitrary types and
//     payloads, so that record decoding and replay are attacked;
//  2: a snapshot file with a valid header and checksum but an arbitrary payload, followed by
//     records as in 1, so that snapshot loading is attacked.
// Model::Open must then either fail with a status or give a model that serves a decision;
// it must never crash, hang, or allocate without bound.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/model/engine.h"
#include "core/model/model.h"
#include "core/model/model_ops.h"
#include "core/storage/log_reader.h"
#include "core/storage/log_writer.h"
#include "core/storage/snapshot_file.h"
#include "tests/fuzz/fuzz_input.h"

namespace graphbandit::fuzz {
namespace {

const std::string& BaseDir() {
  static const std::string* dir = [] {
    // Memory-backed when the machine has it: every input writes and fsyncs a few files.
    const std::string base = std::filesystem::is_directory("/dev/shm")
                                 ? std::string("/dev/shm")
                                 : std::filesystem::temp_directory_path().string();
    std::string pattern = base + "/gb-recovery-fuzz.XXXXXX";
    return new std::string(mkdtemp(pattern.data()));
  }();
  return *dir;
}

// Policies whose learners have different state formats.
constexpr PolicyKind kPolicies[] = {PolicyKind::kEkUcb, PolicyKind::kGpUcb,
                                    PolicyKind::kLinUcbPerUser, PolicyKind::kBatchedNystromUcb};

// Every record type the log knows (model_ops.h), and none beyond: an unknown type is refused
// before decoding, so drawing past the last one would only exercise that refusal.
constexpr int kLastOpType = static_cast<int>(OpType::kServingMode);

// Records with sequence numbers from `first` on, mostly consecutive, sometimes repeated or
// skipping some (lost records), so that recovery's sequence checks meet them (the unit tests
// in tests/core/model/log_damage_test.cc check what they do; here, that nothing crashes).
void WriteRecords(FuzzInput& in, uint64_t first, storage::LogWriter* log) {
  uint64_t seq = first;
  while (!in.empty()) {
    const int step = in.Int(0, 7);
    const uint8_t type = static_cast<uint8_t>(in.Int(1, kLastOpType));
    const int len = in.Int(0, 512);
    std::string payload;
    for (int i = 0; i < len && !in.empty(); ++i) payload.push_back(static_cast<char>(in.Byte()));
    if (!log->Append(seq, type, payload).ok()) return;
    seq += step == 0 ? 0 : (step == 1 ? 2 : 1);
  }
}

// How deep the inputs got, printed at exit: inputs that only exercise the first checks would
// make a clean run meaningless.
struct Reach {
  long inputs = 0, opened = 0, from_snapshot = 0, replayed_records = 0, damaged = 0;
  bool seeded = false;  // the randomized driver took FuzzSeeds() (libFuzzer does not)
  ~Reach() {
    std::fprintf(stderr,
                 "recovery fuzzer: %ld inputs; %ld opened (%ld from a snapshot), %ld records "
                 "replayed in all, %ld with damage reported\n",
                 inputs, opened, from_snapshot, replayed_records, damaged);
    // A seeded run long enough to replay something that replayed nothing attacked only the
    // framing: a seed or driver defect, reported as a failure rather than a clean run.
    if (seeded && inputs >= 1000 && (replayed_records == 0 || from_snapshot == 0)) {
      std::fprintf(stderr, "recovery fuzzer: no input reached replay or a snapshot\n");
      std::_Exit(3);
    }
  }
};
Reach reach;

}  // namespace

// Inputs shaped like real state directories, for the randomized driver to mutate.
std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  reach.seeded = true;
  const std::string dir = BaseDir() + "/seed";
  for (int p = 0; p < 4; ++p) {
    std::filesystem::remove_all(dir);
    {
      EngineOptions options;
      options.state_dir = dir;
      options.run_sweeper = false;
      ModelOptions model;
      model.policy = kPolicies[p];
      if (!model.exact()) {  // the exact GP learns only FIRST rewards
        model.aggregation = p % 2 == 0 ? Aggregation::kFirst : Aggregation::kSum;
        model.default_reward = 0.0;
      }
      options.models = {model};
      auto engine = Engine::Open(options).value();
      Model* m = *engine->FindModel("");
      m->AddEdges({{"u0", "u1", 1.0}, {"u1", "u2", 0.5}}).IgnoreError();
      const std::vector<double> a = {1.0, 0.0}, b = {0.0, 1.0};
      for (int i = 0; i < 12; ++i) {
        const std::string user = absl::StrFormat("u%d", i % 3);
        DecisionRequest request;
        request.user_id = user;
        request.candidates = {CandidateRef{"a", a}, CandidateRef{"b", b}};
        // Some decisions deferred (held rewards, activation records), one never activated.
        request.defer_activation = i % 4 == 1;
        auto decision = engine->SelectArm(request);
        if (decision.ok() && i % 3 != 2) {
          engine->ReportReward({decision->event_id, 0.1 * i, {}, ""}).IgnoreError();
        }
        if (decision.ok() && request.defer_activation && i != 9) {
          engine->Activate("", decision->event_id, absl::InfiniteFuture()).IgnoreError();
        }
        if (i == 6) m->Snapshot().IgnoreError();
      }
      engine->ExpireDue(absl::Now() + absl::Hours(1));
      m->WaitForWriter();
      // Shapes 1 and 2 from what is on disk now.
      const std::string model_dir = dir + "/default";
      std::string records;
      std::string snapshot;
      for (const auto& entry : std::filesystem::directory_iterator(model_dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("log-", 0) == 0) {
          auto reader = storage::LogReader::Open(entry.path().string());
          if (!reader.ok()) continue;
          uint8_t type = 0;
          std::string payload;
          while ((*reader)->Next(&type, &payload) == storage::ReadResult::kRecord) {
            // The framing WriteRecords reads: the sequence step as one byte (2: the next
            // number), type-1 as one byte (mod kLastOpType), a 2-byte length, the payload.
            records.push_back('\2');
            records.push_back(static_cast<char>(type - 1));
            const size_t len = std::min<size_t>(payload.size(), 512);
            records.push_back(static_cast<char>(len >> 8));
            records.push_back(static_cast<char>(len & 0xff));
            records.append(payload, 0, len);
          }
        } else if (name.rfind("snapshot-", 0) == 0) {
          auto contents = storage::ReadSnapshotFile(entry.path().string());
          if (contents.ok()) snapshot = contents->payload;
        }
      }
      const char policy = static_cast<char>(p);
      seeds.push_back(std::string(1, '\1') + policy + records);
      if (!snapshot.empty()) {
        std::string shape2 = std::string(1, '\2') + policy;
        const uint32_t len = static_cast<uint32_t>(snapshot.size());
        for (int s = 3; s >= 0; --s) shape2.push_back(static_cast<char>(len >> (8 * s)));
        shape2 += snapshot + records;
        seeds.push_back(shape2);
      }
      engine->Shutdown();
    }
  }
  std::filesystem::remove_all(dir);
  return seeds;
}

}  // namespace graphbandit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace graphbandit;
  using namespace graphbandit::fuzz;
  FuzzInput in(data, size);
  const std::string dir = BaseDir() + "/input";
  std::filesystem::remove_all(dir);
  const std::string model_dir = dir + "/default";
  std::filesystem::create_directories(model_dir);
  const std::string segment = model_dir + "/log-00000000000000000001.log";
  const uint8_t shape = in.Byte() % 3;
  ModelOptions options;
  options.policy = kPolicies[in.Byte() % 4];
  options.max_decisions = 1000;
  options.max_users = 1000;
  options.exact_max_observations = 500;
  if (shape == 0) {
    if (in.Bool()) {
      auto log = storage::LogWriter::Open(segment);
      if (log.ok()) (*log)->Close().IgnoreError();
    }
    std::ofstream(segment, std::ios::binary | std::ios::app) << in.Rest();
  } else {
    uint64_t first = 1;
    if (shape == 2) {
      uint32_t len = 0;
      for (int s = 0; s < 4; ++s) len = (len << 8) | in.Byte();
      len = std::min<uint32_t>(len, static_cast<uint32_t>(in.remaining()));
      std::string payload;
      for (uint32_t i = 0; i < len; ++i) payload.push_back(static_cast<char>(in.Byte()));
      // The snapshot's sequence number must match the one its payload declares, so take it
      // from there (bytes 1..8, little-endian) when present.
      uint64_t seq = 1;
      if (payload.size() >= 9) {
        seq = 0;
        for (int i = 8; i >= 1; --i) seq = (seq << 8) | static_cast<uint8_t>(payload[i]);
        if (seq == 0 || seq > (uint64_t{1} << 40)) seq = 1;
      }
      storage::WriteSnapshotFile(absl::StrFormat("%s/snapshot-%020d.snap", model_dir, seq), seq,
                                 payload)
          .IgnoreError();
      first = seq + 1;
    }
    auto log = storage::LogWriter::Open(absl::StrFormat("%s/log-%020d.log", model_dir, first));
    if (log.ok()) {
      WriteRecords(in, first, log->get());
      (*log)->Close().IgnoreError();
    }
  }
  Durability durability;
  durability.sync = Durability::Sync::kOs;  // the fuzzer does not need the disk to be safe
  durability.snapshot_every_records = 0;
  auto model = Model::Open(options, dir, durability);
  ++reach.inputs;
  if (model.ok()) {
    const RecoveryReport& report = (*model)->recovery();
    ++reach.opened;
    reach.from_snapshot += report.snapshot_seq > 0;
    reach.replayed_records += report.records_replayed;
    reach.damaged += !report.damage.empty();
    const std::vector<double> a(3, 0.5);
    DecisionRequest request;
    request.user_id = "someone";
    request.candidates = {CandidateRef{"a", a}};
    // Whatever was recovered must serve or refuse cleanly.
    auto decision = (*model)->Select(request, "probe", true, 1, absl::Now());
    if (decision.ok() && !std::isfinite(decision->arms[0].mean)) {
      std::fprintf(stderr, "recovery fuzzer: a recovered model produced a non-finite mean\n");
      std::abort();
    }
    (*model)->Shutdown();
  }
  return 0;
}
