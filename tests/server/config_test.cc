// repository/: config.pbtxt validation (one mutated field per case, each refused with a message
// that names the file and the field), defaults, quality profiles and the repository listing.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include "server/repository/model_config.h"

namespace odeserve::repository {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kRepository = ODESERVE_TEST_REPOSITORY;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// A private copy of a tiny model folder (same folder name, so `name` still matches).
class ModelCopy {
 public:
  explicit ModelCopy(const std::string& model) {
    static std::atomic<int> counter{0};
    root_ = fs::temp_directory_path() /
            ("odeserve-config-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(root_);
    dir_ = root_ / model;
    fs::copy(kRepository / model, dir_, fs::copy_options::recursive);
  }
  ~ModelCopy() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const fs::path& dir() const { return dir_; }
  fs::path config_file() const { return dir_ / kConfigFileName; }

  v1::ModelConfig ReadRaw() const {
    v1::ModelConfig config;
    const absl::Status status = ReadTextProto(config_file(), &config);
    EXPECT_TRUE(status.ok()) << status;
    return config;
  }
  void Write(const v1::ModelConfig& config) const {
    std::string text;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(config, &text));
    WriteFile(config_file(), text);
  }

 private:
  fs::path root_;
  fs::path dir_;
};

TEST(LoadModelConfig, EveryTinyModelLoads) {
  for (const std::string model :
       {"tiny-albert", "tiny-sharebert", "tiny-eelbert", "tiny-classifier", "tiny-lexical", "tiny-probe",
        "tiny-translator"}) {
    ModelCopy copy(model);
    auto config = LoadModelConfig(copy.dir());
    ASSERT_TRUE(config.ok()) << model << ": " << config.status();
    EXPECT_EQ(config->name(), model);
    EXPECT_EQ(config->trained_depth(), 4);
    EXPECT_EQ(config->max_sequence_length(), 32);
    EXPECT_EQ(config->steps().min(), 1);
    EXPECT_EQ(config->steps().max(), 8);
    EXPECT_EQ(config->steps().default_steps(), 4);
    EXPECT_EQ(config->batching().max_batch_size(), 16);
    EXPECT_EQ(config->batching().max_batch_tokens(), 512);
    EXPECT_EQ(config->batching().max_queue_size(), 64);
    const bool classifier = model == "tiny-classifier" || model == "tiny-lexical" || model == "tiny-probe";
    EXPECT_EQ(config->task(), classifier                  ? v1::CLASSIFICATION
                              : model == "tiny-translator" ? v1::TRANSLATION
                                                           : v1::EMBEDDING);
    EXPECT_EQ(config->tokenizer().input_kind(),
              model == "tiny-eelbert" ? v1::HASHED_NGRAMS : v1::TOKEN_IDS);
    auto profile = LoadQualityProfile(*config, copy.dir());
    ASSERT_TRUE(profile.ok()) << model << ": " << profile.status();
    if (model == "tiny-translator") {
      EXPECT_EQ(profile->points_size(), 9);  // Euler, encoder x decoder steps in {1, 2, 4}
      EXPECT_EQ(config->translation().decoder_trained_depth(), 4);
      EXPECT_EQ(config->translation().max_beam_size(), 4);
    } else {
      EXPECT_EQ(profile->points_size(), 24);  // 3 solvers x steps 1..8
    }
  }
}

TEST(LoadModelConfig, DefaultsFillUnsetFields) {
  ModelCopy copy("tiny-albert");
  v1::ModelConfig minimal;
  minimal.set_name("tiny-albert");
  minimal.set_task(v1::EMBEDDING);
  minimal.mutable_tokenizer()->set_input_kind(v1::TOKEN_IDS);
  minimal.mutable_tokenizer()->set_add_bos(true);
  minimal.mutable_tokenizer()->set_add_eos(true);
  minimal.set_max_sequence_length(32);
  minimal.set_trained_depth(6);
  minimal.set_embedding_dimension(16);
  copy.Write(minimal);
  auto config = LoadModelConfig(copy.dir());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->torchscript_file(), "model.pt");
  EXPECT_EQ(config->tokenizer().model_file(), "tokenizer.model");
  ASSERT_EQ(config->solvers_size(), 1);
  EXPECT_EQ(config->solvers(0), v1::EULER);
  EXPECT_EQ(config->steps().min(), 1);
  EXPECT_EQ(config->steps().max(), 6);
  // Unset: follows the quality profile once it is loaded (ResolveDefaultSteps), else L.
  EXPECT_EQ(config->steps().default_steps(), 0);
  EXPECT_EQ(config->batching().max_batch_size(), 32);
  EXPECT_EQ(config->batching().max_batch_tokens(), 8192);
  EXPECT_EQ(config->batching().max_queue_delay_us(), 2000);
  EXPECT_EQ(config->batching().max_queue_size(), 1024);
  EXPECT_EQ(config->max_inputs_per_request(), 64);
  EXPECT_EQ(config->version(), "1");
  // No quality file: an empty profile, not an error.
  auto profile = LoadQualityProfile(*config, copy.dir());
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->points_size(), 0);
}

