// What the slabs (slab_allocator.h) and PyTorch's followed blocks (torch_blocks.h) share when
// they drop dead pages from the GPU: the unit, the batches handed to cuMemDiscardBatchAsync and
// cuMemDiscardAndPrefetchBatchAsync, and the stream those calls may go on. Pure; any thread.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace umswap {

// The unit of discarding: the driver's large page for managed memory.
inline constexpr uint64_t kDiscardPage = uint64_t{2} << 20;

// Adds one page to a batch of ranges, extending the last range when the page follows it (and
// `may_extend`: a range must not run from one allocation into the next, which the driver
// refuses).
inline void add_page(std::vector<CUdeviceptr>& starts, std::vector<size_t>& sizes, uint64_t page,
                     bool may_extend = true) {
  if (may_extend && !starts.empty() && starts.back() + sizes.back() == page) {
    sizes.back() += kDiscardPage;
  } else {
    starts.push_back(page);
    sizes.push_back(kDiscardPage);
  }
}

// The stream a stream-ordered discard may go on: not the legacy default stream (the API
// refuses it); the per-thread stream is ordered with it.
inline CUstream discard_stream(CUstream stream) {
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  return handle == 0 || handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY)
             ? CU_STREAM_PER_THREAD
             : stream;
}

}  // namespace umswap
