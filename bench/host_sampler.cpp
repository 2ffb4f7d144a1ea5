// A CPU sampler to preload into a process (host_sampler.so): where the host's time goes when a
// program is host-bound under umswap (the GPU machines have no perf and no debugger). Set
// HOST_SAMPLER_OUT=PREFIX and LD_PRELOAD=.../host_sampler.so (umswap run keeps an LD_PRELOAD it
// finds, behind its own library); unset, the library does nothing.
//
// Every 1 ms of the process's CPU time (ITIMER_PROF; the kernel's tick makes it about 4 ms on the
// machines measured) the thread that was running records its call stack (glibc's backtrace(), the
// innermost 62 frames). At exit each process writes PREFIX.PID: one line a sample, the thread id
// then each frame as `module+0xOFFSET` (offset from the module's load address, which addr2line
// takes for a shared library), with `:symbol` where the dynamic symbol table names it. Time a
// thread spends blocked (a lock, a sleeping ioctl) is not sampled: compare the threads' CPU, not
// the wall time. Every process that loads it writes its own file (umswap's own process too: take
// the program's, the largest). bench/host_samples.py sums the samples by thread, module and
// function. At most 200,000 samples (the rest are counted as dropped), in about 100 MB reserved,
// touched as filled.
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kDepth = 64;
constexpr size_t kMaxSamples = 200000;

struct Sample {
  void* pc[kDepth];
  int frames;
  int tid;
};

Sample* g_samples = nullptr;
char g_prefix[4000];  // HOST_SAMPLER_OUT, as it was at the start
std::atomic<size_t> g_next{0};
bool g_running = false;

void on_tick(int, siginfo_t*, void*) {
  const size_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  Sample& s = g_samples[i];
  s.frames = backtrace(s.pc, kDepth);
  s.tid = static_cast<int>(syscall(SYS_gettid));
}

__attribute__((constructor)) void start() {
  const char* prefix = std::getenv("HOST_SAMPLER_OUT");
  if (prefix == nullptr || std::strlen(prefix) >= sizeof g_prefix) return;
  std::strcpy(g_prefix, prefix);
  void* memory = mmap(nullptr, kMaxSamples * sizeof(Sample), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return;
  g_samples = static_cast<Sample*>(memory);
  void* warm[4];
  backtrace(warm, 4);  // loads libgcc's unwinder now, not inside the first signal
  struct sigaction action {};
  action.sa_sigaction = on_tick;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGPROF, &action, nullptr) != 0) return;
  itimerval every{{0, 1000}, {0, 1000}};
  g_running = setitimer(ITIMER_PROF, &every, nullptr) == 0;
}

__attribute__((destructor)) void finish() {
  if (!g_running) return;
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  char path[4096];
  std::snprintf(path, sizeof path, "%s.%d", g_prefix, static_cast<int>(getpid()));
  FILE* out = std::fopen(path, "w");
  if (out == nullptr) return;
  const size_t taken = g_next.load();
  const size_t n = std::min(taken, kMaxSamples);
  for (size_t i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    std::fprintf(out, "%d", s.tid);
    // The first two frames are this handler and the kernel's signal trampoline.
    for (int k = 2; k < s.frames; ++k) {
      Dl_info info{};
      if (dladdr(s.pc[k], &info) != 0 && info.dli_fname != nullptr) {
        const char* slash = std::strrchr(info.dli_fname, '/');
        const char* module = slash ? slash + 1 : info.dli_fname;
        const auto offset = static_cast<unsigned long>(static_cast<char*>(s.pc[k]) -
                                                       static_cast<char*>(info.dli_fbase));
        std::fprintf(out, " %s+0x%lx", module, offset);
        if (info.dli_sname != nullptr) std::fprintf(out, ":%s", info.dli_sname);
      } else {
        std::fprintf(out, " ?+%p", s.pc[k]);
      }
    }
    std::fputc('\n', out);
  }
  if (taken > n) std::fprintf(out, "# dropped %zu samples\n", taken - n);
  std::fclose(out);
}

}  // namespace
