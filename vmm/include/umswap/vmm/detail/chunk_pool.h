// ChunkPool: the physical memory of one kind (GPU or host) that a ChunkArena owns, made in
// blocks of `chunks_per_block` 2 MiB chunks (kChunk; one cuMemCreate each) and handed out as
// single chunks or as whole blocks. A range's large pieces take whole blocks: one mapping moves
// many chunks at once, and a mapping's cost is mostly per call (docs/lab/2026-11-29-vmm-window.md:
// 35-41 µs/MiB at 2 MiB against 14 at 32 MiB to the host, 33 against 4 to the GPU). Single
// chunks are mapped from a block split into chunks (cuMemMap at the chunk's offset in its block).
//
// Every block is mapped, for its whole life, at its own slot of a window (a virtual range the
// pool reserves, `capacity` blocks long): the copies of an eviction or a restore need the chunk
// that is not yet mapped in the program's range to have an address, and mapping it once at
// creation costs one map instead of one per move. A chunk is known by its index, block *
// chunks_per_block + its place in the block, which is also its window slot; a whole block by the
// index of its first chunk. With one chunk a block the two are the same.
//
// Contract:
//   * Never more than limit() blocks exist at once; take() and take_block() answer
//     CUDA_ERROR_OUT_OF_MEMORY when no free one is left and none may be made, and the driver's
//     error when a block cannot be made or mapped (nothing is leaked). take() uses a split block's
//     free chunk first, then splits a free block, then makes one, so that whole blocks stay free
//     for take_block().
//   * Blocks given back (a whole one, or a split one's last chunk) stay made, for reuse
//     (cuMemCreate of pinned host memory is slow, and the GPU pool is the budget anyway); trim()
//     releases the free ones.
//   * destroy() releases every block and the window; the caller has given every chunk back.
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
  // `location`: where the blocks live (DEVICE n, or HOST_NUMA 0); `device`: the GPU that gets
  // read/write access to them; `capacity` in blocks; `chunks_per_block` a power of two, at most
  // kMaxChunksPerBlock.
  ChunkPool(const VmmDriver* driver, CUmemLocation location, CUdevice device, uint64_t capacity,
            uint32_t chunks_per_block = 1);
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  static constexpr uint32_t kMaxChunksPerBlock = 32;

  // One chunk: a split block's free one, or one of a block split now (made if need be).
  CUresult take(uint32_t* index);
  // A whole block: a free one, or a new one while fewer than limit() exist.
  CUresult take_block(uint32_t* index);
  // A chunk back (its block becomes free when it was the block's last chunk in use), or a whole
  // block, by the index take_block() gave. Never released here: a staged copy may still read it
  // through the pool's window until its move commits.
  void give(uint32_t index);
  void give_block(uint32_t index);
  // Chunks take() can still hand out (free in split blocks, in free blocks, or in blocks not yet
  // made), and blocks take_block() can.
  uint64_t available() const;
  uint64_t available_blocks() const {
    return free_blocks_.size() + (limit_ > made_ ? limit_ - made_ : 0);
  }
  // At most `blocks` (never above capacity) are made from now on; what exists past it is released
  // by trim_to_limit().
  void set_limit(uint64_t blocks);
  uint64_t limit() const { return limit_; }
  // Releases free blocks while more than limit() exist; returns how many went. Only while no
  // staged copy may read a free chunk (ChunkArena::trim_to_limit()).
  uint64_t trim_to_limit();

  // What to map for the chunk or block at `index`: its block's handle and the offset in it.
  CUmemGenericAllocationHandle handle(uint32_t index) const { return handles_[index / per_]; }
  uint64_t offset(uint32_t index) const { return uint64_t{index % per_} * kChunk; }
  CUdeviceptr window_address(uint32_t index) const;

  uint32_t chunks_per_block() const { return per_; }
  uint64_t block_bytes() const { return uint64_t{per_} * kChunk; }
  uint64_t capacity() const { return capacity_; }  // blocks
  uint64_t made() const { return made_; }          // blocks
  uint64_t in_use() const { return in_use_; }      // chunks (a whole block counts all of its)

  // Releases the free blocks; returns how many went. A block whose unmap or release fails stays.
  uint64_t trim();
  // Releases everything, the window last. Returns the first error.
  CUresult destroy();

 private:
  enum class Use : uint8_t { none, free, whole, split };
  uint32_t full_mask() const { return per_ == 32 ? ~uint32_t{0} : (uint32_t{1} << per_) - 1; }
  CUresult reserve_window();
  // A free block, or a new one: its number.
  CUresult block(uint32_t* number);
  // Releases free blocks while more than `floor` exist; returns how many went.
  uint64_t release_free(uint64_t floor);
  // Unmaps the block from the window and releases it. On a failed release the block is mapped
  // back; *still_mapped (when given) says whether that worked.
  CUresult release_block(uint32_t number, bool* still_mapped = nullptr);

  const VmmDriver* driver_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  uint64_t capacity_;
  uint64_t limit_;  // <= capacity_
  uint32_t per_;    // chunks a block
  CUdeviceptr window_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;  // by block; 0: none made there
  std::vector<Use> use_;                               // by block
  std::vector<uint32_t> used_;                         // by block: bit i, chunk i in use (split)
  std::vector<uint32_t> free_blocks_;                  // made, not in use
  std::vector<uint32_t> split_free_;  // split blocks that may have a free chunk (checked on use)
  std::vector<uint32_t> vacant_;      // block numbers below handles_.size() with none made
  uint64_t made_ = 0;
  uint64_t split_free_chunks_ = 0;  // free chunks of split blocks
  uint64_t in_use_ = 0;
};

// The access every mapping of the engine gets: read and write for `device`.
CUmemAccessDesc device_access(CUdevice device);

}  // namespace umswap::vmm::detail
