#include "server/core/model_manager.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/log.h"
#include "server/common/status_macros.h"
#include "server/repository/model_config.h"

namespace odeserve::core {
namespace fs = std::filesystem;

namespace {

// The load log's name for how a shared block runs: "native pre_ln", or "torchscript".
std::string FieldLabel(const std::string& native) {
  return native.empty() ? std::string("torchscript") : absl::StrCat("native ", native);
}

}  // namespace

ModelManager::ModelManager(ModelManagerOptions options)
    : options_(std::move(options)),
      gate_(std::make_shared<scheduler::ComputeGate>(std::max(1, options_.compute_slots))) {}

ModelManager::~ModelManager() { StopAll(); }

absl::Status ModelManager::LoadAll() {
  // A device that does not exist fails every model the same way: refuse to start instead of
  // serving a repository of FAILED models.
  RETURN_IF_ERROR(runtime::ParseDevice(options_.device).status());
  ASSIGN_OR_RETURN(const std::vector<fs::path> folders,
                   repository::ListModelFolders(options_.repository));
  if (folders.empty()) {
    LogWarning(absl::StrCat("model repository ", options_.repository.string(), " holds no model folders"));
  }
  for (const auto& dir : folders) {
    auto entry = std::make_unique<ModelEntry>();
    entry->name = dir.filename().string();
    entry->dir = dir;
    const auto started = std::chrono::steady_clock::now();
    auto servable = LoadModelGuarded(dir);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (servable.ok()) {
      entry->state = v1::READY;
      entry->servable = *std::move(servable);
      const auto& config = entry->servable->config;
      entry->servable->metrics = options_.metrics->AddModel(
          entry->name, config.version(), v1::Task_Name(config.task()), config.family(),
          entry->servable->device, seconds);
      entry->servable->scheduler->SetObserver(entry->servable->metrics);
      LogInfo(absl::StrCat("model ", entry->name, " READY: task=", v1::Task_Name(config.task()),
                           " family=", config.family(), " L=", config.trained_depth(), " steps=[",
                           config.steps().min(), ",", config.steps().max(), "] params=",
                           entry->servable->model->parameter_count(), " device=",
                           entry->servable->device, " precision=",
                           v1::ComputePrecision_Name(entry->servable->precision),
                           entry->servable->bfloat16_weight_tensors > 0
                               ? absl::StrCat(" (", entry->servable->bfloat16_weight_tensors, " weights stored bfloat16)")
                               : "",
                           " field=", FieldLabel(entry->servable->native_field),
                           entry->servable->model->has_decoder()
                               ? absl::StrCat(" decoder_field=", FieldLabel(entry->servable->native_decoder))
                               : "",
                           " load=",
                           absl::StrFormat("%.2fs", seconds)));
    } else {
      entry->state = v1::FAILED;
      entry->error = std::string(servable.status().message());
      LogError(absl::StrCat("model ", entry->name, " FAILED to load: ", entry->error));
    }
    models_[entry->name] = std::move(entry);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Servable>> ModelManager::LoadModelGuarded(const fs::path& dir) {
  // One model's load must never take the server down: an exception (an allocation that a
  // config's sizes made impossible, a filesystem error) fails this model only.
  try {
    return LoadServable(dir, {options_.device, options_.calibrate, options_.native_fields, gate_});
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(dir.string(), ": load failed: ", e.what()));
  }
}

void ModelManager::StopAll() {
  for (auto& [name, entry] : models_) {
    if (entry->servable && entry->servable->scheduler) entry->servable->scheduler->Stop();
  }
}

const ModelEntry* ModelManager::Find(const std::string& name) const {
  const auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second.get();
}

std::vector<const ModelEntry*> ModelManager::List() const {
  std::vector<const ModelEntry*> entries;
  for (const auto& [name, entry] : models_) entries.push_back(entry.get());
  return entries;
}

std::vector<std::string> ModelManager::ReadyModelNames() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : models_) {
    if (entry->state == v1::READY) names.push_back(name);
  }
  return names;
}

v1::ModelInfo ModelManager::Describe(const ModelEntry& entry) {
  v1::ModelInfo info;
  info.set_name(entry.name);
  info.set_state(entry.state);
  info.set_error(entry.error);
  if (!entry.servable) return info;
  const Servable& s = *entry.servable;
  const v1::ModelConfig& c = s.config;
  info.set_task(c.task());
  info.set_version(c.version());
  info.set_family(c.family());
  info.set_description(c.description());
  *info.mutable_labels() = c.labels();
  *info.mutable_languages() = c.languages();
  info.set_embedding_dimension(c.task() == v1::EMBEDDING ? s.output_width : c.embedding_dimension());
  info.set_hidden_size(c.hidden_size());
  info.set_trained_depth(c.trained_depth());
  for (int solver : c.solvers()) info.add_solvers(static_cast<v1::Solver>(solver));
  info.set_min_steps(c.steps().min());
  info.set_max_steps(c.steps().max());
  info.set_default_steps(c.steps().default_steps());
  info.set_max_sequence_length(c.max_sequence_length());
  info.set_max_batch_size(c.batching().max_batch_size());
  info.set_max_inputs_per_request(c.max_inputs_per_request());
  *info.mutable_quality_profile() = s.profile.points();
  const auto snapshot = s.scheduler->cost_model().Snapshot();
  auto* cost = info.mutable_cost_model();
  cost->set_fixed_seconds(snapshot.coefficients.fixed);
  cost->set_per_row_seconds(snapshot.coefficients.per_row);
  cost->set_per_token_seconds(snapshot.coefficients.per_token);
  cost->set_per_token_evaluation_seconds(snapshot.coefficients.per_token_evaluation);
  cost->set_per_decoder_call_seconds(snapshot.coefficients.per_decoder_call);
  cost->set_per_decoder_row_evaluation_seconds(snapshot.coefficients.per_decoder_row_evaluation);
  cost->set_calibration_samples(snapshot.calibration_samples);
  cost->set_online_samples(snapshot.online_samples);
  cost->set_mean_abs_relative_error(snapshot.mean_abs_relative_error);
  cost->set_latency_inflation(s.scheduler->LatencyInflation());
  if (c.task() == v1::TRANSLATION) {
    const auto& t = c.translation();
    auto* translation = info.mutable_translation();
    translation->set_decoder_trained_depth(t.decoder_trained_depth());
    translation->set_min_decoder_steps(t.decoder_steps().min());
    translation->set_max_decoder_steps(t.decoder_steps().max());
    translation->set_default_decoder_steps(t.decoder_steps().default_steps());
    translation->set_max_output_tokens(t.max_output_tokens());
    translation->set_max_beam_size(t.max_beam_size());
    translation->set_length_penalty(t.length_penalty());
    translation->set_source_language(t.source_language());
    translation->set_target_language(t.target_language());
  }
  info.set_parameters(c.parameters() > 0 ? c.parameters() : s.model->parameter_count());
  info.set_size_bytes(s.size_bytes);
  info.set_device(s.device);
  info.set_compute_precision(s.precision);
  info.set_pad_to_multiple(s.pad_to_multiple);
  info.set_continuous_batching(s.scheduler->continuous_batching());
  info.set_quality_tolerance(c.quality_tolerance());
  info.set_quality_profile_measured(s.profile.points_size() > 0);
  info.set_default_steps_source(std::string(repository::DefaultStepsSourceName(s.default_steps_source)));
  return info;
}

}  // namespace odeserve::core
