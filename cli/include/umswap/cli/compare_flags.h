// The flags of `umswap compare`, validated. Plain data: produced by parse_command_line(), read by
// compare_command().
#pragma once

#include "umswap/core/options.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace umswap::cli {

// The ways `compare` runs the command, in the order it runs them (and prints them).
enum class CompareMode {
  native,   // UMSWAP_MODE=passthrough: hooks loaded, nothing redirected (the baseline)
  managed,  // UMSWAP_MODE=managed: plain unified memory, no advice
  online,   // UMSWAP_MODE=online with UMSWAP_BUDGET
  replay,   // a record run (online + UMSWAP_TRACE), then UMSWAP_MODE=replay with that trace
};
inline constexpr std::array kCompareModes = {CompareMode::native, CompareMode::managed,
                                             CompareMode::online, CompareMode::replay};

std::string_view compare_mode_name(CompareMode mode);
std::optional<CompareMode> parse_compare_mode(std::string_view text);

struct CompareFlags {
  // --budget: bytes, or a percentage of the footprint measured in the managed run.
  SizeSpec budget{.bytes = 0, .percent = 50.0, .is_percent = true};
  // --modes: a subset of kCompareModes in their run order, without repeats; never empty.
  std::vector<CompareMode> modes{kCompareModes.begin(), kCompareModes.end()};
  std::string json_path;             // --json FILE; empty = none
  uint64_t steps_hint = 0;           // --steps-hint N: iterations the command runs; 0 = not given
  bool keep = false;                 // --keep: keep the directory of outputs and stats files
  std::vector<std::string> command;  // after `--`, verbatim; empty = the bundled cudnn_vgg16
};

}  // namespace umswap::cli
