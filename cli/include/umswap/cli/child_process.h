// Running the command: fork + execvp, waiting, and the exit code a shell would give.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace umswap::cli {

// The exit code for a waitpid() status: the command's exit status, or 128 + the signal number
// when a signal killed it (as shells report it).
int exit_code_from_wait_status(int status);

// The exit code when exec failed with `error` (an errno value): 127 when the command does not
// exist, 126 when it exists but cannot be run (as shells do).
int exit_code_for_exec_error(int error);

// Runs `command` (command[0] is looked up in PATH; arguments passed verbatim) with the current
// environment and waits for it. Exec failures come back through a close-on-exec pipe and are
// reported on stderr (`umswap: error: cannot run 'x': No such file or directory`). While the
// command runs, this process ignores SIGINT and SIGQUIT (the terminal sends them to the command
// too), forwards SIGTERM and SIGHUP to it, and keeps SIGCHLD at its default (an inherited SIG_IGN
// would lose the exit status); the command itself starts with the signal dispositions and mask
// this process had. Returns the exit code per the two functions above.
// Not thread-safe: it changes process-wide signal dispositions for the duration of the call.
int run_child(const std::vector<std::string>& command);

// Where a captured command's output goes (`umswap compare`).
struct ChildCapture {
  std::string stdout_path;  // the command's stdout is copied here (created or truncated)
  std::string stderr_path;  // the command's stderr is written here (created or truncated)
  // Called for each line the command writes to stdout (without the newline), as it arrives, and
  // for an unterminated last line at the end. May be empty.
  std::function<void(std::string_view line)> on_stdout_line;
};

// run_child() with the command's stdout read through a pipe (copied to `capture.stdout_path`,
// line by line to `on_stdout_line`) and its stderr written to `capture.stderr_path`. Signals are
// handled as by run_child(). A file that cannot be opened: an error on stderr, 126, nothing run.
int run_child_captured(const std::vector<std::string>& command, const ChildCapture& capture);

}  // namespace umswap::cli
