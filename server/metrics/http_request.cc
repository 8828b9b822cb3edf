#include "server/metrics/http_request.h"

namespace odeserve::metrics {
namespace {
constexpr std::string_view kHeadEnd = "\r\n\r\n";

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
}  // namespace

bool RequestHeadReady(std::string_view received) {
  return received.find(kHeadEnd) != std::string_view::npos || received.size() >= kMaxRequestHeadBytes;
}

MetricsRequest ParseRequestHead(std::string_view received) {
  if (received.find(kHeadEnd) == std::string_view::npos) return MetricsRequest::kHeadTooLarge;
  const std::string_view line = received.substr(0, received.find("\r\n"));
  const bool head = StartsWith(line, "HEAD ");
  if (!head && !StartsWith(line, "GET ")) return MetricsRequest::kMethodNotAllowed;
  // The request target: from after the method's space to the next space or the end of the line.
  const size_t path_start = line.find(' ') + 1;
  const std::string_view path = line.substr(path_start, line.find(' ', path_start) - path_start);
  if (path != "/metrics" && !StartsWith(path, "/metrics?")) return MetricsRequest::kNotFound;
  return head ? MetricsRequest::kHead : MetricsRequest::kGet;
}

}  // namespace odeserve::metrics