// 0 is a setting (start every batch at once), not "unset": it once silently meant 2 ms.
TEST(LoadModelConfig, ZeroQueueDelayIsKept) {
  ModelCopy copy("tiny-albert");
  v1::ModelConfig config = copy.ReadRaw();
  config.mutable_batching()->set_max_queue_delay_us(0);
  copy.Write(config);
  auto loaded = LoadModelConfig(copy.dir());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->batching().has_max_queue_delay_us());
  EXPECT_EQ(loaded->batching().max_queue_delay_us(), 0);
}

TEST(LoadModelConfig, MissingConfigIsNotFoundNamingTheFile) {
  ModelCopy copy("tiny-albert");
  fs::remove(copy.config_file());
  auto config = LoadModelConfig(copy.dir());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(copy.config_file().string()));
}

TEST(LoadModelConfig, SyntaxErrorNamesFileLineAndColumn) {
  ModelCopy copy("tiny-albert");
  std::string text = ReadFile(copy.config_file());
  if (!text.empty() && text.back() != '\n') text += '\n';
  const int line = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  text += "steps { min: 1 max: }\n";
  WriteFile(copy.config_file(), text);
  auto config = LoadModelConfig(copy.dir());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr(copy.config_file().string() + ":" + std::to_string(line) + ":"));
}

// ---- One mutated field per case --------------------------------------------------------------

struct BadConfigCase {
  std::string name;   // test name suffix
  std::string model;  // which tiny model folder to start from
  std::function<void(v1::ModelConfig&, const fs::path& dir)> mutate;
  std::string field;  // must appear in the message
  std::string detail; // also must appear in the message ("" = nothing more)
};

std::ostream& operator<<(std::ostream& os, const BadConfigCase& c) { return os << c.name; }

class BadConfig : public ::testing::TestWithParam<BadConfigCase> {};

TEST_P(BadConfig, IsInvalidArgumentNamingFileAndField) {
  const BadConfigCase& c = GetParam();
  ModelCopy copy(c.model);
  v1::ModelConfig config = copy.ReadRaw();
  c.mutate(config, copy.dir());
  copy.Write(config);
  auto loaded = LoadModelConfig(copy.dir());
  ASSERT_FALSE(loaded.ok()) << c.name << " was accepted";
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  const std::string message(loaded.status().message());
  EXPECT_THAT(message, HasSubstr(copy.config_file().string() + ": " + c.field + ": "));
  if (!c.detail.empty()) {
    EXPECT_THAT(message, HasSubstr(c.detail));
  }
}

using Config = v1::ModelConfig;
using Dir = const fs::path&;

