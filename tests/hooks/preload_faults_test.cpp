// libumswap.so in a real process, without a GPU: fault_probe runs with the library preloaded,
// a fake libcuda.so.1 (fake_cuda.cpp) and a fake CUPTI (fake_cupti.cpp). Faults are injected at
// the library's exit-time writers (stats and trace paths that cannot be written, a file-size limit
// that fails or kills the writer half-way) and at start-up (no CUPTI, CUPTI held by a profiler, a
// forked child). In every case the program's exit code and output must be its own, the library
// must say what went wrong in one warning naming the path or cause, and no partial file may
// appear under a final name.
#include "umswap/core/stats_file.h"
#include "umswap/core/trace_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace umswap {
namespace {

namespace fs = std::filesystem;
using Env = std::vector<std::pair<std::string, std::string>>;

struct ProbeRun {
  pid_t pid = -1;
  int exit_code = -1;  // -N: killed by signal N
  std::string out;
  std::string err;
};

// How the probe's process is started: a file-size limit (bytes; 0: none) and what SIGXFSZ does.
struct Limits {
  rlim_t file_size = 0;
  bool die_on_sigxfsz = false;  // default action (the process is killed) instead of ignored
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Under AddressSanitizer (the asan preset) the library is not preloaded but dlopen'ed by the
// probe once it runs (UMSWAP_TEST_DLOPEN): a preloaded libumswap.so interposes dlsym, and the ASan
// runtime calls dlsym(RTLD_NEXT, ...) while it initializes, before its shadow memory exists and
// before libumswap's own constructor; instrumented code there crashes (docs/RELIABILITY.md).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

class PreloadFaults : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_preload_faults.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  // The environment: ours without anything umswap reads, then the library in managed mode (a
  // cap, as on any shared GPU), the fake CUPTI, then `changes` (an empty value unsets).
  static std::vector<std::string> environment(const Env& changes, bool preload) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string entry(*e);
      if (entry.rfind("UMSWAP_", 0) == 0 || entry.rfind("LD_PRELOAD=", 0) == 0) continue;
      env.push_back(entry);
    }
    Env all = {{"UMSWAP_MODE", "managed"},
               {"UMSWAP_MANAGED_LIMIT", "1G"},
               {"UMSWAP_CUPTI_LIBRARY", UMSWAP_TEST_FAKE_CUPTI}};
    if (preload) {
      all.emplace_back(kAddressSanitizer ? "UMSWAP_TEST_DLOPEN" : "LD_PRELOAD",
                       UMSWAP_TEST_PRELOAD_LIBRARY);
    }
    all.insert(all.end(), changes.begin(), changes.end());
    for (const auto& [name, value] : all) {
      std::erase_if(env, [&](const std::string& e) { return e.rfind(name + "=", 0) == 0; });
      if (!value.empty()) env.push_back(name + "=" + value);
    }
    return env;
  }

  // Runs `argv` (the probe unless given) with stdout and stderr on pipes (a file-size limit does
  // not cut pipes).
  static ProbeRun run(const Env& changes, std::vector<std::string> args = {"7"}, Limits limits = {},
                      bool preload = true) {
    args.insert(args.begin(), UMSWAP_TEST_FAULT_PROBE);
    const std::vector<std::string> env_strings = environment(changes, preload);
    std::vector<char*> argv, envp;
    for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    for (auto& s : env_strings) envp.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
    ProbeRun r;
    r.pid = ::fork();
    if (r.pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      const rlimit no_core{0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);
      if (limits.file_size) {
        const rlimit fsize{limits.file_size, limits.file_size};
        ::setrlimit(RLIMIT_FSIZE, &fsize);
      }
      // A disposition of SIG_IGN survives exec: the write then fails with EFBIG instead.
      std::signal(SIGXFSZ, limits.die_on_sigxfsz ? SIG_DFL : SIG_IGN);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* text[2] = {&r.out, &r.err};
    int open_pipes = 2;
    while (open_pipes > 0 && ::poll(fds, 2, 30000) > 0) {
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !fds[i].revents) continue;
        char buffer[4096];
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
        if (n > 0) {
          text[i]->append(buffer, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open_pipes;
        }
      }
    }
    int status = 0;
    ::waitpid(r.pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return r;
  }

  // The probe's own output, which umswap must leave as it is.
  static std::string probe_output(const ProbeRun& r) {
    return "probe: pid " + std::to_string(r.pid) + ", 3 allocations\n";
  }

  // Exit code 7, the probe's own stdout, and stderr exactly one warning line starting with
  // `warning` and naming `named`.
  static void expect_one_warning(const ProbeRun& r, const std::string& warning,
                                 const std::string& named) {
    EXPECT_EQ(r.exit_code, 7) << r.err;
    EXPECT_EQ(r.out, probe_output(r));
    const std::vector<std::string> lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("umswap: warning: " + warning, 0), 0u) << lines[0];
    EXPECT_TRUE(contains(lines[0], named)) << lines[0];
  }

  // A stats file that reads back, from the probe's process, in managed mode.
  void expect_stats(const std::string& file, const ProbeRun& r, bool tracer) const {
    std::string error;
    const auto stats = read_stats_file(file, &error);
    ASSERT_TRUE(stats) << error;
    EXPECT_EQ((*stats)["pid"], r.pid);
    EXPECT_EQ((*stats)["mode"], "managed");
    EXPECT_EQ((*stats)["engine"], "um");
    EXPECT_FALSE(stats->contains("vmm"));
    EXPECT_EQ((*stats)["tracer"], tracer);
    // 3 managed allocations by the probe: the library did redirect.
    EXPECT_EQ((*stats)["allocator"]["allocations"], 3) << stats->dump();
  }

  fs::path dir_;
};

