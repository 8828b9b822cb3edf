#include "server/repository/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "server/common/status_macros.h"

namespace odeserve::repository {
namespace fs = std::filesystem;
using v1::ModelConfig;

namespace {

constexpr int kDefaultMaxBatchSize = 32;
constexpr int kDefaultMaxBatchTokens = 8192;
constexpr int64_t kDefaultMaxQueueDelayUs = 2000;
constexpr int kDefaultMaxQueueSize = 1024;
constexpr int kDefaultMaxInputsPerRequest = 64;
constexpr int kDefaultMaxBeamSize = 8;
constexpr int kMaxSequenceLengthLimit = 8192;
constexpr int kMaxStepsLimit = 1024;
// Upper bounds that keep one mistyped number from exhausting memory at load: the hashed
// tokenizer precomputes vocabulary x dim features, and the warm-up builds max_batch_size rows.
constexpr int kMaxHashDim = 4096;
constexpr int kMaxBatchSizeLimit = 1024;
// A batching delay is a wait for company; past a second it only holds every call back.
constexpr int64_t kMaxQueueDelayUsLimit = 1000000;
constexpr int kMaxBatchTokensLimit = 1 << 20;
constexpr int kMaxInputsPerRequestLimit = 65536;

class CollectFirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

absl::Status FieldError(const fs::path& file, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", field, ": ", what));
}

absl::Status CheckFileField(const fs::path& config_file, const fs::path& model_dir,
                            const std::string& field, const std::string& value) {
  if (value.empty()) return FieldError(config_file, field, "is required");
  const fs::path path(value);
  if (path.is_absolute() || std::any_of(path.begin(), path.end(), [](const fs::path& part) { return part == ".."; })) {
    return FieldError(config_file, field, absl::StrCat("'", value, "' must be a plain file name inside the model folder"));
  }
  std::error_code ec;
  if (!fs::is_regular_file(model_dir / value, ec)) {
    return FieldError(config_file, field, absl::StrCat("file '", (model_dir / value).string(), "' does not exist"));
  }
  return absl::OkStatus();
}

absl::Status CheckStepRange(const fs::path& file, const std::string& field,
                            const v1::StepRange& range) {
  if (range.min() < 1) return FieldError(file, field + ".min", absl::StrCat("must be >= 1, got ", range.min()));
  if (range.max() < range.min()) {
    return FieldError(file, field + ".max", absl::StrCat("must be >= min (", range.min(), "), got ", range.max()));
  }
  if (range.max() > kMaxStepsLimit) {
    return FieldError(file, field + ".max", absl::StrCat("must be <= ", kMaxStepsLimit, ", got ", range.max()));
  }
  // 0: follow the quality profile (ResolveDefaultSteps, once the profile is loaded).
  if (range.default_steps() != 0 && (range.default_steps() < range.min() || range.default_steps() > range.max())) {
    return FieldError(file, field + ".default_steps",
                      absl::StrCat("must lie in [", range.min(), ", ", range.max(), "], got ", range.default_steps()));
  }
  return absl::OkStatus();
}

void DefaultStepRange(v1::StepRange& range, int trained_depth) {
  if (!range.has_min()) range.set_min(1);
  if (!range.has_max()) range.set_max(std::max(trained_depth, range.min()));
}

}  // namespace

absl::Status ReadTextProto(const fs::path& path, google::protobuf::Message* message) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(buffer.str(), message)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ":", errors.error().empty() ? " parse error" : errors.error()));
  }
  return absl::OkStatus();
}

