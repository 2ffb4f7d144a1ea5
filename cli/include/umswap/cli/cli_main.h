// The `umswap` command: parse, then act. Prints to stdout/stderr and may run a process.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "umswap/cli/command_line.h"
#include "umswap/cli/compare_flags.h"
#include "umswap/cli/link_probe.h"
#include "umswap/cli/plan_cache.h"
#include "umswap/cli/run_flags.h"

namespace umswap::cli {

// Runs `flags.command` under umswap: finds libumswap.so, sets the environment (and prints it with
// --verbose), runs the command and returns its exit code; 2 when libumswap.so cannot be found.
// For `umswap replay` it first reads the trace and returns kTraceErrorExitCode, with one line
// naming the file and the problem, when the trace cannot be read.
int run_command(const RunFlags& flags);
// After `umswap record`: reads the trace back and reports it; the command's status, or 1 when the
// command succeeded but no readable trace was written.
int finish_record(const RecordFlags& record, int child_status);
// libcupti.so.13 for NVTX injection: UMSWAP_CUPTI_LIBRARY, else the CUDA toolkit's usual places.
std::optional<std::string> find_cupti_library();

// `umswap report FILE`: prints the trace's report to stdout and returns 0, or prints one error
// line naming the file and the problem and returns kTraceErrorExitCode.
int report_command(const TraceCommandFlags& flags);

// `umswap timeline FILE -o OUT.json`: writes the trace's timeline (Chrome trace / Perfetto JSON)
// to OUT.json atomically and returns 0. Returns kTraceErrorExitCode when the trace cannot be read
// or OUT.json cannot be written, kUsageErrorExitCode when OUT.json is the trace itself.
int timeline_command(const TraceCommandFlags& flags);

// `umswap compare`: measures the links with `probe`, runs the command once per mode (with output
// captured under a temporary directory and progress on stderr), prints the table to stdout and
// writes --json. Returns 0 when the native run succeeded (when native was not asked for: when any
// mode did), 1 when not or when the default command cannot run here (no GPU, too little free
// memory), kUsageErrorExitCode when libumswap.so cannot be found.
int compare_command(const CompareFlags& flags, const LinkProber& probe);
int compare_command(const CompareFlags& flags);  // with probe_link()

// `umswap plans [list]`: prints the plan cache's entries to stdout. `umswap plans clear [KEY...]`:
// removes every entry, or the ones named (each KEY the start of exactly one key, else nothing is
// removed and 1 is returned). kUsageErrorExitCode when there is no cache folder (plan_cache_dir).
int plans_command(const PlansFlags& flags);
// The list's text (pure, for tests).
std::string plans_list_text(const std::vector<PlanCacheEntry>& entries,
                            const std::filesystem::path& dir);

// main() of `umswap`.
int cli_main(int argc, char** argv);

}  // namespace umswap::cli
