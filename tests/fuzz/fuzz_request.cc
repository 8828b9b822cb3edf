// (a) Request validation, byte limits and tokenization: arbitrary bytes as input texts and
// arbitrary compute options through InferenceCore::Embed / Classify / Translate /
// TranslateStream (server/core/inference_core.cc) on the bundled models (models/repository,
// loaded by the real ModelManager without calibration), and the same texts through each model's
// real tokenizer (SentencePiece, text normalization, EELBERT n-gram hashing) and the byte limits
// (server/core/input_limits.h).
//
// Input: the first line holds space-separated key=value options; the rest, split at the byte
// 0x1E (ASCII record separator), are the inputs. No newline: no inputs.
//   rpc=embed|classify|translate|stream   (default: the model's own task)
//   model=NAME  steps= decoder_steps= min_steps= solver= on_miss=  (int32, any value)
//   budget_s= budget_ns=   (either one sets compute.latency_budget)
//   deadline_ms=           (the call's deadline, from now; negative = already passed)
//   truncate=0|1 normalize=0|1 top_k= beam= max_out= penalty=(float, nan/inf too)
//   repeat=N   each input N times over (up to 70,000 bytes: past the 65,536-byte cap)
//   copies=N   the inputs N times over (up to 100 inputs: past max_inputs_per_request)
// steps, decoder_steps, min_steps, top_k, beam, max_out and copies also take "min", "max",
// "min-K", "max+K" (or "max" and any other suffix: -2..2): relative to the model's own bound
// (steps range, max_beam_size, ...).
//
// ODESERVE_FUZZ_VERBOSE=1 prints each request, its status and the rules it breaks.
//
// No call reaches a batch: the call's `cancelled` turns true after the tokenizer's checks, so a
// call that passed validation, tokenization and planning ends CANCELLED where it would have been
// queued (or, if it was queued, is dropped there before any compute).
//
// Checks, besides the sanitizers:
//  - the completion runs exactly once, and a refusal is an error status with a message; the
//    status code is one the call can get: a request that breaks a documented rule (README "Errors",
//    docs/LIMITS.md: unknown model, wrong task, input count, empty or non-UTF-8 text, byte and
//    token limits with truncate=false, steps / decoder_steps / min_steps ranges, solver,
//    on_budget_miss, budget, top_k, beam_size, max_output_tokens, length_penalty) is refused with
//    its code; one that breaks none is accepted (CANCELLED here), or DEADLINE_EXCEEDED where a
//    deadline or a REFUSE budget applies;
//  - an accepted call's report: tokens within [inputs, inputs x max_sequence_length], truncated
//    inputs only with truncate=true, steps (and decoder steps) in the model's ranges and equal to
//    the requested ones, the requested solver, field evaluations = steps x evaluations per step,
//    a budget-driven choice not under min_steps, beam size;
//  - rpc::ToGrpcStatus keeps the code, bounds the message and keeps it UTF-8;
//  - IsValidUtf8 agrees with an independent RFC 3629 check; Utf8Prefix and BoundInputBytes cut
//    where the rules say;
//  - the tokenizer: ids within the vocabulary, bos/eos where configured, truncation keeps the
//    first tokens and eos and at most max_sequence_length tokens, truncate=false fails with
//    OutOfRange exactly when the text is too long, hashed features are finite and follow the
//    kept tokens; text normalization keeps text valid UTF-8.
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/inference_core.h"
#include "server/core/input_limits.h"
#include "server/core/model_manager.h"
#include "server/metrics/metrics.h"
#include "server/rpc/status_mapping.h"
#include "server/tokenizer/ngram_hash.h"
#include "server/tokenizer/text_normalizer.h"
#include "server/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
namespace v1 = odeserve::v1;
namespace core = odeserve::core;
namespace tok = odeserve::tokenizer;