void ApplyDefaults(ModelConfig& config) {
  if (config.torchscript_file().empty()) config.set_torchscript_file("model.pt");
  auto* tokenizer = config.mutable_tokenizer();
  if (tokenizer->model_file().empty()) tokenizer->set_model_file("tokenizer.model");
  if (config.solvers().empty()) config.add_solvers(v1::EULER);
  DefaultStepRange(*config.mutable_steps(), config.trained_depth());
  if (config.task() == v1::TRANSLATION) {
    auto* translation = config.mutable_translation();
    DefaultStepRange(*translation->mutable_decoder_steps(), translation->decoder_trained_depth());
    if (translation->max_beam_size() == 0) translation->set_max_beam_size(kDefaultMaxBeamSize);
    if (translation->length_penalty() == 0) translation->set_length_penalty(1.0);
    if (translation->max_output_tokens() == 0) translation->set_max_output_tokens(config.max_sequence_length());
    if (translation->expected_output_ratio() == 0) translation->set_expected_output_ratio(1.0);
  }
  auto* batching = config.mutable_batching();
  if (batching->max_batch_size() == 0) batching->set_max_batch_size(kDefaultMaxBatchSize);
  if (batching->max_batch_tokens() == 0) batching->set_max_batch_tokens(kDefaultMaxBatchTokens);
  // Present even when 0: no wait for company is a setting, not a request for the default.
  if (!batching->has_max_queue_delay_us()) batching->set_max_queue_delay_us(kDefaultMaxQueueDelayUs);
  if (batching->max_queue_size() == 0) batching->set_max_queue_size(kDefaultMaxQueueSize);
  if (config.max_inputs_per_request() == 0) config.set_max_inputs_per_request(kDefaultMaxInputsPerRequest);
  if (config.version().empty()) config.set_version("1");
}

