// The server's configuration file (protobuf text format, graphbandit.v1.ServerConfig) and the
// engine's options from it.
#ifndef GRAPHBANDIT_SERVER_CONFIG_H_
#define GRAPHBANDIT_SERVER_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/model/engine.h"
#include "core/model/model_options.h"
#include "graphbandit/v1/config.pb.h"
#include "proto/model_config.h"

namespace graphbandit::server {

// Parses a ServerConfig; errors carry the file name, line and column.
absl::StatusOr<v1::ServerConfig> ParseServerConfig(const std::string& text,
                                                   const std::string& source_name);
absl::StatusOr<v1::ServerConfig> ReadServerConfig(const std::string& path);

// ModelConfig <-> ModelOptions (proto/model_config.h, shared with the simulator).
using config::ToModelConfig;
using config::ToModelOptions;

// Engine options from the configuration file at `path`: every error names the file, the line
// and the field ("cfg.textproto:12: model \"news\": ridge must be ...").
absl::StatusOr<EngineOptions> ReadEngineOptions(const std::string& path,
                                                const std::string& state_dir);

// Engine options from a ServerConfig (the default model is added by the engine if absent).
absl::StatusOr<EngineOptions> ToEngineOptions(const v1::ServerConfig& config,
                                              const std::string& state_dir);

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_CONFIG_H_
