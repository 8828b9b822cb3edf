#include "server/tokenizer/sentencepiece_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

// GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang 14 only answers __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ODESERVE_SANITIZED_DLOPEN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ODESERVE_SANITIZED_DLOPEN 1
#endif
#endif

namespace odeserve::tokenizer {
namespace {

using LoadFn = SentencePieceBackend* (*)(const char*, std::string*);

// Candidate locations of the shim, most specific first.
std::vector<std::string> ShimCandidates() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ODESERVE_SENTENCEPIECE_SHIM")) candidates.push_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back((exe.parent_path() / ODESERVE_SHIM_NAME).string());
    candidates.push_back((exe.parent_path().parent_path() / "lib/odeserve" / ODESERVE_SHIM_NAME).string());
  }
  candidates.push_back(ODESERVE_SHIM_INSTALL_PATH);
  candidates.push_back(ODESERVE_SHIM_BUILD_PATH);
  return candidates;
}

LoadFn LoadShim(std::string* error) {
  static std::once_flag once;
  static LoadFn load = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
    std::string tried;
    for (const auto& path : ShimCandidates()) {
      if (access(path.c_str(), R_OK) != 0) continue;
      constexpr int kFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#ifdef ODESERVE_SANITIZED_DLOPEN
      // The sanitizers' dlopen interceptor dies on RTLD_DEEPBIND (google/sanitizers#611: a
      // deep-bound library may bind malloc & co. to libc's instead of the sanitizer's). Built
      // with -fsanitize, the shim lists the sanitizer runtime as its first dependency, so it heads
      // the deep-bind scope and those symbols still resolve to the runtime's. dlmopen into the
      // base namespace is dlopen without that interceptor.
      void* handle = dlmopen(LM_ID_BASE, path.c_str(), kFlags);
#else
      void* handle = dlopen(path.c_str(), kFlags);
#endif
      if (handle == nullptr) {
        tried += std::string(" ") + dlerror();
        continue;
      }
      load = reinterpret_cast<LoadFn>(dlsym(handle, "odeserve_load_sentencepiece"));
      if (load != nullptr) return;
      tried += " " + path + ": no odeserve_load_sentencepiece";
    }
    load_error = "cannot load " ODESERVE_SHIM_NAME " (set ODESERVE_SENTENCEPIECE_SHIM):" + tried;
  });
  if (load == nullptr) *error = load_error;
  return load;
}

}  // namespace

std::unique_ptr<SentencePieceBackend> SentencePieceBackend::Load(const std::string& path,
                                                                 std::string* error) {
  LoadFn load = LoadShim(error);
  if (load == nullptr) return nullptr;
  return std::unique_ptr<SentencePieceBackend>(load(path.c_str(), error));
}

}  // namespace odeserve::tokenizer
