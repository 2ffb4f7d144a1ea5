// Kernels that must find their memory on the GPU. Some kernels compute a different result when
// part of what they read or write is not resident in GPU memory, whether they fault it in or
// read it through a mapping to host memory: cuDNN's fused attention with dropout (PyTorch's
// default SDPA backend on an H200) gave a different output on every such trial, and the native
// output whenever its buffers were resident (docs/RELIABILITY.md, "Kernels that a page fault
// changes"). For those kernels a plan that is late or wrong would change the program's results,
// so the launch path makes everything their parameters point at resident first, in their stream's
// order (Advisor::on_step): slower when the plan missed, never wrong.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace umswap::advisor {

// True for a kernel name known to compute differently on memory that is not GPU-resident:
// cuDNN's generated fused-attention kernels ("cudnn_generated_..._sdpa_..."). Found by
// measurement; kernels that merely run slower on such memory are not listed.
bool needs_resident_memory(std::string_view kernel_name);

// A launch's pointer into the allocation [base, base_end): [pointer, end) is what it may reach
// (end: the end of the program's block or of the allocation).
struct LaunchReach {
  uint64_t pointer = 0;
  uint64_t end = 0;
  uint64_t base = 0;
  uint64_t base_end = 0;
};

struct ResidentRange {
  uint64_t address = 0;
  uint64_t length = 0;
  bool operator==(const ResidentRange&) const = default;
};

// The ranges to bring to the GPU for a launch with these reaches: each rounded out to `page`
// (a power of two) and clipped to its allocation, empty ones dropped, overlapping or adjacent
// ones of one allocation merged (a range never spans two allocations), in address order.
// Replaces the contents of `out` (its capacity is reused: no allocation once it is large enough).
void resident_ranges(std::span<const LaunchReach> reaches, std::vector<ResidentRange>& out,
                     uint64_t page = 2 << 20);

}  // namespace umswap::advisor
