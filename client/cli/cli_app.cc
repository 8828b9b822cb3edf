#include "client/cli/cli_app.h"

#include <chrono>
#include <cmath>
#include <fstream>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/client_context.h>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/lib/bench_report.h"
#include "client/lib/input_lines.h"
#include "client/lib/json_writer.h"
#include "client/lib/status_macros.h"
#include "client/rpc/models.h"
#include "odeserve/v1/inference.grpc.pb.h"

namespace odeserve::client {
namespace {

using google::protobuf::Message;

struct Env {
  const CliOptions& opt;
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
  std::unique_ptr<v1::Inference::Stub> stub;
  grpc::Channel* channel = nullptr;
};

std::string ToJson(const Message& m, bool pretty = true) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string s;
  (void)google::protobuf::util::MessageToJsonString(m, &s, o);
  return s;
}

std::string Clip(absl::string_view s, size_t n) {
  std::string t(s.substr(0, n));
  for (char& c : t) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return s.size() > n ? absl::StrCat(t, "...") : t;
}

std::string Ms(const google::protobuf::Duration& d) { return absl::StrFormat("%.2f", ProtoMs(d)); }

std::string ChoiceName(v1::StepChoice c) {
  switch (c) {
    case v1::REQUESTED: return "requested";
    case v1::MODEL_DEFAULT: return "model-default";
    case v1::BUDGET: return "budget";
    case v1::BUDGET_FLOOR: return "budget-floor";
    default: return "unspecified";
  }
}

/// The one-line compute report.
std::string FormatReport(const v1::ComputeReport& r, double client_ms) {
  std::string s = absl::StrFormat("compute: steps=%d solver=%s dt=%.3g evals=%d (%s)", r.steps(),
                                  SolverName(r.solver()), r.step_size(), r.field_evaluations(),
                                  ChoiceName(r.step_choice()));
  if (r.decoder_steps() > 0) {
    absl::StrAppend(&s, " decoder_steps=", r.decoder_steps(), " beam=", r.beam_size(),
                    " output_tokens=", r.output_tokens());
  }
  absl::StrAppend(&s, " | queue ", Ms(r.queue_time()), " ms compute ", Ms(r.compute_time()),
                  " ms total ", Ms(r.total_time()), " ms predicted ", Ms(r.predicted_time()),
                  " ms client ", absl::StrFormat("%.2f", client_ms), " ms");
  if (r.budget_set()) {
    absl::StrAppend(&s, " | budget ", Ms(r.budget()), " ms ", r.budget_met() ? "met" : "MISSED");
  } else {
    absl::StrAppend(&s, " | no budget");
  }
  absl::StrAppend(&s, " | batch ", r.batch_size(), " tokens ", r.tokens());
  if (r.truncated_inputs() > 0) absl::StrAppend(&s, " truncated ", r.truncated_inputs());
  if (!r.device().empty()) absl::StrAppend(&s, " device ", r.device());
  return s;
}

int ExitCodeFor(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitError;
}

int Fail(Env& env, const absl::Status& s) {
  env.err << "error: " << StatusCodeName(static_cast<int>(s.code())) << ": " << s.message()
          << "\n";
  return ExitCodeFor(s);
}

absl::StatusOr<std::vector<std::string>> ReadLines(std::istream& in, const std::string& what) {
  std::vector<std::string> lines = ReadInputLines(in);
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", what));
  return lines;
}

/// Inputs from the operands, --input_file, or stdin ("-").
absl::StatusOr<std::vector<std::string>> CollectInputs(Env& env,
                                                       const std::vector<std::string>& operands) {
  std::vector<std::string> inputs;
  if (!env.opt.input_file.empty()) {
    std::ifstream f(env.opt.input_file);
    if (!f) return absl::NotFoundError(absl::StrCat("cannot open --input_file '", env.opt.input_file, "'"));
    OC_ASSIGN_OR_RETURN(inputs, ReadLines(f, env.opt.input_file));
  }
  for (const std::string& op : operands) {
    if (op == "-") {
      OC_ASSIGN_OR_RETURN(auto lines, ReadLines(env.in, "stdin"));
      inputs.insert(inputs.end(), lines.begin(), lines.end());
    } else {
      inputs.push_back(op);
    }
  }
  if (inputs.empty()) {
    return absl::InvalidArgumentError(
        "no inputs: give texts as arguments, --input_file FILE, or '-' to read stdin");
  }
  return inputs;
}

std::unique_ptr<grpc::ClientContext> NewContext(const CliOptions& opt) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  PrepareContext(*ctx, opt.connection, opt.deadline);
  return ctx;
}

