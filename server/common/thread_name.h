#pragma once
// Names the server's own long-lived threads, so that `top -H`, `perf report --sort comm`, gdb
// and /proc/PID/task/*/comm say which model's batcher (or the metrics endpoint) uses the CPU.

#include <string>
#include <string_view>

namespace odeserve {

/// Linux keeps at most this many bytes of a thread's name.
inline constexpr size_t kMaxThreadNameBytes = 15;

/// `name` cut to kMaxThreadNameBytes, never inside a UTF-8 sequence.
std::string ThreadNameFor(std::string_view name);

/// Names the calling thread ThreadNameFor(name). Best effort: a no-op where unsupported.
void NameCurrentThread(std::string_view name);

}  // namespace odeserve
