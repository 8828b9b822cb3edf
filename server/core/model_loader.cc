#include "server/core/model_loader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/common/log.h"
#include "server/common/status_macros.h"
#include "server/repository/model_config.h"
#include "server/runtime/threading.h"
#include "server/runtime/torch_executor.h"
#include "server/runtime/translation_executor.h"

namespace odeserve::core {
namespace fs = std::filesystem;

scheduler::Solver ToSchedulerSolver(v1::Solver solver) {
  switch (solver) {
    case v1::HEUN: return scheduler::Solver::kHeun;
    case v1::RK4: return scheduler::Solver::kRk4;
    default: return scheduler::Solver::kEuler;
  }
}

v1::Solver ToProtoSolver(scheduler::Solver solver) {
  switch (solver) {
    case scheduler::Solver::kHeun: return v1::HEUN;
    case scheduler::Solver::kRk4: return v1::RK4;
    default: return v1::EULER;
  }
}

namespace {

// Default batching.pad_to_multiple of a model that runs bfloat16 on the CPU.
constexpr int kBfloat16PadMultiple = 16;

// Text used to build warm-up rows of realistic token statistics.
constexpr char kWarmupText[] =
    "library for reading and writing compressed archives with a command line tool and python "
    "bindings; includes documentation, examples and development headers for building programs ";

tokenizer::EncodedText WarmupRow(const tokenizer::Tokenizer& tok, int length) {
  std::string text;
  while (text.size() < static_cast<size_t>(length) * 8) text += kWarmupText;
  auto encoded = tok.Encode(text, length, /*truncate=*/true);
  return encoded.ok() ? *std::move(encoded) : tokenizer::EncodedText{};
}

std::vector<scheduler::StepCandidate> CandidatesFromProfile(const v1::ModelConfig& config,
                                                            const v1::QualityProfile& profile) {
  std::vector<scheduler::StepCandidate> candidates;
  for (const auto& point : profile.points()) {
    if (!profile.primary_metric().empty() && point.metric() != profile.primary_metric()) continue;
    if (point.steps() < config.steps().min() || point.steps() > config.steps().max()) continue;
    if (config.task() == v1::TRANSLATION) {
      // Step choice ranks greedy points (beam search multiplies the decoder's work, and a
      // caller who asks for beams gets the same step trade-off).
      const auto& range = config.translation().decoder_steps();
      if (point.decoder_steps() < range.min() || point.decoder_steps() > range.max()) continue;
      if (point.beam_size() > 1) continue;
    }
    candidates.push_back({ToSchedulerSolver(point.solver()), point.steps(), point.value(), point.decoder_steps()});
  }
  return candidates;
}

// The config, its quality profile, and the default steps that follow from both.
absl::Status ReadConfigAndProfile(const fs::path& dir, Servable& s) {
  ASSIGN_OR_RETURN(s.config, repository::LoadModelConfig(dir));
  ASSIGN_OR_RETURN(s.profile, repository::LoadQualityProfile(s.config, dir));
  const repository::DefaultSteps defaults = repository::ResolveDefaultSteps(s.config, s.profile);
  s.config.mutable_steps()->set_default_steps(defaults.steps);
  if (s.config.task() == v1::TRANSLATION) {
    s.config.mutable_translation()->mutable_decoder_steps()->set_default_steps(defaults.decoder_steps);
  }
  s.default_steps_source = defaults.source;
  return absl::OkStatus();
}

absl::Status LoadTokenizer(const fs::path& dir, Servable& s) {
  const v1::ModelConfig& config = s.config;
  const tokenizer::TokenizerOptions tok_options = repository::TokenizerOptionsFor(config);
  ASSIGN_OR_RETURN(s.tokenizer,
                   tokenizer::Tokenizer::Load((dir / config.tokenizer().model_file()).string(), tok_options));
  return absl::OkStatus();
}

// The TorchScript module on `device`, in the precision the CPU runs natively, checked against
// the tokenizer (translation) and with its product weights stored once in bfloat16.
absl::Status LoadModule(const fs::path& dir, const torch::Device& device, bool native_fields, Servable& s) {
  const v1::ModelConfig& config = s.config;
  s.device = device.str();
  const bool translation = config.task() == v1::TRANSLATION;
  s.precision = config.compute_precision();
  if (s.precision == v1::BFLOAT16 && !runtime::NativeBfloat16(device)) {
    // Emulated bfloat16 is slower than float32 and still rounds: run float32, say so.
    s.precision = v1::FLOAT32;
    LogWarning(absl::StrCat("model ", config.name(), ": compute_precision BFLOAT16 needs a CPU with "
                            "AVX512_BF16 or AMX-BF16 (or a GPU); this one has neither, running FLOAT32"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::TorchModel> model,
                   runtime::TorchModel::Load((dir / config.torchscript_file()).string(), device,
                                             config.trained_depth(),
                                             translation ? config.translation().decoder_trained_depth() : 0,
                                             s.precision == v1::BFLOAT16
                                                 ? runtime::ComputePrecision::kBFloat16
                                                 : runtime::ComputePrecision::kFloat32));
  if (translation && (model->bos_id() != s.tokenizer->bos_id() ||
                      model->eos_id() != s.tokenizer->eos_id() ||
                      model->vocab_size() != s.tokenizer->vocab_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        (dir / config.torchscript_file()).string(), ": decoder bos/eos/vocabulary (", model->bos_id(), "/",
        model->eos_id(), "/", model->vocab_size(), ") differ from ", config.tokenizer().model_file(), " (",
        s.tokenizer->bos_id(), "/", s.tokenizer->eos_id(), "/", s.tokenizer->vocab_size(), ")"));
  }
  if (translation && model->decoder_positions() < config.translation().max_output_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        (dir / config.torchscript_file()).string(), ": the decoder has ", model->decoder_positions(),
        " positions but config translation.max_output_tokens is ", config.translation().max_output_tokens()));
  }
  if (translation && model->logit_shortlist() > 0 &&
      model->logit_shortlist() < 2 * config.translation().max_beam_size()) {
    // A beam wider than K/2 can take a candidate outside the K exact logits (the contract).
    LogWarning(absl::StrCat("model ", config.name(), ": translation.max_beam_size ",
                            config.translation().max_beam_size(), " needs exact_logit_candidates >= ",
                            2 * config.translation().max_beam_size(), " but the model exports ",
                            model->logit_shortlist(), "; decoding with the exact float32 projection"));
    model->UseLogitShortlist(false);
  } else if (model->exported_logit_shortlist() > 0 && model->logit_shortlist() == 0) {
    LogWarning(absl::StrCat("model ", config.name(), ": its bfloat16 vocabulary shortlist (exact_logit_candidates ",
                            model->exported_logit_shortlist(), ") needs native bfloat16; decoding with the exact "
                            "float32 projection"));
  }
  if (s.precision == v1::BFLOAT16) {
    // Autocast would cast these at every call; cast once, the outputs are the same.
    ASSIGN_OR_RETURN(const runtime::TorchModel::StoredWeights stored, model->StoreProductWeightsInBfloat16());
    s.bfloat16_weight_tensors = stored.tensors;
  }
  if (native_fields) {
    // After the weights took their final dtype: the native blocks read them as they are.
    absl::StatusOr<std::string> native = model->UseNativeField();
    if (native.ok()) {
      s.native_field = *native;
    } else if (!absl::IsNotFound(native.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat((dir / config.torchscript_file()).string(), ": ", native.status().message()));
    }
    absl::StatusOr<std::string> decoder = model->UseNativeDecoder();
    if (decoder.ok()) {
      s.native_decoder = *decoder;
    } else if (!absl::IsNotFound(decoder.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat((dir / config.torchscript_file()).string(), ": ", decoder.status().message()));
    }
  }
  s.model = std::move(model);
  return absl::OkStatus();
}

std::shared_ptr<runtime::TorchExecutor> MakeExecutor(const torch::Device& device, Servable& s) {
  const v1::ModelConfig& config = s.config;
  const bool translation = config.task() == v1::TRANSLATION;
  const tokenizer::TokenizerOptions tok_options = repository::TokenizerOptionsFor(config);
  // bfloat16 kernels are compiled per shape on the CPU: padding lengths to multiples of 16
  // bounds the shapes (all compiled at load, below) at a little padded compute.
  s.pad_to_multiple = config.batching().pad_to_multiple();
  if (s.pad_to_multiple == 0) {
    s.pad_to_multiple = s.precision == v1::BFLOAT16 && device.is_cpu() ? kBfloat16PadMultiple : 1;
  }
  runtime::InputLayout layout;
  layout.pad_to_multiple = s.pad_to_multiple;
  layout.max_length = config.max_sequence_length();
  layout.hashed = tok_options.hashed;
  layout.feature_dim = tok_options.hash.dim;
  layout.pad_id = s.tokenizer->pad_id();
  if (translation) {
    return std::make_shared<runtime::TranslationExecutor>(s.model, layout, config.translation().max_output_tokens());
  }
  return std::make_shared<runtime::TorchExecutor>(s.model, layout);
}

// Runs the module once on a probe row: its output width must match what the config promises.
absl::Status ProbeOutputWidth(const fs::path& dir, runtime::TorchExecutor& executor, Servable& s) {
  const v1::ModelConfig& config = s.config;
  const bool translation = config.task() == v1::TRANSLATION;
  const tokenizer::EncodedText probe = WarmupRow(*s.tokenizer, std::min(8, config.max_sequence_length()));
  if (probe.ids.empty()) return absl::InvalidArgumentError(absl::StrCat(dir.string(), ": tokenizer produced no tokens for the probe text"));
  scheduler::ExecBatch probe_batch;
  const scheduler::DecodeSpec probe_decode{translation ? 1 : 0, 2, 2, 1};
  probe_batch.rows.push_back({&probe, 1, probe_decode});
  int width = -1;
  ASSIGN_OR_RETURN(auto probe_stats, executor.Run(probe_batch,
      [&](size_t, const scheduler::RowOutput& out) {
        if (out.partial) return;
        width = static_cast<int>(translation ? out.tokens.size() : out.values.size());
      },
      [](size_t) { return false; }, nullptr));
  (void)probe_stats;
  const fs::path model_file = dir / config.torchscript_file();
  if (config.task() == v1::CLASSIFICATION && width != config.labels_size()) {
    return absl::InvalidArgumentError(absl::StrCat(model_file.string(), ": output_stage produces ", width,
                                                   " logits but config.pbtxt lists ", config.labels_size(), " labels"));
  }
  if (config.task() == v1::EMBEDDING && width != config.embedding_dimension()) {
    return absl::InvalidArgumentError(absl::StrCat(model_file.string(), ": output_stage produces ", width,
                                                   "-dim embeddings but config.pbtxt says embedding_dimension ",
                                                   config.embedding_dimension()));
  }
  if (translation && (width < 0 || width > 2)) {
    return absl::InvalidArgumentError(absl::StrCat(model_file.string(), ": a 2-token probe translation returned ",
                                                   width, " tokens"));
  }
  s.output_width = translation ? 0 : width;

  return absl::OkStatus();
}

scheduler::SchedulerOptions SchedulerOptionsFor(const Servable& s, std::shared_ptr<scheduler::ComputeGate> gate) {
  const v1::ModelConfig& config = s.config;
  const bool translation = config.task() == v1::TRANSLATION;
  scheduler::SchedulerOptions sched;
  sched.model_name = config.name();
  sched.max_batch_size = config.batching().max_batch_size();
  sched.max_batch_tokens = config.batching().max_batch_tokens();
  sched.max_queue_delay = absl::Microseconds(config.batching().max_queue_delay_us());
  sched.queue_delay_when_idle = config.batching().queue_delay_when_idle();
  sched.max_queue_size = config.batching().max_queue_size();
  sched.pad_to_multiple = s.pad_to_multiple;
  sched.max_sequence_length = config.max_sequence_length();
  sched.continuous_batching = !translation && (!config.batching().has_continuous_batching() ||
                                               config.batching().continuous_batching());
  sched.min_steps = config.steps().min();
  sched.max_steps = config.steps().max();
  sched.default_steps = config.steps().default_steps();
  if (translation) {
    sched.min_decoder_steps = config.translation().decoder_steps().min();
    sched.max_decoder_steps = config.translation().decoder_steps().max();
    sched.default_decoder_steps = config.translation().decoder_steps().default_steps();
  }
  sched.solvers.clear();
  for (int solver : config.solvers()) sched.solvers.push_back(ToSchedulerSolver(static_cast<v1::Solver>(solver)));
  sched.candidates = CandidatesFromProfile(config, s.profile);
  sched.quality_tolerance = config.quality_tolerance();
  sched.gate = std::move(gate);
  return sched;
}

// Warm-up over the shapes that matter (batch size, padded length and field evaluations), and the
// cost model fitted to the measured ones.
absl::Status Calibrate(Servable& s) {
  const v1::ModelConfig& config = s.config;
  const bool translation = config.task() == v1::TRANSLATION;
  const int max_len = config.max_sequence_length();
  const int max_batch = config.batching().max_batch_size();
  std::vector<tokenizer::EncodedText> rows_short, rows_long;
  const int short_len = std::min(16, max_len);
  const int long_len = std::min(64, max_len);
  for (int i = 0; i < max_batch; ++i) {
    rows_short.push_back(WarmupRow(*s.tokenizer, short_len));
    rows_long.push_back(WarmupRow(*s.tokenizer, long_len));
  }
  const int depth = config.trained_depth();
  const int decoder_depth = translation ? config.translation().decoder_trained_depth() : 0;
  // Translation shapes also vary decoder steps, beams and output length.
  struct Shape { int rows; bool long_rows; int steps; scheduler::DecodeSpec decode; };
  const int mid = std::max(1, max_batch / 4);
  const auto dec = [&](int steps, int beam, int outputs) {
    // min = max output: calibration decodes exactly `outputs` positions, EOS or not.
    return translation ? scheduler::DecodeSpec{std::max(1, steps), beam, outputs, outputs} : scheduler::DecodeSpec{};
  };
  const std::vector<Shape> shapes = {
      {1, false, 1, dec(1, 1, 4)}, {1, false, 1, dec(1, 1, 4)},  // discarded: one-time costs
      {1, false, 1, dec(1, 1, 8)}, {1, false, depth, dec(decoder_depth, 1, 16)},
      {1, true, 1, dec(decoder_depth / 2, 4, 8)}, {1, true, depth, dec(1, 1, 16)},
      {mid, false, depth, dec(decoder_depth, 4, 8)}, {mid, true, 1, dec(decoder_depth / 2, 1, 16)},
      {max_batch, false, 1, dec(1, 1, 8)}, {max_batch, true, std::max(1, depth / 2), dec(decoder_depth, 1, 8)}};
  std::vector<scheduler::ExecBatch> warmup, calibration;
  for (size_t i = 0; i < shapes.size(); ++i) {
    scheduler::ExecBatch batch;
    const auto& rows = shapes[i].long_rows ? rows_long : rows_short;
    for (int r = 0; r < shapes[i].rows; ++r) batch.rows.push_back({&rows[r], shapes[i].steps, shapes[i].decode});
    (i < 2 ? warmup : calibration).push_back(std::move(batch));
  }
  // Every measured shape runs once unmeasured first: first calls of a shape pay allocator
  // and kernel-selection costs that steady-state traffic never sees.
  warmup.insert(warmup.end(), calibration.begin(), calibration.end());
  // A bfloat16 encoder compiles oneDNN kernels per (rows x padded tokens) shape. Padding
  // leaves few enough of them to compile all at load, so traffic never waits for a compile
  // and the kernel cache (and RSS) does not grow while serving.
  std::vector<std::vector<tokenizer::EncodedText>> bucket_rows;
  if (s.precision == v1::BFLOAT16 && s.pad_to_multiple > 1 && !translation) {
    for (int length = s.pad_to_multiple;; length += s.pad_to_multiple) {
      length = std::min(length, max_len);
      bucket_rows.emplace_back(max_batch, WarmupRow(*s.tokenizer, length));
      if (length == max_len) break;
    }
    for (const auto& rows : bucket_rows) {
      const int64_t length = static_cast<int64_t>(rows.front().ids.size());
      for (int count = 1; count <= max_batch && count * length <= config.batching().max_batch_tokens(); ++count) {
        scheduler::ExecBatch batch;
        for (int r = 0; r < count; ++r) batch.rows.push_back({&rows[r], 1, {}});
        // A busy server runs a large shape of short rows on one thread (LeaveCoresForRpc):
        // its kernels are compiled per thread count, so warm both.
        const int64_t tokens = int64_t{count} * length;
        const bool leave_cores = runtime::LeaveCoresForRpc(true, length);
        if (runtime::IntraOpThreadsFor(tokens, leave_cores) != runtime::IntraOpThreadsFor(tokens, false)) {
          scheduler::ExecBatch busy = batch;
          busy.arrivals_during_previous_batch = true;
          warmup.push_back(std::move(busy));
        }
        warmup.push_back(std::move(batch));
      }
    }
  }
  return s.scheduler->Calibrate(warmup, calibration);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Servable>> LoadServable(const fs::path& dir, const ModelLoadOptions& options) {
  auto servable = std::make_unique<Servable>();
  Servable& s = *servable;
  RETURN_IF_ERROR(ReadConfigAndProfile(dir, s));
  RETURN_IF_ERROR(LoadTokenizer(dir, s));
  ASSIGN_OR_RETURN(const torch::Device device, runtime::ParseDevice(options.device));
  RETURN_IF_ERROR(LoadModule(dir, device, options.native_fields, s));
  s.size_bytes = repository::FolderSizeBytes(dir);
  const std::shared_ptr<runtime::TorchExecutor> executor = MakeExecutor(device, s);
  RETURN_IF_ERROR(ProbeOutputWidth(dir, *executor, s));
  s.scheduler = std::make_unique<scheduler::ModelScheduler>(SchedulerOptionsFor(s, options.gate), executor);
  if (options.calibrate) RETURN_IF_ERROR(Calibrate(s));
  return servable;
}

}  // namespace odeserve::core
