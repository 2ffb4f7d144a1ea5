// Parsing umswap's command line, and its help and version texts. Pure: nothing is run, nothing
// is printed, so every error path is unit-tested.
#pragma once

#include "umswap/cli/compare_flags.h"
#include "umswap/cli/run_flags.h"

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace umswap::cli {

// Exit code of a usage error: a bad flag or value, no command, no libumswap.so.
inline constexpr int kUsageErrorExitCode = 2;
// Exit code of `report` and `timeline` when the trace cannot be read (missing, damaged, a version
// this umswap does not read) or the output cannot be written.
inline constexpr int kTraceErrorExitCode = 1;

// The arguments of `umswap report FILE` and `umswap timeline FILE -o OUT.json`.
struct TraceCommandFlags {
  std::string trace_path;   // FILE; never empty
  std::string output_path;  // OUT.json (timeline only); never empty for timeline
  // timeline --iterations A-B (or N): the iterations drawn, first and last, from 0; all without.
  std::optional<std::pair<uint64_t, uint64_t>> iterations;
};

// The arguments of `umswap plans [list]` and `umswap plans clear [KEY...]` (plan_cache.h).
struct PlansFlags {
  bool clear = false;             // clear; else list
  std::vector<std::string> keys;  // clear: the entries (keys or their first digits); all if empty
};

struct CommandLine {
  enum class Action {
    run,       // run `run_flags.command` (also `record` and `replay`: see RunFlags)
    report,    // print the report of `trace_flags.trace_path`
    timeline,  // write the timeline of `trace_flags.trace_path` to `trace_flags.output_path`
    compare,   // run the command of `compare_flags` once per mode and print the table
    plans,     // list or clear the plan cache (`plans_flags`)
    help,      // print help_text(help_all); exit with `exit_code` (0 when asked for, 2 without a
               // command)
    version,   // print version_text(); exit 0
    error,     // print `message` to stderr; exit with `exit_code` (2)
  };
  Action action = Action::error;
  RunFlags run_flags;
  TraceCommandFlags trace_flags;
  CompareFlags compare_flags;
  PlansFlags plans_flags;
  int exit_code = 0;
  bool help_all = false;  // --help-all: the advanced variables too
  std::string message;    // for error: complete lines (`umswap: error: ...\n`), ready to print
};

// `args` are the arguments after argv[0]. Everything after the first `--` is the command,
// passed through untouched (so `umswap run -- python --help` runs python's help).
CommandLine parse_command_line(std::span<const std::string> args);

// all: also the variables that are experiments or diagnostics (OptionInfo::advanced).
std::string help_text(bool all = false);
std::string version_text();  // `umswap <version>\n`

}  // namespace umswap::cli
