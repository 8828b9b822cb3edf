#include "server/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/tokenizer/sentencepiece_backend.h"

namespace odeserve::tokenizer {
namespace {
constexpr char kBosText[] = "<s>";
constexpr char kEosText[] = "</s>";
constexpr char kWordMarker[] = "\xE2\x96\x81";  // U+2581, SentencePiece's word-start marker

// The code point of `s` that ends at byte offset `end` (a UTF-8 boundary), or 0 at the start.
char32_t CodePointBefore(const std::string& s, size_t end) {
  size_t i = end;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return 0;
  --i;
  const unsigned char lead = static_cast<unsigned char>(s[i]);
  const int length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  char32_t c = length == 1 ? lead : lead & (0x7F >> length);
  for (int k = 1; k < length && i + k < end; ++k) c = (c << 6) | (s[i + k] & 0x3F);
  return c;
}

bool StartsWithMarker(const std::string& s) { return s.rfind(kWordMarker, 0) == 0; }

std::string WithoutMarkers(std::string s) {
  for (size_t at = s.find(kWordMarker); at != std::string::npos; at = s.find(kWordMarker, at)) {
    s.erase(at, sizeof(kWordMarker) - 1);
  }
  return s;
}
}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<SentencePieceBackend> backend,
                     const TokenizerOptions& options)
    : backend_(std::move(backend)), options_(options) {
  pad_id_ = std::max(0, backend_->pad_id());
  bos_id_ = options_.bos_id >= 0 ? options_.bos_id : backend_->bos_id();
  eos_id_ = options_.eos_id >= 0 ? options_.eos_id : backend_->eos_id();
  unk_id_ = backend_->unk_id();
  if (options_.hashed) {
    const int vocab = backend_->vocab_size();
    vocab_features_.resize(static_cast<size_t>(vocab) * options_.hash.dim);
    for (int id = 0; id < vocab; ++id) {
      std::string piece = backend_->IdToPiece(id);
      if (id == bos_id_) piece = kBosText;
      if (id == eos_id_) piece = kEosText;
      HashPiece(piece, options_.hash, &vocab_features_[static_cast<size_t>(id) * options_.hash.dim]);
    }
  }
}

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_path,
                                                           const TokenizerOptions& options) {
  if (options.hashed && (options.hash.dim <= 0 || options.hash.orders.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_path, ": hashed input needs hash.dim > 0 and ngram_orders"));
  }
  std::string error;
  auto backend = SentencePieceBackend::Load(model_path, &error);
  if (backend == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_path, ": not a loadable SentencePiece model: ", error));
  }
  for (const int id : {options.bos_id, options.eos_id}) {
    if (id >= backend->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(model_path, ": bos_id/eos_id ", id,
                                                     " is outside the vocabulary of ", backend->vocab_size()));
    }
  }
  const int bos = options.bos_id >= 0 ? options.bos_id : backend->bos_id();
  const int eos = options.eos_id >= 0 ? options.eos_id : backend->eos_id();
  if ((options.add_bos && bos < 0) || (options.add_eos && eos < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        model_path, ": add_bos/add_eos set but the model has no bos/eos piece and the config no bos_id/eos_id"));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(backend), options));
}

absl::StatusOr<EncodedText> Tokenizer::Encode(std::string_view text, int max_length,
                                              bool truncate) const {
  std::vector<std::string> pieces;
  std::vector<int> ids;
  std::string error;
  if (!backend_->Encode(NormalizeText(text, options_.normalization), &pieces, &ids, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenization failed: ", error));
  }
  if (options_.split_digit_comma) SplitDigitComma(&pieces, &ids);
  const int specials = (options_.add_bos ? 1 : 0) + (options_.add_eos ? 1 : 0);
  EncodedText encoded;
  encoded.untruncated_length = static_cast<int>(ids.size()) + specials;
  int keep = static_cast<int>(ids.size());
  if (encoded.untruncated_length > max_length) {
    if (!truncate) {
      return absl::OutOfRangeError(absl::StrCat(encoded.untruncated_length, " tokens"));
    }
    keep = std::max(0, max_length - specials);
    encoded.truncated = true;
  }
  encoded.ids.reserve(keep + specials);
  if (options_.add_bos) encoded.ids.push_back(bos_id_);
  encoded.ids.insert(encoded.ids.end(), ids.begin(), ids.begin() + keep);
  if (options_.add_eos) encoded.ids.push_back(eos_id_);

  if (options_.hashed) {
    const int dim = options_.hash.dim;
    encoded.features.resize(encoded.ids.size() * dim);
    const size_t first_piece = options_.add_bos ? 1 : 0;
    for (size_t t = 0; t < encoded.ids.size(); ++t) {
      float* out = &encoded.features[t * dim];
      const int64_t id = encoded.ids[t];
      const bool is_piece = t >= first_piece && t < first_piece + keep;
      if (is_piece && id == unk_id_) {
        HashPiece(pieces[t - first_piece], options_.hash, out);
      } else {
        std::copy_n(&vocab_features_[static_cast<size_t>(id) * dim], dim, out);
      }
    }
  }
  return encoded;
}

void Tokenizer::SplitDigitComma(std::vector<std::string>* pieces, std::vector<int>* ids) const {
  std::vector<std::string> out_pieces;
  std::vector<int> out_ids;
  for (size_t p = 0; p < pieces->size(); ++p) {
    const std::string& piece = (*pieces)[p];
    const bool ends_in_comma = piece.size() >= 2 && piece.back() == ',';
    if (!ends_in_comma || !IsPythonDigit(CodePointBefore(piece, piece.size() - 1))) {
      out_pieces.push_back(piece);
      out_ids.push_back((*ids)[p]);
      continue;
    }
    std::vector<std::string> sub_pieces;
    std::vector<int> sub_ids;
    std::string error;
    if (!backend_->Encode(WithoutMarkers(piece.substr(0, piece.size() - 1)), &sub_pieces, &sub_ids, &error) ||
        sub_pieces.empty()) {
      out_pieces.push_back(piece);  // cannot happen for a digit; keep the piece as it was
      out_ids.push_back((*ids)[p]);
      continue;
    }
    if (!StartsWithMarker(piece) && StartsWithMarker(sub_pieces[0])) {
      if (sub_pieces[0].size() == sizeof(kWordMarker) - 1) {
        sub_pieces.erase(sub_pieces.begin());
        sub_ids.erase(sub_ids.begin());
      } else {
        sub_pieces[0].erase(0, sizeof(kWordMarker) - 1);
        sub_ids[0] = backend_->PieceToId(sub_pieces[0]);
      }
    }
    out_pieces.insert(out_pieces.end(), sub_pieces.begin(), sub_pieces.end());
    out_ids.insert(out_ids.end(), sub_ids.begin(), sub_ids.end());
    out_pieces.push_back(",");
    out_ids.push_back(backend_->PieceToId(","));
  }
  *pieces = std::move(out_pieces);
  *ids = std::move(out_ids);
}

std::string Tokenizer::Decode(const std::vector<int>& ids) const { return backend_->Decode(ids); }

int Tokenizer::vocab_size() const { return backend_->vocab_size(); }

}  // namespace odeserve::tokenizer
