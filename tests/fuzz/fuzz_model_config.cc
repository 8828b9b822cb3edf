// (b) config.pbtxt and quality.pbtxt through the loader (server/repository/model_config.h,
// default_steps.h): arbitrary bytes as the files of a model folder. The input is the
// config.pbtxt; if it holds a line "#%quality" the bytes after that line are the quality.pbtxt
// (else the folder keeps a real one, models/repository/embed-eelbert's). The folder is
// $TMPDIR/odeserve-fuzz-config-*/a/fuzz-model and also holds an (empty) model.pt and
// tokenizer.model.
//
// ODESERVE_FUZZ_VERBOSE=1 prints what the loader said of each input.
//
// Checks, besides the sanitizers:
//  - a refused config or profile is an error status whose message is not empty and starts with
//    the path of the file at fault (every loader error names the file, then the field);
//  - an accepted config passes ValidateModelConfig again, is a fixed point of ApplyDefaults, and
//    survives a text-format round trip: printed and loaded again from another folder it is the
//    same message;
//  - TokenizerOptionsFor(accepted config) is what Tokenizer::Load accepts (hashed: dim > 0 and
//    n-gram orders);
//  - an accepted profile's points use the config's solvers, steps >= 1 and a metric;
//  - ResolveDefaultSteps(accepted config, accepted profile) lies in the step ranges, keeps a
//    default the config fixes, and a profile-sourced default is one of the profile's Euler points.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "google/protobuf/text_format.h"
#include "server/repository/default_steps.h"
#include "server/repository/model_config.h"

namespace fs = std::filesystem;
namespace v1 = odeserve::v1;
namespace repo = odeserve::repository;

namespace {

constexpr std::string_view kQualityMarker = "#%quality\n";
constexpr char kFolder[] = "fuzz-model";

fs::path g_dir;           // the model folder the fuzzer writes
fs::path g_roundtrip_dir; // a second one for the round trip
std::string g_default_quality;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_model_config: %s\n", what.c_str());
  std::abort();
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) Fail("cannot write " + path.string());
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

fs::path MakeFolder(const fs::path& root) {
  const fs::path dir = root / kFolder;
  fs::create_directories(dir);
  WriteFile(dir / "model.pt", "");
  WriteFile(dir / "tokenizer.model", "");
  return dir;
}

void CheckError(const absl::Status& status, const fs::path& file, const char* what) {
  if (status.ok()) Fail(std::string(what) + ": OK where an error was expected");
  if (status.message().empty()) Fail(std::string(what) + ": error without a message");
  if (!absl::StartsWith(status.message(), file.string())) {
    Fail(std::string(what) + ": error does not name " + file.string() + ": " + std::string(status.message()));
  }
}

