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
#include <cstring>
#include <new>
#include <vector>

namespace umswap {

class LaunchInOrder {
 public:
  LaunchInOrder() = default;
  LaunchInOrder(const LaunchInOrder&) = delete;  // copy_.attrs points into this object
  LaunchInOrder& operator=(const LaunchInOrder&) = delete;

  // Whether `config` asks to overlap the kernel ahead (cheap: asked of every cuLaunchKernelEx).
  static bool overlaps(const CUlaunchConfig* config) {
    if (!config || !config->attrs) return false;
    for (unsigned i = 0; i < config->numAttrs; ++i) {
      if (asks_overlap(config->attrs[i])) return true;
    }
    return false;
  }

  // `config` itself when it asks for no overlap (or is null, or no memory is left for the copy),
  // else a copy that asks for none, valid while this object lives. Every other attribute is
  // kept as it was.
  const CUlaunchConfig* apply(const CUlaunchConfig* config) {
    if (!overlaps(config)) return config;
    CUlaunchAttribute* attrs = small_.data();
    if (config->numAttrs > small_.size()) {
      try {
        large_.resize(config->numAttrs);
      } catch (const std::bad_alloc&) {
        return config;
      }
      attrs = large_.data();
    }
    for (unsigned i = 0; i < config->numAttrs; ++i) {
      attrs[i] = config->attrs[i];
      if (asks_overlap(attrs[i])) attrs[i].value.programmaticStreamSerializationAllowed = 0;
    }
    copy_ = *config;
    copy_.attrs = attrs;
    copied_ = true;
    return &copy_;
  }

  // After the launch: a value the driver wrote into the copy's attributes goes back to the
  // program's (CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE returns a node handle there);
  // only a value that changed is written (the program's array may be read-only, or shared by
  // threads), and the overlap it asked for is left as it was. Nothing when it was not copied.
  void write_back(const CUlaunchConfig* config) const {
    if (!copied_ || !config || config->numAttrs != copy_.numAttrs) return;
    for (unsigned i = 0; i < config->numAttrs; ++i) {
      CUlaunchAttribute& mine = config->attrs[i];
      if (mine.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
          std::memcmp(&mine.value, &copy_.attrs[i].value, sizeof(mine.value)) != 0) {
        mine.value = copy_.attrs[i].value;
      }
    }
  }

 private:
  static bool asks_overlap(const CUlaunchAttribute& a) {
    return a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
           a.value.programmaticStreamSerializationAllowed != 0;
  }

  // Not zeroed: written only when a launch is copied.
  bool copied_ = false;
  CUlaunchConfig copy_;
  std::array<CUlaunchAttribute, 8> small_;
  std::vector<CUlaunchAttribute> large_;
};

}  // namespace umswap
