#pragma once
// The request side of the /metrics endpoint (http_exposer.cc) as pure functions over the bytes
// a connection has sent: when they can be answered, and how. No sockets, so they are tested and
// fuzzed on their own (tests/server/http_request_test.cc, tests/fuzz/fuzz_metrics_http.cc).

#include <cstddef>
#include <string_view>

namespace odeserve::metrics {

/// The most bytes of a request head the endpoint waits for (docs/LIMITS.md): a connection that
/// has sent this many without ending its head is answered 431.
inline constexpr size_t kMaxRequestHeadBytes = 16 * 1024;

/// Whether `received` (everything a connection has sent so far) can be answered: it holds the
/// end of a request head ("\r\n\r\n"), or kMaxRequestHeadBytes bytes or more.
bool RequestHeadReady(std::string_view received);

/// The answer to a request, decided by its head alone (bytes after the first "\r\n\r\n" never
/// change it).
enum class MetricsRequest {
  kGet,               // GET /metrics, with or without a query string: 200 and the body
  kHead,              // HEAD /metrics: 200, the head of the GET response without its body
  kHeadTooLarge,      // no "\r\n\r\n" in the bytes received: 431
  kMethodNotAllowed,  // the request line starts with neither "GET " nor "HEAD ": 405
  kNotFound,          // another path: 404
};

/// Classifies the bytes a connection sent once RequestHeadReady() holds for them.
MetricsRequest ParseRequestHead(std::string_view received);

}  // namespace odeserve::metrics