// The harness itself: with writable paths the library runs its tracer (the fake CUPTI), writes
// both files, and prints nothing. Every test below differs from this one by one fault.
TEST_F(PreloadFaults, WritablePathsGetBothFilesAndNoWarning) {
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_TRACE", path("run.umtrace")}});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out, probe_output(r));
  EXPECT_EQ(r.err, "");
  expect_stats(path("s.json"), r, /*tracer=*/true);
  std::string error;
  const auto trace = read_trace_file(path("run.umtrace"), &error);
  ASSERT_TRUE(trace) << error;
  EXPECT_EQ(trace->pid, static_cast<uint64_t>(r.pid));
  EXPECT_EQ(entries(), (std::vector<std::string>{"run.umtrace", "s.json"}));

  // Natively (no library) the probe prints the same and writes nothing.
  fs::remove(path("s.json"));
  fs::remove(path("run.umtrace"));
  const ProbeRun native = run({{"UMSWAP_STATS", path("s.json")}}, {"7"}, {}, /*preload=*/false);
  EXPECT_EQ(native.exit_code, 7);
  EXPECT_EQ(native.out, probe_output(native));
  EXPECT_EQ(native.err, "");
  EXPECT_TRUE(entries().empty());
}

// A context whose GPU work failed (the fake's event queries answer error 700): the stats get
// the flight recorder's events and the error, with one warning; none of it otherwise (above).
TEST_F(PreloadFaults, AContextHoldingAnErrorAtExitPutsTheFlightRecorderInTheStats) {
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}, {"FAKE_CUDA_STICKY_ERROR", "700"}});
  expect_one_warning(r, "the program's CUDA context holds error 700 at exit", "flight_recorder");
  std::string error;
  const auto stats = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(stats) << error;
  ASSERT_TRUE(stats->contains("flight_recorder")) << stats->dump();
  EXPECT_EQ((*stats)["flight_recorder"]["context_error"], 700);
  EXPECT_TRUE((*stats)["flight_recorder"]["events"].is_array());
  EXPECT_EQ((*stats)["flight_recorder"]["columns"].size(), 7u);
  std::string plain;
  fs::remove(path("s.json"));
  const ProbeRun ok = run({{"UMSWAP_STATS", path("s.json")}});
  EXPECT_EQ(ok.err, "");
  const auto clean = read_stats_file(path("s.json"), &plain);
  ASSERT_TRUE(clean) << plain;
  EXPECT_FALSE(clean->contains("flight_recorder"));
}

