#include "server/config.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"
#include "google/protobuf/text_format.h"
#include "proto/enum_table.h"
#include "proto/text_format.h"
#include "server/cluster/jetstream_log.h"

namespace graphbandit::server {
namespace {

using config::EnumRow;
using config::FromProto;

constexpr EnumRow<v1::DurabilityConfig::Sync, Durability::Sync> kSyncs[] = {
    {v1::DurabilityConfig::EVERY_RECORD, Durability::Sync::kEveryRecord},
    {v1::DurabilityConfig::GROUP_COMMIT, Durability::Sync::kGroupCommit},
    {v1::DurabilityConfig::OS, Durability::Sync::kOs},
};

}  // namespace

absl::StatusOr<v1::ServerConfig> ParseServerConfig(const std::string& text,
                                                   const std::string& source_name) {
  v1::ServerConfig config;
  if (absl::Status parsed = ParseTextFormat(text, &config); !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", source_name, parsed.message()));
  }
  return config;
}

absl::StatusOr<v1::ServerConfig> ReadServerConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open config file \"%s\"", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseServerConfig(buffer.str(), path);
}

namespace {

// Cluster mode: each model's shared log is a JetStream stream (server/cluster/jetstream_log.h).
absl::Status ApplyClusterConfig(const v1::ClusterConfig& c, EngineOptions* options) {
  if (c.nats_servers().empty()) {
    return absl::InvalidArgumentError(
        "cluster.nats_servers is empty: list the NATS servers (nats://HOST:PORT) of the "
        "JetStream cluster");
  }
  const uint32_t replicas = c.replicas() == 0 ? 3 : c.replicas();
  if (replicas > 5) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster.replicas is %d; it must be 1..5", replicas));
  }
  const std::string prefix = c.stream_prefix().empty() ? "graphbandit" : c.stream_prefix();
  const bool prefix_ok =
      prefix.size() <= 64 && std::all_of(prefix.begin(), prefix.end(), [](char ch) {
        return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
      });
  if (!prefix_ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cluster.stream_prefix \"%s\" must be 1..64 characters from [A-Za-z0-9_-]", prefix));
  }
  if (c.has_expiry_grace_ms()) {
    if (c.expiry_grace_ms() > 600'000) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cluster.expiry_grace_ms is %d; it must be 0..600000", c.expiry_grace_ms()));
    }
    options->expiry_grace = absl::Milliseconds(c.expiry_grace_ms());
  }
  // Default: the host name (a StatefulSet's pod name is unique and stable across restarts).
  options->node_id = c.node_id();  // checked by the engine
  if (options->node_id.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) options->node_id = host;
  }
  std::vector<std::string> servers(c.nats_servers().begin(), c.nats_servers().end());
  options->shared_log =
      [servers, replicas,
       prefix](const ModelOptions& model) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
    cluster::JetStreamLog::Options stream;
    stream.servers = servers;
    stream.stream = cluster::ModelStreamName(prefix, model.name);
    stream.subject = cluster::ModelSubject(prefix, model.name);
    stream.replicas = static_cast<int>(replicas);
    absl::StatusOr<std::unique_ptr<cluster::JetStreamLog>> log =
        cluster::JetStreamLog::Open(stream);
    if (!log.ok()) {
      return absl::Status(
          log.status().code(),
          absl::StrFormat("model \"%s\": the shared log (stream %s on %s): %s", model.name,
                          stream.stream, absl::StrJoin(servers, ","), log.status().message()));
    }
    return std::shared_ptr<SharedLog>(
        std::make_shared<cluster::JetStreamSharedLog>(*std::move(log)));
  };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EngineOptions> ToEngineOptions(const v1::ServerConfig& config,
                                              const std::string& state_dir) {
  EngineOptions options;
  options.state_dir = state_dir;
  options.default_model = config.default_model().empty() ? "default" : config.default_model();
  for (int i = 0; i < config.models_size(); ++i) {
    if (config.models(i).name().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("models[%d].name is required", i));
    }
    absl::StatusOr<ModelOptions> model = ToModelOptions(config.models(i));
    if (!model.ok()) return model.status();
    options.models.push_back(*std::move(model));
  }
  // A default_model that names no configured model is a mistake, not a request for a new
  // model with default settings.
  if (!config.default_model().empty()) {
    std::vector<std::string> names;
    for (const ModelOptions& model : options.models) names.push_back(model.name);
    if (std::find(names.begin(), names.end(), config.default_model()) == names.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "default_model \"%s\" names no configured model (%s); add a models { name: \"%s\" } "
          "block or remove default_model",
          config.default_model(),
          names.empty() ? "none is configured" : "configured: " + absl::StrJoin(names, ", "),
          config.default_model()));
    }
  }
  const v1::DurabilityConfig& d = config.durability();
  if (absl::Status status = FromProto(kSyncs, d.sync(), Durability::Sync::kEveryRecord,
                                      "durability.sync", &options.durability.sync);
      !status.ok()) {
    return status;
  }
  if (d.group_commit_interval_ms() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("durability.group_commit_interval_ms is %d; it must be 1..1000",
                        d.group_commit_interval_ms()));
  }
  if (d.group_commit_interval_ms() > 0) {
    options.durability.group_commit_interval = absl::Milliseconds(d.group_commit_interval_ms());
  }
  if (d.has_snapshot_every_records()) {
    if (d.snapshot_every_records() > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError("durability.snapshot_every_records is too large");
    }
    options.durability.snapshot_every_records = static_cast<int64_t>(d.snapshot_every_records());
  }
  if (d.has_max_queued_operations()) {
    if (d.max_queued_operations() < 1 || d.max_queued_operations() > 10'000'000) {
      return absl::InvalidArgumentError(
          absl::StrFormat("durability.max_queued_operations is %d; it must be 1..10000000",
                          d.max_queued_operations()));
    }
    options.durability.max_queued_operations = static_cast<int64_t>(d.max_queued_operations());
  }
  if (d.has_max_learning_lag_ms()) {
    if (d.max_learning_lag_ms() > 3'600'000) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "durability.max_learning_lag_ms is %d; it must be 0..3600000", d.max_learning_lag_ms()));
    }
    options.durability.max_learning_lag = absl::Milliseconds(d.max_learning_lag_ms());
  }
  if (config.has_cluster()) {
    if (absl::Status s = ApplyClusterConfig(config.cluster(), &options); !s.ok()) return s;
  }
  return options;
}

