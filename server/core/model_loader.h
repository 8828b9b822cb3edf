#pragma once
// Loading one model folder into a Servable, in the steps a load takes: config and quality
// profile (with the default steps they give), tokenizer, TorchScript module (device, precision,
// bfloat16 weights), executor, a probe run that checks the output width against the config,
// the scheduler, and the warm-up that calibrates its cost model. Every step's failure is an
// error status naming the file or field; the caller keeps such a model as FAILED.

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "odeserve/v1/inference.pb.h"
#include "odeserve/v1/model_config.pb.h"
#include "server/metrics/metrics.h"
#include "server/repository/default_steps.h"
#include "server/runtime/torch_model.h"
#include "server/scheduler/model_scheduler.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::core {

/// One loaded model: its config, tokenizer, LibTorch module and scheduler.
struct Servable {
  v1::ModelConfig config;
  v1::QualityProfile profile;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<runtime::TorchModel> model;
  std::unique_ptr<scheduler::ModelScheduler> scheduler;
  metrics::ModelMetrics* metrics = nullptr;
  int64_t size_bytes = 0;
  int output_width = 0;  // embedding dimension or number of labels, as the module produced it
  std::string device;
  // What runs: config.compute_precision, or FLOAT32 where bfloat16 would only be emulated.
  v1::ComputePrecision precision = v1::FLOAT32;
  // Weight tensors kept in bfloat16 for a bfloat16 model (TorchModel::StoreProductWeightsInBfloat16).
  int bfloat16_weight_tensors = 0;
  // The shared block evaluated natively (TorchModel::UseNativeField), and a translator's decoder
  // block (TorchModel::UseNativeDecoder); empty where the TorchScript one runs.
  std::string native_field;
  std::string native_decoder;
  // Batches run at token lengths that are multiples of this (config, or its default).
  int pad_to_multiple = 1;
  // Where config.steps().default_steps (and the decoder's) came from.
  repository::DefaultStepsSource default_steps_source = repository::DefaultStepsSource::kConfig;
};

struct ModelLoadOptions {
  std::string device = "cpu";
  bool calibrate = true;  // run the cost-model warm-up
  bool native_fields = true;  // evaluate a block the module declares natively (--native_fields)
  std::shared_ptr<scheduler::ComputeGate> gate;  // shared by every model's scheduler
};

/// Loads the model in `dir`. May throw (LibTorch); ModelManager turns that into an error.
absl::StatusOr<std::unique_ptr<Servable>> LoadServable(const std::filesystem::path& dir,
                                                       const ModelLoadOptions& options);

/// scheduler::Solver <-> v1::Solver.
scheduler::Solver ToSchedulerSolver(v1::Solver solver);
v1::Solver ToProtoSolver(scheduler::Solver solver);

}  // namespace odeserve::core
