// A preload library of the common kind that wraps a libc function and finds the real one with
// dlsym(RTLD_NEXT, ...) in its constructor. Listed after libumswap.so in LD_PRELOAD (as
// `umswap run` puts a user's own LD_PRELOAD), its constructor runs before libumswap's; the
// look-up must still find libc's getpid, not this library's. It says which on stderr.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

namespace {
pid_t (*g_real_getpid)() = nullptr;
}

extern "C" __attribute__((visibility("default"))) pid_t getpid() {
  return g_real_getpid ? g_real_getpid() : -1;
}

namespace {
__attribute__((constructor)) void find_real_getpid() {
  void* next = dlsym(RTLD_NEXT, "getpid");
  if (next == reinterpret_cast<void*>(&::getpid)) {
    std::fprintf(stderr, "rtld_next_interposer: dlsym(RTLD_NEXT, \"getpid\") found itself\n");
    return;  // calling it would recurse forever
  }
  g_real_getpid = reinterpret_cast<pid_t (*)()>(next);
}
}  // namespace