INSTANTIATE_TEST_SUITE_P(
    OneField, BadConfig,
    ::testing::Values(
        BadConfigCase{"NameMismatch", "tiny-albert", [](Config& c, Dir) { c.set_name("other-name"); },
                      "name", "'other-name' must equal the folder name 'tiny-albert'"},
        BadConfigCase{"NameEmpty", "tiny-albert", [](Config& c, Dir) { c.clear_name(); }, "name", "is required"},
        BadConfigCase{"ComputePrecisionUnknown", "tiny-albert",
                      [](Config& c, Dir) { c.set_compute_precision(static_cast<v1::ComputePrecision>(7)); },
                      "compute_precision", "FLOAT32 or BFLOAT16"},
        BadConfigCase{"QualityToleranceNegative", "tiny-albert",
                      [](Config& c, Dir) { c.set_quality_tolerance(-0.01); }, "quality_tolerance",
                      "must be a finite number >= 0, got -0.01"},
        BadConfigCase{"QualityToleranceNotANumber", "tiny-albert",
                      [](Config& c, Dir) { c.set_quality_tolerance(std::nan("")); }, "quality_tolerance",
                      "must be a finite number >= 0, got nan"},
        BadConfigCase{"TaskUnspecified", "tiny-albert",
                      [](Config& c, Dir) { c.set_task(v1::TASK_UNSPECIFIED); }, "task", ""},
        BadConfigCase{"TorchscriptFileMissing", "tiny-albert",
                      [](Config&, Dir d) { fs::remove(d / "model.pt"); }, "torchscript_file",
                      "does not exist"},
        BadConfigCase{"TorchscriptFileOutsideFolder", "tiny-albert",
                      [](Config& c, Dir) { c.set_torchscript_file("../tiny-sharebert/model.pt"); },
                      "torchscript_file", "must be a plain file name"},
        BadConfigCase{"TorchscriptFileAbsolute", "tiny-albert",
                      [](Config& c, Dir) { c.set_torchscript_file("/etc/hostname"); },
                      "torchscript_file", "must be a plain file name"},
        BadConfigCase{"TokenizerFileMissing", "tiny-albert",
                      [](Config&, Dir d) { fs::remove(d / "tokenizer.model"); }, "tokenizer.model_file",
                      "tokenizer.model' does not exist"},
        BadConfigCase{"InputKindUnspecified", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_tokenizer()->set_input_kind(v1::INPUT_KIND_UNSPECIFIED); },
                      "tokenizer.input_kind", ""},
        BadConfigCase{"HashedDimZero", "tiny-eelbert",
                      [](Config& c, Dir) { c.mutable_tokenizer()->mutable_hash()->set_dim(0); },
                      "tokenizer.hash.dim", "HASHED_NGRAMS"},
        // The tokenizer precomputes vocabulary x dim features at load: a typo must not abort it.
        BadConfigCase{"HashedDimHuge", "tiny-eelbert",
                      [](Config& c, Dir) { c.mutable_tokenizer()->mutable_hash()->set_dim(1000000000); },
                      "tokenizer.hash.dim", "must be in [1, 4096] for HASHED_NGRAMS, got 1000000000"},
        BadConfigCase{"HashedNoOrders", "tiny-eelbert",
                      [](Config& c, Dir) { c.mutable_tokenizer()->mutable_hash()->clear_ngram_orders(); },
                      "tokenizer.hash.ngram_orders", ""},
        BadConfigCase{"HashedOrderTooLong", "tiny-eelbert",
                      [](Config& c, Dir) { c.mutable_tokenizer()->mutable_hash()->add_ngram_orders(17); },
                      "tokenizer.hash.ngram_orders", "order 17"},
        BadConfigCase{"MaxSequenceLengthZero", "tiny-albert",
                      [](Config& c, Dir) { c.set_max_sequence_length(0); }, "max_sequence_length", "got 0"},
        BadConfigCase{"MaxSequenceLengthOnlySpecials", "tiny-albert",
                      [](Config& c, Dir) { c.set_max_sequence_length(2); }, "max_sequence_length", "got 2"},
        BadConfigCase{"TrainedDepthZero", "tiny-albert", [](Config& c, Dir) { c.set_trained_depth(0); },
                      "trained_depth", "got 0"},
        BadConfigCase{"StepsMinNegative", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_steps()->set_min(-1); }, "steps.min", "got -1"},
        BadConfigCase{"StepsMinExplicitlyZero", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_steps()->set_min(0); }, "steps.min", "must be >= 1, got 0"},
        BadConfigCase{"DecoderStepsMaxExplicitlyZero", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->mutable_decoder_steps()->set_max(0); },
                      "translation.decoder_steps.max", "got 0"},
        BadConfigCase{"StepsMaxBelowMin", "tiny-albert",
                      [](Config& c, Dir) {
                        c.mutable_steps()->set_min(5);
                        c.mutable_steps()->set_max(3);
                      },
                      "steps.max", "got 3"},
        BadConfigCase{"StepsMaxTooLarge", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_steps()->set_max(5000); }, "steps.max", "got 5000"},
        BadConfigCase{"DefaultStepsOutsideRange", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_steps()->set_default_steps(9); },
                      "steps.default_steps", "[1, 8], got 9"},
        BadConfigCase{"DuplicateSolver", "tiny-albert", [](Config& c, Dir) { c.add_solvers(v1::HEUN); },
                      "solvers", "HEUN twice"},
        BadConfigCase{"ClassifierOneLabel", "tiny-classifier",
                      [](Config& c, Dir) {
                        c.clear_labels();
                        c.add_labels("only");
                      },
                      "labels", "at least 2 labels"},
        BadConfigCase{"DuplicateLabel", "tiny-classifier", [](Config& c, Dir) { c.add_labels("games"); },
                      "labels", "'games' appears twice"},
        BadConfigCase{"EmptyLabel", "tiny-classifier", [](Config& c, Dir) { c.add_labels(""); }, "labels",
                      "empty"},
        BadConfigCase{"EmbeddingDimensionZero", "tiny-albert",
                      [](Config& c, Dir) { c.set_embedding_dimension(0); }, "embedding_dimension", "got 0"},
        BadConfigCase{"MaxBatchTokensBelowSequenceLength", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_batch_tokens(16); },
                      "batching.max_batch_tokens", "got 16"},
        BadConfigCase{"MaxBatchSizeNegative", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_batch_size(-1); },
                      "batching.max_batch_size", "got -1"},
        BadConfigCase{"MaxBatchSizeHuge", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_batch_size(1000000); },
                      "batching.max_batch_size", "must be in [1, 1024], got 1000000"},
        BadConfigCase{"MaxBatchSizeOverTheLoadBound", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_batch_size(4096); },
                      "batching.max_batch_size", "must be in [1, 1024], got 4096"},
        BadConfigCase{"MaxQueueDelayOverASecond", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_queue_delay_us(2000000000); },
                      "batching.max_queue_delay_us", "must be in [0, 1000000], got 2000000000"},
        BadConfigCase{"MaxBatchTokensHuge", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_batch_tokens(2000000000); },
                      "batching.max_batch_tokens", "got 2000000000"},
        BadConfigCase{"MaxQueueSizeNegative", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_queue_size(-3); },
                      "batching.max_queue_size", "got -3"},
        BadConfigCase{"PadToMultipleNegative", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_pad_to_multiple(-2); },
                      "batching.pad_to_multiple", "got -2"},
        BadConfigCase{"PadToMultipleAboveSequenceLength", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_pad_to_multiple(1000); },
                      "batching.pad_to_multiple", "must be in [0, max_sequence_length = 32], got 1000"},
        BadConfigCase{"MaxQueueDelayNegative", "tiny-albert",
                      [](Config& c, Dir) { c.mutable_batching()->set_max_queue_delay_us(-1); },
                      "batching.max_queue_delay_us", ""},
        BadConfigCase{"MaxInputsPerRequestNegative", "tiny-albert",
                      [](Config& c, Dir) { c.set_max_inputs_per_request(-1); }, "max_inputs_per_request", ""},
        BadConfigCase{"MaxInputsPerRequestHuge", "tiny-albert",
                      [](Config& c, Dir) { c.set_max_inputs_per_request(100000000); }, "max_inputs_per_request",
                      "must be in [1, 65536], got 100000000"},
        BadConfigCase{"ContinuousBatchingOnATranslator", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_batching()->set_continuous_batching(true); },
                      "batching.continuous_batching", "not supported for TRANSLATION models"},
        BadConfigCase{"DecoderDepthZero", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_decoder_trained_depth(0); },
                      "translation.decoder_trained_depth", "must be > 0"},
        BadConfigCase{"DecoderStepsAboveLimit", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->mutable_decoder_steps()->set_max(5000); },
                      "translation.decoder_steps.max", "must be <= 1024, got 5000"},
        BadConfigCase{"LengthPenaltyNegative", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_length_penalty(-1); },
                      "translation.length_penalty", "must be in (0, 4] (0 = 1), got -1"},
        BadConfigCase{"LengthPenaltyTooLarge", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_length_penalty(9); },
                      "translation.length_penalty", "got 9"},
        BadConfigCase{"BeamTooWide", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_max_beam_size(100); },
                      "translation.max_beam_size", "[1, 64]"},
        BadConfigCase{"OutputLimitTooSmall", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_max_output_tokens(1); },
                      "translation.max_output_tokens", ">= 2"},
        BadConfigCase{"OutputRatioNegative", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_expected_output_ratio(-1); },
                      "translation.expected_output_ratio", "> 0"},
        // NaN passes a plain "<= 0" test and then turns into an undefined int cast.
        BadConfigCase{"OutputRatioNotANumber", "tiny-translator",
                      [](Config& c, Dir) { c.mutable_translation()->set_expected_output_ratio(std::nan("")); },
                      "translation.expected_output_ratio", "must be a finite number > 0, got nan"},
        BadConfigCase{"OutputRatioInfinite", "tiny-translator",
                      [](Config& c, Dir) {
                        c.mutable_translation()->set_expected_output_ratio(std::numeric_limits<float>::infinity());
                      },
                      "translation.expected_output_ratio", "got inf"},
        BadConfigCase{"TorchscriptFileInAParentFolder", "tiny-albert",
                      [](Config& c, Dir) { c.set_torchscript_file("sub/../../tiny-sharebert/model.pt"); },
                      "torchscript_file", "must be a plain file name"},
        BadConfigCase{"QualityFileMissing", "tiny-albert",
                      [](Config&, Dir d) { fs::remove(d / "quality.pbtxt"); }, "quality_profile_file",
                      "quality.pbtxt' does not exist"},
        BadConfigCase{"QualityFileNamedWrong", "tiny-albert",
                      [](Config& c, Dir) { c.set_quality_profile_file("nope.pbtxt"); }, "quality_profile_file",
                      "nope.pbtxt' does not exist"}),
    [](const ::testing::TestParamInfo<BadConfigCase>& info) { return info.param.name; });

