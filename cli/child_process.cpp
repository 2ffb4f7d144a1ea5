#include "umswap/cli/child_process.h"

#include "umswap/core/log.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

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

int run_child(const std::vector<std::string>& command) {
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

}  // namespace umswap::cli
