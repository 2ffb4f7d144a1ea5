#include "umswap/core/thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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

// What /proc says a thread is blocked in: "futex UADDR OP, words: w0 w1 ..." for a futex (a lock,
// a condition or a rwlock: ten ints from UADDR-8 on, read without faulting, so the futex word is
// the third), the raw line for another call. A glibc mutex waits on its first word and keeps its
// owner's TID 8 bytes on (the fifth printed); a rwlock keeps its writer's 24 bytes from its start.
void write_blocked_call(int fd, long tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
  char text[256] = {};
  const int c = open(path, O_RDONLY);
  if (c < 0) return;
  const ssize_t n = read(c, text, sizeof text - 1);
  close(c);
  if (n <= 0) return;
  text[n] = '\0';
  if (char* nl = std::strchr(text, '\n')) *nl = '\0';
  char line[320];
  long number = -1;
  unsigned long uaddr = 0, op = 0;
  int len = 0;
  if (std::sscanf(text, "%ld %lx %lx", &number, &uaddr, &op) == 3 && number == SYS_futex &&
      uaddr >= 8) {
    int words[10] = {};
    iovec local{words, sizeof words}, remote{reinterpret_cast<void*>(uaddr - 8), sizeof words};
    const bool got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == sizeof words;
    len = std::snprintf(line, sizeof line, "umswap: thread %ld waits in futex 0x%lx op %lu", tid,
                        uaddr, op & 0x7f);
    if (got) {
      len += std::snprintf(line + len, sizeof line - len, ", words from 0x%lx:", uaddr - 8);
      for (int w : words) len += std::snprintf(line + len, sizeof line - len, " %d", w);
    }
    len += std::snprintf(line + len, sizeof line - len, "\n");
  } else {
    len = std::snprintf(line, sizeof line, "umswap: thread %ld in syscall: %s\n", tid, text);
  }
  if (len > 0) (void)!write(fd, line, static_cast<size_t>(std::min<int>(len, sizeof line - 1)));
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
      write_blocked_call(fd, tid);  // before the signal, which interrupts the call
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
