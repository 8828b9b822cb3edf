#include "client/lib/input_lines.h"

#include "absl/strings/ascii.h"

namespace odeserve::client {

std::vector<std::string> ReadInputLines(std::istream& in) {
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!absl::StripAsciiWhitespace(line).empty()) lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace odeserve::client
