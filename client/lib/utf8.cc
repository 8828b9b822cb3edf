#include "client/lib/utf8.h"

namespace odeserve::client {
namespace {

// Length of the well-formed character at the start of `s` (not empty), or -(length of the
// maximal ill-formed subpart) when none starts there.
int CharLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  // The allowed range of the second byte depends on the lead (Unicode Table 3-7); the later
  // continuation bytes are always 0x80..0xBF.
  int length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;  // a continuation byte, C0, C1 or F5..FF
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -i;  // truncated at the end
    const unsigned char c = byte(static_cast<size_t>(i));
    const bool ok = i == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return -i;  // the subpart before this byte is replaced; this byte starts anew
  }
  return length;
}

}  // namespace

std::string ToValidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const int length = CharLength(s);
    if (length > 0) {
      out.append(s.data(), static_cast<size_t>(length));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    s.remove_prefix(static_cast<size_t>(length > 0 ? length : -length));
  }
  return out;
}

}  // namespace odeserve::client
