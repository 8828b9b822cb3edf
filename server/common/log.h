#pragma once
// Minimal structured logging to stderr (Debian's Abseil predates absl/log): one line per event,
// UTC timestamp, level, message. Thread-safe (one write per line).

#include <string_view>

namespace odeserve {

enum class LogLevel { kInfo, kWarning, kError };

void Log(LogLevel level, std::string_view message);
inline void LogInfo(std::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(std::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(std::string_view message) { Log(LogLevel::kError, message); }

}  // namespace odeserve
