// Tokenizer: EELBERT hash bit-exactness against the shared test vectors, UTF-8 validation, and
// Encode's bos/eos placement, truncation and hashed features on the tiny test tokenizer.

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/repository/model_config.h"
#include "server/tokenizer/ngram_hash.h"
#include "server/tokenizer/sentencepiece_backend.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::tokenizer {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

std::string FromHex(const std::string& hex) {
  if (hex == "-") return "";
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

struct PieceCase {
  std::string piece;
  NgramHashOptions options;
  std::vector<uint32_t> bits;
};

struct NgramCase {
  std::string ngram;
  uint32_t seed = 0;
  uint64_t fnv = 0;
};

class HashVectors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(ODESERVE_HASH_VECTORS_TXT);
    ASSERT_TRUE(in) << "cannot open " << ODESERVE_HASH_VECTORS_TXT;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string kind, hex;
      fields >> kind >> hex;
      if (kind == "piece") {
        PieceCase c;
        c.piece = FromHex(hex);
        int orders = 0;
        fields >> c.options.seed >> c.options.dim >> orders;
        for (int i = 0; i < orders; ++i) {
          int order;
          fields >> order;
          c.options.orders.push_back(order);
        }
        for (int j = 0; j < c.options.dim; ++j) {
          uint32_t b;
          fields >> b;
          c.bits.push_back(b);
        }
        ASSERT_FALSE(fields.fail()) << line;
        pieces_->push_back(c);
      } else if (kind == "ngram") {
        NgramCase c;
        c.ngram = FromHex(hex);
        fields >> c.seed >> c.fnv;
        ASSERT_FALSE(fields.fail()) << line;
        ngrams_->push_back(c);
      }
    }
  }
  static std::vector<PieceCase>* pieces_;
  static std::vector<NgramCase>* ngrams_;
};
std::vector<PieceCase>* HashVectors::pieces_ = new std::vector<PieceCase>;
std::vector<NgramCase>* HashVectors::ngrams_ = new std::vector<NgramCase>;

TEST_F(HashVectors, HashPieceIsBitExact) {
  // 53 pieces in three (seed, dim, orders) settings, including "", emoji and 4-byte letters.
  ASSERT_EQ(pieces_->size(), 53u);
  for (const auto& c : *pieces_) {
    std::vector<float> out(c.options.dim, 99.0f);
    HashPiece(c.piece, c.options, out.data());
    std::vector<uint32_t> bits;
    for (float v : out) bits.push_back(Bits(v));
    EXPECT_THAT(bits, ElementsAreArray(c.bits))
        << "piece '" << c.piece << "' seed " << c.options.seed << " dim " << c.options.dim;
  }
}

TEST_F(HashVectors, SeededFnv1a64MatchesPerNgramHashes) {
  ASSERT_EQ(ngrams_->size(), 4u);
  for (const auto& c : *ngrams_) {
    EXPECT_EQ(SeededFnv1a64(c.seed, c.ngram), c.fnv) << "n-gram '" << c.ngram << "' seed " << c.seed;
  }
}

TEST(NgramHash, SeededFnv1a64KnownValues) {
  // FNV-1a 64 of the 4 zero seed bytes and nothing else, computed by hand from the definition.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 4; ++i) h = (h ^ 0u) * 0x100000001b3ULL;
  EXPECT_EQ(SeededFnv1a64(0, ""), h);
  // The seed is little-endian: seeds 1 and 1 << 24 differ.
  EXPECT_NE(SeededFnv1a64(1, "ab"), SeededFnv1a64(1u << 24, "ab"));
}

TEST(NgramHash, OrdersLongerThanThePieceAreSkipped) {
  // "<a>" has 3 code points: order 4 contributes nothing, so {3, 4} equals {3}.
  NgramHashOptions three{8, 7, {3}};
  NgramHashOptions three_four{8, 7, {3, 4}};
  std::vector<float> a(8), b(8);
  HashPiece("a", three, a.data());
  HashPiece("a", three_four, b.data());
  for (int j = 0; j < 8; ++j) EXPECT_EQ(Bits(a[j]), Bits(b[j])) << j;
  // Only orders longer than every n-gram: all zeros.
  NgramHashOptions too_long{4, 7, {9}};
  std::vector<float> c(4, 5.0f);
  HashPiece("a", too_long, c.data());
  EXPECT_THAT(c, ::testing::Each(0.0f));
}

TEST(Utf8, ValidSequences) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8(std::string_view("a\0b", 3)));  // NUL is a code point
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9"));                    // U+00E9
  EXPECT_TRUE(IsValidUtf8("\xC2\x80"));                    // U+0080, smallest 2-byte
  EXPECT_TRUE(IsValidUtf8("\xDF\xBF"));                    // U+07FF
  EXPECT_TRUE(IsValidUtf8("\xE0\xA0\x80"));                // U+0800, smallest 3-byte
  EXPECT_TRUE(IsValidUtf8("\xE2\x82\xAC"));                // U+20AC euro
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));                // U+D7FF, just below surrogates
  EXPECT_TRUE(IsValidUtf8("\xEE\x80\x80"));                // U+E000, just above surrogates
  EXPECT_TRUE(IsValidUtf8("\xEF\xBF\xBF"));                // U+FFFF
  EXPECT_TRUE(IsValidUtf8("\xF0\x90\x80\x80"));            // U+10000, smallest 4-byte
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));            // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));            // U+10FFFF, the last code point
  EXPECT_TRUE(IsValidUtf8("Stra\xC3\x9F" "e \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\x8D"));
}