/// --model, or the only READY model of `task`.
absl::StatusOr<std::string> ResolveModelName(Env& env, grpc::Channel& channel, v1::Task task) {
  if (!env.opt.model.empty()) return env.opt.model;
  return ResolveModel(channel, env.opt.connection, task,
                      env.opt.deadline.value_or(absl::Seconds(10)));
}

double SinceMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status Embed(Env& env, const std::vector<std::string>& operands) {
  OC_ASSIGN_OR_RETURN(auto inputs, CollectInputs(env, operands));
  v1::EmbedRequest req;
  OC_ASSIGN_OR_RETURN(*req.mutable_compute(), BuildComputeOptions(env.opt.compute));
  OC_ASSIGN_OR_RETURN(*req.mutable_model(), ResolveModelName(env, *env.channel, v1::EMBEDDING));
  for (auto& s : inputs) req.add_inputs(s);
  req.set_normalize(env.opt.normalize);
  req.set_truncate(env.opt.truncate);
  v1::EmbedResponse resp;
  auto ctx = NewContext(env.opt);
  const auto t0 = std::chrono::steady_clock::now();
  OC_RETURN_IF_ERROR(FromGrpc(env.stub->Embed(ctx.get(), req, &resp)));
  const double client_ms = SinceMs(t0);
  if (env.opt.json) {
    env.out << ToJson(resp);
    return absl::OkStatus();
  }
  for (int i = 0; i < resp.embeddings_size(); ++i) {
    const auto& v = resp.embeddings(i).values();
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    std::vector<std::string> head;
    for (int k = 0; k < std::min(v.size(), 6); ++k) head.push_back(absl::StrFormat("%.4f", v[k]));
    env.out << absl::StrFormat("[%d] dim=%d norm=%.4f [%s%s]  %s\n", i, v.size(), std::sqrt(norm),
                               absl::StrJoin(head, ", "), v.size() > 6 ? ", ..." : "",
                               i < static_cast<int>(inputs.size()) ? Clip(inputs[i], 48) : "");
  }
  env.out << "model " << resp.model() << " | " << FormatReport(resp.report(), client_ms) << "\n";
  return absl::OkStatus();
}

absl::Status Classify(Env& env, const std::vector<std::string>& operands) {
  OC_ASSIGN_OR_RETURN(auto inputs, CollectInputs(env, operands));
  v1::ClassifyRequest req;
  OC_ASSIGN_OR_RETURN(*req.mutable_compute(), BuildComputeOptions(env.opt.compute));
  OC_ASSIGN_OR_RETURN(*req.mutable_model(), ResolveModelName(env, *env.channel, v1::CLASSIFICATION));
  for (auto& s : inputs) req.add_inputs(s);
  if (env.opt.top_k < 0) return absl::InvalidArgumentError("--top_k must be >= 0");
  req.set_top_k(env.opt.top_k);
  req.set_truncate(env.opt.truncate);
  v1::ClassifyResponse resp;
  auto ctx = NewContext(env.opt);
  const auto t0 = std::chrono::steady_clock::now();
  OC_RETURN_IF_ERROR(FromGrpc(env.stub->Classify(ctx.get(), req, &resp)));
  const double client_ms = SinceMs(t0);
  if (env.opt.json) {
    env.out << ToJson(resp);
    return absl::OkStatus();
  }
  env.out << absl::StrFormat("%-4s %-4s %-24s %8s  %s\n", "#", "rank", "label", "score", "input");
  for (int i = 0; i < resp.results_size(); ++i) {
    const auto& labels = resp.results(i).labels();
    for (int k = 0; k < labels.size(); ++k) {
      env.out << absl::StrFormat(
          "%-4d %-4d %-24s %8.4f  %s\n", i, k + 1, labels[k].label(), labels[k].score(),
          k == 0 && i < static_cast<int>(inputs.size()) ? Clip(inputs[i], 60) : "");
    }
  }
  env.out << "model " << resp.model() << " | " << FormatReport(resp.report(), client_ms) << "\n";
  return absl::OkStatus();
}

