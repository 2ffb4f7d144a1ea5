// ChunkPool: the physical memory of one kind (GPU or host) that a ChunkArena owns, handed out
// as whole blocks of `chunks_per_block` 2 MiB chunks (kChunk) or as single chunks, each one
// cuMemCreate of its own size: the driver maps a handle only whole (cuMemMap of part of one, or at
// an offset in it, answered CUDA_ERROR_NOT_SUPPORTED on an H200, driver 580, 2026-12-01). A
// range's large pieces take whole blocks: one mapping moves many chunks at once, and a mapping's
// cost is mostly per mapping, however the calls are grouped (docs/lab/2026-11-29-vmm-window.md:
// 35-41 µs/MiB at 2 MiB against 14 at 32 MiB to the host, 33 against 4 to the GPU; run 190 in
// docs/lab/2026-12-01-vmm-driver-calls-and-blocks.md).
//
// The pool's window (a virtual range it reserves, `capacity` blocks long) is cut into groups of
// one block each. A group holds one whole block, or up to chunks_per_block single chunks at
// their places in it, or nothing. Everything made is mapped there for its whole life: the copies
// of an eviction or a restore need the chunk not yet mapped in the program's range to have an
// address, and mapping it once at creation costs one map instead of one per move. A chunk is
// known by its index, group * chunks_per_block + its place, which is also its window slot; a
// whole block by the index of its first chunk. With one chunk a block the two are the same.
//
// Contract:
//   * The bytes made (blocks and single chunks) never pass limit() blocks' worth. take() uses a
//     free single chunk first, then makes one in a group already holding singles, then in an
//     empty group; when the limit stands in the way it releases a free block first. take_block()
//     uses a free block, then makes one in an empty group, releasing the free single chunks of
//     groups with none in use when the limit or the groups stand in the way. CUDA_ERROR_OUT_OF_
//     MEMORY when neither works (can_take() / can_take_block() say so beforehand); the driver's
//     error when memory cannot be made or mapped (nothing is leaked).
//   * What is given back stays made, for reuse (cuMemCreate of pinned host memory is slow, and
//     the GPU pool is the budget anyway) until taking needs the room (never while keep_free()),
//     trim() or trim_to_limit(). Past a lowered limit nothing more is handed out.
//   * destroy() releases everything and the window; the caller has given every chunk back.
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
  // `location`: where the memory lives (DEVICE n, or HOST_NUMA 0); `device`: the GPU that gets
  // read/write access to it; `capacity` in blocks; `chunks_per_block` a power of two, at most
  // kMaxChunksPerBlock.
  ChunkPool(const VmmDriver* driver, CUmemLocation location, CUdevice device, uint64_t capacity,
            uint32_t chunks_per_block = 1);
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  static constexpr uint32_t kMaxChunksPerBlock = 32;

  CUresult take(uint32_t* index);
  CUresult take_block(uint32_t* index);
  // A single chunk back, or a whole block by the index take_block() gave; it stays made.
  void give(uint32_t index);
  void give_block(uint32_t index);
  // Whether take() / take_block() can succeed, barring a driver failure.
  bool can_take() const;
  bool can_take_block() const;
  // Whether `blocks` whole blocks and then `chunks` single chunks can all be taken now (while
  // keep_free(), a conservative answer).
  bool can_place(uint64_t blocks, uint64_t chunks) const;
  // Chunks take() can still hand out, at most (what is in use never passes the limit).
  uint64_t available() const { return in_use_ < limit_ * per_ ? limit_ * per_ - in_use_ : 0; }
  // While set, nothing free is released to make room (a staged copy may still read a free chunk
  // through the window until its move commits): the takes use what is free or may be made.
  void keep_free(bool keep) { keep_free_ = keep; }
  // At most `blocks` blocks' worth (never above capacity) are made from now on; what exists past
  // it is released by trim_to_limit().
  void set_limit(uint64_t blocks);
  uint64_t limit() const { return limit_; }
  // Releases free memory while more than limit() is made; returns the chunks' worth released. Only
  // while no staged copy may read a free chunk (ChunkArena::trim_to_limit()).
  uint64_t trim_to_limit();

  // The handle to map for the chunk or block at `index` (always mapped whole, at offset 0).
  CUmemGenericAllocationHandle handle(uint32_t index) const { return handles_[index]; }
  CUdeviceptr window_address(uint32_t index) const;

  uint32_t chunks_per_block() const { return per_; }
  uint64_t block_bytes() const { return uint64_t{per_} * kChunk; }
  uint64_t capacity() const { return capacity_; }  // blocks
  uint64_t made() const { return made_; }          // chunks' worth, blocks included
  uint64_t in_use() const { return in_use_; }      // chunks (a whole block counts all of its)

  // Releases everything free; returns the chunks' worth released. What fails to go stays.
  uint64_t trim();
  // Releases everything, the window last. Returns the first error.
  CUresult destroy();

 private:
  enum class Use : uint8_t { empty, free_block, whole, singles };
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Group {
    Use use = Use::empty;
    uint32_t made = 0;  // singles: bit i, a chunk made at place i
    uint32_t used = 0;  // singles: bit i, that chunk in use
    // The list it is on (kNone: none) and its neighbours there. A group holding singles is on
    // list k (k < per_) when it has a free chunk and k in use, on list per_ + k when it has none
    // free but a place to make one: take() looks from the fullest.
    uint32_t list = kNone, prev = kNone, next = kNone;
  };
  uint32_t full_mask() const { return per_ == 32 ? ~uint32_t{0} : (uint32_t{1} << per_) - 1; }
  uint64_t cap() const { return limit_ * per_; }  // chunks' worth
  void unlink(uint32_t group);
  void relist(uint32_t group);                  // after its use, made or used changed
  uint32_t fullest(uint32_t first_list) const;  // of lists [first, first + per_): kNone if none
  CUresult reserve_window();
  // Makes `chunks` chunks' worth (one handle) at window index `index` and maps it there.
  CUresult make(uint32_t index, uint32_t chunks);
  // Unmaps and releases what is at `index` (`chunks` worth). On a failed release it is mapped
  // back; *still_mapped says whether that worked.
  CUresult release(uint32_t index, uint32_t chunks, bool* still_mapped);
  // Releases a free block / a group's free singles; false if any would not go.
  bool release_block(uint32_t group);
  bool release_singles(uint32_t group);
  // Whether `chunks` more can be made under the limit, releasing free memory if need be (never
  // while keep_free()).
  bool room_for(uint64_t chunks);
  uint64_t release_free(uint64_t floor);

  const VmmDriver* driver_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  uint64_t capacity_;
  uint64_t limit_;  // blocks, <= capacity_
  uint32_t per_;    // chunks a block
  CUdeviceptr window_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;  // by chunk index; 0: nothing made there
  std::vector<Group> groups_;                          // capacity_ of them once the window exists
  std::vector<uint32_t> heads_;                        // 2 * per_ lists of singles groups
  std::vector<uint32_t> lengths_;
  std::vector<uint32_t> free_blocks_;  // groups holding a free block
  std::vector<uint32_t> empty_;        // groups with nothing made
  uint64_t made_ = 0;                  // chunks' worth
  uint64_t in_use_ = 0;                // chunks
  uint64_t free_singles_ = 0;          // single chunks made and not in use
  bool keep_free_ = false;
};

// The access every mapping of the engine gets: read and write for `device`.
CUmemAccessDesc device_access(CUdevice device);

}  // namespace umswap::vmm::detail