TEST(LoadModelConfig, UnknownFieldIsRefusedNamingIt) {
  ModelCopy copy("tiny-albert");
  WriteFile(copy.config_file(), ReadFile(copy.config_file()) + "\ntrained_dept: 4\n");
  auto config = LoadModelConfig(copy.dir());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(copy.config_file().string()));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("trained_dept"));
}

// ---- Quality profiles ------------------------------------------------------------------------

TEST(LoadQualityProfile, SolverNotInConfigIsRefused) {
  ModelCopy copy("tiny-albert");
  v1::ModelConfig raw = copy.ReadRaw();
  raw.clear_solvers();
  raw.add_solvers(v1::EULER);
  copy.Write(raw);
  auto config = LoadModelConfig(copy.dir());
  ASSERT_TRUE(config.ok()) << config.status();

  v1::QualityProfile profile;
  ASSERT_TRUE(ReadTextProto(copy.dir() / "quality.pbtxt", &profile).ok());
  int first_other = -1;
  for (int i = 0; i < profile.points_size() && first_other < 0; ++i) {
    if (profile.points(i).solver() != v1::EULER) first_other = i;
  }
  ASSERT_GE(first_other, 0);
  const std::string solver = v1::Solver_Name(profile.points(first_other).solver());

  auto loaded = LoadQualityProfile(*config, copy.dir());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr((copy.dir() / "quality.pbtxt").string() + ": points[" +
                        std::to_string(first_other) + "].solver: " + solver +
                        " is not in the config's solvers"));
}