namespace {

constexpr char kSeparator = '\x1e';
constexpr size_t kMaxInputBytes = 70000;
constexpr int kMaxInputs = 100;
constexpr size_t kMaxTotalBytes = 512 * 1024;
constexpr int64_t kMaxTextBytes = 65536;  // InferenceOptions' default (--max_text_bytes)
constexpr size_t kMaxStatusBytes = 2048;  // rpc/status_mapping.cc

struct Env {
  odeserve::metrics::Metrics* metrics = nullptr;
  core::ModelManager* models = nullptr;
  core::InferenceCore* core = nullptr;
};
Env g_env;

struct Request {
  std::string rpc;
  std::string model = "embed-sharebert";
  int32_t steps = 0, decoder_steps = 0, min_steps = 0, solver = 0, on_miss = 0;
  bool has_budget = false;
  int64_t budget_s = 0;
  int32_t budget_ns = 0;
  bool has_deadline = false;
  int64_t deadline_ms = 0;
  bool truncate = false, normalize = false;
  int32_t top_k = 0, beam = 0, max_out = 0;
  float penalty = 0;
  int repeat = 1, copies = 1;
  std::vector<std::string> inputs;
};

std::string g_description;  // of the current input, for failure reports

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_request: %s\n  request: %s\n", what.c_str(), g_description.c_str());
  std::abort();
}