// Prints every message as it arrives: "[i] ..." lines for text so far, "[i] = ..." for final
// ones; with --json, JSON Lines (one compact object per message and line), which line-oriented
// readers can parse as the messages come.
absl::Status TranslateStreamed(Env& env, const v1::TranslateRequest& req) {
  auto ctx = NewContext(env.opt);
  const auto t0 = std::chrono::steady_clock::now();
  auto reader = env.stub->TranslateStream(ctx.get(), req);
  v1::TranslateStreamResponse message;
  v1::ComputeReport report;
  while (reader->Read(&message)) {
    if (env.opt.json) {
      env.out << ToJson(message, /*pretty=*/false) << "\n" << std::flush;
    } else {
      env.out << absl::StrFormat("[%d] %s %s", message.index(), message.final() ? "=" : "...", message.text());
      if (message.final()) env.out << absl::StrFormat("  (score %.3f)", message.score());
      env.out << "\n" << std::flush;
    }
    if (message.has_report()) report = message.report();
  }
  OC_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
  if (!env.opt.json) {
    env.out << "model " << req.model() << " | " << FormatReport(report, SinceMs(t0)) << "\n";
  }
  return absl::OkStatus();
}

absl::Status Translate(Env& env, const std::vector<std::string>& operands) {
  OC_ASSIGN_OR_RETURN(auto inputs, CollectInputs(env, operands));
  v1::TranslateRequest req;
  OC_ASSIGN_OR_RETURN(*req.mutable_compute(), BuildComputeOptions(env.opt.compute));
  OC_ASSIGN_OR_RETURN(*req.mutable_model(), ResolveModelName(env, *env.channel, v1::TRANSLATION));
  for (auto& s : inputs) req.add_inputs(s);
  if (env.opt.beam_size < 0) return absl::InvalidArgumentError("--beam_size must be >= 0");
  if (env.opt.max_output_tokens < 0) {
    return absl::InvalidArgumentError("--max_output_tokens must be >= 0");
  }
  req.set_beam_size(env.opt.beam_size);
  req.set_max_output_tokens(env.opt.max_output_tokens);
  req.set_length_penalty(env.opt.length_penalty);
  req.set_truncate(env.opt.truncate);
  if (env.opt.stream) return TranslateStreamed(env, req);
  v1::TranslateResponse resp;
  auto ctx = NewContext(env.opt);
  const auto t0 = std::chrono::steady_clock::now();
  OC_RETURN_IF_ERROR(FromGrpc(env.stub->Translate(ctx.get(), req, &resp)));
  const double client_ms = SinceMs(t0);
  if (env.opt.json) {
    env.out << ToJson(resp);
    return absl::OkStatus();
  }
  for (int i = 0; i < resp.translations_size(); ++i) {
    env.out << absl::StrFormat("[%d] %s\n    -> %s", i,
                               i < static_cast<int>(inputs.size()) ? inputs[i] : "",
                               resp.translations(i));
    if (i < resp.scores_size()) env.out << absl::StrFormat("  (score %.3f)", resp.scores(i));
    env.out << "\n";
  }
  env.out << "model " << resp.model() << " | " << FormatReport(resp.report(), client_ms) << "\n";
  return absl::OkStatus();
}

std::string TaskName(v1::Task t) {
  return t == v1::TASK_UNSPECIFIED ? "-" : absl::AsciiStrToLower(v1::Task_Name(t));
}

std::string Solvers(const v1::ModelInfo& m) {
  std::vector<std::string> s;
  for (int v : m.solvers()) s.push_back(SolverName(static_cast<v1::Solver>(v)));
  return s.empty() ? "-" : absl::StrJoin(s, ",");
}

std::string HumanCount(int64_t n) {
  if (n >= 1000000) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 1000) return absl::StrFormat("%.1fk", n / 1e3);
  return absl::StrCat(n);
}