// Paths that cannot be written even as root: a missing directory, a directory in the way of the
// rename, a regular file used as a directory.
std::vector<std::pair<std::string, std::string>> unwritable(const fs::path& dir) {
  fs::create_directory(dir / "a_directory");
  std::ofstream(dir / "a_file") << "x";
  return {{(dir / "no" / "such" / "dir" / "out").string(), "No such file or directory"},
          {(dir / "a_directory").string(), "cannot rename"},
          {(dir / "a_file" / "out").string(), "Not a directory"}};
}

TEST_F(PreloadFaults, UnwritableStatsPathWarnsOnceAndChangesNothingElse) {
  for (const auto& [target, why] : unwritable(dir_)) {
    SCOPED_TRACE(target);
    const ProbeRun r = run({{"UMSWAP_STATS", target}});
    expect_one_warning(r, "stats not written: ", target);
    EXPECT_TRUE(contains(r.err, why)) << r.err;
  }
  EXPECT_EQ(entries(), (std::vector<std::string>{"a_directory", "a_file"}));  // no temporaries
  EXPECT_TRUE(fs::is_empty(dir_ / "a_directory"));
}

TEST_F(PreloadFaults, UnwritableTracePathWarnsOnceAndTheStatsAreStillWritten) {
  for (const auto& [target, why] : unwritable(dir_)) {
    SCOPED_TRACE(target);
    const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_TRACE", target}});
    expect_one_warning(r, "trace not written: ", target);
    EXPECT_TRUE(contains(r.err, why)) << r.err;
    expect_stats(path("s.json"), r, /*tracer=*/true);
    fs::remove(path("s.json"));
  }
  EXPECT_EQ(entries(), (std::vector<std::string>{"a_directory", "a_file"}));
}

// A full disk, as far as one process can tell: the file-size limit makes write() fail with EFBIG
// after 100 bytes of each file. Both writers fail half-way, say so, and leave nothing behind.
TEST_F(PreloadFaults, WritesFailingHalfWayWarnAndLeaveNoFiles) {
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_TRACE", path("run.umtrace")}},
                         {"7"}, {.file_size = 100});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out, probe_output(r));
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 2u) << r.err;
  EXPECT_EQ(
      lines[0].rfind(
          "umswap: warning: trace not written: cannot write " + path("run.umtrace") + ".tmp.", 0),
      0u)
      << lines[0];
  EXPECT_TRUE(contains(lines[0], "File too large")) << lines[0];
  EXPECT_EQ(lines[1].rfind(
                "umswap: warning: stats not written: cannot write " + path("s.json") + ".tmp.", 0),
            0u)
      << lines[1];
  EXPECT_TRUE(contains(lines[1], "File too large")) << lines[1];
  EXPECT_TRUE(entries().empty());
}

