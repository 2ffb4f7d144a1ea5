// The flags of `umswap run`: one table read by the parser and the help text, so they cannot
// drift apart. Internal to cli/.
#pragma once

#include <array>
#include <string_view>

namespace umswap::cli::detail {

struct RunFlagInfo {
  std::string_view name;        // `--budget`
  std::string_view value_name;  // `SIZE`; empty for a flag without a value
  std::string_view variable;    // the UMSWAP_* variable it sets; empty for a flag of umswap's own
  std::string_view meaning;     // one line
  std::string_view sets = "1";  // the value a flag without a value sets its variable to
};

inline constexpr std::array kRunFlags = {
    RunFlagInfo{"--budget", "SIZE", "UMSWAP_BUDGET",
                "GPU-resident bytes to stay under, by evicting to the host; 0 = no budget"},
    RunFlagInfo{"--limit", "SIZE", "UMSWAP_MANAGED_LIMIT",
                "hard cap on managed bytes allocated; an allocation past it fails with "
                "out-of-memory; 0 = no cap"},
    RunFlagInfo{
        "--mode", "MODE", "UMSWAP_MODE",
        "online (default), managed or passthrough (see Modes); replay: use `umswap replay`"},
    RunFlagInfo{"--engine", "ENGINE", "UMSWAP_ENGINE",
                "um (default): managed memory, moved by the advisor; vmm (experimental): "
                "allocations mapped to GPU chunks up to --budget, host chunks after it (up to "
                "--limit), each rounded up to 2 MiB, moved when a step reaches host chunks (the "
                "program held meanwhile); no advisor runs; not with replay or --verify"},
    RunFlagInfo{"--stats", "FILE", "UMSWAP_STATS",
                "write a JSON stats file at exit (`%p` is replaced by the process id)"},
    RunFlagInfo{"--verify", "", "UMSWAP_EVICT_COPY",
                "run once on the fast eviction path (copies to the host, GPU pages discarded) "
                "and check it: every GPU access to a range while it was away, every copy out "
                "that overtook its copy back, every step on a page while it was away is "
                "reported with its buffer and kernel, and every range is hashed on the GPU as it "
                "leaves and once it is back (the two must agree); exit 3 if any fails (or if "
                "nothing was evicted: give --budget below the footprint); costs a stats file, "
                "its analysis at exit and one read of each range on the GPU each way (and sets "
                "UMSWAP_VERIFY=1)"},
    RunFlagInfo{"--no-cache", "", "",
                "(run only) neither replay a plan cached by an earlier run of this command nor "
                "cache this run's (by default an online run with a budget records its first 16 "
                "iterations and keeps them under $XDG_CACHE_HOME/umswap/plans, and the next run "
                "of the same command in the same folder replays them from its second iteration; "
                "`umswap plans` lists and clears them)"},
    RunFlagInfo{"--verbose", "", "UMSWAP_VERBOSE",
                "print the environment set for the command; the library reports its options "
                "and notable events"},
    RunFlagInfo{"-q, --quiet", "", "UMSWAP_VERBOSE",
                "only warnings and errors: no line when the first plan takes effect, and no "
                "summary when the command ends (by default, for each process the advisor ran "
                "in: iterations and their median time under the plan, GB moved each way and GPU "
                "page faults per iteration, peak GPU-resident bytes against the budget, where the "
                "advisor ended, the memory path, read from its stats file: a temporary one "
                "without --stats)",
                "quiet"},
};

inline constexpr std::string_view kRunUsage = "umswap run [options] -- command [args...]";
inline constexpr std::string_view kRecordUsage =
    "umswap record -o FILE [--iterations N] [--marker NAME] [run options] -- command [args...]";

}  // namespace umswap::cli::detail
