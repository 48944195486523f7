// The load generator's report: the figures of a run (throughput, latency percentiles, regret
// per window and first against last, what the model learned), computed once into a Report
// (report.proto) that is printed as text on stdout and, with --report_json, as JSON.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_REPORT_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_REPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/loadtest/report.pb.h"
#include "client/loadtest/session.h"
#include "graphbandit/v1/bandit.pb.h"

namespace graphbandit::loadtest {

// What the report states besides the run's measurements.
struct ReportSettings {
  std::string target;
  std::string model;
  std::string user_prefix;
  int64_t rounds = 0;
  int concurrency = 0;
  int64_t window = 0;          // rounds per window of the regret table
  int64_t compare_window = 0;  // rounds of the first and last blocks compared
  Environment environment;
};

Report BuildReport(const ReportSettings& settings, const RunResult& run,
                   const graphbandit::v1::ModelDescription& before,
                   const graphbandit::v1::ModelDescription& after);

// The text report (stdout).
void PrintReport(const Report& report);

// The JSON report (the proto3 JSON mapping of Report, field names as in report.proto).
absl::StatusOr<std::string> ReportJson(const Report& report);
absl::Status WriteReportJson(const Report& report, const std::string& path);

// 0 when every round completed and the model learned every acknowledged reward; 3 when rounds
// failed; 4 when acknowledged rewards were not learned.
int ExitCode(const Report& report);

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_REPORT_H_