// RFC 3629, written apart from tokenizer::IsValidUtf8.
bool ReferenceValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int length;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + length > s.size()) return false;
    for (int k = 1; k < length; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (length == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return false;
    if (length == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return false;
    i += length;
  }
  return true;
}

template <typename T>
void ParseNumber(std::string_view value, T* out) {
  T parsed;
  if (absl::SimpleAtoi(std::string(value), &parsed)) *out = parsed;
}

// A value "min", "max", "min-K" or "max+K" is relative to the model's own bound of the field:
// boundaries are one mutation away whatever the model.
template <typename T>
void ParseBounded(const std::string& value, int64_t lo, int64_t hi, T* out) {
  if (value.size() < 3 || (value.compare(0, 3, "min") != 0 && value.compare(0, 3, "max") != 0)) {
    ParseNumber(value, out);
    return;
  }
  int64_t delta = 0;
  if (value.size() > 3 && !absl::SimpleAtoi(value.substr(3), &delta)) {
    // Any other suffix: -2..2 from its bytes, so one inserted byte steps over a bound.
    unsigned sum = 0;
    for (size_t i = 3; i < value.size(); ++i) sum += static_cast<unsigned char>(value[i]);
    delta = static_cast<int64_t>(sum % 5) - 2;
  }
  const int64_t base = value[1] == 'i' ? lo : hi;
  const int64_t limit = std::numeric_limits<int32_t>::max();
  *out = static_cast<T>(std::clamp<int64_t>(base + std::clamp<int64_t>(delta, -limit, limit), -limit, limit));
}

Request Parse(std::string_view data) {
  Request r;
  const size_t newline = data.find('\n');
  const std::string_view header = data.substr(0, newline);
  std::vector<std::string> tokens = absl::StrSplit(std::string(header), ' ', absl::SkipEmpty());
  for (const std::string& token : tokens) {
    if (token.compare(0, 6, "model=") == 0) r.model = token.substr(6);
  }
  const core::ModelEntry* entry = g_env.models->Find(r.model);
  const v1::ModelConfig empty;
  const v1::ModelConfig& c = entry != nullptr && entry->servable ? entry->servable->config : empty;
  const auto& decoder = c.translation().decoder_steps();
  for (const std::string& token : tokens) {
    const size_t eq = token.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = token.substr(0, eq);
    const std::string value = token.substr(eq + 1);
    if (key == "rpc") r.rpc = value;
    else if (key == "steps") ParseBounded(value, c.steps().min(), c.steps().max(), &r.steps);
    else if (key == "decoder_steps") ParseBounded(value, decoder.min(), decoder.max(), &r.decoder_steps);
    else if (key == "min_steps") ParseBounded(value, c.steps().min(), c.steps().max(), &r.min_steps);
    else if (key == "solver") ParseNumber(value, &r.solver);
    else if (key == "on_miss") ParseNumber(value, &r.on_miss);
    else if (key == "budget_s") r.has_budget = true, ParseNumber(value, &r.budget_s);
    else if (key == "budget_ns") r.has_budget = true, ParseNumber(value, &r.budget_ns);
    else if (key == "deadline_ms") r.has_deadline = true, ParseNumber(value, &r.deadline_ms);
    else if (key == "truncate") r.truncate = value == "1";
    else if (key == "normalize") r.normalize = value == "1";
    else if (key == "top_k") ParseBounded(value, 0, c.labels_size(), &r.top_k);
    else if (key == "beam") ParseBounded(value, 0, c.translation().max_beam_size(), &r.beam);
    else if (key == "max_out") ParseBounded(value, 0, c.translation().max_output_tokens(), &r.max_out);
    else if (key == "penalty") {
      double d;
      if (absl::SimpleAtod(value, &d)) r.penalty = static_cast<float>(d);
    } else if (key == "repeat") ParseNumber(value, &r.repeat);
    else if (key == "copies") ParseBounded(value, 1, c.max_inputs_per_request(), &r.copies);
  }
  r.deadline_ms = std::clamp<int64_t>(r.deadline_ms, -1000000, 1000000000);
  if (newline == std::string_view::npos) return r;
  std::vector<std::string> texts = absl::StrSplit(std::string(data.substr(newline + 1)), kSeparator);
  const int repeat = std::clamp(r.repeat, 1, 100000);
  const int copies = std::clamp(r.copies, 1, kMaxInputs);
  size_t total = 0;
  for (int c = 0; c < copies; ++c) {
    for (const std::string& text : texts) {
      if (static_cast<int>(r.inputs.size()) >= kMaxInputs) break;
      std::string input;
      for (int k = 0; k < repeat && input.size() < kMaxInputBytes; ++k) input += text;
      if (input.size() > kMaxInputBytes) input.resize(kMaxInputBytes);
      total += input.size();
      if (total > kMaxTotalBytes) break;
      r.inputs.push_back(std::move(input));
    }
  }
  return r;
}

std::string Describe(const Request& r) {
  std::vector<std::string> sizes;
  for (const auto& input : r.inputs) sizes.push_back(absl::StrCat(input.size()));
  return absl::StrCat("rpc=", r.rpc, " model=", r.model, " steps=", r.steps, " decoder_steps=", r.decoder_steps,
                      " min_steps=", r.min_steps, " solver=", r.solver, " on_miss=", r.on_miss,
                      r.has_budget ? absl::StrCat(" budget=", r.budget_s, "s+", r.budget_ns, "ns") : "",
                      r.has_deadline ? absl::StrCat(" deadline_ms=", r.deadline_ms) : "", " truncate=", r.truncate ? 1 : 0,
                      " top_k=", r.top_k, " beam=", r.beam, " max_out=", r.max_out, " penalty=", r.penalty,
                      " inputs=", r.inputs.size(), " bytes=[", absl::StrJoin(sizes, ","), "]");
}

v1::Task TaskOf(const std::string& rpc) {
  if (rpc == "classify") return v1::CLASSIFICATION;
  if (rpc == "translate" || rpc == "stream") return v1::TRANSLATION;
  return v1::EMBEDDING;
}

// The per-call work limit (--max_call_work, server/core/work_limit.h, where the tree has it)
// depends on the steps the planner picks: a refusal for it is accepted as such.
bool OverWorkLimit(const absl::Status& status) {
#if __has_include("server/core/work_limit.h")
  return absl::IsInvalidArgument(status) && absl::StrContains(std::string(status.message()), "--max_call_work");
#else
  return false;
#endif
}

// --- tokenizer and byte-limit checks ------------------------------------------------------------

void CheckUtf8Prefix(std::string_view text, size_t limit) {
  const std::string_view prefix = core::Utf8Prefix(text, limit);
  if (prefix.data() != text.data()) Fail("Utf8Prefix is not a prefix");
  if (text.size() <= limit && prefix.size() != text.size()) Fail("Utf8Prefix cut a text within the limit");
  if (text.size() > limit && prefix.size() > limit) Fail("Utf8Prefix is over the limit");
  if (text.size() > limit && ReferenceValidUtf8(text)) {
    if (!ReferenceValidUtf8(prefix)) Fail("Utf8Prefix split a character of valid UTF-8");
    if (prefix.size() + 3 < limit) Fail("Utf8Prefix cut more than one character's continuation bytes");
  }
}

void CheckEncoded(const tok::Tokenizer& t, const tok::EncodedText& e, const char* which) {
  const auto& options = t.options();
  for (int64_t id : e.ids) {
    if (id < 0 || id >= t.vocab_size()) Fail(absl::StrCat(which, ": token id ", id, " outside the vocabulary of ", t.vocab_size()));
  }
  if (options.add_bos && (e.ids.empty() || e.ids.front() != t.bos_id())) Fail(absl::StrCat(which, ": no bos first"));
  if (options.add_eos && (e.ids.empty() || e.ids.back() != t.eos_id())) Fail(absl::StrCat(which, ": no eos last"));
  if (options.hashed) {
    if (e.features.size() != e.ids.size() * static_cast<size_t>(options.hash.dim)) Fail(absl::StrCat(which, ": features do not match the ids"));
    for (float f : e.features) {
      if (!std::isfinite(f)) Fail(absl::StrCat(which, ": a hashed feature is not finite"));
    }
  } else if (!e.features.empty()) {
    Fail(absl::StrCat(which, ": features for a model without hashing"));
  }
}

// `text` is valid UTF-8 within the model's byte limit: what the server hands the tokenizer.
void CheckTokenizer(const core::Servable& s, std::string_view text) {
  const tok::Tokenizer& t = *s.tokenizer;
  const int max_length = s.config.max_sequence_length();
  const auto& options = t.options();
  auto full = t.Encode(text, std::numeric_limits<int>::max(), false);
  if (!full.ok()) Fail(absl::StrCat("valid UTF-8 did not tokenize: ", full.status().ToString()));
  CheckEncoded(t, *full, "untruncated");
  if (full->truncated || full->untruncated_length != static_cast<int>(full->ids.size())) {
    Fail("an untruncated encoding counts itself truncated");
  }
  const size_t length = full->ids.size();

  auto cut = t.Encode(text, max_length, true);
  if (!cut.ok()) Fail(absl::StrCat("truncate=true failed: ", cut.status().ToString()));
  CheckEncoded(t, *cut, "truncated");
  if (cut->ids.size() > static_cast<size_t>(max_length)) {
    Fail(absl::StrCat(cut->ids.size(), " tokens after truncation, over max_sequence_length ", max_length));
  }
  if (cut->untruncated_length != static_cast<int>(length)) Fail("truncation changed untruncated_length");
  if (cut->truncated != (length > static_cast<size_t>(max_length))) Fail("truncated flag is wrong");
  std::vector<int64_t> expected = full->ids;
  std::vector<float> expected_features = full->features;
  if (length > static_cast<size_t>(max_length)) {
    // The first tokens are kept, and eos stays.
    const size_t dim = options.hashed ? static_cast<size_t>(options.hash.dim) : 0;
    const size_t keep = options.add_eos ? max_length - 1 : max_length;
    expected.resize(keep);
    expected_features.resize(keep * dim);
    if (options.add_eos) {
      expected.push_back(full->ids.back());
      expected_features.insert(expected_features.end(), full->features.end() - dim, full->features.end());
    }
  }
  if (cut->ids != expected) Fail("truncation did not keep the first tokens (and eos)");
  if (cut->features != expected_features) Fail("truncation changed the hashed features of kept tokens");

  auto strict = t.Encode(text, max_length, false);
  if (length <= static_cast<size_t>(max_length)) {
    if (!strict.ok() || strict->ids != full->ids) Fail("truncate=false changed a text within the limit");
  } else if (!absl::IsOutOfRange(strict.status()) || strict.status().message().empty()) {
    Fail(absl::StrCat("truncate=false on a long text: ", strict.status().ToString()));
  }

  // Normalization on its own, with every rule: valid UTF-8 stays valid.
  tok::TextNormalizationOptions all;
  all.collapse_whitespace = all.normalize_quotes = all.strip_accents = all.lowercase = true;
  for (const auto& rules : {options.normalization, all}) {
    if (!ReferenceValidUtf8(tok::NormalizeText(text, rules))) Fail("NormalizeText made invalid UTF-8");
  }
  tok::TextNormalizationOptions collapse;
  collapse.collapse_whitespace = true;
  const std::string collapsed = tok::NormalizeText(text, collapse);
  if (!collapsed.empty() && (collapsed.front() == ' ' || collapsed.back() == ' ' ||
                             collapsed.find("  ") != std::string::npos)) {
    Fail("collapse_whitespace left leading, trailing or double spaces");
  }
}

// --- the call -----------------------------------------------------------------------------------

struct CallState {
  std::mutex mu;
  std::condition_variable cv;
  int cancel_checks = 0;
  int done_calls = 0;
  absl::Status status;
  std::vector<v1::TranslateStreamResponse> messages;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* override_repository = std::getenv("ODESERVE_FUZZ_REPOSITORY");
  const fs::path repository = override_repository != nullptr
                                  ? fs::path(override_repository)
                                  : fs::path(__FILE__).parent_path() / "../../models/repository";
  g_env.metrics = new odeserve::metrics::Metrics({"fuzz", "fuzz", "fuzz"});
  core::ModelManagerOptions options;
  options.repository = repository;
  options.calibrate = false;
  options.metrics = g_env.metrics;
  g_env.models = new core::ModelManager(options);
  if (auto status = g_env.models->LoadAll(); !status.ok()) Fail("LoadAll: " + status.ToString());
  if (g_env.models->List().empty()) Fail("no models under " + repository.string());
  for (const core::ModelEntry* entry : g_env.models->List()) {
    if (entry->state != v1::READY) Fail(absl::StrCat("model ", entry->name, " did not load: ", entry->error));
  }
  g_env.core = new core::InferenceCore(g_env.models, g_env.metrics);
  g_env.core->SetReady();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string_view data(reinterpret_cast<const char*>(bytes), size);
  Request r = Parse(data);
  const core::ModelEntry* entry = g_env.models->Find(r.model);
  const core::Servable* s = entry != nullptr && entry->servable ? entry->servable.get() : nullptr;
  if (r.rpc.empty()) {
    const v1::Task task = s != nullptr ? s->config.task() : v1::EMBEDDING;
    r.rpc = task == v1::CLASSIFICATION ? "classify" : task == v1::TRANSLATION ? "translate" : "embed";
  }
  g_description = Describe(r);
  const int n = static_cast<int>(r.inputs.size());

  // Texts: the UTF-8 check against the reference, and the byte limit's cut.
  std::vector<bool> valid(n);
  for (int i = 0; i < n; ++i) {
    valid[i] = ReferenceValidUtf8(r.inputs[i]);
    if (tok::IsValidUtf8(r.inputs[i]) != valid[i]) Fail(absl::StrCat("IsValidUtf8 disagrees with RFC 3629 on inputs[", i, "]"));
    if (i < 4) {
      CheckUtf8Prefix(r.inputs[i], 4096);
      CheckUtf8Prefix(r.inputs[i], static_cast<size_t>(r.inputs[i].size() / 2));
    }
  }

  // What the documented rules say of this request.
  std::set<absl::StatusCode> codes;  // the codes a refusal may have
  std::vector<std::string> broken;   // the rules it breaks
  auto refuse = [&](absl::StatusCode code, std::string rule) {
    codes.insert(code);
    broken.push_back(std::move(rule));
  };
  const v1::Task task = TaskOf(r.rpc);
  const bool translation = task == v1::TRANSLATION;
  int64_t byte_limit = 0;
  std::vector<std::string_view> bounded;  // what the tokenizer reads of each input
  if (r.rpc == "classify" && r.top_k < 0) refuse(absl::StatusCode::kInvalidArgument, "top_k < 0");
  if (r.model.empty()) {
    refuse(absl::StatusCode::kInvalidArgument, "empty model");
  } else if (s == nullptr) {
    refuse(absl::StatusCode::kNotFound, "unknown model");
  } else if (s->config.task() != task) {
    refuse(absl::StatusCode::kFailedPrecondition, "model of another task");
  } else {
    const v1::ModelConfig& c = s->config;
    const auto ia = absl::StatusCode::kInvalidArgument;
    if (n == 0 || n > c.max_inputs_per_request()) refuse(ia, "input count");
    for (int i = 0; i < n; ++i) {
      if (r.inputs[i].empty() || !valid[i]) refuse(ia, "empty or invalid UTF-8 input");
    }
    const auto& range = c.steps();
    if (r.steps != 0 && (r.steps < range.min() || r.steps > range.max())) refuse(ia, "steps range");
    if (r.min_steps < 0 || r.min_steps > range.max()) refuse(ia, "min_steps range");
    if (r.steps != 0 && r.min_steps > r.steps) refuse(ia, "min_steps > steps");
    const bool known_solver = v1::Solver_IsValid(r.solver);
    bool allowed_solver = r.solver == v1::SOLVER_UNSPECIFIED;
    for (int solver : c.solvers()) allowed_solver |= solver == r.solver;
    if (!known_solver || !allowed_solver) refuse(ia, "solver");
    if (!v1::BudgetMissPolicy_IsValid(r.on_miss)) refuse(ia, "on_budget_miss");
    if (r.has_budget && (r.budget_s < 0 || r.budget_ns < 0 || (r.budget_s == 0 && r.budget_ns == 0) ||
                         r.budget_ns >= 1000000000)) {
      refuse(ia, "latency_budget <= 0");
    }
    if (translation) {
      const auto& t = c.translation();
      const auto& decoder = t.decoder_steps();
      if (r.decoder_steps != 0 && (r.decoder_steps < decoder.min() || r.decoder_steps > decoder.max())) {
        refuse(ia, "decoder_steps range");
      }
      if (r.min_steps > decoder.max()) refuse(ia, "min_steps > decoder max");
      if (r.decoder_steps != 0 && r.min_steps > r.decoder_steps) refuse(ia, "min_steps > decoder_steps");
      if (r.beam < 0 || r.beam > t.max_beam_size()) refuse(ia, "beam_size");
      if (r.max_out < 0 || r.max_out > t.max_output_tokens()) refuse(ia, "max_output_tokens");
      if (!(r.penalty >= 0 && r.penalty <= 4)) refuse(ia, "length_penalty");
    } else if (r.decoder_steps != 0) {
      refuse(ia, "decoder_steps on an encoder model");
    }
    byte_limit = core::TextByteLimit(c.max_sequence_length(), kMaxTextBytes);
    if (byte_limit != std::min<int64_t>(32 * int64_t{c.max_sequence_length()}, kMaxTextBytes)) {
      Fail("TextByteLimit is not 32 bytes per token within --max_text_bytes");
    }
    for (int i = 0; i < n; ++i) {
      if (!r.truncate && static_cast<int64_t>(r.inputs[i].size()) > byte_limit) refuse(ia, "input bytes");
      bounded.push_back(core::Utf8Prefix(r.inputs[i], static_cast<size_t>(byte_limit)));
    }
    // BoundInputBytes against the rule.
    google::protobuf::RepeatedPtrField<std::string> texts(r.inputs.begin(), r.inputs.end());
    auto bound = core::BoundInputBytes(texts, c.name(), c.max_sequence_length(), kMaxTextBytes, r.truncate);
    bool over = false;
    for (int i = 0; i < n; ++i) over |= static_cast<int64_t>(r.inputs[i].size()) > byte_limit;
    if (bound.ok() == (over && !r.truncate)) Fail("BoundInputBytes refused or accepted against the byte rule");
    if (bound.ok()) {
      for (int i = 0; i < n; ++i) {
        const auto& b = (*bound)[i];
        if (b.text.data() != texts[i].data() || b.text.size() != bounded[i].size() ||
            b.cut != (static_cast<int64_t>(r.inputs[i].size()) > byte_limit)) {
          Fail(absl::StrCat("BoundInputBytes cut inputs[", i, "] elsewhere than Utf8Prefix at the limit"));
        }
      }
    } else if (bound.status().code() != absl::StatusCode::kInvalidArgument || bound.status().message().empty()) {
      Fail("BoundInputBytes: " + bound.status().ToString());
    }
    // The tokenizer on what it would read (a few inputs per call, to keep the rate up).
    int tokenized = 0;
    for (int i = 0; i < n && tokenized < 3; ++i) {
      if (bounded[i].empty() || !valid[i]) continue;
      CheckTokenizer(*s, bounded[i]);
      ++tokenized;
    }
    // The token limit, only for a call that breaks no rule checked before tokenization.
    if (broken.empty()) {
      for (int i = 0; i < n; ++i) {
        auto encoded = s->tokenizer->Encode(bounded[i], std::numeric_limits<int>::max(), false);
        if (!encoded.ok()) Fail("a valid input did not tokenize: " + encoded.status().ToString());
        if (encoded->ids.empty()) refuse(ia, "input without tokens");
        if (!r.truncate && encoded->ids.size() > static_cast<size_t>(c.max_sequence_length())) {
          refuse(ia, "input tokens");
        }
      }
    }
  }
  std::set<absl::StatusCode> may_expire;  // accepted calls that may still miss their deadline
  if (r.has_deadline || (r.has_budget && r.on_miss == v1::REFUSE)) may_expire.insert(absl::StatusCode::kDeadlineExceeded);

  // The call.
  auto state = std::make_shared<CallState>();
  core::CallContext call;
  call.received = absl::Now();
  if (r.has_deadline) call.deadline = call.received + absl::Milliseconds(r.deadline_ms);
  // False for the tokenizer's check before each input, true from the next check on (where the
  // call would be queued).
  call.cancelled = [state, n] {
    std::lock_guard<std::mutex> lock(state->mu);
    return ++state->cancel_checks > n;
  };
  core::Completion done = [state](absl::Status status) {
    std::lock_guard<std::mutex> lock(state->mu);
    if (++state->done_calls > 1) Fail("the completion ran twice");
    state->status = std::move(status);
    state->cv.notify_all();
  };
  v1::ComputeOptions compute;
  compute.set_steps(r.steps);
  compute.set_decoder_steps(r.decoder_steps);
  compute.set_min_steps(r.min_steps);
  compute.set_solver(static_cast<v1::Solver>(r.solver));
  compute.set_on_budget_miss(static_cast<v1::BudgetMissPolicy>(r.on_miss));
  if (r.has_budget) {
    compute.mutable_latency_budget()->set_seconds(r.budget_s);
    compute.mutable_latency_budget()->set_nanos(r.budget_ns);
  }
  v1::ComputeReport report;
  // The requests and responses live until the completion ran: the core reads and fills them on
  // its own threads after the call returns.
  v1::EmbedRequest embed_request;
  v1::ClassifyRequest classify_request;
  v1::TranslateRequest translate_request;
  v1::EmbedResponse embed_response;
  v1::ClassifyResponse classify_response;
  v1::TranslateResponse translate_response;
  if (task == v1::EMBEDDING) {
    v1::EmbedRequest& request = embed_request;
    request.set_model(r.model);
    for (const auto& input : r.inputs) request.add_inputs(input);
    *request.mutable_compute() = compute;
    request.set_normalize(r.normalize);
    request.set_truncate(r.truncate);
    g_env.core->Embed(call, request, &embed_response, done);
  } else if (task == v1::CLASSIFICATION) {
    v1::ClassifyRequest& request = classify_request;
    request.set_model(r.model);
    for (const auto& input : r.inputs) request.add_inputs(input);
    *request.mutable_compute() = compute;
    request.set_top_k(r.top_k);
    request.set_truncate(r.truncate);
    g_env.core->Classify(call, request, &classify_response, done);
  } else {
    v1::TranslateRequest& request = translate_request;
    request.set_model(r.model);
    for (const auto& input : r.inputs) request.add_inputs(input);
    *request.mutable_compute() = compute;
    request.set_beam_size(r.beam);
    request.set_max_output_tokens(r.max_out);
    request.set_length_penalty(r.penalty);
    request.set_truncate(r.truncate);
    if (r.rpc == "stream") {
      g_env.core->TranslateStream(call, request, [state](v1::TranslateStreamResponse message) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->messages.push_back(std::move(message));
      }, done);
    } else {
      g_env.core->Translate(call, request, &translate_response, done);
    }
  }
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    // A queued call is dropped, cancelled, by the batcher before any compute.
    if (!state->cv.wait_for(lock, std::chrono::seconds(20), [&] { return state->done_calls > 0; })) {
      Fail("the completion never ran");
    }
    status = state->status;
  }
  const absl::StatusCode code = status.code();
  static const bool verbose = std::getenv("ODESERVE_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s\n  -> %s; rules broken: [%s]\n", g_description.c_str(), status.ToString().c_str(),
                 absl::StrJoin(broken, "; ").c_str());
  }
  if (!status.ok() && status.message().empty()) Fail("an error without a message: " + status.ToString());

  if (!broken.empty()) {
    if (!codes.count(code) && !may_expire.count(code)) {
      Fail(absl::StrCat("a request that breaks [", absl::StrJoin(broken, "; "), "] ended ", status.ToString()));
    }
  } else if (code != absl::StatusCode::kCancelled && code != absl::StatusCode::kOk && !may_expire.count(code) &&
             !OverWorkLimit(status)) {
    Fail("a request that breaks no rule was refused: " + status.ToString());
  }

  // The status as gRPC sends it.
  const grpc::Status mapped = odeserve::rpc::ToGrpcStatus(status);
  if (static_cast<int>(mapped.error_code()) != static_cast<int>(code)) Fail("ToGrpcStatus changed the code");
  if (mapped.error_message().size() > kMaxStatusBytes + std::string_view("...(truncated)").size()) {
    Fail("ToGrpcStatus left the message over its limit");
  }
  if (ReferenceValidUtf8(std::string(status.message())) && !ReferenceValidUtf8(mapped.error_message())) {
    Fail("ToGrpcStatus cut a UTF-8 message inside a character");
  }

  // An accepted call's report (filled before it would have been queued).
  if (code == absl::StatusCode::kCancelled && s != nullptr) {
    const v1::ComputeReport& rep = task == v1::EMBEDDING       ? embed_response.report()
                                   : task == v1::CLASSIFICATION ? classify_response.report()
                                                                : translate_response.report();
    const v1::ModelConfig& c = s->config;
    if (r.rpc != "stream") {
      if (rep.tokens() < n || rep.tokens() > n * c.max_sequence_length()) {
        Fail(absl::StrCat("report.tokens ", rep.tokens(), " outside [", n, ", ", n * c.max_sequence_length(), "]"));
      }
      if (rep.truncated_inputs() < 0 || rep.truncated_inputs() > n || (!r.truncate && rep.truncated_inputs() != 0)) {
        Fail(absl::StrCat("report.truncated_inputs ", rep.truncated_inputs()));
      }
      if (rep.steps() < c.steps().min() || rep.steps() > c.steps().max()) Fail(absl::StrCat("report.steps ", rep.steps(), " outside the model's range"));
      if (r.steps != 0 && (rep.steps() != r.steps || rep.step_choice() != v1::REQUESTED)) Fail("requested steps not run as asked");
      if (r.solver != 0 && rep.solver() != r.solver) Fail("requested solver not used");
      const int evaluations = rep.solver() == v1::HEUN ? 2 : rep.solver() == v1::RK4 ? 4 : 1;
      if (rep.field_evaluations() != rep.steps() * evaluations) Fail("field_evaluations != steps x evaluations per step");
      if ((rep.step_choice() == v1::BUDGET || rep.step_choice() == v1::BUDGET_FLOOR) && rep.steps() < r.min_steps) {
        Fail("a budget-driven choice under min_steps");
      }
      if (!r.has_budget && !r.has_deadline && rep.budget_set()) Fail("budget_set without a budget or deadline");
      if (translation) {
        const auto& decoder = c.translation().decoder_steps();
        if (rep.decoder_steps() < decoder.min() || rep.decoder_steps() > decoder.max()) Fail("report.decoder_steps outside the range");
        if (r.decoder_steps != 0 && rep.decoder_steps() != r.decoder_steps) Fail("requested decoder_steps not run as asked");
        if (rep.beam_size() != std::max(1, r.beam)) Fail("report.beam_size");
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (!status.ok() && !state->messages.empty()) Fail("a refused stream wrote messages");
  }
  return 0;
}
