// Files that are not good traces, given to every command that reads one: `umswap report`,
// `umswap timeline` and `umswap replay`. Each must exit 1 with one line naming the file and the
// problem, print nothing on stdout, write no timeline and run no command.
#include "umswap/core/stats_file.h"
#include "umswap/core/trace_file.h"
#include "umswap_process.h"

#include <sys/stat.h>

#include <cstdint>
#include <thread>

namespace {

using umswap_test::lines_of;
using umswap_test::Result;
namespace fs = std::filesystem;

umswap::trace::Trace small_trace() {
  umswap::trace::Trace t;
  t.program = "./train";
  t.pid = 42;
  t.names = {"gemm"};
  t.buffers = {{.id = 1, .size = 4096}};
  t.accesses = {{.buffer = 0, .offset = 0, .length = 4096}};
  t.steps = {{.name = 0, .first_access = 0, .access_count = 1, .start_ns = 1, .end_ns = 2}};
  t.iterations = {{.first_step = 0, .step_count = 1, .counters = {}}};
  return t;
}

void set_u32(std::string& bytes, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
}

// Fixes the size and checksum fields after a deliberate change, so only that change is wrong.
std::string resealed(std::string bytes) {
  std::span<uint8_t> span(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size());
  umswap::detail::reseal_trace_bytes(span);
  return bytes;
}

class BadTrace : public umswap_test::UmswapProcess {
 protected:
  void SetUp() override {
    UmswapProcess::SetUp();
    std::string error;
    ASSERT_TRUE(umswap::write_trace_file(good_path(), small_trace(), &error)) << error;
    good_ = umswap_test::read_file(good_path());
    ASSERT_GT(good_.size(), 100u);
  }

  std::string good_path() const { return (dir_ / "good.umtrace").string(); }

  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The three commands on `path`: each fails as described at the top, with `problem` in its one
  // line of error.
  void expect_refused(const std::string& path, const std::string& problem) {
    SCOPED_TRACE(path);
    const std::string json = (dir_ / "timeline.out.json").string();
    const std::string ran = (dir_ / "ran").string();
    const struct {
      std::vector<std::string> args;
      std::string prefix;
    } commands[] = {
        {{"report", path}, "umswap: error: " + path + ": "},
        {{"timeline", path, "-o", json}, "umswap: error: " + path + ": "},
        {{"replay", path, "--", "touch", ran}, "umswap: error: replay: " + path + ": "},
    };
    for (const auto& c : commands) {
      SCOPED_TRACE(c.args[0]);
      const Result r = umswap(c.args);
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_EQ(r.out, "");
      const std::vector<std::string> err = lines_of(r.err);
      ASSERT_EQ(err.size(), 1u) << r.err;
      EXPECT_EQ(err[0].rfind(c.prefix, 0), 0u) << err[0];
      EXPECT_NE(err[0].find(problem), std::string::npos) << err[0];
    }
    EXPECT_FALSE(fs::exists(json));
    EXPECT_FALSE(fs::exists(ran));
  }

  std::string good_;
};

TEST_F(BadTrace, TheGoodFileIsAccepted) {  // the baseline the others differ from
  EXPECT_EQ(umswap({"report", good_path()}).exit_code, 0);
  EXPECT_EQ(umswap({"replay", good_path(), "--", "true"}, {{"UMSWAP_MODE", "managed"}}).exit_code,
            0);
}

TEST_F(BadTrace, FilesFromOtherPrograms) {
  std::string error;
  const std::string stats = (dir_ / "stats.json").string();
  ASSERT_TRUE(umswap::write_stats_file(stats, {{"umswap_stats_version", 1}}, &error)) << error;
  expect_refused(stats, "not a umswap trace: it starts with '{' like a JSON file");
  expect_refused(write("timeline.json", "{\"traceEvents\": []}\n"), "like a JSON file");
  // An ELF executable (the umswap binary itself).
  const std::string elf = (dir_ / "elf").string();
  fs::copy_file(UMSWAP_TEST_CLI_BINARY, elf);
  expect_refused(elf, "not a umswap trace (it does not start with the magic number");
  std::string noise(4096, '\0');
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (char& c : noise) {
    x = x * 6364136223846793005u + 1442695040888963407u;
    c = static_cast<char>(x >> 56);
  }
  expect_refused(write("noise", noise), "not a umswap trace");
  expect_refused(write("text.umtrace", "UMSWAP trace, honest\n"), "not a umswap trace");
}

TEST_F(BadTrace, EmptyAndTruncatedFiles) {
  expect_refused(write("empty", ""), "empty file (0 bytes)");
  for (const size_t size : {size_t{4}, size_t{11}, size_t{39}}) {
    expect_refused(
        write("cut" + std::to_string(size), good_.substr(0, size)),
        "truncated: the header needs 40 bytes but the file ends at " + std::to_string(size));
  }
  for (const size_t size : {size_t{40}, size_t{100}, good_.size() - 1}) {
    expect_refused(write("cut" + std::to_string(size), good_.substr(0, size)),
                   "truncated: the file has " + std::to_string(size) + " of the " +
                       std::to_string(good_.size()) + " bytes its header gives");
  }
}

TEST_F(BadTrace, OtherVersionsAndFeatures) {
  std::string newer = good_;
  set_u32(newer, 8, 2);
  expect_refused(write("v2", resealed(newer)),
                 "version 2 is not supported (this umswap reads version 1); it was written by a "
                 "newer umswap");
  std::string older = good_;
  set_u32(older, 8, 0);
  expect_refused(write("v0", resealed(older)), "version 0 is not supported");
  std::string flagged = good_;
  set_u32(flagged, 16, 0x1);
  expect_refused(write("flags", resealed(flagged)), "uses features this umswap does not know");
}

TEST_F(BadTrace, ThingsThatAreNotRegularFiles) {
  expect_refused(dir_.string(), "cannot read: Is a directory");
  // An endless stream: refused from its first bytes, not read to the end of memory.
  expect_refused("/dev/zero", "not a umswap trace");
}

// A trace arriving through a pipe (`umswap report <(zcat run.umtrace.gz)`) is read whole.
TEST_F(BadTrace, AGoodTraceThroughAFifoIsRead) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << good_; });
  const Result r = umswap({"report", fifo});
  writer.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("umswap trace of ./train (pid 42)"), std::string::npos) << r.out;
}

}  // namespace
