// Runs of the built `umswap` binary for end-to-end tests: a fixture that starts it with a clean
// environment (UMSWAP_LIBRARY pointing at a trivial shared library, so no GPU and no real
// libumswap.so are needed) and its stdout and stderr going to files in a temporary directory.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace umswap_test {

namespace fs = std::filesystem;
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct Result {
  int exit_code = -1;  // -N when umswap itself was killed by signal N
  std::string out;
  std::string err;
};

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  return lines;
}

class UmswapProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_cli_e2e.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // The environment umswap starts with: ours without anything umswap reads or sets, plus
  // UMSWAP_LIBRARY (unless `changes` unsets it), plus `changes`.
  static std::vector<std::string> environment(const EnvChanges& changes) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (name.rfind("UMSWAP_", 0) == 0 || name == "LD_PRELOAD" ||
          name == "PYTORCH_CUDA_ALLOC_CONF" || name == "PYTORCH_ALLOC_CONF") {
        continue;
      }
      env.push_back(entry);
    }
    EnvChanges all = {{"UMSWAP_LIBRARY", UMSWAP_TEST_PRELOAD_LIBRARY}};
    all.insert(all.end(), changes.begin(), changes.end());
    for (const auto& [name, value] : all) {
      std::erase_if(env, [&](const std::string& e) { return e.rfind(name + "=", 0) == 0; });
      if (value) env.push_back(name + "=" + *value);
    }
    return env;
  }

  // Starts umswap with stdout and stderr going to files in dir_.
  pid_t start(const std::vector<std::string>& args, const EnvChanges& changes = {},
              const std::string& binary = UMSWAP_TEST_CLI_BINARY, bool ignore_sigchld = false) {
    std::vector<std::string> argv_strings = {binary};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    // No test reads or writes the user's plan cache: each gets its own, empty (a test may point
    // XDG_CACHE_HOME elsewhere with `changes`).
    EnvChanges all = {{"XDG_CACHE_HOME", (dir_ / "cache").string()}};
    all.insert(all.end(), changes.begin(), changes.end());
    const std::vector<std::string> env_strings = environment(all);
    std::vector<char*> argv, envp;
    for (auto& s : argv_strings) argv.push_back(const_cast<char*>(s.c_str()));
    for (auto& s : env_strings) envp.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const std::string out = (dir_ / "out").string(), err = (dir_ / "err").string();
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
      if (ignore_sigchld) std::signal(SIGCHLD, SIG_IGN);
      if (!cwd_.empty() && ::chdir(cwd_.c_str()) != 0) ::_exit(98);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(99);
    }
    return pid;
  }

  Result finish(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    r.out = read_file(dir_ / "out");
    r.err = read_file(dir_ / "err");
    return r;
  }

  Result umswap(const std::vector<std::string>& args, const EnvChanges& changes = {},
                const std::string& binary = UMSWAP_TEST_CLI_BINARY, bool ignore_sigchld = false) {
    return finish(start(args, changes, binary, ignore_sigchld));
  }

  // Waits (up to 2 s) until the command has written `text` to stdout.
  bool wait_for_output(const std::string& text) {
    for (int i = 0; i < 400; ++i) {
      if (read_file(dir_ / "out").find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  fs::path dir_;
  fs::path cwd_;  // where umswap starts; empty: this process's directory
};

}  // namespace umswap_test
