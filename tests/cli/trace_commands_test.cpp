// `umswap report` and `umswap timeline`: parsing in-process, and runs of the built binary on good,
// corrupt and missing trace files.
#include "umswap/cli/command_line.h"
#include "umswap/core/trace_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace umswap::cli {
namespace {

namespace fs = std::filesystem;
using Action = CommandLine::Action;

CommandLine parse(std::vector<std::string> args) {
  return parse_command_line(args);
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// --- Parsing ------------------------------------------------------------------------------------

TEST(TraceCommandLine, Report) {
  const CommandLine cl = parse({"report", "run.umtrace"});
  ASSERT_EQ(cl.action, Action::report) << cl.message;
  EXPECT_EQ(cl.trace_flags.trace_path, "run.umtrace");
}

TEST(TraceCommandLine, Timeline) {
  for (const auto& args :
       {std::vector<std::string>{"timeline", "run.umtrace", "-o", "t.json"},
        std::vector<std::string>{"timeline", "-o", "t.json", "run.umtrace"},
        std::vector<std::string>{"timeline", "run.umtrace", "--output=t.json"}}) {
    const CommandLine cl = parse(args);
    ASSERT_EQ(cl.action, Action::timeline) << cl.message;
    EXPECT_EQ(cl.trace_flags.trace_path, "run.umtrace");
    EXPECT_EQ(cl.trace_flags.output_path, "t.json");
  }
}

TEST(TraceCommandLine, TimelineIterations) {
  EXPECT_FALSE(parse({"timeline", "a", "-o", "t.json"}).trace_flags.iterations);
  const CommandLine one = parse({"timeline", "a", "-o", "t.json", "--iterations", "3"});
  ASSERT_EQ(one.action, Action::timeline) << one.message;
  EXPECT_EQ(one.trace_flags.iterations, (std::pair<uint64_t, uint64_t>{3, 3}));
  const CommandLine range = parse({"timeline", "a", "--iterations=2-5", "-o", "t.json"});
  ASSERT_EQ(range.action, Action::timeline) << range.message;
  EXPECT_EQ(range.trace_flags.iterations, (std::pair<uint64_t, uint64_t>{2, 5}));
}

TEST(TraceCommandLine, UsageErrors) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"report"}, "umswap: error: report: no trace file given\nusage: umswap report FILE\n"},
      {{"report", "a", "b"}, "umswap: error: unexpected argument 'b'\nusage: umswap report FILE\n"},
      {{"report", "--bogus", "a"}, "umswap: error: unknown option '--bogus'\n"},
      {{"report", "a", "--", "b"}, "report: unexpected `--`"},
      {{"timeline", "a"}, "timeline: no output file given (-o OUT.json)"},
      {{"timeline", "a", "-o"}, "umswap: error: -o needs a value (OUT.json)\n"},
      {{"timeline", "a", "-o", ""}, "timeline: -o: '' is empty"},
      {{"timeline", "-o", "x.json"}, "timeline: no trace file given"},
      {{"timeline", "a", "-o", "x.json", "--iterations", "x"},
       "timeline: --iterations: 'x' is not an iteration (N) or a range of them (A-B), from 0"},
      {{"timeline", "a", "-o", "x.json", "--iterations", "3-1"},
       "timeline: --iterations: '3-1' ends before it starts"},
      {{"timeline", "a", "-o", "x.json", "--iterations", "-2"}, "is not an iteration"},
      {{"timeline", "a", "-o", "x.json", "--iterations", "1-"}, "is not an iteration"},
  };
  for (const auto& c : cases) {
    const CommandLine cl = parse(c.args);
    EXPECT_EQ(cl.action, Action::error) << c.args[0];
    EXPECT_EQ(cl.exit_code, kUsageErrorExitCode);
    EXPECT_TRUE(contains(cl.message, c.message)) << cl.message;
  }
  EXPECT_TRUE(contains(parse({"bogus"}).message,
                       "(commands: run, record, replay, compare, report, timeline, plans)"));
}

TEST(TraceCommandLine, HelpNamesBothCommands) {
  EXPECT_EQ(parse({"report", "--help"}).action, Action::help);
  EXPECT_EQ(parse({"timeline", "-h"}).action, Action::help);
  const std::string help = help_text();
  for (const char* part :
       {"umswap report FILE", "umswap timeline FILE -o OUT.json", "  report  ", "  timeline  ",
        "Exit codes of report and timeline", "umswap timeline run.umtrace -o run.json"}) {
    EXPECT_TRUE(contains(help, part)) << part;
  }
}