absl::Status Models(Env& env) {
  v1::ListModelsResponse resp;
  auto ctx = NewContext(env.opt);
  OC_RETURN_IF_ERROR(FromGrpc(env.stub->ListModels(ctx.get(), v1::ListModelsRequest(), &resp)));
  if (env.opt.json) {
    env.out << ToJson(resp);
    return absl::OkStatus();
  }
  const char* fmt = "%-28s %-14s %-8s %-10s %-7s %-12s %-14s %-8s %s\n";
  env.out << absl::StrFormat(fmt, "NAME", "TASK", "VERSION", "FAMILY", "STATE", "STEPS",
                             "SOLVERS", "PARAMS", "DEVICE");
  for (const auto& m : resp.models()) {
    std::string state = absl::AsciiStrToLower(v1::ModelState_Name(m.state()));
    if (m.state() == v1::MODEL_STATE_UNSPECIFIED) state = "-";
    env.out << absl::StrFormat(
        fmt, m.name(), TaskName(m.task()), m.version().empty() ? "-" : m.version(),
        m.family().empty() ? "-" : m.family(), state,
        absl::StrFormat("%d-%d (%d)", m.min_steps(), m.max_steps(), m.default_steps()),
        Solvers(m), HumanCount(m.parameters()), m.device().empty() ? "-" : m.device());
    if (m.state() == v1::FAILED && !m.error().empty()) env.out << "    error: " << m.error() << "\n";
  }
  if (resp.models().empty()) env.out << "(no models)\n";
  return absl::OkStatus();
}

absl::Status Model(Env& env, const std::vector<std::string>& operands) {
  if (operands.size() != 1) return absl::InvalidArgumentError("usage: odeserve-cli model NAME");
  v1::GetModelRequest req;
  req.set_name(operands[0]);
  v1::GetModelResponse resp;
  auto ctx = NewContext(env.opt);
  OC_RETURN_IF_ERROR(FromGrpc(env.stub->GetModel(ctx.get(), req, &resp)));
  if (env.opt.json) {
    env.out << ToJson(resp);
    return absl::OkStatus();
  }
  const v1::ModelInfo& m = resp.model();
  auto kv = [&](absl::string_view k, const std::string& v) {
    env.out << absl::StrFormat("%-22s %s\n", absl::StrCat(k, ":"), v);
  };
  kv("name", m.name());
  kv("task", TaskName(m.task()));
  kv("version", m.version());
  kv("family", m.family());
  if (!m.description().empty()) kv("description", m.description());
  kv("state", v1::ModelState_Name(m.state()));
  if (!m.error().empty()) kv("error", m.error());
  kv("device", m.device());
  kv("trained depth (L)", absl::StrCat(m.trained_depth()));
  kv("steps", absl::StrFormat("%d-%d, default %d (from %s)", m.min_steps(), m.max_steps(),
                              m.default_steps(), m.default_steps_source()));
  kv("solvers", Solvers(m));
  kv("hidden / embedding", absl::StrCat(m.hidden_size(), " / ", m.embedding_dimension()));
  kv("max sequence length", absl::StrCat(m.max_sequence_length()));
  kv("max batch / inputs", absl::StrCat(m.max_batch_size(), " / ", m.max_inputs_per_request()));
  kv("parameters", absl::StrCat(m.parameters(), " (", HumanCount(m.parameters()), ")"));
  kv("size on disk", absl::StrFormat("%.2f MiB", m.size_bytes() / 1048576.0));
  if (!m.languages().empty()) kv("languages", absl::StrJoin(m.languages(), ", "));
  if (!m.labels().empty()) {
    kv(absl::StrCat("labels (", m.labels_size(), ")"), absl::StrJoin(m.labels(), ", "));
  }
  if (m.has_cost_model()) {
    const auto& c = m.cost_model();
    kv("cost model", absl::StrFormat(
                         "%.3g s + %.3g s/row + %.3g s/token + %.3g s/token-eval",
                         c.fixed_seconds(), c.per_row_seconds(), c.per_token_seconds(),
                         c.per_token_evaluation_seconds()));
    kv("cost model samples", absl::StrFormat("calibration %d, online %d, mean |rel err| %.1f%%",
                                             c.calibration_samples(), c.online_samples(),
                                             100 * c.mean_abs_relative_error()));
  }
  if (!m.quality_profile_measured()) {
    kv("quality profile", "none measured: a budgeted call takes the most steps that fit");
  }
  if (!m.quality_profile().empty()) {
    env.out << "quality profile:\n";
    env.out << absl::StrFormat("  %-8s %6s  %-14s %10s  %s\n", "solver", "steps", "metric",
                               "value", "dataset");
    for (const auto& q : m.quality_profile()) {
      env.out << absl::StrFormat("  %-8s %6d  %-14s %10.4f  %s\n", SolverName(q.solver()),
                                 q.steps(), q.metric(), q.value(), q.dataset());
    }
  }
  return absl::OkStatus();
}

