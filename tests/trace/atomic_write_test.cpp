// Killed mid-write: a child process rewrites a trace file (write_trace_file) or a stats file
// (write_stats_file) in a loop and is SIGKILLed at a random moment, many times. After each kill
// the final name must hold one complete version, never a mix or a prefix; only a temporary
// beside it may be left. And with write() failing half-way (a file-size limit: EFBIG, as on a
// full disk) the writer reports the path and leaves the old file as it was.
#include "umswap/core/stats_file.h"
#include "umswap/core/trace_file.h"

#include "synthetic_trace.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace umswap {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A trace of a few MB, so that writing it takes long enough to be interrupted.
trace::Trace big_trace(uint64_t seed) {
  trace::Trace t = test::full_trace();
  t.pid = seed;
  const uint64_t first = t.accesses.size();
  for (uint64_t i = 0; i < 60000; ++i) {
    t.accesses.push_back({.buffer = 0, .offset = i % 1000, .length = 1 + seed % 7});
    t.steps.push_back({.name = 1,
                       .stream = seed,
                       .first_access = first + i,
                       .access_count = 1,
                       .start_ns = 10000 + i,
                       .end_ns = 10000 + i});
  }
  return t;
}

nlohmann::json big_stats(int seed) {
  nlohmann::json iterations = nlohmann::json::array();
  for (int i = 0; i < 40000; ++i) iterations.push_back({{"i", i}, {"ms", seed * 1.5 + i}});
  return {
      {"umswap_stats_version", kStatsFormatVersion}, {"seed", seed}, {"iterations", iterations}};
}

class AtomicWrite : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_atomic_write.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Forks `rounds` children, each calling `write(0)`, `write(1)`, `write(2)`... until SIGKILLed
  // a random 0-40 ms after its first write completed; after each kill, `check` must accept the
  // file at path_(). Returns how many kills left a temporary (landed inside a write), and
  // removes those temporaries.
  int kill_writers(int rounds, const std::function<void(int)>& write,
                   const std::function<void(const std::string&)>& check) {
    std::mt19937 random(12345);
    int interrupted = 0;
    for (int round = 0; round < rounds; ++round) {
      int ready[2];
      if (::pipe(ready) != 0) return -1;
      const pid_t child = ::fork();
      if (child == 0) {
        ::close(ready[0]);
        for (int i = 0;; ++i) {
          write(i);
          if (i == 0) {
            (void)!::write(ready[1], "r", 1);
            ::close(ready[1]);
          }
        }
      }
      ::close(ready[1]);
      char byte = 0;
      EXPECT_EQ(::read(ready[0], &byte, 1), 1) << "round " << round;
      ::close(ready[0]);
      std::this_thread::sleep_for(std::chrono::microseconds(random() % 40000));
      ::kill(child, SIGKILL);
      int status = 0;
      ::waitpid(child, &status, 0);
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "round " << round;
      bool left_temporary = false;
      for (const auto& e : fs::directory_iterator(dir_)) {
        const std::string name = e.path().filename();
        if (name.find(".tmp.") != std::string::npos) {
          EXPECT_EQ(name.substr(name.rfind('.') + 1), std::to_string(child));
          left_temporary = true;
          fs::remove(e.path());
        }
      }
      interrupted += left_temporary ? 1 : 0;
      check(read_file(path_()));
    }
    return interrupted;
  }

  std::string path_() const { return (dir_ / "out").string(); }

  fs::path dir_;
};