bool InRange(int steps, const v1::StepRange& range) { return steps >= range.min() && steps <= range.max(); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Under $TMPDIR (run.sh points it at its own work folder, removed at the end).
  std::string pattern = (fs::temp_directory_path() / "odeserve-fuzz-config-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) Fail("mkdtemp failed");
  g_dir = MakeFolder(fs::path(pattern) / "a");
  g_roundtrip_dir = MakeFolder(fs::path(pattern) / "b");
  const fs::path source = fs::path(__FILE__).parent_path() / "../../models/repository/embed-eelbert/quality.pbtxt";
  const char* override_dir = std::getenv("ODESERVE_FUZZ_REPOSITORY");
  g_default_quality = ReadFile(override_dir ? fs::path(override_dir) / "embed-eelbert/quality.pbtxt" : source);
  if (g_default_quality.empty()) Fail("cannot read " + source.string());
  WriteFile(g_dir / "quality.pbtxt", g_default_quality);
  WriteFile(g_roundtrip_dir / "quality.pbtxt", g_default_quality);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string_view data(reinterpret_cast<const char*>(bytes), size);
  std::string_view config_text = data;
  std::string_view quality_text = g_default_quality;
  if (const size_t at = data.find(kQualityMarker); at != std::string_view::npos) {
    config_text = data.substr(0, at);
    quality_text = data.substr(at + kQualityMarker.size());
  }
  const fs::path config_file = g_dir / repo::kConfigFileName;
  WriteFile(config_file, config_text);
  WriteFile(g_dir / "quality.pbtxt", quality_text);

  static const bool verbose = std::getenv("ODESERVE_FUZZ_VERBOSE") != nullptr;
  auto config_or = repo::LoadModelConfig(g_dir);
  if (verbose) std::fprintf(stderr, "config: %s\n", config_or.status().ToString().c_str());
  if (!config_or.ok()) {
    CheckError(config_or.status(), config_file, "LoadModelConfig");
    return 0;
  }
  const v1::ModelConfig& config = *config_or;

  // The loader's own checks hold for what it returns.
  if (auto status = repo::ValidateModelConfig(config, g_dir); !status.ok()) {
    Fail("an accepted config fails ValidateModelConfig: " + std::string(status.message()));
  }
  v1::ModelConfig defaulted = config;
  repo::ApplyDefaults(defaulted);
  std::string before, after;
  config.SerializeToString(&before);
  defaulted.SerializeToString(&after);
  if (before != after) Fail("ApplyDefaults changed an accepted config");

  // Text-format round trip through the loader.
  std::string printed;
  if (!google::protobuf::TextFormat::PrintToString(config, &printed)) Fail("cannot print an accepted config");
  WriteFile(g_roundtrip_dir / repo::kConfigFileName, printed);
  // (Both folders hold the same file names, so the file fields check the same way.)
  auto reloaded = repo::LoadModelConfig(g_roundtrip_dir);
  if (!reloaded.ok()) Fail("an accepted config, printed, is refused: " + std::string(reloaded.status().message()));
  std::string again;
  reloaded->SerializeToString(&again);
  if (again != before) Fail("an accepted config changed in a text-format round trip:\n" + printed);

  const auto options = repo::TokenizerOptionsFor(config);
  if (options.hashed && (options.hash.dim <= 0 || options.hash.orders.empty())) {
    Fail("an accepted HASHED_NGRAMS config gives options Tokenizer::Load refuses");
  }

  auto profile_or = repo::LoadQualityProfile(config, g_dir);
  if (verbose) std::fprintf(stderr, "profile: %s\n", profile_or.status().ToString().c_str());
  if (!profile_or.ok()) {
    CheckError(profile_or.status(), g_dir / config.quality_profile_file(), "LoadQualityProfile");
    return 0;
  }
  const v1::QualityProfile& profile = *profile_or;
  for (const auto& point : profile.points()) {
    bool allowed = false;
    for (int solver : config.solvers()) allowed |= solver == point.solver();
    if (!allowed || point.steps() < 1 || point.metric().empty()) Fail("an accepted profile has a point its checks refuse");
  }

  const repo::DefaultSteps defaults = repo::ResolveDefaultSteps(config, profile);
  const bool translation = config.task() == v1::TRANSLATION;
  if (!InRange(defaults.steps, config.steps())) Fail("default steps outside the config's step range");
  if (config.steps().default_steps() != 0 && defaults.steps != config.steps().default_steps()) {
    Fail("ResolveDefaultSteps dropped the config's steps.default_steps");
  }
  if (translation) {
    const auto& decoder = config.translation().decoder_steps();
    if (!InRange(defaults.decoder_steps, decoder)) Fail("default decoder steps outside the decoder step range");
    if (decoder.default_steps() != 0 && defaults.decoder_steps != decoder.default_steps()) {
      Fail("ResolveDefaultSteps dropped the config's translation.decoder_steps.default_steps");
    }
  } else if (defaults.decoder_steps != 0) {
    Fail("decoder steps for a model without a decoder");
  }
  if (defaults.source == repo::DefaultStepsSource::kProfile) {
    bool found = false;
    for (const auto& point : profile.points()) {
      found |= point.solver() == v1::EULER && point.steps() == defaults.steps &&
               (!translation || point.decoder_steps() == defaults.decoder_steps);
    }
    if (!found) Fail("a profile-sourced default that is no Euler point of the profile");
  }
  return 0;
}
