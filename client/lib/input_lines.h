#pragma once
// Input texts read from a file or stdin, one per line, as odeserve-cli and odeserve-bench take them.

#include <istream>
#include <string>
#include <vector>

namespace odeserve::client {

/// The stream's lines without their line ends (\n or \r\n); blank lines (empty or whitespace
/// only, which no model can tokenize) are skipped.
std::vector<std::string> ReadInputLines(std::istream& in);

}  // namespace odeserve::client
