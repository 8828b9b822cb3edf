// odeserve-cli: one-off calls to an odeserve server. See client/README.md.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "client/rpc/connection_flags.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "client/cli/cli_app.h"

ABSL_FLAG(std::string, model, "", "model name (default: the only ready model of the task)");
ABSL_FLAG(int, steps, 0, "exact solver steps (0 = server's choice)");
ABSL_FLAG(std::string, solver, "", "euler | heun | rk4 (default: server's choice)");
ABSL_FLAG(std::optional<absl::Duration>, budget, std::nullopt, "latency budget, e.g. 20ms");
ABSL_FLAG(int, min_steps, 0, "quality floor for budget-driven step choice");
ABSL_FLAG(std::string, on_miss, "", "when the budget cannot be met: floor | refuse");
ABSL_FLAG(int, decoder_steps, 0, "translate: decoder steps (0 = server's choice)");
ABSL_FLAG(bool, normalize, false, "embed: L2-normalize embeddings");
ABSL_FLAG(bool, truncate, false, "cut inputs longer than the model's limit instead of failing");
ABSL_FLAG(int, top_k, 0, "classify: labels per input (0 = 1)");
ABSL_FLAG(int, beam_size, 0, "translate: beam size (0 or 1 = greedy)");
ABSL_FLAG(int, max_output_tokens, 0, "translate: output length limit (0 = from input length)");
ABSL_FLAG(float, length_penalty, 0, "translate: beam ranking exponent, log-prob / tokens^p (0 = the model's)");
ABSL_FLAG(bool, stream, false, "translate: stream the text as it is decoded (TranslateStream)");
ABSL_FLAG(std::optional<absl::Duration>, deadline, std::nullopt, "gRPC deadline of the call, e.g. 2s");
ABSL_FLAG(bool, json, false, "print machine-readable JSON");
ABSL_FLAG(std::string, input_file, "", "read inputs from this file, one per line");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(odeserve::client::CliUsage());
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  odeserve::client::CliOptions o;
  o.connection = odeserve::client::ConnectionFromFlags();
  o.model = absl::GetFlag(FLAGS_model);
  o.compute.steps = absl::GetFlag(FLAGS_steps);
  o.compute.solver = absl::GetFlag(FLAGS_solver);
  o.compute.budget = absl::GetFlag(FLAGS_budget);
  o.compute.min_steps = absl::GetFlag(FLAGS_min_steps);
  o.compute.on_miss = absl::GetFlag(FLAGS_on_miss);
  o.compute.decoder_steps = absl::GetFlag(FLAGS_decoder_steps);
  o.normalize = absl::GetFlag(FLAGS_normalize);
  o.truncate = absl::GetFlag(FLAGS_truncate);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.beam_size = absl::GetFlag(FLAGS_beam_size);
  o.max_output_tokens = absl::GetFlag(FLAGS_max_output_tokens);
  o.length_penalty = absl::GetFlag(FLAGS_length_penalty);
  o.stream = absl::GetFlag(FLAGS_stream);
  o.deadline = absl::GetFlag(FLAGS_deadline);
  o.json = absl::GetFlag(FLAGS_json);
  o.input_file = absl::GetFlag(FLAGS_input_file);
  return odeserve::client::RunCli(o, std::vector<std::string>(positional.begin() + 1, positional.end()),
                                  std::cin, std::cout, std::cerr);
}
