#include "server/tokenizer/ngram_hash.h"

#include <string>

namespace odeserve::tokenizer {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t FnvUpdate(uint64_t hash, std::string_view bytes) {
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= kFnvPrime;
  }
  return hash;
}

// One splitmix64 output from `state`, advancing it.
uint64_t SplitMix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

int Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 0;
}

}  // namespace

uint64_t SeededFnv1a64(uint32_t seed, std::string_view bytes) {
  const char seed_bytes[4] = {static_cast<char>(seed & 0xff), static_cast<char>((seed >> 8) & 0xff),
                              static_cast<char>((seed >> 16) & 0xff),
                              static_cast<char>((seed >> 24) & 0xff)};
  return FnvUpdate(FnvUpdate(kFnvOffset, std::string_view(seed_bytes, 4)), bytes);
}

std::vector<std::string_view> SplitCodePoints(std::string_view utf8) {
  std::vector<std::string_view> points;
  size_t i = 0;
  while (i < utf8.size()) {
    int length = Utf8Length(static_cast<unsigned char>(utf8[i]));
    if (length == 0 || i + length > utf8.size()) length = 1;  // defensive: never loop forever
    points.push_back(utf8.substr(i, length));
    i += length;
  }
  return points;
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    const int length = Utf8Length(lead);
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? lead : (lead & (0xFF >> (length + 1)));
    for (int k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

void HashPiece(std::string_view piece, const NgramHashOptions& options, float* out) {
  std::string marked;
  marked.reserve(piece.size() + 2);
  marked.push_back('<');
  marked.append(piece);
  marked.push_back('>');
  const std::vector<std::string_view> points = SplitCodePoints(marked);

  std::vector<double> sum(options.dim, 0.0);
  int64_t count = 0;
  for (int order : options.orders) {
    if (order <= 0 || order > static_cast<int>(points.size())) continue;
    for (size_t start = 0; start + order <= points.size(); ++start) {
      const char* begin = points[start].data();
      const char* end = points[start + order - 1].data() + points[start + order - 1].size();
      uint64_t state = SeededFnv1a64(options.seed, std::string_view(begin, end - begin));
      for (int j = 0; j < options.dim; ++j) {
        const uint64_t z = SplitMix64(state);
        sum[j] += static_cast<double>(static_cast<float>(z >> 40) / 16777216.0f * 2.0f - 1.0f);
      }
      ++count;
    }
  }
  for (int j = 0; j < options.dim; ++j) {
    out[j] = count == 0 ? 0.0f : static_cast<float>(sum[j] / static_cast<double>(count));
  }
}

}  // namespace odeserve::tokenizer
