// `umswap run --verify`: what the stats files of a run say about the evictions umswap copied to
// the host (UMSWAP_EVICT_COPY=1, which --verify turns on), judged. Pure: JSON in, text out.
//
// A run fails verification when, in any of its processes' stats files:
//   * a GPU page fault hit a page while umswap held it on the host and its GPU pages were
//     discarded (copy_check.unforeseen.faults): a kernel reached the range through a pointer
//     umswap could not see, and read garbage or wrote what the copy back then overwrote;
//   * a copy out of a page began before that page's copy back had ended
//     (copy_check.unforeseen.copies_out_before_copy_back_ended): it may have saved unfilled pages;
//   * a step the tracer saw ran on a page while it was discarded or coming back
//     (copy_check.harmful);
//   * a copy back failed and its bytes were lost (advisor.evict_copy.lost_bytes).
// It is not verified (also a failure, with its reason) when no stats file was written, or
// nothing was copied to the host (no budget below the footprint, or copies turned off).
// GPU page faults that came while kernels ran (fault_kernels) are named in a warning, not judged:
// a fault changes what some kernels compute (cuDNN's fused attention with dropout), and which
// kernels those are cannot be told from the stats.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace umswap::cli {

// Exit code of `umswap run --verify` when the program succeeded but verification did not.
inline constexpr int kVerifyFailedExitCode = 3;

struct VerifyVerdict {
  bool ok = false;
  std::string text;  // complete lines, each starting with "umswap: verify: "
};

// `stats`: one parsed stats file per process of the run (names for the messages in `names`).
VerifyVerdict judge_verify(const std::vector<nlohmann::json>& stats,
                           const std::vector<std::string>& names);

}  // namespace umswap::cli
