// odeserve-cli: one-off calls to an odeserve server. See client/README.md.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "client/cli/cli_app.h"

ABSL_FLAG(std::string, address, "localhost:8500", "server address host:port");
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
ABSL_FLAG(std::optional<absl::Duration>, deadline, std::nullopt, "gRPC deadline of the call, e.g. 2s");
ABSL_FLAG(bool, json, false, "print machine-readable JSON");
ABSL_FLAG(std::string, input_file, "", "read inputs from this file, one per line");
ABSL_FLAG(bool, tls, false, "use TLS (system roots unless --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "", "PEM file of roots that verify the server (implies TLS)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate chain for mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM client private key for mutual TLS");
ABSL_FLAG(std::string, tls_server_name, "", "override the server name checked in its certificate");
ABSL_FLAG(std::string, token, "", "bearer token (default: $ODESERVE_TOKEN)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(odeserve::client::CliUsage());
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  odeserve::client::CliOptions o;
  o.connection.address = absl::GetFlag(FLAGS_address);
  o.connection.tls = absl::GetFlag(FLAGS_tls);
  o.connection.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.connection.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.connection.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.connection.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.connection.token = absl::GetFlag(FLAGS_token);
  if (o.connection.token.empty()) {
    if (const char* t = std::getenv("ODESERVE_TOKEN")) o.connection.token = t;
  }
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
  o.deadline = absl::GetFlag(FLAGS_deadline);
  o.json = absl::GetFlag(FLAGS_json);
  o.input_file = absl::GetFlag(FLAGS_input_file);
  return odeserve::client::RunCli(o, std::vector<std::string>(positional.begin() + 1, positional.end()),
                                  std::cin, std::cout, std::cerr);
}
