#include "server/core/input_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace odeserve::core {

int64_t TextByteLimit(int max_sequence_length, int64_t max_text_bytes) {
  return std::min<int64_t>(kTextBytesPerToken * std::max(1, max_sequence_length), max_text_bytes);
}

std::string_view Utf8Prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  // Back up over continuation bytes (10xxxxxx): text[cut] must start a character.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

absl::StatusOr<std::vector<BoundedText>> BoundInputBytes(
    const google::protobuf::RepeatedPtrField<std::string>& inputs, const std::string& model,
    int max_sequence_length, int64_t max_text_bytes, bool truncate) {
  const int64_t limit = TextByteLimit(max_sequence_length, max_text_bytes);
  std::vector<BoundedText> bounded;
  bounded.reserve(inputs.size());
  for (int i = 0; i < inputs.size(); ++i) {
    const std::string& text = inputs[i];
    if (static_cast<int64_t>(text.size()) <= limit) {
      bounded.push_back({text, false});
      continue;
    }
    if (!truncate) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "] has ", text.size(), " bytes, over model '", model, "' limit of ", limit,
          " bytes per input (", kTextBytesPerToken, " bytes for each of its at most ", max_sequence_length,
          " tokens, max_sequence_length; never more than --max_text_bytes ", max_text_bytes,
          "); shorten it or set truncate=true"));
    }
    bounded.push_back({Utf8Prefix(text, static_cast<size_t>(limit)), true});
  }
  return bounded;
}

}  // namespace odeserve::core