absl::StatusOr<EngineOptions> ReadEngineOptions(const std::string& path,
                                                const std::string& state_dir) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open config file \"%s\"", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  v1::ServerConfig config;
  google::protobuf::TextFormat::ParseInfoTree locations;
  if (absl::Status parsed = ParseTextFormat(buffer.str(), &config, &locations); !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, parsed.message()));
  }
  // Which part was refused, and where it is in the file (1-based lines).
  const google::protobuf::Descriptor* descriptor = config.GetDescriptor();
  auto line_of = [&](const char* field, int index) {
    const auto location = locations.GetLocation(descriptor->FindFieldByName(field), index);
    return location.line + 1;
  };
  // A model declared twice is refused by the engine too, which cannot say where.
  absl::flat_hash_map<std::string, int> first_model;
  for (int i = 0; i < config.models_size(); ++i) {
    const auto [it, inserted] = first_model.emplace(config.models(i).name(), i);
    if (!inserted && !config.models(i).name().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: model \"%s\" is declared twice (first at line %d)", path, line_of("models", i),
          config.models(i).name(), line_of("models", it->second)));
    }
  }
  absl::StatusOr<EngineOptions> options = ToEngineOptions(config, state_dir);
  if (options.ok()) return options;
  int line = 0;
  for (int i = 0; i < config.models_size() && line == 0; ++i) {
    if (config.models(i).name().empty() || !ToModelOptions(config.models(i)).ok()) {
      line = line_of("models", i);
    }
  }
  if (line == 0 && !config.default_model().empty() &&
      absl::StrContains(options.status().message(), "default_model")) {
    line = line_of("default_model", -1);
  }
  if (line == 0 && config.has_durability()) {
    // The field of the durability block the message names, else the block.
    line = line_of("durability", -1);
    const google::protobuf::Descriptor* durability = config.durability().GetDescriptor();
    const auto* nested = locations.GetTreeForNested(descriptor->FindFieldByName("durability"), -1);
    for (int f = 0; nested != nullptr && f < durability->field_count(); ++f) {
      const google::protobuf::FieldDescriptor* field = durability->field(f);
      if (absl::StrContains(options.status().message(), "durability." + field->name())) {
        const auto location = nested->GetLocation(field, -1);
        if (location.line >= 0) line = location.line + 1;
      }
    }
  }
  if (line <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, options.status().message()));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s:%d: %s", path, line, options.status().message()));
}

}  // namespace graphbandit::server
