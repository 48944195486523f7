// Reading a server's Prometheus endpoint: an HTTP GET of its /metrics page (cpp-httplib's
// client) and a parser of the text exposition format, so that graphbandit-loadgen can read the
// server's CPU (process_cpu_seconds_total) and its freshness histogram by metric name and labels.
//
// The format, one sample a line:
//   name{label="value",other="with \"quotes\", commas and \\ backslashes"} 12.5 [timestamp]
// Lines starting with '#' (# HELP, # TYPE and other comments) and blank lines are skipped; a
// value may be a decimal or +Inf, -Inf or NaN; label values escape \\, \" and \n.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_METRICS_SCRAPE_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_METRICS_SCRAPE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::loadtest {

// Label name -> value pairs.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// One sample line of a page.
struct MetricSample {
  std::string name;
  MetricLabels labels;  // in the order written, values unescaped
  double value = 0;
  std::optional<int64_t> timestamp_ms;

  // The value of label `label`, or nullptr when the sample has none.
  const std::string* Label(absl::string_view label) const;
};

// A parsed page.
class MetricsPage {
 public:
  // Parses a whole page. A line that is not a comment, blank or a well-formed sample fails the
  // page with INVALID_ARGUMENT naming the line's number and what is wrong with it.
  static absl::StatusOr<MetricsPage> Parse(absl::string_view text);

  const std::vector<MetricSample>& samples() const { return samples_; }

  // The samples named `name` that carry every label of `match` with that value (they may carry
  // others too), in page order.
  std::vector<const MetricSample*> Find(absl::string_view name,
                                        const MetricLabels& match = {}) const;

  // The value of the first sample named `name` whose labels are exactly `labels` (in any order;
  // none by default, e.g. process_cpu_seconds_total); NaN when there is none.
  double Value(absl::string_view name, const MetricLabels& labels = {}) const;

  // A histogram's cumulative buckets: upper bound (its "le" label; +Inf as infinity) -> count,
  // added up over the series of `histogram`_bucket that carry every label of `match`. Buckets
  // whose le is missing or not a number are left out.
  std::map<double, double> Buckets(absl::string_view histogram,
                                   const MetricLabels& match = {}) const;

 private:
  std::vector<MetricSample> samples_;
};

// The parts of http://HOST:PORT/PATH (HOST may be [an IPv6 address]; PATH defaults to "/").
struct HttpUrl {
  std::string host;  // without brackets
  int port = 0;
  std::string path;
};

// INVALID_ARGUMENT unless `url` is http:// with a host and a port in 1..65535.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

// GET `url` (5 s to connect and 5 s to read): the body of a 200 answer. INVALID_ARGUMENT for a
// URL ParseHttpUrl refuses; UNAVAILABLE when nothing accepts the connection or answers in time,
// and for an answer other than 200 ("GET URL answered "HTTP/1.1 404 Not Found", not 200").
absl::StatusOr<std::string> FetchMetricsText(const std::string& url);

// FetchMetricsText, then MetricsPage::Parse.
absl::StatusOr<MetricsPage> ScrapeMetrics(const std::string& url);

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_METRICS_SCRAPE_H_
