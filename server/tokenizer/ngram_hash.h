#pragma once
// EELBERT-style dynamic embeddings: a token's input feature is computed from its string by
// hashing character n-grams, so the model stores no embedding table. The function is fixed
// bit for bit by docs/MODEL_CONTRACT.md and shared test vectors with the Python trainer.

#include <cstdint>
#include <string_view>
#include <vector>

namespace odeserve::tokenizer {

struct NgramHashOptions {
  int dim = 0;
  uint32_t seed = 0;
  std::vector<int> orders;  // n-gram lengths in code points, in order
};

/// Writes the `options.dim` features of `piece` (UTF-8) to `out`.
void HashPiece(std::string_view piece, const NgramHashOptions& options, float* out);

/// FNV-1a 64 over the seed's 4 little-endian bytes, then `bytes`.
uint64_t SeededFnv1a64(uint32_t seed, std::string_view bytes);

/// Splits UTF-8 into code points (each as its byte span). Input must be valid UTF-8.
std::vector<std::string_view> SplitCodePoints(std::string_view utf8);

/// True if `text` is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool IsValidUtf8(std::string_view text);

}  // namespace odeserve::tokenizer
