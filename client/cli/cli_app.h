#pragma once
// odeserve-cli as a function, so that tests can drive it without a process.

#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/rpc/compute_options.h"
#include "client/rpc/connection.h"

namespace odeserve::client {

struct CliOptions {
  ConnectionOptions connection;
  std::string model;  // empty: the only READY model of the method's task
  ComputeFlags compute;
  bool normalize = false;
  bool truncate = false;
  int top_k = 0;
  int beam_size = 0;
  int max_output_tokens = 0;
  float length_penalty = 0;  // 0 = the model's
  bool stream = false;  // translate: TranslateStream, printing text as it is decoded
  std::optional<absl::Duration> deadline;  // gRPC deadline of each call
  bool json = false;
  std::string input_file;  // one input per line
};

/// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;         // any failed call except INVALID_ARGUMENT
inline constexpr int kExitUsage = 2;         // bad command line, or INVALID_ARGUMENT
inline constexpr int kExitNotServing = 3;    // health: the service is not SERVING

/// Runs one command. `args` are the positional arguments: the command and its operands
/// (embed|classify|translate [TEXT...|-], models, model NAME, health [SERVICE]).
int RunCli(const CliOptions& options, const std::vector<std::string>& args, std::istream& in,
           std::ostream& out, std::ostream& err);

/// The usage text.
std::string CliUsage();

}  // namespace odeserve::client