TEST(Utf8, InvalidSequences) {
  // Overlong encodings.
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));  // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));
  EXPECT_FALSE(IsValidUtf8("\xE0\x9F\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x80\x80\xAF"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x8F\xBF\xBF"));
  // UTF-16 surrogates.
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));  // U+D800
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));  // U+DFFF
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\xBD\xED\xB8\x80"));  // CESU-8 surrogate pair
  // Truncated sequences, at the end and in the middle.
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("a\xE2\x82"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\x98"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82x"));
  EXPECT_FALSE(IsValidUtf8("\xC3\x28"));
  // Past U+10FFFF and impossible lead bytes.
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xF7\xBF\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xF8\x88\x80\x80\x80"));  // 5-byte form
  EXPECT_FALSE(IsValidUtf8("\xFC\x84\x80\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFE"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  // Stray continuation bytes.
  EXPECT_FALSE(IsValidUtf8("\x80"));
  EXPECT_FALSE(IsValidUtf8("abc\xBF"));
}

TEST(Utf8, SplitCodePoints) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  const auto points = SplitCodePoints(text);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0], "a");
  EXPECT_EQ(points[1], "\xC3\xA9");
  EXPECT_EQ(points[2], "\xE2\x82\xAC");
  EXPECT_EQ(points[3], "\xF0\x9F\x98\x80");
}

// ---- Tokenizer::Encode on the tiny test tokenizer ------------------------------------------

const fs::path kRepository = ODESERVE_TEST_REPOSITORY;
const std::string kLongText =
    "Python bindings for the GNU scientific library with numerical routines for interpolation, "
    "integration, random numbers and special functions, plus documentation and examples.";

std::string TokenizerPath(const std::string& model) {
  return (kRepository / model / "tokenizer.model").string();
}

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& model, const TokenizerOptions& options) {
  auto tokenizer = Tokenizer::Load(TokenizerPath(model), options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  const std::string missing = (kRepository / "no-such-model" / "tokenizer.model").string();
  auto tokenizer = Tokenizer::Load(missing, TokenizerOptions{});
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr(missing));

  // A file that is not a SentencePiece model.
  const std::string config = (kRepository / "tiny-albert" / "config.pbtxt").string();
  tokenizer = Tokenizer::Load(config, TokenizerOptions{});
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr(config));

  TokenizerOptions hashed_without_dim;
  hashed_without_dim.hashed = true;
  tokenizer = Tokenizer::Load(TokenizerPath("tiny-eelbert"), hashed_without_dim);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr("hash.dim"));
}

TEST(Tokenizer, BosAndEosPlacement) {
  TokenizerOptions both;
  auto tokenizer = LoadOrDie("tiny-albert", both);
  ASSERT_NE(tokenizer, nullptr);
  ASSERT_GE(tokenizer->bos_id(), 0);
  ASSERT_GE(tokenizer->eos_id(), 0);
  ASSERT_NE(tokenizer->bos_id(), tokenizer->eos_id());

  auto encoded = tokenizer->Encode("library for parsing XML documents", 32, false);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const std::vector<int64_t> ids = encoded->ids;
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), tokenizer->bos_id());
  EXPECT_EQ(ids.back(), tokenizer->eos_id());
  for (size_t t = 1; t + 1 < ids.size(); ++t) {
    EXPECT_NE(ids[t], tokenizer->bos_id()) << t;
    EXPECT_NE(ids[t], tokenizer->eos_id()) << t;
    EXPECT_GE(ids[t], 0);
    EXPECT_LT(ids[t], tokenizer->vocab_size());
  }
  EXPECT_EQ(encoded->untruncated_length, static_cast<int>(ids.size()));
  EXPECT_FALSE(encoded->truncated);
  EXPECT_TRUE(encoded->features.empty());
  // The pieces decode back to the text (the SentencePiece model keeps ASCII text as is).
  EXPECT_EQ(tokenizer->Decode(std::vector<int>(ids.begin() + 1, ids.end() - 1)),
            "library for parsing XML documents");

  TokenizerOptions eos_only;
  eos_only.add_bos = false;
  auto eos_tokenizer = LoadOrDie("tiny-albert", eos_only);
  auto eos_encoded = eos_tokenizer->Encode("library for parsing XML documents", 32, false);
  ASSERT_TRUE(eos_encoded.ok());
  EXPECT_EQ(eos_encoded->ids, std::vector<int64_t>(ids.begin() + 1, ids.end()));

  TokenizerOptions none;
  none.add_bos = false;
  none.add_eos = false;
  auto plain_tokenizer = LoadOrDie("tiny-albert", none);
  auto plain = plain_tokenizer->Encode("library for parsing XML documents", 32, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->ids, std::vector<int64_t>(ids.begin() + 1, ids.end() - 1));

  // Empty text: just the specials.
  auto empty = tokenizer->Encode("", 32, false);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->ids, (std::vector<int64_t>{tokenizer->bos_id(), tokenizer->eos_id()}));
}

