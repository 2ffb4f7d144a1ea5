// The flags of `umswap compare` and the columns of its table, and the usage of `umswap replay`:
// one table each, read by the parser and the help text so they cannot drift apart. Internal to
// cli/.
#pragma once

#include <array>
#include <string_view>

namespace umswap::cli::detail {

inline constexpr std::string_view kReplayUsage =
    "umswap replay TRACE [run options] -- command [args...]";
inline constexpr std::string_view kCompareUsage =
    "umswap compare [--budget B] [--modes LIST] [--json FILE] [options] [-- command [args...]]";

struct CompareFlagInfo {
  std::string_view name;        // `--budget`
  std::string_view value_name;  // `B`; empty for a flag without a value
  std::string_view meaning;     // one line
};

inline constexpr std::array kCompareFlags = {
    CompareFlagInfo{"--budget", "B",
                    "GPU-resident budget of the online and replay runs: a size (8G) or a "
                    "percentage of the footprint measured in the managed run (allocator peak; "
                    "else the native run's peak_allocated_bytes) [default: 50%]"},
    CompareFlagInfo{"--modes", "LIST",
                    "comma-separated subset of native,managed,online,replay,vmm [default: the "
                    "first four]; they always run in that order (vmm: engine vmm at the budget)"},
    CompareFlagInfo{"--json", "FILE",
                    "also write every figure, the probe and each run's raw numbers as JSON"},
    CompareFlagInfo{"--baselines", "LIST",
                    "also run the command natively with --offload (save_on_cpu) and/or "
                    "--checkpoint appended, comma-separated: offload,checkpoint [default: none]; "
                    "the command must accept those flags, as samples/pytorch/*.py do"},
    CompareFlagInfo{"--loss-tolerance", "X",
                    "without a checksum, a last loss within X (relative) of native's counts as "
                    "the same result [default: 0.01]"},
    CompareFlagInfo{"--steps-hint", "N",
                    "iterations the command runs, for the progress line; the default command "
                    "runs N steps [default: 20]"},
    CompareFlagInfo{"--keep", "",
                    "keep the directory with each run's output and stats (it is always kept "
                    "when a run failed)"},
};

struct CompareColumnInfo {
  std::string_view header;
  std::string_view meaning;
};

inline constexpr std::array kCompareColumns = {
    CompareColumnInfo{"steady ms",
                      "median time of the steady iterations (all but the first two), from the "
                      "program's `iter <i> ms <t>` lines, else umswap's stats"},
    CompareColumnInfo{"x native", "steady ms over the native run's"},
    CompareColumnInfo{"x link",
                      "steady ms over the link limit max(native, GB in / host->device rate, GB "
                      "out / device->host rate), rates from pinned copies"},
    CompareColumnInfo{"x driver",
                      "steady ms over the driver-path limit max(native, GB in / prefetch rate + "
                      "GB out / eviction rate)"},
    CompareColumnInfo{"first ms", "time of iteration 0 (warm-up, first touches)"},
    CompareColumnInfo{"faults/it", "GPU page faults per steady iteration (mean)"},
    CompareColumnInfo{"GB in/it", "bytes moved host->device per steady iteration, 1e9 bytes"},
    CompareColumnInfo{"GB out/it", "bytes moved device->host per steady iteration"},
    CompareColumnInfo{"peak GiB",
                      "peak GPU-resident bytes, counted from the driver's records; a baseline's: "
                      "the program's peak_allocated_bytes"},
    CompareColumnInfo{"budget", "yes when peak GPU-resident stayed within the budget + 5%"},
    CompareColumnInfo{"result",
                      "same or DIFFERS: the program's checksum against the native run's; "
                      "without one, the last losses within --loss-tolerance of each other "
                      "(≈ native) or not (DIFFERS), as cuDNN is not deterministic"},
};

}  // namespace umswap::cli::detail
