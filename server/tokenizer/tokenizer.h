#pragma once
// Text -> model input rows: SentencePiece pieces/ids with bos/eos, length limits and truncation,
// and, for hash-embedding models, the per-piece n-gram hash features.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/tokenizer/ngram_hash.h"
#include "server/tokenizer/text_normalizer.h"

namespace odeserve::tokenizer {

class SentencePieceBackend;

struct TokenizerOptions {
  bool add_bos = true;
  bool add_eos = true;
  bool hashed = false;        // produce n-gram hash features instead of ids
  NgramHashOptions hash;
  TextNormalizationOptions normalization;  // applied before SentencePiece
  bool split_digit_comma = false;          // AlbertTokenizer's re-split of pieces like "▁9,"
  int bos_id = -1;  // the id add_bos prepends; -1 = the SentencePiece model's bos
  int eos_id = -1;  // the id add_eos appends; -1 = the SentencePiece model's eos
};

/// One tokenized input.
struct EncodedText {
  std::vector<int64_t> ids;       // token ids (bos/eos included); also set for hashed models
  std::vector<float> features;    // hashed models: ids.size() x hash.dim, row-major
  int untruncated_length = 0;     // tokens before truncation
  bool truncated = false;
};

class Tokenizer {
 public:
  ~Tokenizer();
  /// Loads a SentencePiece model; the error names the file.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_path,
                                                         const TokenizerOptions& options);

  /// Encodes `text` keeping at most `max_length` tokens (bos/eos counted). When the text is
  /// longer and `truncate` is false, returns OutOfRange with the token count in the message.
  absl::StatusOr<EncodedText> Encode(std::string_view text, int max_length, bool truncate) const;

  std::string Decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int pad_id() const { return pad_id_; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  const TokenizerOptions& options() const { return options_; }

 private:
  Tokenizer(std::unique_ptr<SentencePieceBackend> backend, const TokenizerOptions& options);
  // Hugging Face AlbertTokenizer: a piece ending in a digit and a comma is encoded again without
  // the comma (and without word markers), and the comma follows as its own piece.
  void SplitDigitComma(std::vector<std::string>* pieces, std::vector<int>* ids) const;

  std::unique_ptr<SentencePieceBackend> backend_;
  TokenizerOptions options_;
  int pad_id_ = 0;
  int bos_id_ = -1;
  int eos_id_ = -1;
  int unk_id_ = -1;
  // Hash features of every vocabulary piece, computed once at load (vocab x dim); pieces
  // outside the vocabulary (unknown characters) are hashed from their text per request.
  std::vector<float> vocab_features_;
};

}  // namespace odeserve::tokenizer