// Killed while writing (SIGXFSZ at the file-size limit): the files from an earlier run stay,
// byte for byte, under their names; at most a temporary is left beside them.
TEST_F(PreloadFaults, KilledWhileWritingLeavesTheEarlierFilesIntact) {
  const ProbeRun first =
      run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_TRACE", path("run.umtrace")}});
  ASSERT_EQ(first.exit_code, 7) << first.err;
  const std::string stats_before = read_file(path("s.json"));
  const std::string trace_before = read_file(path("run.umtrace"));
  ASSERT_GT(stats_before.size(), 100u);
  ASSERT_GT(trace_before.size(), 100u);

  for (const char* which : {"UMSWAP_TRACE", "UMSWAP_STATS"}) {
    SCOPED_TRACE(which);
    // Only one file asked for each time, so each writer is the one killed.
    const std::string target =
        path(which == std::string("UMSWAP_TRACE") ? "run.umtrace" : "s.json");
    const ProbeRun r = run({{which, target}}, {"7"}, {.file_size = 100, .die_on_sigxfsz = true});
    EXPECT_EQ(r.exit_code, -SIGXFSZ) << r.err;
    EXPECT_EQ(r.out, probe_output(r));  // printed before exit, so before the writers ran
    EXPECT_EQ(read_file(path("s.json")), stats_before);
    EXPECT_EQ(read_file(path("run.umtrace")), trace_before);
    const std::string leftover =
        fs::path(target).filename().string() + ".tmp." + std::to_string(r.pid);
    std::vector<std::string> names = entries();
    std::erase(names, leftover);
    EXPECT_EQ(names, (std::vector<std::string>{"run.umtrace", "s.json"}));
    fs::remove(path(leftover));
  }
  std::string error;
  EXPECT_TRUE(read_stats_file(path("s.json"), &error)) << error;
  EXPECT_TRUE(read_trace_file(path("run.umtrace"), &error)) << error;
}

// Engine vmm on a driver without the virtual memory functions (the fake one hides them): one
// warning, the program's allocations go to the driver untouched, the stats name the engine.
TEST_F(PreloadFaults, EngineVmmWithoutTheDriversVmmFunctionsWarnsOnceAndLeavesAllocationsAlone) {
  const ProbeRun r =
      run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_ENGINE", "vmm"}, {"FAKE_CUDA_NO_VMM", "1"}});
  expect_one_warning(r, "engine vmm: the CUDA driver lacks functions", "cuMemCreate");
  EXPECT_TRUE(contains(r.err, "allocations go to the driver unchanged")) << r.err;
  std::string error;
  const auto stats = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(stats) << error;
  EXPECT_EQ((*stats)["engine"], "vmm");
  EXPECT_EQ((*stats)["allocator"]["allocations"], 0) << stats->dump();
  EXPECT_FALSE(stats->contains("vmm"));
  EXPECT_FALSE(stats->contains("advisor"));
}

// Memory the program maps itself (NCCL's buffers) counts against the budget until the driver
// would free it: a handle released while still mapped still counts, and so does one retained
// again and released once.
TEST_F(PreloadFaults, TheProgramsOwnMappingsAreCountedUntilTheDriverWouldFreeThem) {
  // The probe reaches these hooks only with the library preloaded.
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}}, {"7", "program-maps"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.out, "probe: program maps ok")) << r.out;
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;  // one warning, however many handles
  EXPECT_EQ(lines[0].rfind("umswap: warning: the program maps memory with cuMemCreate", 0), 0u)
      << lines[0];
  EXPECT_TRUE(contains(lines[0], "counts it against the budget")) << lines[0];
  std::string error;
  const auto stats = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(stats) << error;
  const nlohmann::json& m = (*stats)["program_mappings"];
  EXPECT_EQ(m["handles"], 2) << stats->dump();
  // 4 MiB released but still mapped, 2 MiB unmapped but retained once more than released.
  EXPECT_EQ(m["gpu_bytes"], 6 << 20) << stats->dump();
  EXPECT_EQ(m["gpu_bytes_peak"], 6 << 20) << stats->dump();
}

