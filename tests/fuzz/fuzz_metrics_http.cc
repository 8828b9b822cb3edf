// (c) The /metrics endpoint's request head parsing (server/metrics/http_request.h): arbitrary
// bytes as what a connection sends. Checks, besides the sanitizers:
//  - the verdict agrees with an independent reading of the rules (request line = bytes before
//    the first CRLF; method token; target up to the next space; /metrics or /metrics?...);
//  - only the head counts: bytes after the first "\r\n\r\n" never change the verdict;
//  - read the way the endpoint reads it (chunks of at most 4096 bytes, answered once
//    RequestHeadReady holds), a head that ends within kMaxRequestHeadBytes gets the same verdict
//    as the whole head, and one that does not is answered 431 after at most the limit plus one
//    chunk of bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/metrics/http_request.h"

using odeserve::metrics::kMaxRequestHeadBytes;
using odeserve::metrics::MetricsRequest;
using odeserve::metrics::ParseRequestHead;
using odeserve::metrics::RequestHeadReady;

namespace {

constexpr size_t kRecvChunk = 4096;  // http_exposer.cc's read buffer

[[noreturn]] void Fail(const char* what, std::string_view data) {
  std::fprintf(stderr, "fuzz_metrics_http: %s (input of %zu bytes)\n", what, data.size());
  std::abort();
}

const char* Name(MetricsRequest r) {
  switch (r) {
    case MetricsRequest::kGet: return "GET";
    case MetricsRequest::kHead: return "HEAD";
    case MetricsRequest::kHeadTooLarge: return "431";
    case MetricsRequest::kMethodNotAllowed: return "405";
    case MetricsRequest::kNotFound: return "404";
  }
  return "?";
}

// The rules, read independently: byte by byte, no find()/substr() arithmetic.
MetricsRequest Reference(std::string_view data) {
  bool complete = false;
  for (size_t i = 0; i + 3 < data.size() && !complete; ++i) {
    complete = data[i] == '\r' && data[i + 1] == '\n' && data[i + 2] == '\r' && data[i + 3] == '\n';
  }
  if (!complete) return MetricsRequest::kHeadTooLarge;
  std::string line;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] == '\n') break;
    line.push_back(data[i]);
  }
  std::string method, target;
  size_t i = 0;
  while (i < line.size() && line[i] != ' ') method.push_back(line[i++]);
  if (i == line.size() || (method != "GET" && method != "HEAD")) return MetricsRequest::kMethodNotAllowed;
  for (++i; i < line.size() && line[i] != ' '; ++i) target.push_back(line[i]);
  const bool metrics = target == "/metrics" || target.compare(0, 9, "/metrics?") == 0;
  if (!metrics) return MetricsRequest::kNotFound;
  return method == "HEAD" ? MetricsRequest::kHead : MetricsRequest::kGet;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string_view data(reinterpret_cast<const char*>(bytes), size);
  const MetricsRequest verdict = ParseRequestHead(data);
  const MetricsRequest expected = Reference(data);
  if (verdict != expected) {
    std::fprintf(stderr, "ParseRequestHead says %s, the rules say %s\n", Name(verdict), Name(expected));
    Fail("verdict differs from the rules", data);
  }
  if (RequestHeadReady(data) != (verdict != MetricsRequest::kHeadTooLarge || size >= kMaxRequestHeadBytes)) {
    Fail("RequestHeadReady disagrees with ParseRequestHead", data);
  }

  // Only the head counts.
  const size_t head_end = data.find("\r\n\r\n");
  if (head_end != std::string_view::npos) {
    const std::string_view head = data.substr(0, head_end + 4);
    if (ParseRequestHead(head) != verdict) Fail("bytes after the head changed the verdict", data);
    if (!RequestHeadReady(head)) Fail("a whole head is not ready", data);
  }

  // Read as the endpoint reads: chunk sizes taken from the input itself.
  std::string received;
  size_t at = 0;
  uint32_t seed = 2166136261u;
  for (unsigned char c : data) seed = (seed ^ c) * 16777619u;
  while (at < size && !RequestHeadReady(received)) {
    seed = seed * 1103515245u + 12345u;
    const size_t chunk = std::min<size_t>(1 + (seed >> 8) % kRecvChunk, size - at);
    received.append(data.substr(at, chunk));
    at += chunk;
  }
  if (!RequestHeadReady(received)) return 0;  // the connection would wait for more
  if (received.size() >= kMaxRequestHeadBytes + kRecvChunk) Fail("read past the head limit plus one chunk", data);
  const MetricsRequest answered = ParseRequestHead(received);
  if (head_end != std::string_view::npos && head_end + 4 <= kMaxRequestHeadBytes) {
    if (answered != ParseRequestHead(data.substr(0, head_end + 4))) {
      Fail("a head within the limit, read in chunks, got another verdict", data);
    }
  } else if (head_end == std::string_view::npos && answered != MetricsRequest::kHeadTooLarge) {
    Fail("an unterminated head was not answered 431", data);
  }
  return 0;
}
