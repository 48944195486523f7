#include "client/loadtest/metrics_scrape.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

// Last: httplib.h brings <resolv.h>, whose macro _res must not reach headers that use the name.
#include <httplib.h>  // NOLINT(build/include_order)

namespace graphbandit::loadtest {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || absl::ascii_isdigit(c); }
bool IsLabelStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsLabelChar(char c) { return IsLabelStart(c) || absl::ascii_isdigit(c); }

// A sample's value or a bucket's bound: a decimal, or +Inf, -Inf or NaN as the format writes
// them.
bool ParseNumber(absl::string_view text, double* value) {
  if (text == "+Inf" || text == "Inf") {
    *value = std::numeric_limits<double>::infinity();
  } else if (text == "-Inf") {
    *value = -std::numeric_limits<double>::infinity();
  } else if (text == "NaN") {
    *value = std::numeric_limits<double>::quiet_NaN();
  } else {
    return absl::SimpleAtod(text, value);
  }
  return true;
}

// One sample line (not blank, not a comment); the error says what is wrong with it.
absl::Status ParseSample(absl::string_view line, MetricSample* sample) {
  const auto wrong = [](absl::string_view what) { return absl::InvalidArgumentError(what); };
  size_t i = 0;
  const auto skip_blanks = [&] {
    while (i < line.size() && IsBlank(line[i])) ++i;
  };
  if (!IsNameStart(line[0])) return wrong("no metric name");
  while (i < line.size() && IsNameChar(line[i])) ++i;
  sample->name = std::string(line.substr(0, i));
  if (i < line.size() && !IsBlank(line[i]) && line[i] != '{') {
    return wrong(absl::StrCat("unexpected '", line.substr(i, 1), "' after the metric name"));
  }
  skip_blanks();
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      skip_blanks();
      if (i >= line.size()) return wrong("the labels have no closing '}'");
      if (line[i] == '}') {  // the end, possibly after a trailing comma
        ++i;
        break;
      }
      if (!IsLabelStart(line[i])) {
        return wrong(
            absl::StrCat("unexpected '", line.substr(i, 1), "' where a label name starts"));
      }
      const size_t start = i;
      while (i < line.size() && IsLabelChar(line[i])) ++i;
      std::string label(line.substr(start, i - start));
      skip_blanks();
      if (i >= line.size() || line[i] != '=') return wrong(absl::StrCat("no '=' after ", label));
      ++i;
      skip_blanks();
      if (i >= line.size() || line[i] != '"') {
        return wrong(absl::StrCat("the value of ", label, " is not quoted"));
      }
      ++i;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value.push_back(c);
          continue;
        }
        if (i >= line.size()) break;
        const char escaped = line[i++];
        if (escaped == '\\' || escaped == '"') {
          value.push_back(escaped);
        } else if (escaped == 'n') {
          value.push_back('\n');
        } else {
          return wrong(absl::StrCat("unknown escape \\", std::string(1, escaped), " in ", label));
        }
      }
      if (!closed) return wrong(absl::StrCat("the value of ", label, " has no closing quote"));
      if (sample->Label(label) != nullptr) return wrong(absl::StrCat(label, " given twice"));
      sample->labels.emplace_back(std::move(label), std::move(value));
      skip_blanks();
      if (i < line.size() && line[i] == ',') {
        ++i;
      } else if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      } else {
        return wrong(
            absl::StrCat("no ',' or '}' after the value of ", sample->labels.back().first));
      }
    }
  }
  // The value, and perhaps a timestamp (milliseconds since the epoch).
  const std::vector<absl::string_view> fields =
      absl::StrSplit(line.substr(i), absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.empty()) return wrong("no value");
  if (fields.size() > 2) return wrong("more than a value and a timestamp");
  if (!ParseNumber(fields[0], &sample->value)) {
    return wrong(absl::StrCat("the value \"", fields[0], "\" is not a number"));
  }
  if (fields.size() == 2) {
    int64_t timestamp = 0;
    if (!absl::SimpleAtoi(fields[1], &timestamp)) {
      return wrong(absl::StrCat("the timestamp \"", fields[1], "\" is not an integer"));
    }
    sample->timestamp_ms = timestamp;
  }
  return absl::OkStatus();
}

bool Carries(const MetricSample& sample, const MetricLabels& match) {
  for (const auto& [label, value] : match) {
    const std::string* found = sample.Label(label);
    if (found == nullptr || *found != value) return false;
  }
  return true;
}

}  // namespace

