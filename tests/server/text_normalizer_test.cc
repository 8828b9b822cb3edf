// Text normalization before SentencePiece: each rule against what Python's own operation gives
// (the expected strings are what CPython 3.11 prints for the same input), and the bos/eos
// overrides on the tiny test tokenizer. Parity with the Python reference on a whole ALBERT
// checkpoint, digit-comma re-split included, is tests/e2e/albert_import_test.py.

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/tokenizer/text_normalizer.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::tokenizer {
namespace {

TextNormalizationOptions Only(bool collapse, bool quotes, bool accents, bool lower) {
  TextNormalizationOptions options;
  options.collapse_whitespace = collapse;
  options.normalize_quotes = quotes;
  options.strip_accents = accents;
  options.lowercase = lower;
  return options;
}

TEST(TextNormalizer, AllRulesOffReturnsTheTextUnchanged) {
  const std::string text = "  Ünïcode\t``x''  ";
  EXPECT_EQ(NormalizeText(text, TextNormalizationOptions{}), text);
}

TEST(TextNormalizer, CollapsesWhitespaceRunsLikePythonSplit) {
  const auto options = Only(true, false, false, false);
  // " ".join(s.strip().split()): tabs, newlines, NBSP (U+00A0), ideographic space (U+3000),
  // U+2028 and the information separators U+001C..U+001F all count as whitespace.
  EXPECT_EQ(NormalizeText("  a \t\n b\xC2\xA0" "c\xE3\x80\x80" "d\xE2\x80\xA8" "e\x1F" "f  ", options),
            "a b c d e f");
  EXPECT_EQ(NormalizeText(" \t\n ", options), "");
  // Zero-width space (U+200B) is not whitespace to Python.
  EXPECT_EQ(NormalizeText("a\xE2\x80\x8B" "b", options), "a\xE2\x80\x8B" "b");
}

TEST(TextNormalizer, MapsTexQuotesToDoubleQuotes) {
  EXPECT_EQ(NormalizeText("``quoted'' and '''", Only(false, true, false, false)), "\"quoted\" and \"'");
}

TEST(TextNormalizer, StripsAccentsThroughNfkd) {
  const auto options = Only(false, false, true, false);
  EXPECT_EQ(NormalizeText("Crème brûlée", options), "Creme brulee");
  EXPECT_EQ(NormalizeText("Straße", options), "Straße");          // ß has no decomposition
  EXPECT_EQ(NormalizeText("\xEF\xAC\x81", options), "fi");          // U+FB01 ligature (compat)
  EXPECT_EQ(NormalizeText("\xE2\x91\xA0", options), "1");           // circled digit one
  EXPECT_EQ(NormalizeText("\xCC\x81\xCC\x80", options), "");        // combining marks only
  EXPECT_EQ(NormalizeText("日本語", options), "日本語");
}

TEST(TextNormalizer, LowercasesWithFullUnicodeMappings) {
  const auto options = Only(false, false, false, true);
  EXPECT_EQ(NormalizeText("ÄÖÜ ABC", options), "äöü abc");
  EXPECT_EQ(NormalizeText("\xC4\xB0", options), "i\xCC\x87");         // İ -> i + U+0307, as str.lower()
  EXPECT_EQ(NormalizeText("ΟΔΟΣ", options), "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");  // final sigma, as str.lower()
  EXPECT_EQ(NormalizeText("\xF0\x9F\x98\x80", options), "\xF0\x9F\x98\x80");  // emoji unchanged
}

TEST(TextNormalizer, PythonCharacterClasses) {
  EXPECT_TRUE(IsPythonWhitespace(U' '));
  EXPECT_TRUE(IsPythonWhitespace(U'\x1c'));
  EXPECT_TRUE(IsPythonWhitespace(U'\x85'));
  EXPECT_FALSE(IsPythonWhitespace(U'\x200b'));
  EXPECT_TRUE(IsPythonDigit(U'7'));
  EXPECT_TRUE(IsPythonDigit(U'\x00b2'));   // superscript two: isdigit() but not isdecimal()
  EXPECT_TRUE(IsPythonDigit(U'\x0663'));   // Arabic-Indic three
  EXPECT_FALSE(IsPythonDigit(U'\x2155'));  // vulgar fraction one fifth: numeric, not a digit
  EXPECT_FALSE(IsPythonDigit(U','));
}

std::unique_ptr<Tokenizer> TinyAlbert(const TokenizerOptions& options) {
  const std::filesystem::path model = std::filesystem::path(ODESERVE_TEST_REPOSITORY) / "tiny-albert" / "tokenizer.model";
  auto tokenizer = Tokenizer::Load(model.string(), options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

TEST(Tokenizer, BosAndEosIdsFromTheConfigReplaceTheModelsOwn) {
  TokenizerOptions options;
  options.bos_id = 5;
  options.eos_id = 6;
  auto tokenizer = TinyAlbert(options);
  ASSERT_NE(tokenizer, nullptr);
  auto encoded = tokenizer->Encode("files", 32, false);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(encoded->ids.front(), 5);
  EXPECT_EQ(encoded->ids.back(), 6);

  options.eos_id = 1 << 20;
  const auto model = std::filesystem::path(ODESERVE_TEST_REPOSITORY) / "tiny-albert" / "tokenizer.model";
  auto refused = Tokenizer::Load(model.string(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("outside the vocabulary"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace odeserve::tokenizer
