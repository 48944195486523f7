// The load generator's reading of a server's /metrics page (client/loadtest/metrics_scrape.h):
// the text exposition parser on pages like the server's (counters, a histogram, escaped label
// values, comments, special values) and on malformed lines, URLs, and the fetch against a
// cpp-httplib server on loopback: a page, a 404, a page that does not parse, a refused
// connection.
#include "client/loadtest/metrics_scrape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
// Last: httplib.h brings <resolv.h>, whose macro _res must not reach headers that use the name.
#include <httplib.h>  // NOLINT(build/include_order)

namespace graphbandit::loadtest {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A page as the server writes one (prometheus-cpp's text format), with two models.
constexpr char kPage[] =
    R"(# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# HELP graphbandit_requests_total RPCs answered, by method and status code.
# TYPE graphbandit_requests_total counter
graphbandit_requests_total{model="default",method="SelectArm",code="OK"} 1027
graphbandit_requests_total{model="default",method="ReportReward",code="OK"} 998
graphbandit_requests_total{model="default",method="SelectArm",code="INVALID_ARGUMENT"} 3

# HELP graphbandit_state_freshness_seconds From a reward's acknowledgement to a learned state.
# TYPE graphbandit_state_freshness_seconds histogram
graphbandit_state_freshness_seconds_bucket{model="default",le="0.001"} 3
graphbandit_state_freshness_seconds_bucket{model="default",le="0.01"} 10
graphbandit_state_freshness_seconds_bucket{model="default",le="+Inf"} 12
graphbandit_state_freshness_seconds_sum{model="default"} 0.0625
graphbandit_state_freshness_seconds_count{model="default"} 12
graphbandit_state_freshness_seconds_bucket{model="other",le="0.001"} 1
graphbandit_state_freshness_seconds_bucket{model="other",le="0.01"} 1
graphbandit_state_freshness_seconds_bucket{model="other",le="+Inf"} 2
graphbandit_state_freshness_seconds_sum{model="other"} 0.5
graphbandit_state_freshness_seconds_count{model="other"} 2
)";

MetricsPage MustParse(const std::string& text) {
  absl::StatusOr<MetricsPage> page = MetricsPage::Parse(text);
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? *std::move(page) : MetricsPage();
}

TEST(MetricsPageTest, ReadsCountersByNameAndLabels) {
  const MetricsPage page = MustParse(kPage);
  EXPECT_EQ(page.samples().size(), 14u);  // the comments and the blank line are skipped
  EXPECT_EQ(page.Value("process_cpu_seconds_total"), 12.5);
  EXPECT_EQ(page.Value("graphbandit_requests_total",
                       {{"code", "OK"}, {"method", "ReportReward"}, {"model", "default"}}),
            998);
  // Value wants the labels exactly: a subset or none names no sample.
  EXPECT_TRUE(std::isnan(page.Value("graphbandit_requests_total", {{"method", "SelectArm"}})));
  EXPECT_TRUE(std::isnan(page.Value("graphbandit_requests_total")));
  EXPECT_TRUE(std::isnan(page.Value("no_such_metric")));
  // Find takes a subset.
  const auto select = page.Find("graphbandit_requests_total", {{"method", "SelectArm"}});
  ASSERT_EQ(select.size(), 2u);
  EXPECT_EQ(select[0]->value, 1027);
  EXPECT_EQ(*select[1]->Label("code"), "INVALID_ARGUMENT");
  EXPECT_EQ(select[1]->Label("le"), nullptr);
  EXPECT_EQ(page.Find("graphbandit_requests_total").size(), 3u);
  EXPECT_EQ(page.Value("graphbandit_state_freshness_seconds_sum", {{"model", "other"}}), 0.5);
}

TEST(MetricsPageTest, ReadsAHistogramsBuckets) {
  const MetricsPage page = MustParse(kPage);
  EXPECT_THAT(page.Buckets("graphbandit_state_freshness_seconds", {{"model", "default"}}),
              ElementsAre(Pair(0.001, 3), Pair(0.01, 10), Pair(kInf, 12)));
  // Without a model the series add up.
  EXPECT_THAT(page.Buckets("graphbandit_state_freshness_seconds"),
              ElementsAre(Pair(0.001, 4), Pair(0.01, 11), Pair(kInf, 14)));
  EXPECT_TRUE(page.Buckets("graphbandit_state_freshness_seconds", {{"model", "none"}}).empty());
  EXPECT_TRUE(page.Buckets("graphbandit_requests_total").empty());
}

TEST(MetricsPageTest, UnescapesLabelValues) {
  const MetricsPage page = MustParse(
      "paths{dir=\"C:\\\\temp\\\\\",quote=\"say \\\"hi\\\", then go\",lines=\"a\\nb\","
      "list=\"x,y}\",empty=\"\"} 1\n");
  ASSERT_EQ(page.samples().size(), 1u);
  const MetricSample& sample = page.samples()[0];
  EXPECT_EQ(sample.name, "paths");
  EXPECT_THAT(sample.labels,
              ElementsAre(Pair("dir", "C:\\temp\\"), Pair("quote", "say \"hi\", then go"),
                          Pair("lines", "a\nb"), Pair("list", "x,y}"), Pair("empty", "")));
  EXPECT_EQ(page.Value("paths", {{"list", "x,y}"},
                                 {"quote", "say \"hi\", then go"},
                                 {"dir", "C:\\temp\\"},
                                 {"lines", "a\nb"},
                                 {"empty", ""}}),
            1);
}

TEST(MetricsPageTest, ReadsSpecialValuesTimestampsAndSpacing) {
  const MetricsPage page = MustParse(
      "# a comment that is neither HELP nor TYPE\r\n"
      "up_inf +Inf\r\n"
      "down_inf -Inf\n"
      "not_a_number NaN\n"
      "exponent 1.5e-3\n"
      "negative -2\n"
      "stamped 7 1700000000000\n"
      "  \tspaced { a = \"b\" , } \t 4  \n"
      "tight{a=\"b\"}5\n"
      "colon:name_total 6\n"
      "\n");
  EXPECT_EQ(page.Value("up_inf"), kInf);
  EXPECT_EQ(page.Value("down_inf"), -kInf);
  EXPECT_TRUE(std::isnan(page.Value("not_a_number")));
  EXPECT_EQ(page.Value("exponent"), 1.5e-3);
  EXPECT_EQ(page.Value("negative"), -2);
  ASSERT_EQ(page.Find("stamped").size(), 1u);
  EXPECT_EQ(page.Find("stamped")[0]->value, 7);
  EXPECT_EQ(page.Find("stamped")[0]->timestamp_ms, 1700000000000);
  EXPECT_FALSE(page.Find("up_inf")[0]->timestamp_ms.has_value());
  EXPECT_EQ(page.Value("spaced", {{"a", "b"}}), 4);
  EXPECT_EQ(page.Value("tight", {{"a", "b"}}), 5);
  EXPECT_EQ(page.Value("colon:name_total"), 6);
  EXPECT_TRUE(MustParse("").samples().empty());
  EXPECT_TRUE(MustParse("# only\n# comments\n").samples().empty());
}

TEST(MetricsPageTest, RefusesMalformedLinesByNumber) {
  const struct {
    const char* line;
    const char* says;
  } cases[] = {
      {"metric", "no value"},
      {"metric abc", "is not a number"},
      {"metric 1 2 3", "more than a value and a timestamp"},
      {"metric 1 soon", "is not an integer"},
      {"1metric 2", "no metric name"},
      {"{a=\"b\"} 2", "no metric name"},
      {"met-ric 2", "after the metric name"},
      {"metric{a=\"b\" 1", "no ',' or '}'"},
      {"metric{a=\"b\",", "no closing '}'"},
      {"metric{a=b} 1", "not quoted"},
      {"metric{a} 1", "no '=' after a"},
      {"metric{1a=\"b\"} 1", "where a label name starts"},
      {"metric{a=\"b} 1", "no closing quote"},
      {"metric{a=\"b\\q\"} 1", "unknown escape \\q"},
      {"metric{a=\"x\",a=\"y\"} 1", "a given twice"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const absl::StatusOr<MetricsPage> page =
        MetricsPage::Parse(absl::StrCat("# TYPE metric counter\nok 1\n", c.line, "\nok 2\n"));
    ASSERT_FALSE(page.ok());
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(page.status().message(), HasSubstr("metrics line 3: "));
    EXPECT_THAT(page.status().message(), HasSubstr(c.says));
    EXPECT_THAT(page.status().message(), HasSubstr(c.line));
  }
}

TEST(ParseHttpUrlTest, SplitsHostPortAndPath) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl("http://127.0.0.1:9464/metrics");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 9464);
  EXPECT_EQ(url->path, "/metrics");
  url = ParseHttpUrl("http://[::1]:80");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 80);
  EXPECT_EQ(url->path, "/");
  url = ParseHttpUrl("http://localhost:1/a/b?c=d");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->path, "/a/b?c=d");

  for (const char* bad :
       {"https://127.0.0.1:9464/metrics", "127.0.0.1:9464/metrics", "", "http://host/metrics",
        "http://:9464/metrics", "http://host:0/", "http://host:65536/", "http://host:port/",
        "http://[::1/metrics", "http://[::1]/metrics"}) {
    SCOPED_TRACE(bad);
    url = ParseHttpUrl(bad);
    ASSERT_FALSE(url.ok());
    EXPECT_EQ(url.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(url.status().message(), HasSubstr("http://HOST:PORT/PATH"));
  }
}

