#include "umswap/cli/child_process.h"

#include "umswap/core/log.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

namespace umswap::cli {
namespace {

// The running command, for the forwarding handler. 0 while there is none.
volatile sig_atomic_t g_child_pid = 0;

extern "C" void forward_signal(int sig) {
  const int saved_errno = errno;
  const pid_t pid = static_cast<pid_t>(g_child_pid);
  if (pid > 0) ::kill(pid, sig);
  errno = saved_errno;
}

enum class Disposition { ignore, forward, default_action };
struct SignalRule {
  int sig;
  Disposition disposition;
};
// SIGINT/SIGQUIT: the terminal sends them to the whole foreground group, the command included.
// SIGCHLD: a SIG_IGN inherited from our parent would make waitpid lose the exit status.
constexpr SignalRule kRules[] = {{SIGINT, Disposition::ignore},
                                 {SIGQUIT, Disposition::ignore},
                                 {SIGTERM, Disposition::forward},
                                 {SIGHUP, Disposition::forward},
                                 {SIGCHLD, Disposition::default_action}};

// This process's signal handling while a command runs, and how to put the original back.
class SignalScope {
 public:
  SignalScope() {
    // Forwarded signals are blocked until the child's pid is known; a signal that arrives in
    // between stays pending and is forwarded when unblock() runs.
    sigset_t block;
    sigemptyset(&block);
    for (const SignalRule& rule : kRules) {
      if (rule.disposition == Disposition::forward) sigaddset(&block, rule.sig);
    }
    ::sigprocmask(SIG_BLOCK, &block, &old_mask_);

    for (size_t i = 0; i < std::size(kRules); ++i) {
      struct sigaction action {};
      sigemptyset(&action.sa_mask);
      switch (kRules[i].disposition) {
        case Disposition::ignore:
          action.sa_handler = SIG_IGN;
          break;
        case Disposition::forward:
          action.sa_handler = forward_signal;
          action.sa_flags = SA_RESTART;
          break;
        case Disposition::default_action:
          action.sa_handler = SIG_DFL;
          break;
      }
      ::sigaction(kRules[i].sig, &action, &old_actions_[i]);
    }
  }
  ~SignalScope() {
    g_child_pid = 0;
    restore();
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  void unblock() const { ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr); }
  // Also called in the child between fork and exec: async-signal-safe.
  void restore() const {
    for (size_t i = 0; i < std::size(kRules); ++i) {
      ::sigaction(kRules[i].sig, &old_actions_[i], nullptr);
    }
    unblock();
  }

 private:
  sigset_t old_mask_{};
  struct sigaction old_actions_[std::size(kRules)]{};
};

ssize_t read_full(int fd, void* buffer, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, static_cast<char*>(buffer) + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

pid_t wait_for(pid_t pid, int* status) {
  for (;;) {
    const pid_t r = ::waitpid(pid, status, 0);
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace

int exit_code_from_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;  // stopped or continued: not a final status, not expected from waitpid(…, 0)
}

int exit_code_for_exec_error(int error) {
  return error == ENOENT ? 127 : 126;
}

namespace {

// Copies what the command writes to `fd` into `file` (may be -1), handing complete lines to
// `on_line`, until end of file.
void pump_output(int fd, int file, const std::function<void(std::string_view)>& on_line) {
  std::string pending;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t done = 0; file >= 0 && done < n;) {
      const ssize_t w = ::write(file, buffer + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // disk full: keep reading so the command is not blocked on the pipe
      done += w;
    }
    if (!on_line) continue;
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      on_line(std::string_view(pending).substr(start, nl - start));
    }
    pending.erase(0, start);
  }
  if (on_line && !pending.empty()) on_line(pending);
}

// The file descriptors a captured command gets, and what this process reads.
struct Redirect {
  int stdout_write = -1;  // pipe end the child's stdout becomes
  int stderr_file = -1;   // the child's stderr
  int stdout_read = -1;   // pipe end this process reads
  int stdout_file = -1;   // where this process copies it
};

int run_child_impl(const std::vector<std::string>& command, Redirect* redirect,
                   const std::function<void(std::string_view)>& on_line) {
  if (command.empty()) return 127;
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    log(LogLevel::error, "cannot create a pipe: {}", std::strerror(errno));
    return 126;
  }
  std::fflush(nullptr);  // nothing buffered may be written twice

  SignalScope signals;
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    log(LogLevel::error, "cannot run '{}': fork: {}", command[0], std::strerror(error));
    return 126;
  }
  if (pid == 0) {
    ::close(report[0]);
    signals.restore();
    if (redirect) {
      // dup2 clears close-on-exec on the new descriptors; the originals close at exec.
      ::dup2(redirect->stdout_write, STDOUT_FILENO);
      ::dup2(redirect->stderr_file, STDERR_FILENO);
    }
    ::execvp(argv[0], argv.data());
    const int error = errno;
    [[maybe_unused]] const ssize_t n = ::write(report[1], &error, sizeof(error));
    ::_exit(127);
  }

  g_child_pid = pid;
  signals.unblock();
  ::close(report[1]);
  int exec_error = 0;
  const bool exec_failed = read_full(report[0], &exec_error, sizeof(exec_error)) ==
                           static_cast<ssize_t>(sizeof(exec_error));
  ::close(report[0]);
  if (redirect) {
    // Our copy of the write end must go, or the pipe never reaches end of file.
    ::close(redirect->stdout_write);
    redirect->stdout_write = -1;
    pump_output(redirect->stdout_read, redirect->stdout_file, on_line);
  }

  int status = 0;
  const pid_t waited = wait_for(pid, &status);
  g_child_pid = 0;  // reaped: its pid may be reused, so nothing more is forwarded to it
  if (waited < 0) {
    log(LogLevel::error, "cannot wait for '{}': {}", command[0], std::strerror(errno));
    return 126;
  }
  if (exec_failed) {
    log(LogLevel::error, "cannot run '{}': {}", command[0], std::strerror(exec_error));
    return exit_code_for_exec_error(exec_error);
  }
  return exit_code_from_wait_status(status);
}

}  // namespace

int run_child(const std::vector<std::string>& command) {
  return run_child_impl(command, nullptr, {});
}

int run_child_captured(const std::vector<std::string>& command, const ChildCapture& capture) {
  constexpr int kFileFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  Redirect r;
  int pipe_fds[2] = {-1, -1};
  r.stdout_file = ::open(capture.stdout_path.c_str(), kFileFlags, 0644);
  const int stdout_error = errno;
  r.stderr_file = ::open(capture.stderr_path.c_str(), kFileFlags, 0644);
  const int stderr_error = errno;
  int code = 126;
  if (r.stdout_file < 0) {
    log(LogLevel::error, "cannot create {}: {}", capture.stdout_path, std::strerror(stdout_error));
  } else if (r.stderr_file < 0) {
    log(LogLevel::error, "cannot create {}: {}", capture.stderr_path, std::strerror(stderr_error));
  } else if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    log(LogLevel::error, "cannot create a pipe: {}", std::strerror(errno));
  } else {
    r.stdout_read = pipe_fds[0];
    r.stdout_write = pipe_fds[1];
    code = run_child_impl(command, &r, capture.on_stdout_line);
    // run_child_impl closed the write end once the command had started; not if it never did.
    if (r.stdout_write >= 0) ::close(r.stdout_write);
    ::close(r.stdout_read);
  }
  if (r.stdout_file >= 0) ::close(r.stdout_file);
  if (r.stderr_file >= 0) ::close(r.stderr_file);
  return code;
}

}  // namespace umswap::cli