// Engine vmm serves the memory a program maps itself (as JAX's allocators do): on the
// fake driver, whose virtual memory is host memory mapped for real, the probe's handles become
// the engine's ranges at its own addresses, hold what it writes (the later ones on host chunks,
// past the 16 MiB pool), and get the engine's answers: retain, properties, the refusals (export
// once mapped, a second mapping, part of a mapping, another device), real memory for a handle
// mapped in part or exported first, the driver's for a fabric handle, a release too many.
TEST_F(PreloadFaults, EngineVmmServesTheProgramsOwnHandles) {
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const int memfd = static_cast<int>(::syscall(SYS_memfd_create, "probe", 0u));
  if (memfd < 0) GTEST_SKIP() << "no memfd_create here: the fake driver cannot map memory";
  ::close(memfd);
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")},
                          {"UMSWAP_ENGINE", "vmm"},
                          {"UMSWAP_MODE", "online"},
                          {"UMSWAP_BUDGET", "16M"}},
                         {"7", "vmm-handles"});
  EXPECT_EQ(r.exit_code, 7) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "probe: vmm handles, 0 failed")) << r.out;
  EXPECT_FALSE(contains(r.out, "FAILED")) << r.out;
  EXPECT_TRUE(contains(r.err, "engine vmm serves the memory the program maps itself")) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot share with another process")) << r.err;
  EXPECT_TRUE(contains(r.err, "gets GPU memory of its own")) << r.err;
  EXPECT_TRUE(contains(r.err, "(a fabric handle)")) << r.err;
  // No virtual handle reached the driver (the fake says so on stderr), and the refusals' warning
  // came once.
  EXPECT_FALSE(contains(r.err, "fake_cuda: virtual handle")) << r.err;
  EXPECT_EQ(count_of(r.err, "on memory umswap maps for the program (a virtual handle)"), 1u)
      << r.err;
  std::string error;
  const auto stats = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(stats) << error;
  const nlohmann::json& vmm = (*stats)["vmm"];
  EXPECT_EQ(vmm["allocations_by_api"]["cuMemMap"], 6) << vmm.dump();
  EXPECT_EQ(vmm["frees"], 6) << vmm.dump();  // each unmapped by the program
  EXPECT_GE(vmm["bytes_allocated_on_host"].get<uint64_t>(), uint64_t{8} << 20) << vmm.dump();
  EXPECT_LE(vmm["gpu_bytes_peak"].get<uint64_t>(), uint64_t{16} << 20) << vmm.dump();
}

// PyTorch's handles (made from a library named libc10_cuda...: its expandable segments) are left
// to the driver under engine vmm, with one warning naming why and the setting; another library's
// handle of the same kind is served (run 216: a tensor across PyTorch's handles changed cuDNN's
// dropout attention).
TEST_F(PreloadFaults, EngineVmmLeavesPyTorchsOwnHandlesToTheDriver) {
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")},
                          {"UMSWAP_ENGINE", "vmm"},
                          {"UMSWAP_MODE", "online"},
                          {"UMSWAP_BUDGET", "16M"}},
                         {"7", "vmm-torch-handle", UMSWAP_TEST_C10_SHIM});
  EXPECT_EQ(r.exit_code, 7) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "probe: shim handle real (0), own handle virtual (0)")) << r.out;
  EXPECT_EQ(count_of(r.err, "engine vmm does not serve (PyTorch's expandable segments"), 1u)
      << r.err;
  EXPECT_TRUE(contains(r.err, "expandable_segments:False")) << r.err;
}

// Exporting an allocation for another process (cudaIpcGetMemHandle) fails on umswap's managed
// memory as the driver fails it on any: the program gets the driver's error, every time, and the
// process one warning that names the cause and the way out. The program's own managed memory
// fails the same way without umswap: no warning for it. Without redirection umswap's export.
TEST_F(PreloadFaults, ExportingAnAllocationFailsAsOnManagedMemoryWithOneWarning) {
  // The probe reaches these hooks only with the library preloaded.
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const std::string invalid = "1";  // CUDA_ERROR_INVALID_VALUE
  const ProbeRun own = run({{"UMSWAP_STATS", path("o.json")}}, {"7", "ipc-export-own"});
  EXPECT_EQ(own.exit_code, 7) << own.err;
  EXPECT_TRUE(contains(own.out, "probe: export own managed " + invalid)) << own.out;
  EXPECT_TRUE(own.err.empty()) << own.err;

  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}}, {"7", "ipc-export"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.out, "probe: export own managed " + invalid + ", allocation " + invalid +
                                  ", again " + invalid))
      << r.out;
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("umswap: warning: the program exports an allocation", 0), 0u)
      << lines[0];
  EXPECT_TRUE(contains(lines[0], "--mode passthrough")) << lines[0];

  const ProbeRun plain =
      run({{"UMSWAP_STATS", path("p.json")}, {"UMSWAP_MODE", "passthrough"}}, {"7", "ipc-export"});
  EXPECT_EQ(plain.exit_code, 7) << plain.err;
  EXPECT_TRUE(
      contains(plain.out, "probe: export own managed " + invalid + ", allocation 0, again 0"))
      << plain.out;
  EXPECT_FALSE(contains(plain.err, "exports an allocation")) << plain.err;
}

