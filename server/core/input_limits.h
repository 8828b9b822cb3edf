#pragma once
// Byte limits on input texts, checked before any tokenization. SentencePiece's cost is not
// linear in every text (a run of unknown characters costs the square of its length), so the
// bytes a call may make the server tokenize are bounded before the tokenizer sees them.
// docs/LIMITS.md lists every limit.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace odeserve::core {

/// Bytes per token of `max_sequence_length` that one input may have. Normal text averages far
/// less per SentencePiece piece (English about 4-6 bytes, CJK 3-6; a piece holds at most 16
/// characters), so a text over this many bytes per token could not fit the model untruncated.
inline constexpr int64_t kTextBytesPerToken = 32;

/// The per-input byte limit of a model: kTextBytesPerToken x max_sequence_length, never more
/// than `max_text_bytes` (--max_text_bytes).
int64_t TextByteLimit(int max_sequence_length, int64_t max_text_bytes);

/// The longest prefix of `text` of at most `max_bytes` bytes that does not split a UTF-8
/// character.
std::string_view Utf8Prefix(std::string_view text, size_t max_bytes);

/// What the tokenizer reads of each input.
struct BoundedText {
  std::string_view text;  // the input, or its first TextByteLimit bytes
  bool cut = false;       // bytes were dropped (truncate=true)
};

/// Checks every input against the model's per-input byte limit. Over the limit, an input is
/// refused with INVALID_ARGUMENT naming it, its size and the limit (truncate=false), or cut to
/// its first `limit` bytes at a character boundary (truncate=true). `inputs` must outlive the
/// result.
absl::StatusOr<std::vector<BoundedText>> BoundInputBytes(
    const google::protobuf::RepeatedPtrField<std::string>& inputs, const std::string& model,
    int max_sequence_length, int64_t max_text_bytes, bool truncate);

}  // namespace odeserve::core