TEST(LoadQualityProfile, BadPointsAreRefused) {
  ModelCopy copy("tiny-albert");
  auto config = LoadModelConfig(copy.dir());
  ASSERT_TRUE(config.ok()) << config.status();
  const fs::path file = copy.dir() / "quality.pbtxt";

  WriteFile(file, "primary_metric: \"m\"\npoints { solver: EULER steps: 0 metric: \"m\" value: 1 }\n");
  auto loaded = LoadQualityProfile(*config, copy.dir());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(file.string() + ": points[0].steps: "));

  WriteFile(file, "points { solver: EULER steps: 2 metric: \"m\" value: 1 }\n"
                  "points { solver: EULER steps: 3 value: 1 }\n");
  loaded = LoadQualityProfile(*config, copy.dir());
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(file.string() + ": points[1].metric: "));

  WriteFile(file, "points { solver: EULER steps: }\n");
  loaded = LoadQualityProfile(*config, copy.dir());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(file.string() + ":1:"));
}

// ---- Repository listing ----------------------------------------------------------------------

TEST(ListModelFolders, ListsVisibleFoldersSorted) {
  const fs::path root = fs::temp_directory_path() / ("odeserve-list-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* folder : {"zeta", "alpha", ".hidden", "mid-model", ".git"}) fs::create_directories(root / folder);
  WriteFile(root / "README.txt", "not a model");
  WriteFile(root / "alpha" / "config.pbtxt", "");
  auto folders = ListModelFolders(root);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_EQ(*folders, (std::vector<fs::path>{root / "alpha", root / "mid-model", root / "zeta"}));
  fs::remove_all(root);
}

// A symlink loop in the repository used to throw std::filesystem_error out of start-up (the
// range-for's throwing is_directory). It is listed, so that its load fails with the reason.
TEST(ListModelFolders, ASymlinkLoopIsListedNotThrown) {
  const fs::path root = fs::temp_directory_path() / ("odeserve-loop-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "good");
  fs::create_symlink(root / "loop-b", root / "loop-a");
  fs::create_symlink(root / "loop-a", root / "loop-b");
  auto folders = ListModelFolders(root);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_EQ(*folders, (std::vector<fs::path>{root / "good", root / "loop-a", root / "loop-b"}));
  auto config = LoadModelConfig(root / "loop-a");
  EXPECT_FALSE(config.ok());
  fs::remove_all(root);
}

TEST(ListModelFolders, TestRepositoryHoldsTheSevenTinyModels) {
  auto folders = ListModelFolders(kRepository);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_EQ(*folders, (std::vector<fs::path>{kRepository / "tiny-albert", kRepository / "tiny-classifier",
                                             kRepository / "tiny-eelbert", kRepository / "tiny-lexical",
                                             kRepository / "tiny-probe", kRepository / "tiny-sharebert",
                                             kRepository / "tiny-translator"}));
}

TEST(ListModelFolders, MissingRepositoryIsNotFound) {
  const fs::path missing = fs::temp_directory_path() / "odeserve-no-such-repository";
  auto folders = ListModelFolders(missing);
  ASSERT_FALSE(folders.ok());
  EXPECT_EQ(folders.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(folders.status().message()), HasSubstr(missing.string()));

  // A file is not a repository either.
  ModelCopy copy("tiny-albert");
  folders = ListModelFolders(copy.config_file());
  ASSERT_FALSE(folders.ok());
  EXPECT_EQ(folders.status().code(), absl::StatusCode::kNotFound);
}

TEST(FolderSizeBytes, SumsRegularFiles) {
  const fs::path root = fs::temp_directory_path() / ("odeserve-size-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "sub");
  WriteFile(root / "a", std::string(100, 'x'));
  WriteFile(root / "sub" / "b", std::string(23, 'y'));
  EXPECT_EQ(FolderSizeBytes(root), 123);
  // What cannot be read is not counted, and never throws (it used to, out of the model's load).
  fs::create_symlink(root / "loop-b", root / "sub" / "loop-a");
  fs::create_symlink(root / "sub" / "loop-a", root / "loop-b");
  EXPECT_EQ(FolderSizeBytes(root), 123);
  fs::remove_all(root);
}

TEST(CheckFileFields, ANameWithTwoDotsIsAPlainName) {
  ModelCopy copy("tiny-albert");
  fs::rename(copy.dir() / "model.pt", copy.dir() / "model..v2.pt");
  v1::ModelConfig config = copy.ReadRaw();
  config.set_torchscript_file("model..v2.pt");
  copy.Write(config);
  auto loaded = LoadModelConfig(copy.dir());
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

}  // namespace
}  // namespace odeserve::repository