TEST_F(PreloadFaults, NoCuptiWarnsOnceAndTheProgramRunsOnManagedMemory) {
  const std::string missing = path("nonexistent/libcupti.so");
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_CUPTI_LIBRARY", missing}});
  expect_one_warning(r, "tracing is off: " + missing + " cannot be loaded", missing);
  EXPECT_TRUE(contains(r.err, "the program runs on plain managed memory")) << r.err;
  expect_stats(path("s.json"), r, /*tracer=*/false);
}

// What Nsight Systems or compute-sanitizer does to umswap (injected before the program starts):
// CUPTI allows one subscriber.
TEST_F(PreloadFaults, CuptiHeldByAProfilerWarnsOnceNamingTheCause) {
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")},
                          {"UMSWAP_TRACE", path("run.umtrace")},
                          {"UMSWAP_TEST_CUPTI_BUSY", "1"}});
  expect_one_warning(r, "tracing is off: another CUPTI subscriber", "compute-sanitizer");
  EXPECT_TRUE(contains(r.err, "plain managed memory and no trace is written")) << r.err;
  expect_stats(path("s.json"), r, /*tracer=*/false);
  EXPECT_FALSE(fs::exists(path("run.umtrace")));
}

// A process that only looks the driver up (torchrun's launcher, importing torch) starts the
// tracer (here for a trace; online mode too, where the fake driver would turn the advisor off
// with a warning) but uses no CUDA: at exit it leaves CUPTI alone (calling it from the library's
// destructor crashed the real launcher) and writes neither stats nor a trace, which would land
// beside, or over, its workers' files.
TEST_F(PreloadFaults, AProcessThatOnlyLooksTheDriverUpWritesNothing) {
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const ProbeRun r = run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_TRACE", path("run.umtrace")}},
                         {"7", "lookup-only"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out, "probe: lookup found\n");
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(entries().empty());
}

// A profiler the program starts itself (torch.profiler's kineto calls these through the global
// scope, where the preloaded library's exports come first) gets CUPTI, whether it starts before
// umswap's tracer or while the tracer runs. The fake CUPTI takes one subscriber at a time, as
// the real one does, so "subscribe 0" shows that umswap let go of it.
constexpr const char* kProfilerGotCupti = "profiler: subscribe 0 callbacks 0 enable 0\n";

// Runs the probe starting a profiler at `when` (profiler-before or profiler-after) with stats and
// a trace asked for, and checks what both cases share: the program's own output (the profiler's
// calls all succeeded), exactly one warning starting with `warning`, the stats (tracer on or off)
// naming the call the tracer yielded to.
class ProfilerStarts : public PreloadFaults {
 protected:
  ProbeRun run_profiler_probe(const std::string& when, const std::string& warning, bool tracer) {
    const ProbeRun r =
        run({{"UMSWAP_STATS", path("s.json")}, {"UMSWAP_TRACE", path("run.umtrace")}}, {"7", when});
    EXPECT_EQ(r.exit_code, 7) << r.err;
    EXPECT_EQ(r.out, kProfilerGotCupti + probe_output(r));
    const std::vector<std::string> lines = lines_of(r.err);
    EXPECT_EQ(lines.size(), 1u) << r.err;
    if (!lines.empty()) {
      EXPECT_EQ(lines[0].rfind("umswap: warning: " + warning, 0), 0u) << lines[0];
    }
    expect_stats(path("s.json"), r, tracer);
    std::string error;
    const auto stats = read_stats_file(path("s.json"), &error);
    EXPECT_TRUE(stats) << error;
    if (stats) {
      EXPECT_EQ((*stats)["tracer_yielded_to"], "cuptiSubscribe called from fault_probe");
    }
    return r;
  }
};

