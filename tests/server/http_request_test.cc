// The /metrics endpoint's request head rules (server/metrics/http_request.h), without sockets;
// tests/server/metrics_test.cc covers the endpoint end to end.
#include "server/metrics/http_request.h"

#include <string>

#include <gtest/gtest.h>

namespace odeserve::metrics {
namespace {

TEST(HttpRequest, ReadyOnceTheHeadEndsOrTheLimitIsReached) {
  EXPECT_FALSE(RequestHeadReady(""));
  EXPECT_FALSE(RequestHeadReady("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_FALSE(RequestHeadReady("GET /metrics HTTP/1.1\r\n\r"));
  EXPECT_TRUE(RequestHeadReady("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(RequestHeadReady("\r\n\r\n"));
  EXPECT_FALSE(RequestHeadReady(std::string(kMaxRequestHeadBytes - 1, 'a')));
  EXPECT_TRUE(RequestHeadReady(std::string(kMaxRequestHeadBytes, 'a')));
}

TEST(HttpRequest, GetAndHeadOfMetrics) {
  EXPECT_EQ(ParseRequestHead("GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"),
            MetricsRequest::kGet);
  EXPECT_EQ(ParseRequestHead("GET /metrics?name[]=odeserve_requests_total HTTP/1.1\r\n\r\n"),
            MetricsRequest::kGet);
  EXPECT_EQ(ParseRequestHead("HEAD /metrics HTTP/1.0\r\n\r\n"), MetricsRequest::kHead);
  // No protocol version: the target runs to the end of the line.
  EXPECT_EQ(ParseRequestHead("GET /metrics\r\n\r\n"), MetricsRequest::kGet);
}

TEST(HttpRequest, OtherMethodsAndPaths) {
  EXPECT_EQ(ParseRequestHead("POST /metrics HTTP/1.1\r\n\r\n"), MetricsRequest::kMethodNotAllowed);
  EXPECT_EQ(ParseRequestHead("get /metrics HTTP/1.1\r\n\r\n"), MetricsRequest::kMethodNotAllowed);
  EXPECT_EQ(ParseRequestHead("GET\r\n\r\n"), MetricsRequest::kMethodNotAllowed);
  EXPECT_EQ(ParseRequestHead("\r\n\r\n"), MetricsRequest::kMethodNotAllowed);
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
  EXPECT_EQ(ParseRequestHead("GET /metricsz HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
  EXPECT_EQ(ParseRequestHead("GET /metrics/ HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
  EXPECT_EQ(ParseRequestHead("GET  /metrics HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
  EXPECT_EQ(ParseRequestHead("GET http://localhost/metrics HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
}

TEST(HttpRequest, IncompleteHeadIsTooLarge) {
  EXPECT_EQ(ParseRequestHead(std::string(kMaxRequestHeadBytes, 'a')), MetricsRequest::kHeadTooLarge);
  EXPECT_EQ(ParseRequestHead("GET /metrics HTTP/1.1\r\n"), MetricsRequest::kHeadTooLarge);
}

TEST(HttpRequest, OnlyTheHeadCounts) {
  // Bytes after the head (a body, a pipelined request) do not change the answer.
  EXPECT_EQ(ParseRequestHead("GET /metrics HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\n\r\n"), MetricsRequest::kGet);
  EXPECT_EQ(ParseRequestHead("PUT /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"),
            MetricsRequest::kMethodNotAllowed);
  // The request line ends at the first CRLF: a bare LF does not end it.
  EXPECT_EQ(ParseRequestHead("GET /x\n/metrics HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
  EXPECT_EQ(ParseRequestHead("GET /metrics\nX HTTP/1.1\r\n\r\n"), MetricsRequest::kNotFound);
}

}  // namespace
}  // namespace odeserve::metrics
