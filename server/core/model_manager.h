#pragma once
// Loads every model of a repository once, validates it, calibrates its cost model, and keeps
// it for the server's lifetime. A model that fails to load is kept as FAILED with the reason;
// it never takes the others down. Lookups are lock-free after LoadAll().

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "odeserve/v1/inference.pb.h"
#include "odeserve/v1/model_config.pb.h"
#include "server/core/model_loader.h"
#include "server/metrics/metrics.h"

namespace odeserve::core {

struct ModelEntry {
  std::string name;
  std::filesystem::path dir;
  v1::ModelState state = v1::MODEL_STATE_UNSPECIFIED;
  std::string error;                    // FAILED: why
  std::unique_ptr<Servable> servable;   // READY only
};

struct ModelManagerOptions {
  std::filesystem::path repository;
  std::string device = "cpu";
  int compute_slots = 1;               // batches computing at once, across models
  bool calibrate = true;               // run the cost-model warm-up at load
  bool native_fields = true;           // evaluate declared standard blocks natively (--native_fields)
  metrics::Metrics* metrics = nullptr; // required
};

class ModelManager {
 public:
  explicit ModelManager(ModelManagerOptions options);
  ~ModelManager();

  /// Loads every model folder. Fails only if the repository itself cannot be read or the device
  /// does not exist; individual broken models are logged and kept as FAILED.
  absl::Status LoadAll();

  /// The entry for `name`, or null.
  const ModelEntry* Find(const std::string& name) const;
  std::vector<const ModelEntry*> List() const;
  std::vector<std::string> ReadyModelNames() const;

  /// Stops every scheduler after its queue drains.
  void StopAll();

  /// Metadata for ListModels/GetModel.
  static v1::ModelInfo Describe(const ModelEntry& entry);

 private:
  /// LoadServable with any exception it throws turned into an error status.
  absl::StatusOr<std::unique_ptr<Servable>> LoadModelGuarded(const std::filesystem::path& dir);

  ModelManagerOptions options_;
  std::shared_ptr<scheduler::ComputeGate> gate_;
  std::map<std::string, std::unique_ptr<ModelEntry>> models_;
};

}  // namespace odeserve::core
