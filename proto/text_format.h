// Text-format parsing with every error reported, for the files people write by hand (the
// server's configuration, the simulator's presets). Header-only: protobuf and Abseil, no gRPC.
#ifndef GRAPHBANDIT_PROTO_TEXT_FORMAT_H_
#define GRAPHBANDIT_PROTO_TEXT_FORMAT_H_

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace graphbandit {

// Parses `text` into *message. On failure: INVALID_ARGUMENT listing each problem as
// "line L column C: what" (1-based), joined by "; "; warnings count as problems.
// With `locations`, records where each field was found (for errors found after parsing).
inline absl::Status ParseTextFormat(
    const std::string& text, google::protobuf::Message* message,
    google::protobuf::TextFormat::ParseInfoTree* locations = nullptr) {
  class CollectErrors : public google::protobuf::io::ErrorCollector {
   public:
    void AddError(int line, int column, const std::string& what) override {
      errors.push_back(absl::StrFormat("line %d column %d: %s", line + 1, column + 1, what));
    }
    void AddWarning(int line, int column, const std::string& what) override {
      AddError(line, column, what);
    }
    std::vector<std::string> errors;
  };
  CollectErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (locations != nullptr) parser.WriteLocationsTo(locations);
  if (parser.ParseFromString(text, message)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors.errors, "; "));
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_PROTO_TEXT_FORMAT_H_
