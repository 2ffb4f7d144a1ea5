// Which kernels took the run's GPU page faults: each fault (CUPTI's time) is counted for the
// steps running on the GPU at that time. A diagnostic for issue 36's finding that some kernels
// compute differently when they fault (cuDNN's fused attention with dropout, docs/RELIABILITY.md):
// the stats name the kernels that faulted, so a run's faults can be traced to the kernels that
// took them. Pure: no CUDA, no CUPTI; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace umswap::tracer {

struct StepSpan {
  uint64_t start_ns = 0, end_ns = 0;  // on the GPU; start 0: never seen running (skipped)
  uint32_t name = 0;                  // the caller's kernel-name index
};
struct KernelFaults {
  uint32_t name = 0;
  uint64_t faults = 0;    // faults while a step of this name ran
  uint64_t first_ns = 0;  // the first of them
};
struct FaultKernelReport {
  uint64_t faults = 0;   // all faults given
  uint64_t outside = 0;  // faults while no step ran (a copy's, or a step CUPTI did not time)
  std::vector<KernelFaults> by_kernel;  // most faults first (then by name), `keep` at most
};

// `fault_times`: in any order. A fault while two steps ran counts for both.
FaultKernelReport faults_by_kernel(std::span<const StepSpan> steps,
                                   std::span<const uint64_t> fault_times, size_t keep = 12);

}  // namespace umswap::tracer