int Health(Env& env, grpc::Channel& channel, const std::vector<std::string>& operands) {
  if (operands.size() > 1) {
    return Fail(env, absl::InvalidArgumentError("usage: odeserve-cli health [SERVICE]"));
  }
  const std::string service = operands.empty() ? "" : operands[0];
  auto status = CheckHealth(channel, env.opt.connection, service,
                            env.opt.deadline.value_or(absl::Seconds(5)));
  if (!status.ok()) return Fail(env, status.status());
  if (env.opt.json) {
    JsonWriter w;
    w.BeginObject().Field("service", service).Field("status", HealthStatusName(*status)).EndObject();
    env.out << w.str() << "\n";
  } else {
    env.out << (service.empty() ? "(server)" : service) << ": " << HealthStatusName(*status)
            << "\n";
  }
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitNotServing;
}

}  // namespace

std::string CliUsage() {
  return R"(usage: odeserve-cli [flags] COMMAND [ARGS]

commands:
  embed [TEXT...|-]       embeddings of the inputs (--normalize)
  classify [TEXT...|-]    top-k labels of the inputs (--top_k)
  translate [TEXT...|-]   translations of the inputs (--beam_size, --max_output_tokens, --length_penalty, --stream)
  models                  every model the server holds
  model NAME              one model: metadata, quality profile, cost model
  health [SERVICE]        grpc.health.v1 Check ("" = whole server, or odeserve.v1.Inference)

inputs: positional TEXT arguments, --input_file FILE (one per line), '-' reads stdin.
compute: --steps N | --budget 20ms [--min_steps N] [--on_miss floor|refuse], --solver euler|heun|rk4
output: human-readable; --json prints the response as JSON (proto field names; with --stream,
        one JSON object per message and line).
exit codes: 0 ok, 1 call failed, 2 usage error or INVALID_ARGUMENT, 3 health not SERVING.
Run with --help for every flag.
)";
}

int RunCli(const CliOptions& options, const std::vector<std::string>& args, std::istream& in,
           std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << CliUsage();
    return kExitUsage;
  }
  const std::string& cmd = args[0];
  const std::vector<std::string> operands(args.begin() + 1, args.end());
  Env env{options, in, out, err, nullptr};
  if (options.deadline && *options.deadline <= absl::ZeroDuration()) {
    return Fail(env, absl::InvalidArgumentError(absl::StrCat(
                         "--deadline must be > 0, got ", absl::FormatDuration(*options.deadline))));
  }
  static const char* const kCommands[] = {"embed", "classify", "translate", "models", "model",
                                          "health"};
  if (std::find(std::begin(kCommands), std::end(kCommands), cmd) == std::end(kCommands)) {
    err << "error: unknown command '" << cmd << "'\n\n" << CliUsage();
    return kExitUsage;
  }
  auto channel = MakeChannel(options.connection);
  if (!channel.ok()) return Fail(env, channel.status());
  err << PlaintextTokenWarning(options.connection);
  if (cmd == "health") return Health(env, **channel, operands);
  env.stub = v1::Inference::NewStub(*channel);
  env.channel = channel->get();
  absl::Status s;
  if (cmd == "embed") {
    s = Embed(env, operands);
  } else if (cmd == "classify") {
    s = Classify(env, operands);
  } else if (cmd == "translate") {
    s = Translate(env, operands);
  } else if (cmd == "models") {
    s = operands.empty() ? Models(env)
                         : absl::InvalidArgumentError("usage: odeserve-cli models");
  } else {
    s = Model(env, operands);
  }
  return s.ok() ? kExitOk : Fail(env, s);
}

}  // namespace odeserve::client
