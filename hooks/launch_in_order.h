// Kernel launches that ask to start before the kernel ahead of them on their stream has finished
// (programmatic dependent launch: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION set) are
// launched in plain stream order while umswap redirects the program's memory.
//
// Why: such a kernel must wait, on the GPU, for the writes of the kernel ahead of it before it
// reads them (cudaGridDependencySynchronize); one that reads too early races, and how often the
// race is lost depends on how long the kernel ahead takes. CUB's merge sort of CUDA 13.0's CCCL
// (3.0.1) reads its merge partitions before that wait (fixed upstream: NVIDIA/cccl#5297, #5456),
// and PyTorch sorts with it (a sparse gradient's coalesce()). Page faults and migrations make
// kernels slower, so under umswap the race was lost often enough to stop programs: "merge_sort:
// failed to synchronize" with cudaErrorInvalidAddressSpace or cudaErrorIllegalInstruction,
// docs/RELIABILITY.md. In stream order the wait returns at once and the early read cannot be
// early; the program computes the same, losing at most the kernels' ramp-up overlap.
//
// Thread: a LaunchInOrder lives on the launching thread's stack for one launch.
#pragma once

#include <cuda.h>

#include <array>
#include <vector>

namespace umswap {

class LaunchInOrder {
 public:
  // `config` itself when it asks for no overlap (or is null), else a copy that asks for none,
  // valid while this object lives. Every other attribute is kept as it was.
  const CUlaunchConfig* apply(const CUlaunchConfig* config) {
    if (!config || !config->attrs) return config;
    bool overlaps = false;
    for (unsigned i = 0; i < config->numAttrs; ++i) overlaps |= asks_overlap(config->attrs[i]);
    if (!overlaps) return config;
    CUlaunchAttribute* attrs = small_.data();
    if (config->numAttrs > small_.size()) {
      large_.resize(config->numAttrs);
      attrs = large_.data();
    }
    for (unsigned i = 0; i < config->numAttrs; ++i) {
      attrs[i] = config->attrs[i];
      if (asks_overlap(attrs[i])) attrs[i].value.programmaticStreamSerializationAllowed = 0;
    }
    copy_ = *config;
    copy_.attrs = attrs;
    return &copy_;
  }

 private:
  static bool asks_overlap(const CUlaunchAttribute& a) {
    return a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
           a.value.programmaticStreamSerializationAllowed != 0;
  }

  CUlaunchConfig copy_{};
  std::array<CUlaunchAttribute, 8> small_{};
  std::vector<CUlaunchAttribute> large_;
};

}  // namespace umswap