const std::string* MetricSample::Label(absl::string_view label) const {
  for (const auto& [name, value] : labels) {
    if (name == label) return &value;
  }
  return nullptr;
}

absl::StatusOr<MetricsPage> MetricsPage::Parse(absl::string_view text) {
  MetricsPage page;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);  // also a \r of a CRLF page
    if (line.empty() || line.front() == '#') continue;
    MetricSample sample;
    if (absl::Status s = ParseSample(line, &sample); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics line ", number, ": ", s.message(), ": \"", line, "\""));
    }
    page.samples_.push_back(std::move(sample));
  }
  return page;
}

std::vector<const MetricSample*> MetricsPage::Find(absl::string_view name,
                                                   const MetricLabels& match) const {
  std::vector<const MetricSample*> found;
  for (const MetricSample& sample : samples_) {
    if (sample.name == name && Carries(sample, match)) found.push_back(&sample);
  }
  return found;
}

double MetricsPage::Value(absl::string_view name, const MetricLabels& labels) const {
  for (const MetricSample& sample : samples_) {
    // Label names are unique within a sample, so as many labels, each matched, are the same set.
    if (sample.name == name && sample.labels.size() == labels.size() && Carries(sample, labels)) {
      return sample.value;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::map<double, double> MetricsPage::Buckets(absl::string_view histogram,
                                              const MetricLabels& match) const {
  std::map<double, double> buckets;
  for (const MetricSample* sample : Find(absl::StrCat(histogram, "_bucket"), match)) {
    const std::string* le = sample->Label("le");
    double bound = 0;
    if (le == nullptr || !ParseNumber(*le, &bound) || std::isnan(bound)) continue;
    buckets[bound] += sample->value;
  }
  return buckets;
}

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "http://";
  const auto wrong = [url](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", url, "\" ", what, " (expected http://HOST:PORT/PATH)"));
  };
  if (!absl::StartsWith(url, kScheme)) return wrong("is not an http:// URL");
  const absl::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const absl::string_view authority = rest.substr(0, slash);
  HttpUrl parsed;
  parsed.path = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  absl::string_view host, port;
  if (absl::StartsWith(authority, "[")) {  // [IPv6 address]:port
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return wrong("has a '[' without ']' in its host");
    host = authority.substr(1, close - 1);
    const absl::string_view after = authority.substr(close + 1);
    if (!absl::StartsWith(after, ":")) return wrong("names no port");
    port = after.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == absl::string_view::npos) return wrong("names no port");
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return wrong("names no host");
  if (!absl::SimpleAtoi(port, &parsed.port) || parsed.port < 1 || parsed.port > 65535) {
    return wrong(absl::StrCat("has the port \"", port, "\", not one in 1..65535"));
  }
  parsed.host = std::string(host);
  return parsed;
}

absl::StatusOr<std::string> FetchMetricsText(const std::string& url) {
  absl::StatusOr<HttpUrl> parsed = ParseHttpUrl(url);
  if (!parsed.ok()) return parsed.status();
  const std::string where = parsed->host.find(':') == std::string::npos
                                ? absl::StrCat(parsed->host, ":", parsed->port)
                                : absl::StrCat("[", parsed->host, "]:", parsed->port);
  httplib::Client client(parsed->host, parsed->port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  client.set_write_timeout(5, 0);
  // The page uncompressed, as a plain GET asks for it: no gzip work for the measured server.
  const httplib::Headers headers = {{"Accept-Encoding", "identity"}};
  httplib::Result result = client.Get(parsed->path, headers);
  if (!result) {
    const httplib::Error error = result.error();
    if (error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout) {
      return absl::UnavailableError(absl::StrCat("GET ", url, ": cannot connect to ", where));
    }
    return absl::UnavailableError(absl::StrCat("GET ", url, ": no HTTP response from ", where, " (",
                                               httplib::to_string(error), ")"));
  }
  // Anything but 200 (a 404 for a wrong path, say) is not a metrics page.
  if (result->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", url, " answered \"", result->version, " ",
                                               result->status, result->reason.empty() ? "" : " ",
                                               result->reason, "\", not 200"));
  }
  return std::move(result->body);
}

absl::StatusOr<MetricsPage> ScrapeMetrics(const std::string& url) {
  absl::StatusOr<std::string> text = FetchMetricsText(url);
  if (!text.ok()) return text.status();
  return MetricsPage::Parse(*text);
}

}  // namespace graphbandit::loadtest
