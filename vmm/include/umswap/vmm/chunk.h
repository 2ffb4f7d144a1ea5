// The unit the vmm engine maps and moves.
#pragma once

#include <cstdint>

namespace umswap::vmm {

// The size of every physical chunk, GPU or host: the allocation granularity of both on an H200
// (cuMemGetAllocationGranularity, driver 580, CUDA 13.0; issue 38).
inline constexpr uint64_t kChunk = uint64_t{2} << 20;

// Where a chunk's physical memory is.
enum class Location : uint8_t { gpu, host };

}  // namespace umswap::vmm
