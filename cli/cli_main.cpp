#include "umswap/cli/cli_main.h"

#include "umswap/cli/child_environment.h"
#include "umswap/cli/child_process.h"
#include "umswap/cli/command_line.h"
#include "umswap/cli/plan_cache_run.h"
#include "umswap/cli/preload_library.h"
#include "umswap/cli/run_summary.h"
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

// The stats files `pattern` names that the run wrote (`before`: the files there before it; one
// it did not write again is not its own), read.
std::vector<SummaryInput> read_run_stats(const std::string& pattern, const StatsFiles& before,
                                         const char* what) {
  std::vector<SummaryInput> out;
  for (const auto& [f, time] : stats_files(pattern)) {
    if (const auto old = before.find(f); old != before.end() && old->second == time) continue;
    std::string error;
    if (auto j = read_stats_file(f.string(), &error)) {
      out.push_back({f.filename().string(), std::move(*j)});
    } else {
      log(LogLevel::warning, "{}: {} not read: {}", what, f.string(), error);
    }
  }
  return out;
}

// Whether the run has a budget: --budget, else the user's UMSWAP_BUDGET.
bool has_budget(const RunFlags& flags) {
  if (flags.budget) return !flags.budget->is_zero();
  const char* v = env_get("UMSWAP_BUDGET");
  const std::optional<SizeSpec> size = v ? parse_size(v) : std::nullopt;
  return size && !size->is_zero();
}

// Whether the advisor runs (modes online and replay), where the stats cost nothing the tracer
// does not do anyway: --mode, replay, else the user's UMSWAP_MODE (online when unset).
bool advisor_runs(const RunFlags& flags) {
  if (flags.replay_trace) return true;
  if (flags.mode) return advises(*flags.mode);
  const char* v = env_get("UMSWAP_MODE");
  const std::optional<Mode> mode = v ? parse_mode(v) : std::optional<Mode>(Mode::online);
  return !mode || advises(*mode);
}

}  // namespace

int run_command(const RunFlags& given) {
  RunFlags flags = given;
  // The stats files read at the end: --stats's, the user's UMSWAP_STATS, or (for --verify, and
  // for the summary in the advisor's modes) files in a temporary folder removed at the end.
  std::string stats_pattern;
  struct TempDir {
    std::string path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } temp_dir;
  if (flags.stats_path) {
    stats_pattern = *flags.stats_path;
  } else if (const char* user = env_get("UMSWAP_STATS"); user && *user) {
    stats_pattern = user;
  } else if (flags.verify || (!flags.quiet && advisor_runs(flags))) {
    std::string dir = (std::filesystem::temp_directory_path() / "umswap-run-XXXXXX").string();
    if (!::mkdtemp(dir.data())) {
      if (flags.verify) {
        log(LogLevel::error, "--verify: cannot make a temporary folder for the stats files");
        return kUsageErrorExitCode;
      }
    } else {
      temp_dir.path = dir;
      stats_pattern = dir + "/stats-%p.json";
      flags.stats_path = stats_pattern;
    }
  }
  // Before the environment is planned: a cached plan makes this run a replay of it.
  PlanCacheRun cache;
  cache.begin(&flags);
  if (flags.replay_trace && !cache.hit()) {
    // Checked here, before anything runs, so a bad trace is one clear line rather than a warning
    // from inside the program (a cached one was read when the cache found it).
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

  ChildEnvironment env = plan_child_environment(flags, read_current_env(), library.path);
  for (EnvVar& var : cache.environment()) env.set.push_back(std::move(var));
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
  const StatsFiles before = stats_pattern.empty() ? StatsFiles() : stats_files(stats_pattern);
  const int status = run_child(flags.command);
  const std::vector<SummaryInput> stats =
      stats_pattern.empty() || (flags.quiet && !flags.verify)
          ? std::vector<SummaryInput>()
          : read_run_stats(stats_pattern, before, flags.verify ? "verify" : "summary");
  if (!flags.quiet) std::fputs(run_summary_text(stats, has_budget(flags)).c_str(), stderr);
  cache.finish(flags.quiet, flags.verbose, run_made_a_plan(stats));
  int result = status;
  if (flags.verify) {
    std::vector<nlohmann::json> files;
    std::vector<std::string> names;
    for (const SummaryInput& p : stats) {
      files.push_back(p.stats);
      names.push_back(p.name);
    }
    const VerifyVerdict v = judge_verify(files, names);
    std::fputs(v.text.c_str(), stderr);
    if (status == 0 && !v.ok) result = kVerifyFailedExitCode;
  }
  if (!flags.record) return result;
  return finish_record(*flags.record, result);
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
    case CommandLine::Action::plans:
      return plans_command(command_line.plans_flags);
  }
  return kUsageErrorExitCode;
}

}  // namespace umswap::cli
