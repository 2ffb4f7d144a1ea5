#include "umswap/cli/cli_main.h"

#include "umswap/cli/child_environment.h"
#include "umswap/cli/child_process.h"
#include "umswap/cli/command_line.h"
#include "umswap/cli/preload_library.h"
#include "umswap/cli/verify_report.h"
#include "umswap/core/cupti_paths.h"
#include "umswap/core/environment.h"
#include "umswap/core/log.h"
#include "umswap/core/options.h"
#include "umswap/core/stats_file.h"
#include "umswap/core/trace_file.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

namespace umswap::cli {
namespace {

// The files `pattern` names (`%p` in the file's name: one per process) with their times.
using StatsFiles = std::map<std::filesystem::path, std::filesystem::file_time_type>;
StatsFiles stats_files(const std::string& pattern) {
  StatsFiles out;
  const std::filesystem::path path(pattern);
  const std::string name = path.filename().string();
  const size_t p = name.find("%p");
  std::error_code ec;
  const auto add = [&](const std::filesystem::path& f) {
    const auto t = std::filesystem::last_write_time(f, ec);
    if (!ec) out.emplace(f, t);
  };
  if (p == std::string::npos) {
    add(path);
    return out;
  }
  const std::string head = name.substr(0, p), tail = name.substr(p + 2);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > head.size() + tail.size() && n.starts_with(head) && n.ends_with(tail)) {
      add(e.path());
    }
  }
  return out;
}

// After `umswap run --verify`: the stats files judged (verify_report.h), the verdict printed.
// `before`: the files there before the run (one it did not write again is not its own).
int finish_verify(const std::string& pattern, const StatsFiles& before, int child_status,
                  const std::string& temp_dir) {
  std::vector<nlohmann::json> stats;
  std::vector<std::string> names;
  for (const auto& [f, time] : stats_files(pattern)) {
    if (const auto old = before.find(f); old != before.end() && old->second == time) continue;
    std::string error;
    if (auto j = read_stats_file(f.string(), &error)) {
      stats.push_back(std::move(*j));
      names.push_back(f.filename().string());
    } else {
      log(LogLevel::warning, "verify: {} not read: {}", f.string(), error);
    }
  }
  const VerifyVerdict v = judge_verify(stats, names);
  std::fputs(v.text.c_str(), stderr);
  if (!temp_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  if (child_status != 0) return child_status;
  return v.ok ? 0 : kVerifyFailedExitCode;
}

}  // namespace

int run_command(const RunFlags& given) {
  RunFlags flags = given;
  std::string verify_dir;
  if (flags.verify && !flags.stats_path) {
    std::string dir = (std::filesystem::temp_directory_path() / "umswap-verify-XXXXXX").string();
    if (!::mkdtemp(dir.data())) {
      log(LogLevel::error, "--verify: cannot make a temporary folder for the stats files");
      return kUsageErrorExitCode;
    }
    verify_dir = dir;
    flags.stats_path = dir + "/stats-%p.json";
  }
  if (flags.replay_trace) {
    // Checked here, before anything runs, so a bad trace is one clear line rather than a warning
    // from inside the program.
    std::string error;
    if (!read_trace_file(*flags.replay_trace, &error)) {
      log(LogLevel::error, "replay: {}", error);
      return kTraceErrorExitCode;
    }
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const PreloadLibrary library = find_preload_library(env_get("UMSWAP_LIBRARY"), exe);
  if (!library.error.empty()) {
    log(LogLevel::error, "{}", library.error);
    return kUsageErrorExitCode;
  }

  const ChildEnvironment env = plan_child_environment(flags, read_current_env(), library.path);
  for (const std::string& warning : env.warnings) log(LogLevel::warning, "{}", warning);
  if (const std::string failed = apply_child_environment(env); !failed.empty()) {
    log(LogLevel::error, "cannot set {}", failed);
    return kUsageErrorExitCode;
  }

  if (flags.verbose) {
    std::string text = "umswap: environment for the command:\n";
    for (const EnvVar& var : env.set) text += fmt::format("  {}={}\n", var.name, var.value);
    for (const OptionInfo& option : option_table()) {
      const bool set_here = std::any_of(env.set.begin(), env.set.end(),
                                        [&](const EnvVar& v) { return v.name == option.name; });
      const char* inherited = set_here ? nullptr : env_get(std::string(option.name).c_str());
      if (inherited)
        text += fmt::format("  {}={} (from your environment)\n", option.name, inherited);
    }
    std::fputs(text.c_str(), stderr);
  }
  if (flags.record && !flags.record->marker.empty()) {
    // NVTX reaches CUPTI only through the injection library named before the program starts.
    const std::optional<std::string> cupti = find_cupti_library();
    if (!cupti) {
      log(LogLevel::error,
          "--marker needs libcupti.so.13 for NVTX injection and it was not found; set "
          "UMSWAP_CUPTI_LIBRARY to its path");
      return kUsageErrorExitCode;
    }
    ::setenv("NVTX_INJECTION64_PATH", cupti->c_str(), 1);
    ::setenv("UMSWAP_CUPTI_LIBRARY", cupti->c_str(), 1);
  }
  const StatsFiles before = flags.verify ? stats_files(*flags.stats_path) : StatsFiles();
  const int status = run_child(flags.command);
  if (flags.verify) return finish_verify(*flags.stats_path, before, status, verify_dir);
  if (!flags.record) return status;
  return finish_record(*flags.record, status);
}

// After `umswap record`: say what was recorded, or why nothing was.
int finish_record(const RecordFlags& record, int child_status) {
  std::string error;
  const auto trace = read_trace_file(record.output, &error);
  if (!trace) {
    log(LogLevel::error,
        "no trace was recorded ({}); the program may not have used CUDA, or tracing was off "
        "(see the warning above)",
        error);
    return child_status != 0 ? child_status : kTraceErrorExitCode;
  }
  // Always printed (not a log line at info level): it is what `record` was asked for.
  std::fputs(fmt::format("umswap: trace {}: {} steps, {} iterations (period {}, {}), {} buffers\n",
                         record.output, trace->steps.size(), trace->iterations.size(),
                         trace->detection.period, trace->detection.source, trace->buffers.size())
                 .c_str(),
             stderr);
  return child_status;
}

std::optional<std::string> find_cupti_library() {
  if (const char* explicit_path = env_get("UMSWAP_CUPTI_LIBRARY"))
    return std::string(explicit_path);
  for (const char* candidate : kCuptiLibraryPaths) {
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return std::string(candidate);
  }
  return std::nullopt;
}

int cli_main(int argc, char** argv) {
  const std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  const CommandLine command_line = parse_command_line(args);
  switch (command_line.action) {
    case CommandLine::Action::help:
      std::fputs(help_text(command_line.help_all).c_str(),
                 command_line.exit_code == 0 ? stdout : stderr);
      return command_line.exit_code;
    case CommandLine::Action::version:
      std::fputs(version_text().c_str(), stdout);
      return 0;
    case CommandLine::Action::error:
      std::fputs(command_line.message.c_str(), stderr);
      return command_line.exit_code;
    case CommandLine::Action::run:
      return run_command(command_line.run_flags);
    case CommandLine::Action::report:
      return report_command(command_line.trace_flags);
    case CommandLine::Action::timeline:
      return timeline_command(command_line.trace_flags);
    case CommandLine::Action::compare:
      return compare_command(command_line.compare_flags);
  }
  return kUsageErrorExitCode;
}

}  // namespace umswap::cli