TEST_F(ProfilerStarts, BeforeTheTracerItKeepsCuptiAndTheTracerStaysOff) {
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const ProbeRun r = run_profiler_probe(
      "profiler-before",
      "tracing is off: the program uses CUPTI itself (cuptiSubscribe called from fault_probe)",
      /*tracer=*/false);
  EXPECT_TRUE(contains(r.err, "plain managed memory")) << r.err;
  EXPECT_FALSE(fs::exists(path("run.umtrace")));
}

TEST_F(ProfilerStarts, WhileTheTracerRunsItGetsCuptiAndTheTraceSoFarIsWritten) {
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const ProbeRun r = run_profiler_probe("profiler-after",
                                        "the program started a profiler (cuptiSubscribe called "
                                        "from fault_probe); umswap's tracer and advisor step aside",
                                        /*tracer=*/true);
  std::string error;
  const auto trace = read_trace_file(path("run.umtrace"), &error);
  ASSERT_TRUE(trace) << error;
  EXPECT_EQ(trace->pid, static_cast<uint64_t>(r.pid));
}

// A forked child (a DataLoader worker) runs the library's exit code too, but only the parent
// writes, whether the path names the pid or not.
TEST_F(PreloadFaults, OnlyTheParentOfAForkWritesStats) {
  for (const std::string pattern : {"s.json", "s.%p.json"}) {
    SCOPED_TRACE(pattern);
    const ProbeRun r = run({{"UMSWAP_STATS", path(pattern)}, {"UMSWAP_TRACE", path("run.umtrace")}},
                           {"7", "fork"});
    EXPECT_EQ(r.exit_code, 7) << r.err;
    // LeakSanitizer in the forked child notes the parent's threads it cannot stop: not ours.
    std::vector<std::string> err = lines_of(r.err);
    if (kAddressSanitizer) {
      std::erase_if(err, [](const std::string& l) { return contains(l, "was not suspended"); });
    }
    EXPECT_TRUE(err.empty()) << r.err;
    const std::vector<std::string> out = lines_of(r.out);
    ASSERT_EQ(out.size(), 2u) << r.out;
    EXPECT_EQ(out[0].rfind("probe: child ", 0), 0u);
    EXPECT_TRUE(out[0].ends_with(" exited 0")) << out[0];
    EXPECT_EQ(out[1] + "\n", probe_output(r));
    const std::string written = expand_stats_path(pattern, r.pid);
    EXPECT_EQ(entries(), (std::vector<std::string>{"run.umtrace", written}));
    expect_stats(path(written), r, /*tracer=*/true);
    std::string error;
    const auto trace = read_trace_file(path("run.umtrace"), &error);
    ASSERT_TRUE(trace) << error;
    EXPECT_EQ(trace->pid, static_cast<uint64_t>(r.pid));
    fs::remove(path(written));
    fs::remove(path("run.umtrace"));
  }
}

// Another preload library after libumswap.so whose constructor looks up dlsym(RTLD_NEXT, ...)
// must find the next library after itself, although libumswap's constructor has not run yet
// (the dlsym trampoline then resolves the real dlsym first; it used to answer from inside
// libumswap, so the look-up found the interposer itself and the program crashed).
TEST_F(PreloadFaults, RtldNextInAnotherPreloadLibrarysConstructorFindsTheNextLibrary) {
  if (kAddressSanitizer) GTEST_SKIP() << "the library is dlopen'ed, not preloaded, under ASan";
  const ProbeRun r = run({{"LD_PRELOAD", std::string(UMSWAP_TEST_PRELOAD_LIBRARY) + ":" +
                                             UMSWAP_TEST_RTLD_NEXT_INTERPOSER}});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out, probe_output(r));
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace umswap
