#include "umswap/cli/child_process.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

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

}  // namespace
}  // namespace umswap::cli
