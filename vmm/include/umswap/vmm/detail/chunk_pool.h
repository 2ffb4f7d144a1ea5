// ChunkPool: the physical 2 MiB chunks of one kind (GPU or host) that a ChunkArena owns.
//
// Every chunk is mapped, for its whole life, at its own slot of a window (a virtual range the
// pool reserves, `capacity` chunks long): the copies of an eviction or a restore need the chunk
// that is not yet mapped in the program's range to have an address, and mapping it once at
// creation costs one map instead of one per move. A chunk is known by its index, which is also its
// window slot.
//
// Contract:
//   * Never more than `capacity` chunks exist at once; take() answers CUDA_ERROR_OUT_OF_MEMORY at
//     the limit, and the driver's error when a chunk cannot be made or mapped (nothing is leaked).
//   * Chunks given back stay made, for reuse (cuMemCreate of pinned host memory is slow, and the
//     GPU pool is the budget anyway); trim() releases the free ones.
//   * destroy() releases every chunk and the window; the caller has given every chunk back.
// Not thread-safe: ChunkArena calls it under its own mutex.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "umswap/vmm/chunk.h"
#include "umswap/vmm/vmm_driver.h"

namespace umswap::vmm::detail {

class ChunkPool {
 public:
  // `location`: where the chunks live (DEVICE n, or HOST_NUMA 0); `device`: the GPU that gets
  // read/write access to them.
  ChunkPool(const VmmDriver* driver, CUmemLocation location, CUdevice device, uint64_t capacity);
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // A free chunk, or a new one while fewer than limit() exist.
  CUresult take(uint32_t* index);
  // A chunk back, kept free (never released here: a staged copy may still read it through the
  // pool's window until its move commits).
  void give(uint32_t index);
  // Chunks take() can still hand out (free, or not yet made).
  uint64_t available() const { return free_.size() + (limit_ > made_ ? limit_ - made_ : 0); }
  // At most `chunks` (never above capacity) are made from now on; what exists past it is
  // released by trim_to_limit().
  void set_limit(uint64_t chunks);
  uint64_t limit() const { return limit_; }
  // Releases free chunks while more than limit() exist; returns how many went. Only while no
  // staged copy may read a free chunk (ChunkArena::trim_to_limit()).
  uint64_t trim_to_limit();

  CUmemGenericAllocationHandle handle(uint32_t index) const { return handles_[index]; }
  CUdeviceptr window_address(uint32_t index) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t made() const { return made_; }
  uint64_t in_use() const { return made_ - free_.size(); }

  // Releases the free chunks; returns how many went. A chunk whose unmap or release fails stays.
  uint64_t trim();
  // Releases everything, the window last. Returns the first error.
  CUresult destroy();

 private:
  CUresult reserve_window();
  // Releases free chunks while more than `floor` exist; returns how many went.
  uint64_t release_free(uint64_t floor);
  // Unmaps the chunk from the window and releases it. On a failed release the chunk is mapped
  // back; *still_mapped (when given) says whether that worked.
  CUresult release_chunk(uint32_t index, bool* still_mapped = nullptr);

  const VmmDriver* driver_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  uint64_t capacity_;
  uint64_t limit_;  // <= capacity_
  CUdeviceptr window_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;  // by index; 0: no chunk at that slot
  std::vector<uint32_t> free_;                         // made, not in use
  std::vector<uint32_t> vacant_;                       // slots below handles_.size() with no chunk
  uint64_t made_ = 0;
};

// The access every mapping of the engine gets: read and write for `device`.
CUmemAccessDesc device_access(CUdevice device);

}  // namespace umswap::vmm::detail
