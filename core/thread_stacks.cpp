#include "umswap/core/thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace umswap {
namespace {

std::atomic<int> g_fd{-1};
std::atomic<int> g_done{0};

// Async-signal-safe enough for a diagnostic: backtrace() was called once outside the handler
// (it loads libgcc then), backtrace_symbols_fd() does not allocate.
void on_signal(int) {
  const int fd = g_fd.load();
  char line[96];
  const long tid = syscall(SYS_gettid);
  char name[32] = "?";
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
  if (const int c = open(path, O_RDONLY); c >= 0) {
    const ssize_t n = read(c, name, sizeof name - 1);
    name[n > 0 ? n - 1 : 0] = '\0';  // the newline
    close(c);
  }
  const int n = std::snprintf(line, sizeof line, "umswap: thread %ld (%s):\n", tid, name);
  if (n > 0) (void)!write(fd, line, static_cast<size_t>(n));
  void* frames[48];
  const int depth = backtrace(frames, 48);
  backtrace_symbols_fd(frames, depth, fd);
  g_done.fetch_add(1);
}

}  // namespace

int dump_thread_stacks(int fd) {
  void* warm[2];
  backtrace(warm, 2);
  const int sig = SIGRTMAX - 3;
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  // Left in place afterwards: a thread that had the signal masked may take it later, and the
  // default action of a real-time signal ends the process.
  if (sigaction(sig, &sa, nullptr) != 0) return 0;
  g_fd.store(fd);
  const long self = syscall(SYS_gettid);
  int wrote = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(dir)) {
      const long tid = std::strtol(e->d_name, nullptr, 10);
      if (tid <= 0 || tid == self) continue;
      const int before = g_done.load();
      if (syscall(SYS_tgkill, getpid(), tid, sig) != 0) continue;
      for (int i = 0; i < 200 && g_done.load() == before; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (g_done.load() != before) ++wrote;
    }
    closedir(dir);
  }
  return wrote;
}

}  // namespace umswap