TEST_F(AtomicWrite, AKilledTraceWriterLeavesAWholeFile) {
  const trace::Trace a = big_trace(1), b = big_trace(2);
  const std::vector<uint8_t> a_bytes = encode_trace(a), b_bytes = encode_trace(b);
  ASSERT_GT(a_bytes.size(), size_t{2} << 20);
  std::string error;
  ASSERT_TRUE(write_trace_file(path_(), a, &error)) << error;
  // The bytes are encoded once: the child spends its time writing, where a kill is interesting.
  // write_trace_file() is encode_trace() + write_file_atomically(); the first write of each
  // child goes through it whole.
  const std::string_view a_view(reinterpret_cast<const char*>(a_bytes.data()), a_bytes.size());
  const std::string_view b_view(reinterpret_cast<const char*>(b_bytes.data()), b_bytes.size());
  const int interrupted = kill_writers(
      30,
      [&](int i) {
        if (i == 0) {
          write_trace_file(path_(), b, nullptr);
        } else {
          write_file_atomically(path_(), i % 2 ? a_view : b_view, nullptr);
        }
      },
      [&](const std::string& bytes) {
        const std::vector<uint8_t> got(bytes.begin(), bytes.end());
        EXPECT_TRUE(got == a_bytes || got == b_bytes) << "a file of " << got.size() << " bytes";
        std::string why;
        EXPECT_TRUE(read_trace_file(path_(), &why)) << why;
      });
  // Most kills land inside a write (the file is written, synced and renamed over and over);
  // if none did, this test tested nothing.
  EXPECT_GT(interrupted, 0);
  RecordProperty("kills", 30);
  RecordProperty("kills_inside_a_write", interrupted);
}

TEST_F(AtomicWrite, AKilledStatsWriterLeavesAWholeFile) {
  const nlohmann::json a = big_stats(1), b = big_stats(2);
  ASSERT_GT(a.dump(2).size(), size_t{1} << 20);
  std::string error;
  ASSERT_TRUE(write_stats_file(path_(), a, &error)) << error;
  const int interrupted = kill_writers(
      30, [&](int i) { write_stats_file(path_(), i % 2 ? a : b, nullptr); },
      [&](const std::string&) {
        std::string why;
        const auto read = read_stats_file(path_(), &why);
        ASSERT_TRUE(read) << why;
        EXPECT_TRUE(*read == a || *read == b);
      });
  EXPECT_GT(interrupted, 0);
  RecordProperty("kills", 30);
  RecordProperty("kills_inside_a_write", interrupted);
}

// write() fails after 4 KiB (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG), in a child so the limit does
// not reach the test's own files.
TEST_F(AtomicWrite, AWriteFailingHalfWayNamesThePathAndKeepsTheOldFile) {
  std::string error;
  ASSERT_TRUE(write_trace_file(path_(), test::full_trace(), &error)) << error;
  const std::string trace_before = read_file(path_());
  ASSERT_TRUE(write_stats_file((dir_ / "s.json").string(),
                               {{"umswap_stats_version", kStatsFormatVersion}}, &error))
      << error;
  const std::string stats_before = read_file(dir_ / "s.json");
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string trace_error, stats_error;
    const bool trace_ok = write_trace_file(path_(), big_trace(3), &trace_error);
    const bool stats_ok = write_stats_file((dir_ / "s.json").string(), big_stats(3), &stats_error);
    const std::string report = std::to_string(trace_ok) + std::to_string(stats_ok) + "\n" +
                               trace_error + "\n" + stats_error + "\n";
    (void)!::write(pipe_fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char buffer[1024];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, n);
  ::close(pipe_fds[0]);
  ::waitpid(child, nullptr, 0);
  std::stringstream lines(report);
  std::string oks, trace_error, stats_error;
  std::getline(lines, oks);
  std::getline(lines, trace_error);
  std::getline(lines, stats_error);
  EXPECT_EQ(oks, "00");
  EXPECT_EQ(trace_error.rfind("cannot write " + path_() + ".tmp.", 0), 0u) << trace_error;
  EXPECT_NE(trace_error.find("File too large"), std::string::npos) << trace_error;
  EXPECT_EQ(stats_error.rfind("cannot write " + (dir_ / "s.json").string() + ".tmp.", 0), 0u)
      << stats_error;
  EXPECT_NE(stats_error.find("File too large"), std::string::npos) << stats_error;
  EXPECT_EQ(read_file(path_()), trace_before);
  EXPECT_EQ(read_file(dir_ / "s.json"), stats_before);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"out", "s.json"}));
}

}  // namespace
}  // namespace umswap
