#include "client/lib/health_codec.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace odeserve::client {
namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint(absl::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

}  // namespace

std::string EncodeHealthCheckRequest(absl::string_view service) {
  std::string out;
  if (service.empty()) return out;  // proto3 omits default values
  out.push_back(0x0a);              // field 1, length-delimited
  PutVarint(&out, service.size());
  out.append(service.data(), service.size());
  return out;
}

absl::StatusOr<int> DecodeHealthCheckResponse(absl::string_view bytes) {
  int status = 0;
  while (!bytes.empty()) {
    uint64_t key;
    if (!GetVarint(&bytes, &key)) return absl::DataLossError("truncated health response");
    const uint64_t field = key >> 3, wire = key & 7;
    uint64_t v;
    switch (wire) {
      case 0:
        if (!GetVarint(&bytes, &v)) return absl::DataLossError("truncated health response");
        if (field == 1) status = static_cast<int>(v);
        break;
      case 1:
      case 5: {
        const size_t n = wire == 1 ? 8 : 4;
        if (bytes.size() < n) return absl::DataLossError("truncated health response");
        bytes.remove_prefix(n);
        break;
      }
      case 2:
        if (!GetVarint(&bytes, &v) || bytes.size() < v) {
          return absl::DataLossError("truncated health response");
        }
        bytes.remove_prefix(v);
        break;
      default:
        return absl::DataLossError(absl::StrCat("bad wire type ", wire, " in health response"));
    }
  }
  return status;
}

std::string HealthStatusName(int status) {
  switch (status) {
    case 0: return "UNKNOWN";
    case 1: return "SERVING";
    case 2: return "NOT_SERVING";
    case 3: return "SERVICE_UNKNOWN";
    default: return absl::StrCat("STATUS_", status);
  }
}

}  // namespace odeserve::client