// --- Runs of the binary -------------------------------------------------------------------------

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TraceCommands : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_trace_cli.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    trace_ = (dir_ / "run.umtrace").string();
    std::string error;
    ASSERT_TRUE(write_trace_file(trace_, sample(), &error)) << error;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static trace::Trace sample() {
    trace::Trace t;
    t.program = "./train";
    t.pid = 99;
    t.detection = {.period = 2, .confidence = 1.0, .warmup_steps = 0, .source = "period"};
    t.names = {"gemm", "relu"};
    t.buffers = {{.id = 1, .size = 4096}};
    t.accesses = {{.buffer = 0, .offset = 0, .length = 4096},
                  {.buffer = 0, .offset = 0, .length = 1024}};
    for (uint64_t i = 0; i < 4; ++i) {
      t.steps.push_back({.name = static_cast<uint32_t>(i % 2),
                         .stream = 7 + i % 2,
                         .first_access = i < 2 ? i : 2,
                         .access_count = i < 2 ? 1u : 0u,
                         .start_ns = 1000 * (i + 1),
                         .end_ns = 1000 * (i + 1) + 500});
    }
    t.iterations = {{.first_step = 0, .step_count = 2, .counters = {}},
                    {.first_step = 2, .step_count = 2, .counters = {}}};
    t.faults = {{.time_ns = 1200, .address = 0x40, .buffer = 0, .access = 1}};
    return t;
  }

  Result umswap(const std::vector<std::string>& args) {
    std::vector<std::string> argv_strings = {UMSWAP_TEST_CLI_BINARY};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    Result r;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return r;
    int status = 0;
    ::waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }

  fs::path dir_;
  std::string trace_;
};

TEST_F(TraceCommands, ReportOfAGoodFile) {
  const Result r = umswap({"report", trace_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(contains(r.out, "umswap trace of ./train (pid 99)")) << r.out;
  EXPECT_TRUE(contains(r.out, "Iterations\n  found             2 (source: period)")) << r.out;
  EXPECT_TRUE(contains(r.out, "iteration")) << r.out;
}

TEST_F(TraceCommands, ReportOfACorruptFile) {
  std::string bytes = read_file(trace_);
  bytes[bytes.size() / 2] ^= 0x40;
  const std::string bad = (dir_ / "bad.umtrace").string();
  std::ofstream(bad, std::ios::binary) << bytes;
  const Result r = umswap({"report", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("umswap: error: " + bad + ": damaged: checksum mismatch", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  std::ofstream(bad, std::ios::binary) << bytes.substr(0, 100);
  const Result cut = umswap({"report", bad});
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_TRUE(contains(cut.err, bad + ": truncated: the file has 100 of the")) << cut.err;
}

TEST_F(TraceCommands, ReportOfAMissingFile) {
  const std::string missing = (dir_ / "missing.umtrace").string();
  const Result r = umswap({"report", missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "umswap: error: " + missing + ": cannot open: No such file or directory\n");
}

TEST_F(TraceCommands, ReportUsageError) {
  const Result r = umswap({"report"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "no trace file given")) << r.err;
}

TEST_F(TraceCommands, TimelineWritesParseableJson) {
  const std::string json_path = (dir_ / "run.json").string();
  const Result r = umswap({"timeline", trace_, "-o", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "wrote " + json_path)) << r.out;
  const nlohmann::json timeline = nlohmann::json::parse(read_file(json_path));
  ASSERT_TRUE(timeline.contains("traceEvents"));
  // process name, 2 per track (iterations, faults, 2 streams), 4 steps, 2 iterations, 1 fault
  EXPECT_EQ(timeline["traceEvents"].size(), 1u + 2 * 4 + 4 + 2 + 1);
  EXPECT_FALSE(fs::exists(json_path + ".tmp." + std::to_string(::getpid())));
}

TEST_F(TraceCommands, TimelineOfSomeIterations) {
  const std::string json_path = (dir_ / "one.json").string();
  const Result r = umswap({"timeline", trace_, "-o", json_path, "--iterations", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json timeline = nlohmann::json::parse(read_file(json_path));
  EXPECT_EQ(timeline["otherData"]["iterations"], "1-1");
  // Past the trace's iterations: an error naming how many it has, nothing written.
  const std::string past = (dir_ / "past.json").string();
  const Result bad = umswap({"timeline", trace_, "-o", past, "--iterations", "1-7"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(
      contains(bad.err, "timeline: --iterations 1-7: " + trace_ + " has 2 iterations (0-1)"))
      << bad.err;
  EXPECT_FALSE(fs::exists(past));
}

TEST_F(TraceCommands, TimelineRefusesToOverwriteItsInput) {
  const std::string before = read_file(trace_);
  fs::create_symlink(trace_, dir_ / "link.umtrace");
  for (const std::string& out :
       {trace_, (dir_ / "." / "run.umtrace").string(), (dir_ / "link.umtrace").string()}) {
    const Result r = umswap({"timeline", trace_, "-o", out});
    EXPECT_EQ(r.exit_code, 2) << out;
    EXPECT_TRUE(contains(r.err, "is the trace itself; refusing to overwrite it")) << r.err;
  }
  EXPECT_EQ(read_file(trace_), before);
}

TEST_F(TraceCommands, TimelineOfABadFileWritesNothing) {
  const std::string json_path = (dir_ / "out.json").string();
  const std::string text = (dir_ / "text.umtrace").string();
  std::ofstream(text) << "hello\n";
  const Result r = umswap({"timeline", text, "-o", json_path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, text + ": not a umswap trace")) << r.err;
  EXPECT_FALSE(fs::exists(json_path));

  const Result unwritable =
      umswap({"timeline", trace_, "-o", (dir_ / "no" / "such" / "t.json").string()});
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_TRUE(contains(unwritable.err, "cannot create")) << unwritable.err;
}

}  // namespace
}  // namespace umswap::cli