TEST(Tokenizer, TruncationKeepsFirstPiecesAndEndsWithEos) {
  auto tokenizer = LoadOrDie("tiny-albert", TokenizerOptions{});
  ASSERT_NE(tokenizer, nullptr);
  auto full = tokenizer->Encode(kLongText, 1000, false);
  ASSERT_TRUE(full.ok());
  const int n = static_cast<int>(full->ids.size());
  ASSERT_GT(n, 12) << "the long text must tokenize to more than 12 tokens";

  auto truncated = tokenizer->Encode(kLongText, 12, true);
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  ASSERT_EQ(truncated->ids.size(), 12u);
  EXPECT_TRUE(truncated->truncated);
  EXPECT_EQ(truncated->untruncated_length, n);
  EXPECT_EQ(truncated->ids.front(), tokenizer->bos_id());
  EXPECT_EQ(truncated->ids.back(), tokenizer->eos_id());
  // bos + the first 10 pieces + eos.
  EXPECT_EQ(std::vector<int64_t>(truncated->ids.begin(), truncated->ids.end() - 1),
            std::vector<int64_t>(full->ids.begin(), full->ids.begin() + 11));

  // Exactly at the limit: fine without truncation, nothing cut.
  auto exact = tokenizer->Encode(kLongText, n, false);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->ids, full->ids);
  EXPECT_FALSE(exact->truncated);

  // One short: OutOfRange with the token count.
  auto too_long = tokenizer->Encode(kLongText, n - 1, false);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr(std::to_string(n)));

  // A limit that leaves room for the specials only.
  auto specials_only = tokenizer->Encode(kLongText, 2, true);
  ASSERT_TRUE(specials_only.ok());
  EXPECT_EQ(specials_only->ids, (std::vector<int64_t>{tokenizer->bos_id(), tokenizer->eos_id()}));
}

TEST(Tokenizer, HashedFeaturesAreHashPieceOfEachPiece) {
  auto config = repository::LoadModelConfig(kRepository / "tiny-eelbert");
  ASSERT_TRUE(config.ok()) << config.status();
  const TokenizerOptions options = odeserve::repository::TokenizerOptionsFor(*config);
  ASSERT_TRUE(options.hashed);
  const int dim = options.hash.dim;
  ASSERT_EQ(dim, 16);
  auto tokenizer = LoadOrDie("tiny-eelbert", options);
  ASSERT_NE(tokenizer, nullptr);

  std::string error;
  auto backend = SentencePieceBackend::Load(TokenizerPath("tiny-eelbert"), &error);
  ASSERT_NE(backend, nullptr) << error;

  // Includes characters the tiny vocabulary lacks, so some pieces are <unk> and must be hashed
  // from their own text (two different unknown pieces give different features).
  const std::string text = "Stra\xC3\x9F" "e \xE4\xB8\xAD \xF0\x9F\x98\x80 library";
  std::vector<std::string> pieces;
  std::vector<int> piece_ids;
  ASSERT_TRUE(backend->Encode(text, &pieces, &piece_ids, &error)) << error;

  auto encoded = tokenizer->Encode(text, 32, false);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  ASSERT_EQ(encoded->ids.size(), pieces.size() + 2);
  ASSERT_EQ(encoded->features.size(), encoded->ids.size() * dim);

  std::vector<std::string> expected_pieces = {"<s>"};
  expected_pieces.insert(expected_pieces.end(), pieces.begin(), pieces.end());
  expected_pieces.push_back("</s>");
  int unknown = 0;
  for (size_t t = 0; t < expected_pieces.size(); ++t) {
    if (t > 0 && t + 1 < expected_pieces.size()) {
      EXPECT_EQ(encoded->ids[t], piece_ids[t - 1]);
      if (piece_ids[t - 1] == backend->unk_id()) ++unknown;
    }
    std::vector<float> want(dim);
    HashPiece(expected_pieces[t], options.hash, want.data());
    for (int j = 0; j < dim; ++j) {
      EXPECT_EQ(Bits(encoded->features[t * dim + j]), Bits(want[j]))
          << "token " << t << " piece '" << expected_pieces[t] << "' feature " << j;
    }
  }
  EXPECT_GE(unknown, 2) << "the text should contain unknown pieces";

  // Truncated hashed rows: features follow the kept ids, eos last.
  auto truncated = tokenizer->Encode(kLongText, 6, true);
  ASSERT_TRUE(truncated.ok());
  ASSERT_EQ(truncated->ids.size(), 6u);
  ASSERT_EQ(truncated->features.size(), 6u * dim);
  std::vector<float> eos(dim);
  HashPiece("</s>", options.hash, eos.data());
  for (int j = 0; j < dim; ++j) EXPECT_EQ(Bits(truncated->features[5 * dim + j]), Bits(eos[j]));
}

}  // namespace
}  // namespace odeserve::tokenizer
