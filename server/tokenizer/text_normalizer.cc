#include "server/tokenizer/text_normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace odeserve::tokenizer {
namespace {

icu::UnicodeString CollapseWhitespace(const icu::UnicodeString& in) {
  icu::UnicodeString out;
  bool pending_space = false;
  for (int32_t i = 0; i < in.length(); i = in.moveIndex32(i, 1)) {
    const UChar32 c = in.char32At(i);
    if (IsPythonWhitespace(static_cast<char32_t>(c))) {
      pending_space = !out.isEmpty();  // leading whitespace is stripped
      continue;
    }
    if (pending_space) out.append(static_cast<UChar>(u' '));
    pending_space = false;
    out.append(c);
  }
  return out;  // trailing whitespace never emits its pending space
}

icu::UnicodeString StripAccents(const icu::UnicodeString& in) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfkd = icu::Normalizer2::getNFKDInstance(error);
  if (U_FAILURE(error)) return in;  // ICU's data is built into libicudata: cannot fail in practice
  const icu::UnicodeString decomposed = nfkd->normalize(in, error);
  if (U_FAILURE(error)) return in;
  icu::UnicodeString out;
  for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
    const UChar32 c = decomposed.char32At(i);
    if (u_getCombiningClass(c) == 0) out.append(c);
  }
  return out;
}

}  // namespace

bool IsPythonWhitespace(char32_t c) {
  const UChar32 cp = static_cast<UChar32>(c);
  const UCharDirection direction = u_charDirection(cp);
  return direction == U_WHITE_SPACE_NEUTRAL || direction == U_BLOCK_SEPARATOR ||
         direction == U_SEGMENT_SEPARATOR || u_charType(cp) == U_SPACE_SEPARATOR;
}

bool IsPythonDigit(char32_t c) {
  const int type = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}

std::string NormalizeText(std::string_view text, const TextNormalizationOptions& options) {
  if (!options.any()) return std::string(text);
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (options.collapse_whitespace) s = CollapseWhitespace(s);
  if (options.normalize_quotes) {
    s.findAndReplace(icu::UnicodeString(u"``"), icu::UnicodeString(u"\""));
    s.findAndReplace(icu::UnicodeString(u"''"), icu::UnicodeString(u"\""));
  }
  if (options.strip_accents) s = StripAccents(s);
  if (options.lowercase) s.toLower(icu::Locale::getRoot());
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace odeserve::tokenizer
