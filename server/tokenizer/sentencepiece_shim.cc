// Built into libodeserve_sentencepiece.so only (see sentencepiece_backend.h).
#include <sentencepiece_processor.h>

#include "server/tokenizer/sentencepiece_backend.h"

namespace odeserve::tokenizer {
namespace {

class SentencePieceShim final : public SentencePieceBackend {
 public:
  bool Load(const std::string& path, std::string* error) {
    const auto status = processor_.Load(path);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }

  bool Encode(const std::string& text, std::vector<std::string>* pieces, std::vector<int>* ids,
              std::string* error) const override {
    // The piece string (not the unk symbol) is kept for unknown pieces: the hash needs it.
    sentencepiece::ImmutableSentencePieceText spt;
    const auto status = processor_.Encode(text, spt.mutable_proto());
    if (!status.ok()) {
      *error = status.ToString();
      return false;
    }
    const int count = static_cast<int>(spt.pieces_size());
    pieces->clear();
    ids->clear();
    pieces->reserve(count);
    ids->reserve(count);
    for (int i = 0; i < count; ++i) {
      const auto piece = spt.pieces(i);
      pieces->push_back(piece.piece());
      ids->push_back(static_cast<int>(piece.id()));
    }
    return true;
  }

  std::string Decode(const std::vector<int>& ids) const override {
    std::string text;
    processor_.Decode(ids, &text).IgnoreError();
    return text;
  }
  int vocab_size() const override { return processor_.GetPieceSize(); }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }
  int pad_id() const override { return processor_.pad_id(); }
  int unk_id() const override { return processor_.unk_id(); }
  std::string IdToPiece(int id) const override { return processor_.IdToPiece(id); }
  int PieceToId(const std::string& piece) const override { return processor_.PieceToId(piece); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace odeserve::tokenizer

extern "C" __attribute__((visibility("default"))) odeserve::tokenizer::SentencePieceBackend*
odeserve_load_sentencepiece(const char* path, std::string* error) {
  auto shim = std::make_unique<odeserve::tokenizer::SentencePieceShim>();
  if (!shim->Load(path, error)) return nullptr;
  return shim.release();
}