// A cpp-httplib server on 127.0.0.1 at a port the system chose: /metrics answers kPage,
// /garbled a page that does not parse, anything else 404.
class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kPage, "text/plain; version=0.0.4");
    });
    server_.Get("/garbled", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("process_cpu_seconds_total twelve\n", "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() does nothing before the listener runs: wait for it.
    for (int i = 0; i < 500 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(server_.is_running());
  }
  void TearDown() override {
    server_.stop();
    if (listener_.joinable()) listener_.join();
  }
  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread listener_;
};

TEST_F(MetricsServerTest, FetchesAndParsesThePage) {
  absl::StatusOr<std::string> text = FetchMetricsText(Url("/metrics"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, kPage);
  absl::StatusOr<MetricsPage> page = ScrapeMetrics(Url("/metrics"));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->Value("process_cpu_seconds_total"), 12.5);
  EXPECT_THAT(page->Buckets("graphbandit_state_freshness_seconds", {{"model", "other"}}),
              ElementsAre(Pair(0.001, 1), Pair(0.01, 1), Pair(kInf, 2)));
}

TEST_F(MetricsServerTest, ANotFoundPageIsAnError) {
  const absl::StatusOr<std::string> text = FetchMetricsText(Url("/nothing-here"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(text.status().message(),
              HasSubstr(absl::StrCat("GET ", Url("/nothing-here"), " answered \"HTTP/1.1 404")));
  EXPECT_THAT(text.status().message(), HasSubstr("not 200"));
  EXPECT_EQ(ScrapeMetrics(Url("/nothing-here")).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(MetricsServerTest, APageThatDoesNotParseIsAnError) {
  ASSERT_TRUE(FetchMetricsText(Url("/garbled")).ok());
  const absl::StatusOr<MetricsPage> page = ScrapeMetrics(Url("/garbled"));
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(page.status().message(), HasSubstr("metrics line 1: the value \"twelve\""));
}

TEST(FetchMetricsTextTest, ARefusedConnectionIsAnError) {
  // A port on 127.0.0.1 bound but not listening: a connection to it is refused, and nothing
  // else can take the port while the socket is open.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  const std::string url = absl::StrCat("http://127.0.0.1:", port, "/metrics");
  const absl::StatusOr<std::string> text = FetchMetricsText(url);
  close(fd);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(text.status().message(),
              HasSubstr(absl::StrCat("cannot connect to 127.0.0.1:", port)));
}

TEST(FetchMetricsTextTest, ABadUrlIsAnError) {
  for (const char* bad : {"ftp://127.0.0.1:21/metrics", "http://127.0.0.1/metrics"}) {
    SCOPED_TRACE(bad);
    const absl::StatusOr<MetricsPage> page = ScrapeMetrics(bad);
    ASSERT_FALSE(page.ok());
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace graphbandit::loadtest
