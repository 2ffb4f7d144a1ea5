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
  vmm,      // UMSWAP_ENGINE=vmm with UMSWAP_BUDGET (engine vmm, experimental; not by default)
};
inline constexpr std::array kCompareModes = {CompareMode::native, CompareMode::managed,
                                             CompareMode::online, CompareMode::replay,
                                             CompareMode::vmm};
// What --modes defaults to: all but vmm.
inline constexpr std::array kDefaultCompareModes = {CompareMode::native, CompareMode::managed,
                                                    CompareMode::online, CompareMode::replay};

std::string_view compare_mode_name(CompareMode mode);
std::optional<CompareMode> parse_compare_mode(std::string_view text);

// PyTorch's own ways to save GPU memory, run for comparison: the command, natively (passthrough),
// with the baseline's flag appended. The command must accept that flag, as the bundled PyTorch
// samples do.
enum class CompareBaseline {
  offload,     // --offload: torch.autograd.graph.save_on_cpu(pin_memory=True)
  checkpoint,  // --checkpoint: torch.utils.checkpoint, recomputing activations in backward
};
inline constexpr std::array kCompareBaselines = {CompareBaseline::offload,
                                                 CompareBaseline::checkpoint};

std::string_view compare_baseline_name(CompareBaseline baseline);  // "offload", "checkpoint"
std::string_view compare_baseline_flag(CompareBaseline baseline);  // "--offload", ...
std::optional<CompareBaseline> parse_compare_baseline(std::string_view text);

// A loss within this relative difference of the native run's counts as the same result when the
// program prints no checksum: cuDNN and cuBLAS pick kernels that are not bit-for-bit
// deterministic, so even two native runs of a PyTorch script differ in the last digits.
inline constexpr double kDefaultLossTolerance = 1e-2;

struct CompareFlags {
  // --budget: bytes, or a percentage of the footprint measured in the managed run.
  SizeSpec budget{.bytes = 0, .percent = 50.0, .is_percent = true};
  // --modes: a subset of kCompareModes in their run order, without repeats; never empty.
  std::vector<CompareMode> modes{kDefaultCompareModes.begin(), kDefaultCompareModes.end()};
  // --baselines: a subset of kCompareBaselines in their run order, without repeats; run after the
  // modes. Empty by default; needs a command (the bundled cudnn_vgg16 has no such flags).
  std::vector<CompareBaseline> baselines;
  double loss_tolerance = kDefaultLossTolerance;  // --loss-tolerance: relative, >= 0
  std::string json_path;                          // --json FILE; empty = none
  uint64_t steps_hint = 0;           // --steps-hint N: iterations the command runs; 0 = not given
  bool keep = false;                 // --keep: keep the directory of outputs and stats files
  std::vector<std::string> command;  // after `--`, verbatim; empty = the bundled cudnn_vgg16
};

}  // namespace umswap::cli
