#include "umswap/cli/child_process.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace umswap::cli {
namespace {

// A real waitpid status from a child that runs `body`.
template <typename Body>
int status_of(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(ExitCode, FromWaitStatus) {
  EXPECT_EQ(exit_code_from_wait_status(status_of([] { ::_exit(0); })), 0);
  EXPECT_EQ(exit_code_from_wait_status(status_of([] { ::_exit(3); })), 3);
  EXPECT_EQ(exit_code_from_wait_status(status_of([] { ::_exit(255); })), 255);
  EXPECT_EQ(exit_code_from_wait_status(status_of([] { ::kill(::getpid(), SIGKILL); })), 137);
  EXPECT_EQ(exit_code_from_wait_status(status_of([] {
              std::signal(SIGTERM, SIG_DFL);
              ::kill(::getpid(), SIGTERM);
            })),
            143);
}

TEST(ExitCode, ForExecErrors) {
  EXPECT_EQ(exit_code_for_exec_error(ENOENT), 127);
  EXPECT_EQ(exit_code_for_exec_error(EACCES), 126);
  EXPECT_EQ(exit_code_for_exec_error(ENOEXEC), 126);
}

TEST(RunChild, ReturnsExitCodeAndRestoresSignals) {
  struct sigaction before {};
  ::sigaction(SIGINT, nullptr, &before);
  EXPECT_EQ(run_child({"sh", "-c", "exit 5"}), 5);
  EXPECT_EQ(run_child({"umswap-test-no-such-command-xyz"}), 127);
  EXPECT_EQ(run_child({"/"}), 126);  // a directory: found, but cannot be run
  struct sigaction after {};
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);  // the SIG_IGN during the run is undone
}

class CapturedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "umswap_capture.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string read(const std::string& name) const {
    std::ifstream in(dir_ / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  ChildCapture capture(std::vector<std::string>* lines) const {
    return {.stdout_path = (dir_ / "out").string(),
            .stderr_path = (dir_ / "err").string(),
            .on_stdout_line = [lines](std::string_view line) { lines->emplace_back(line); }};
  }
  std::filesystem::path dir_;
};

TEST_F(CapturedRun, StdoutLinesAndFilesAndExitCode) {
  std::vector<std::string> lines;
  const int code = run_child_captured(
      {"sh", "-c", "echo one; echo oops >&2; printf 'two\\nthree'; exit 7"}, capture(&lines));
  EXPECT_EQ(code, 7);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));  // the last one unterminated
  EXPECT_EQ(read("out"), "one\ntwo\nthree");
  EXPECT_EQ(read("err"), "oops\n");
}

TEST_F(CapturedRun, ManyLinesArriveInOrder) {
  std::vector<std::string> lines;
  EXPECT_EQ(run_child_captured({"seq", "1", "20000"}, capture(&lines)), 0);
  ASSERT_EQ(lines.size(), 20000u);
  EXPECT_EQ(lines.front(), "1");
  EXPECT_EQ(lines[12345], "12346");
  EXPECT_EQ(lines.back(), "20000");
}

TEST_F(CapturedRun, CommandNotFoundAndUnwritableFiles) {
  std::vector<std::string> lines;
  EXPECT_EQ(run_child_captured({"umswap-test-no-such-command-xyz"}, capture(&lines)), 127);
  EXPECT_TRUE(lines.empty());
  const ChildCapture nowhere{.stdout_path = (dir_ / "no" / "out").string(),
                             .stderr_path = (dir_ / "err").string(),
                             .on_stdout_line = {}};
  EXPECT_EQ(run_child_captured({"true"}, nowhere), 126);
}

}  // namespace
}  // namespace umswap::cli
