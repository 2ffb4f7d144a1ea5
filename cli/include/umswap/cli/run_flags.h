// The flags of `umswap run`, validated. Plain data: produced by parse_command_line(), read by
// plan_child_environment() and run_command().
#pragma once

#include "umswap/core/options.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace umswap::cli {

// The extra flags of `umswap record` (a `run` that also records an access trace).
struct RecordFlags {
  std::string output;       // -o FILE → UMSWAP_TRACE (made absolute)
  uint64_t iterations = 0;  // --iterations N → UMSWAP_TRACE_ITERATIONS; 0 = the whole run
  std::string marker;       // --marker NAME → UMSWAP_ITERATION_MARKER (+ NVTX_INJECTION64_PATH)
};

struct RunFlags {
  // Each optional is set only when its flag was given; an unset one leaves the user's own
  // UMSWAP_* variable (if any) untouched.
  std::optional<SizeSpec> budget;         // --budget  → UMSWAP_BUDGET
  std::optional<SizeSpec> managed_limit;  // --limit   → UMSWAP_MANAGED_LIMIT
  std::optional<Mode> mode;               // --mode    → UMSWAP_MODE
  std::optional<Engine> engine;  // --engine  → UMSWAP_ENGINE (vmm: not with replay, --verify)
  std::optional<std::string> stats_path;  // --stats   → UMSWAP_STATS
  bool verbose = false;                   // --verbose → UMSWAP_VERBOSE=1
  // --quiet: no summary at the end (run_summary.h), and no stats file written for it.
  bool quiet = false;
  // --no-cache (run only): neither read nor write the plan cache (plan_cache.h).
  bool no_cache = false;
  // --verify (run, replay) → UMSWAP_EVICT_COPY=1 and a stats file (a temporary one without
  // --stats) judged at exit (verify_report.h).
  bool verify = false;
  std::vector<std::string> command;   // everything after `--`, verbatim; never empty
  std::optional<RecordFlags> record;  // set for `umswap record`
  // Set for `umswap replay TRACE`: the trace, made absolute → UMSWAP_MODE=replay, UMSWAP_REPLAY.
  // `mode` is then unset (the parser refuses --mode with replay).
  std::optional<std::string> replay_trace;
};

}  // namespace umswap::cli
