#pragma once
// Text normalization before SentencePiece, as Hugging Face's AlbertTokenizer preprocesses text
// (config.pbtxt tokenizer.normalization). Unicode data comes from ICU; each rule mirrors the
// Python operation the checkpoint's own tokenizer runs, so the ids match it.

#include <string>
#include <string_view>

namespace odeserve::tokenizer {

struct TextNormalizationOptions {
  bool collapse_whitespace = false;  // " ".join(text.strip().split())
  bool normalize_quotes = false;     // `` and '' -> "
  bool strip_accents = false;        // NFKD, then combining marks (ccc != 0) dropped
  bool lowercase = false;            // str.lower(): full Unicode lowercase mapping

  bool any() const { return collapse_whitespace || normalize_quotes || strip_accents || lowercase; }
};

/// Applies the enabled rules in the order of the fields. Input must be valid UTF-8 (protobuf
/// checks request strings); ill-formed sequences become U+FFFD.
std::string NormalizeText(std::string_view text, const TextNormalizationOptions& options);

/// Python's str.isspace() for one code point: bidirectional class WS, B or S, or category Zs.
bool IsPythonWhitespace(char32_t c);

/// Python's str.isdigit() for one code point: numeric type Decimal or Digit.
bool IsPythonDigit(char32_t c);

}  // namespace odeserve::tokenizer
