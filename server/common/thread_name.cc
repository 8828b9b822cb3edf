#include "server/common/thread_name.h"

#if defined(__linux__)
#include <pthread.h>
#endif

namespace odeserve {

std::string ThreadNameFor(std::string_view name) {
  if (name.size() <= kMaxThreadNameBytes) return std::string(name);
  size_t end = kMaxThreadNameBytes;
  // Back up over continuation bytes (10xxxxxx) to the start of the cut character.
  while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80) --end;
  return std::string(name.substr(0, end));
}

void NameCurrentThread(std::string_view name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), ThreadNameFor(name).c_str());
#endif
}

}  // namespace odeserve
