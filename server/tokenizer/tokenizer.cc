#include "server/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/tokenizer/sentencepiece_backend.h"

namespace odeserve::tokenizer {
namespace {
constexpr char kBosText[] = "<s>";
constexpr char kEosText[] = "</s>";
}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<SentencePieceBackend> backend,
                     const TokenizerOptions& options)
    : backend_(std::move(backend)), options_(options) {
  pad_id_ = std::max(0, backend_->pad_id());
  bos_id_ = backend_->bos_id();
  eos_id_ = backend_->eos_id();
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
  if ((options.add_bos && backend->bos_id() < 0) || (options.add_eos && backend->eos_id() < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_path, ": add_bos/add_eos set but the model has no bos/eos piece"));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(backend), options));
}

absl::StatusOr<EncodedText> Tokenizer::Encode(std::string_view text, int max_length,
                                              bool truncate) const {
  std::vector<std::string> pieces;
  std::vector<int> ids;
  std::string error;
  if (!backend_->Encode(std::string(text), &pieces, &ids, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenization failed: ", error));
  }
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

std::string Tokenizer::Decode(const std::vector<int>& ids) const { return backend_->Decode(ids); }

int Tokenizer::vocab_size() const { return backend_->vocab_size(); }

}  // namespace odeserve::tokenizer
