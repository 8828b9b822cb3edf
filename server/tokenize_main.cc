// odeserve-tokenize: prints the ids the server feeds a model for each input line, so that a
// model's tokenization can be checked against the tokenizer it was trained with (tokenizer
// parity for imported checkpoints). Reads the model folder's config.pbtxt like the server does.
//
//   odeserve-tokenize MODEL_DIR < texts     one text per line, C escapes allowed (\n, \t, \xNN)
// Output: one line per input, the ids separated by spaces (truncated to max_sequence_length).

#include <iostream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "server/repository/model_config.h"
#include "server/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: odeserve-tokenize MODEL_DIR < texts (one per line, C escapes allowed)\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  auto config = odeserve::repository::LoadModelConfig(dir);
  if (!config.ok()) {
    std::cerr << "odeserve-tokenize: " << config.status().message() << "\n";
    return 1;
  }
  auto tokenizer = odeserve::tokenizer::Tokenizer::Load((dir / config->tokenizer().model_file()).string(),
                                                        odeserve::repository::TokenizerOptionsFor(*config));
  if (!tokenizer.ok()) {
    std::cerr << "odeserve-tokenize: " << tokenizer.status().message() << "\n";
    return 1;
  }
  std::string line;
  for (int number = 1; std::getline(std::cin, line); ++number) {
    std::string text;
    std::string error;
    if (!absl::CUnescape(line, &text, &error)) {
      std::cerr << "odeserve-tokenize: line " << number << ": " << error << "\n";
      return 1;
    }
    auto encoded = (*tokenizer)->Encode(text, config->max_sequence_length(), /*truncate=*/true);
    if (!encoded.ok()) {
      std::cerr << "odeserve-tokenize: line " << number << ": " << encoded.status().message() << "\n";
      return 1;
    }
    std::cout << absl::StrJoin(encoded->ids, " ") << "\n";
  }
  return 0;
}