absl::Status ValidateModelConfig(const ModelConfig& config, const fs::path& model_dir) {
  const fs::path file = model_dir / kConfigFileName;
  const std::string folder = model_dir.filename().string();
  if (config.name().empty()) return FieldError(file, "name", "is required");
  if (config.name() != folder) {
    return FieldError(file, "name", absl::StrCat("'", config.name(), "' must equal the folder name '", folder, "'"));
  }
  if (config.task() == v1::TASK_UNSPECIFIED || !v1::Task_IsValid(config.task())) {
    return FieldError(file, "task", "must be EMBEDDING, CLASSIFICATION or TRANSLATION");
  }
  RETURN_IF_ERROR(CheckFileField(file, model_dir, "torchscript_file", config.torchscript_file()));
  if (!v1::ComputePrecision_IsValid(config.compute_precision())) {
    return FieldError(file, "compute_precision", "must be FLOAT32 or BFLOAT16");
  }
  if (!(config.quality_tolerance() >= 0 && std::isfinite(config.quality_tolerance()))) {
    return FieldError(file, "quality_tolerance",
                      absl::StrCat("must be a finite number >= 0, got ", config.quality_tolerance()));
  }
  const auto& tokenizer = config.tokenizer();
  RETURN_IF_ERROR(CheckFileField(file, model_dir, "tokenizer.model_file", tokenizer.model_file()));
  if (tokenizer.input_kind() == v1::INPUT_KIND_UNSPECIFIED || !v1::InputKind_IsValid(tokenizer.input_kind())) {
    return FieldError(file, "tokenizer.input_kind", "must be TOKEN_IDS or HASHED_NGRAMS");
  }
  if (tokenizer.input_kind() == v1::HASHED_NGRAMS) {
    if (tokenizer.hash().dim() <= 0 || tokenizer.hash().dim() > kMaxHashDim) {
      return FieldError(file, "tokenizer.hash.dim",
                        absl::StrCat("must be in [1, ", kMaxHashDim, "] for HASHED_NGRAMS, got ", tokenizer.hash().dim()));
    }
    if (tokenizer.hash().ngram_orders().empty()) {
      return FieldError(file, "tokenizer.hash.ngram_orders", "must list at least one n-gram order");
    }
    for (int order : tokenizer.hash().ngram_orders()) {
      if (order < 1 || order > 16) return FieldError(file, "tokenizer.hash.ngram_orders", absl::StrCat("order ", order, " is outside [1, 16]"));
    }
  }
  const int specials = (tokenizer.add_bos() ? 1 : 0) + (tokenizer.add_eos() ? 1 : 0);
  if (config.max_sequence_length() <= specials || config.max_sequence_length() > kMaxSequenceLengthLimit) {
    return FieldError(file, "max_sequence_length",
                      absl::StrCat("must lie in [", specials + 1, ", ", kMaxSequenceLengthLimit, "], got ", config.max_sequence_length()));
  }
  if (config.trained_depth() <= 0) {
    return FieldError(file, "trained_depth", absl::StrCat("must be > 0, got ", config.trained_depth()));
  }
  RETURN_IF_ERROR(CheckStepRange(file, "steps", config.steps()));
  std::set<int> solvers;
  for (int solver : config.solvers()) {
    if (solver == v1::SOLVER_UNSPECIFIED || !v1::Solver_IsValid(solver)) {
      return FieldError(file, "solvers", absl::StrCat("unknown solver value ", solver));
    }
    if (!solvers.insert(solver).second) {
      return FieldError(file, "solvers", absl::StrCat("lists ", v1::Solver_Name(solver), " twice"));
    }
  }
  switch (config.task()) {
    case v1::CLASSIFICATION: {
      if (config.labels_size() < 2) return FieldError(file, "labels", "a classifier needs at least 2 labels");
      std::set<std::string> seen;
      for (const auto& label : config.labels()) {
        if (label.empty()) return FieldError(file, "labels", "a label is empty");
        if (!seen.insert(label).second) return FieldError(file, "labels", absl::StrCat("label '", label, "' appears twice"));
      }
      break;
    }
    case v1::EMBEDDING:
      if (config.embedding_dimension() <= 0) {
        return FieldError(file, "embedding_dimension", absl::StrCat("must be > 0 for EMBEDDING, got ", config.embedding_dimension()));
      }
      break;
    case v1::TRANSLATION:
      if (config.translation().decoder_trained_depth() <= 0) {
        return FieldError(file, "translation.decoder_trained_depth", "must be > 0 for TRANSLATION");
      }
      RETURN_IF_ERROR(CheckStepRange(file, "translation.decoder_steps", config.translation().decoder_steps()));
      if (config.translation().max_beam_size() < 1 || config.translation().max_beam_size() > 64) {
        return FieldError(file, "translation.max_beam_size",
                          absl::StrCat("must be in [1, 64], got ", config.translation().max_beam_size()));
      }
      if (!(config.translation().length_penalty() > 0 && config.translation().length_penalty() <= kMaxLengthPenalty)) {
        return FieldError(file, "translation.length_penalty",
                          absl::StrCat("must be in (0, ", kMaxLengthPenalty, "] (0 = 1), got ",
                                       config.translation().length_penalty()));
      }
      if (config.translation().max_output_tokens() < 2) {
        return FieldError(file, "translation.max_output_tokens",
                          absl::StrCat("must be >= 2, got ", config.translation().max_output_tokens()));
      }
      if (!(config.translation().expected_output_ratio() > 0 && std::isfinite(config.translation().expected_output_ratio()))) {
        return FieldError(file, "translation.expected_output_ratio",
                          absl::StrCat("must be a finite number > 0, got ", config.translation().expected_output_ratio()));
      }
      break;
    default:
      break;
  }
  const auto& batching = config.batching();
  if (batching.max_batch_size() < 1 || batching.max_batch_size() > kMaxBatchSizeLimit) {
    return FieldError(file, "batching.max_batch_size",
                      absl::StrCat("must be in [1, ", kMaxBatchSizeLimit, "], got ", batching.max_batch_size()));
  }
  if (batching.max_batch_tokens() < config.max_sequence_length() || batching.max_batch_tokens() > kMaxBatchTokensLimit) {
    return FieldError(file, "batching.max_batch_tokens",
                      absl::StrCat("must be in [max_sequence_length (", config.max_sequence_length(), ") so one full input fits, ",
                                   kMaxBatchTokensLimit, "], got ", batching.max_batch_tokens()));
  }
  if (batching.max_queue_delay_us() < 0 || batching.max_queue_delay_us() > kMaxQueueDelayUsLimit) {
    return FieldError(file, "batching.max_queue_delay_us",
                      absl::StrCat("must be in [0, ", kMaxQueueDelayUsLimit, "], got ", batching.max_queue_delay_us()));
  }
  if (batching.max_queue_size() < 1) return FieldError(file, "batching.max_queue_size", absl::StrCat("must be >= 1, got ", batching.max_queue_size()));
  if (batching.pad_to_multiple() < 0 || batching.pad_to_multiple() > config.max_sequence_length()) {
    return FieldError(file, "batching.pad_to_multiple",
                      absl::StrCat("must be in [0, max_sequence_length = ", config.max_sequence_length(),
                                   "], got ", batching.pad_to_multiple()));
  }
  if (config.task() == v1::TRANSLATION && batching.has_continuous_batching() && batching.continuous_batching()) {
    return FieldError(file, "batching.continuous_batching",
                      "is not supported for TRANSLATION models (a batch's encoder and decoder run as one unit)");
  }
  if (config.max_inputs_per_request() < 1 || config.max_inputs_per_request() > kMaxInputsPerRequestLimit) {
    return FieldError(file, "max_inputs_per_request",
                      absl::StrCat("must be in [1, ", kMaxInputsPerRequestLimit, "], got ", config.max_inputs_per_request()));
  }
  if (!config.quality_profile_file().empty()) {
    RETURN_IF_ERROR(CheckFileField(file, model_dir, "quality_profile_file", config.quality_profile_file()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> LoadModelConfig(const fs::path& model_dir) {
  ModelConfig config;
  RETURN_IF_ERROR(ReadTextProto(model_dir / kConfigFileName, &config));
  ApplyDefaults(config);
  RETURN_IF_ERROR(ValidateModelConfig(config, model_dir));
  return config;
}

absl::StatusOr<v1::QualityProfile> LoadQualityProfile(const ModelConfig& config, const fs::path& model_dir) {
  v1::QualityProfile profile;
  if (config.quality_profile_file().empty()) return profile;
  const fs::path file = model_dir / config.quality_profile_file();
  RETURN_IF_ERROR(ReadTextProto(file, &profile));
  const std::set<int> allowed(config.solvers().begin(), config.solvers().end());
  for (int i = 0; i < profile.points_size(); ++i) {
    const auto& point = profile.points(i);
    const std::string field = absl::StrCat("points[", i, "]");
    if (!allowed.count(point.solver())) {
      return FieldError(file, field + ".solver", absl::StrCat(v1::Solver_Name(point.solver()), " is not in the config's solvers"));
    }
    if (point.steps() < 1) return FieldError(file, field + ".steps", absl::StrCat("must be >= 1, got ", point.steps()));
    if (point.metric().empty()) return FieldError(file, field + ".metric", "is required");
  }
  return profile;
}

absl::StatusOr<std::vector<fs::path>> ListModelFolders(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("model repository '", root.string(), "' is not a directory"));
  }
  std::vector<fs::path> folders;
  // error_code forms throughout: a symlink loop or an unreadable entry must not throw out of
  // start-up. An entry whose type cannot be read is listed, so that its load fails, loudly.
  fs::directory_iterator it(root, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().rfind('.', 0) == 0) continue;  // hidden
    std::error_code type_error;
    const bool directory = it->is_directory(type_error);
    // Every visible folder is a model; one without config.pbtxt fails its own load, loudly.
    if (directory || type_error) folders.push_back(it->path());
  }
  if (ec) return absl::InternalError(absl::StrCat("listing '", root.string(), "': ", ec.message()));
  std::sort(folders.begin(), folders.end());
  return folders;
}

tokenizer::TokenizerOptions TokenizerOptionsFor(const ModelConfig& config) {
  const auto& t = config.tokenizer();
  tokenizer::TokenizerOptions options;
  options.add_bos = t.add_bos();
  options.add_eos = t.add_eos();
  options.hashed = t.input_kind() == v1::HASHED_NGRAMS;
  options.hash.dim = t.hash().dim();
  options.hash.seed = t.hash().seed();
  options.hash.orders.assign(t.hash().ngram_orders().begin(), t.hash().ngram_orders().end());
  const auto& n = t.normalization();
  options.normalization.collapse_whitespace = n.collapse_whitespace();
  options.normalization.normalize_quotes = n.normalize_quotes();
  options.normalization.strip_accents = n.strip_accents();
  options.normalization.lowercase = n.lowercase();
  options.split_digit_comma = n.split_digit_comma();
  if (t.has_bos_id()) options.bos_id = t.bos_id();
  if (t.has_eos_id()) options.eos_id = t.eos_id();
  return options;
}

int64_t FolderSizeBytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  // A size for the metrics, never a reason to fail a load: what cannot be read is not counted.
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code entry_error;
    if (!it->is_regular_file(entry_error)) continue;
    const uintmax_t size = it->file_size(entry_error);
    if (!entry_error) total += static_cast<int64_t>(size);
  }
  return total;
}

}  // namespace odeserve::repository
