#pragma once
// UTF-8 repair for text the client writes into documents that must be valid UTF-8 (JSON, SVG):
// status messages, file names and labels are bytes from elsewhere.

#include <string>

#include "absl/strings/string_view.h"

namespace odeserve::client {

/// `s` with each maximal ill-formed subpart replaced by U+FFFD (the practice Unicode section 3.9
/// recommends, so one bad byte never swallows the characters after it); well-formed UTF-8
/// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) comes back unchanged.
std::string ToValidUtf8(absl::string_view s);

}  // namespace odeserve::client
