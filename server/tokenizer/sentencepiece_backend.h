#pragma once
// SentencePiece behind a loadable shim.
//
// Debian's libsentencepiece bundles its own protobuf 3.14 runtime with the same symbol names as
// the system libprotobuf 3.21 that gRPC needs. Linked into one executable, one of the two binds
// to the other's symbols and the process dies before main (a crash, or a protobuf version
// check). So SentencePiece lives in its own shared object, libodeserve_sentencepiece.so, opened
// with RTLD_LOCAL | RTLD_DEEPBIND so that it and its protobuf copy see only each other. The
// interface is a pure virtual class: no symbol crosses the boundary except the factory.
// (Its header also declares `absl::string_view`, which clashes with the real Abseil.)

#include <memory>
#include <string>
#include <vector>

namespace odeserve::tokenizer {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  /// Loads a model file through the shim; on failure returns null and sets `error`.
  static std::unique_ptr<SentencePieceBackend> Load(const std::string& path, std::string* error);

  /// Pieces and their ids for `text`; returns false and sets `error` on failure.
  virtual bool Encode(const std::string& text, std::vector<std::string>* pieces,
                      std::vector<int>* ids, std::string* error) const = 0;
  virtual std::string Decode(const std::vector<int>& ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
  virtual int unk_id() const = 0;
  virtual std::string IdToPiece(int id) const = 0;
  /// The piece's id, or unk_id() when the vocabulary has no such piece.
  virtual int PieceToId(const std::string& piece) const = 0;
};

}  // namespace odeserve::tokenizer

/// The shim's one exported symbol: a new backend for `path`, or null with `error` set.
extern "C" odeserve::tokenizer::SentencePieceBackend* odeserve_load_sentencepiece(
    const char* path, std::string* error);
