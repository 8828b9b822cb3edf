#pragma once
// Reading and validating a model folder's config.pbtxt and quality profile. Every error names
// the file and the field, so an operator can fix a broken model without reading code.

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "odeserve/v1/model_config.pb.h"
#include "server/tokenizer/tokenizer.h"

namespace odeserve::repository {

inline constexpr char kConfigFileName[] = "config.pbtxt";
// Largest beam length penalty a config or a request may set: beyond it the longest hypothesis
// always wins, whatever its probability.
inline constexpr double kMaxLengthPenalty = 4.0;

/// Parses a text proto file into `message`; errors carry file:line:column.
absl::Status ReadTextProto(const std::filesystem::path& path, google::protobuf::Message* message);

/// Fills unset optional fields with their defaults (solvers, step range, batching, files).
void ApplyDefaults(v1::ModelConfig& config);

/// Checks every field of an (already defaulted) config against the contract and the files in
/// `model_dir`. The first problem is returned as InvalidArgument naming file and field.
absl::Status ValidateModelConfig(const v1::ModelConfig& config,
                                 const std::filesystem::path& model_dir);

/// Reads, defaults and validates `<model_dir>/config.pbtxt`.
absl::StatusOr<v1::ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir);

/// Reads and validates a quality profile against the config (solvers and steps it allows).
absl::StatusOr<v1::QualityProfile> LoadQualityProfile(const v1::ModelConfig& config,
                                                      const std::filesystem::path& model_dir);

/// Model folders (every non-hidden folder) directly under `root`, sorted by name.
absl::StatusOr<std::vector<std::filesystem::path>> ListModelFolders(
    const std::filesystem::path& root);

/// How the server tokenizes for this model (bos/eos, ids or hashed n-gram features).
tokenizer::TokenizerOptions TokenizerOptionsFor(const v1::ModelConfig& config);

/// Total size of the regular files in a folder.
int64_t FolderSizeBytes(const std::filesystem::path& dir);

}  // namespace odeserve::repository
