// Where libcupti is looked for when UMSWAP_CUPTI_LIBRARY does not name it: the CUDA toolkit's
// usual places. Shared by the tracer (which loads it) and the CLI (which names it to NVTX as the
// injection library), so the two always agree.
#pragma once

#include <array>

namespace umswap {

inline constexpr std::array kCuptiLibraryPaths = {
    "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
    "/usr/local/cuda/lib64/libcupti.so.13",
    "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13",
};

}  // namespace umswap
