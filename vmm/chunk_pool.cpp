#include "umswap/vmm/detail/chunk_pool.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace umswap::vmm::detail {

CUmemAccessDesc device_access(CUdevice device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

ChunkPool::ChunkPool(const VmmDriver* driver, CUmemLocation location, CUdevice device,
                     uint64_t capacity, uint32_t chunks_per_block)
    : driver_(driver),
      access_(device_access(device)),
      capacity_(capacity),
      limit_(capacity),
      per_(std::clamp<uint32_t>(std::bit_floor(std::max<uint32_t>(chunks_per_block, 1)), 1,
                                kMaxChunksPerBlock)) {
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop_.location = location;
}

CUdeviceptr ChunkPool::window_address(uint32_t index) const {
  return window_ + CUdeviceptr{index} * kChunk;
}

CUresult ChunkPool::reserve_window() {
  if (window_ != 0) return CUDA_SUCCESS;
  // Reserved on first use: an arena that never needs host chunks reserves no host window.
  if (CUresult r = driver_->mem_address_reserve(&window_, capacity_ * block_bytes(), kChunk, 0, 0);
      r != CUDA_SUCCESS) {
    window_ = 0;
    return r;
  }
  groups_.assign(capacity_, Group{});
  handles_.assign(capacity_ * per_, 0);
  heads_.assign(2 * per_, kNone);
  lengths_.assign(2 * per_, 0);
  empty_.clear();
  for (uint64_t g = capacity_; g > 0; --g) empty_.push_back(static_cast<uint32_t>(g - 1));
  return CUDA_SUCCESS;
}

void ChunkPool::unlink(uint32_t n) {
  Group& g = groups_[n];
  if (g.list == kNone) return;
  if (g.prev != kNone) {
    groups_[g.prev].next = g.next;
  } else {
    heads_[g.list] = g.next;
  }
  if (g.next != kNone) groups_[g.next].prev = g.prev;
  --lengths_[g.list];
  g.list = g.prev = g.next = kNone;
}

void ChunkPool::relist(uint32_t n) {
  Group& g = groups_[n];
  uint32_t want = kNone;
  if (g.use == Use::singles) {
    const uint32_t in_use = static_cast<uint32_t>(std::popcount(g.used));
    if ((g.made & ~g.used) != 0) {
      want = in_use;
    } else if (g.made != full_mask()) {
      want = per_ + in_use;
    }
  }
  if (want == g.list) return;
  unlink(n);
  if (want == kNone) return;
  g.list = want;
  g.next = heads_[want];
  if (g.next != kNone) groups_[g.next].prev = n;
  heads_[want] = n;
  ++lengths_[want];
}

uint32_t ChunkPool::fullest(uint32_t first) const {
  for (uint32_t k = per_; k > 0; --k) {
    if (heads_[first + k - 1] != kNone) return heads_[first + k - 1];
  }
  return kNone;
}

CUresult ChunkPool::make(uint32_t index, uint32_t chunks) {
  const uint64_t bytes = uint64_t{chunks} * kChunk;
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = driver_->mem_create(&handle, bytes, &prop_, 0); r != CUDA_SUCCESS) return r;
  const CUdeviceptr at = window_address(index);
  CUresult r = driver_->mem_map(at, bytes, 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    r = driver_->mem_set_access(at, bytes, &access_, 1);
    if (r != CUDA_SUCCESS) driver_->mem_unmap(at, bytes);
  }
  if (r != CUDA_SUCCESS) {
    driver_->mem_release(handle);
    return r;
  }
  handles_[index] = handle;
  made_ += chunks;
  return CUDA_SUCCESS;
}

CUresult ChunkPool::release(uint32_t index, uint32_t chunks, bool* still_mapped) {
  const uint64_t bytes = uint64_t{chunks} * kChunk;
  const CUdeviceptr at = window_address(index);
  *still_mapped = true;
  if (CUresult r = driver_->mem_unmap(at, bytes); r != CUDA_SUCCESS) return r;
  // Unmapped and released: the driver frees the memory now (no other mapping is left).
  if (CUresult r = driver_->mem_release(handles_[index]); r != CUDA_SUCCESS) {
    // Keep it usable: map it back where it was.
    *still_mapped = driver_->mem_map(at, bytes, 0, handles_[index], 0) == CUDA_SUCCESS &&
                    driver_->mem_set_access(at, bytes, &access_, 1) == CUDA_SUCCESS;
    return r;
  }
  handles_[index] = 0;
  made_ -= chunks;
  return CUDA_SUCCESS;
}

// A free block that will not go stays free; one unmapped and not released is never handed out
// again (its memory stays counted, as in use).
bool ChunkPool::release_block(uint32_t group) {
  bool still_mapped = true;
  if (release(group * per_, per_, &still_mapped) == CUDA_SUCCESS) {
    groups_[group].use = Use::empty;
    empty_.push_back(group);
    return true;
  }
  if (!still_mapped) {
    groups_[group].use = Use::whole;
    in_use_ += per_;
  } else {
    free_blocks_.push_back(group);
  }
  return false;
}

bool ChunkPool::release_singles(uint32_t group) {
  Group& g = groups_[group];
  bool all = true;
  for (uint32_t free = g.made & ~g.used; free != 0; free &= free - 1) {
    const uint32_t i = static_cast<uint32_t>(std::countr_zero(free));
    bool still_mapped = true;
    if (release(group * per_ + i, 1, &still_mapped) == CUDA_SUCCESS) {
      g.made &= ~(uint32_t{1} << i);
      --free_singles_;
    } else {
      all = false;
      if (!still_mapped) {  // lost: never handed out again
        g.used |= uint32_t{1} << i;
        --free_singles_;
        ++in_use_;
      }
    }
  }
  if (g.made == 0) {
    g.use = Use::empty;
    empty_.push_back(group);
  }
  relist(group);
  return all;
}

bool ChunkPool::room_for(uint64_t chunks) {
  if (keep_free_) return made_ + chunks <= cap();
  while (made_ + chunks > cap() && !free_blocks_.empty()) {
    const uint32_t n = free_blocks_.back();
    free_blocks_.pop_back();
    if (!release_block(n)) break;
  }
  // Then free single chunks, from the groups with the fewest in use.
  for (uint32_t k = 0; made_ + chunks > cap() && k < per_; ++k) {
    while (made_ + chunks > cap() && heads_[k] != kNone) {
      if (!release_singles(heads_[k])) return false;
    }
  }
  return made_ + chunks <= cap();
}

bool ChunkPool::can_take() const {
  if (in_use_ >= cap()) return false;
  if (!keep_free_) return true;  // room_for() can release what is free
  if (free_singles_ > 0) return true;
  if (made_ + 1 > cap()) return false;
  return window_ == 0 || !empty_.empty() || fullest(per_) != kNone;
}

CUresult ChunkPool::take(uint32_t* index) {
  if (!can_take()) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = reserve_window(); r != CUDA_SUCCESS) return r;
  // A free single chunk, from the fullest group that has one: singles packed into few groups
  // leave the others whole for blocks.
  if (const uint32_t n = fullest(0); n != kNone) {
    Group& g = groups_[n];
    const uint32_t i = static_cast<uint32_t>(std::countr_zero(g.made & ~g.used));
    g.used |= uint32_t{1} << i;
    --free_singles_;
    ++in_use_;
    relist(n);
    *index = n * per_ + i;
    return CUDA_SUCCESS;
  }
  if (!room_for(1)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint32_t n = fullest(per_);
  if (n == kNone) {
    if (empty_.empty()) return CUDA_ERROR_OUT_OF_MEMORY;
    n = empty_.back();
    empty_.pop_back();
    groups_[n].use = Use::singles;
  }
  Group& g = groups_[n];
  const uint32_t i = static_cast<uint32_t>(std::countr_one(g.made));
  if (CUresult r = make(n * per_ + i, 1); r != CUDA_SUCCESS) {
    if (g.made == 0) {
      g.use = Use::empty;
      empty_.push_back(n);
    }
    relist(n);
    return r;
  }
  g.made |= uint32_t{1} << i;
  g.used |= uint32_t{1} << i;
  ++in_use_;
  relist(n);
  *index = n * per_ + i;
  return CUDA_SUCCESS;
}

bool ChunkPool::can_take_block() const {
  if (in_use_ + per_ > cap()) return false;
  if (!free_blocks_.empty()) return true;
  if (keep_free_) return made_ + per_ <= cap() && (window_ == 0 || !empty_.empty());
  // room_for() can release what is free; a group whose chunks are all free can be emptied.
  return window_ == 0 || !empty_.empty() || heads_[0] != kNone;
}

bool ChunkPool::can_place(uint64_t blocks, uint64_t chunks) const {
  if (in_use_ + blocks * per_ + chunks > cap()) return false;
  if (keep_free_) return blocks <= free_blocks_.size() && chunks <= free_singles_;
  if (blocks == 0) return true;
  const uint64_t whole =
      free_blocks_.size() + (window_ == 0 ? capacity_ : empty_.size() + lengths_[0]);
  return whole >= blocks;
}

CUresult ChunkPool::take_block(uint32_t* index) {
  if (!can_take_block()) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = reserve_window(); r != CUDA_SUCCESS) return r;
  if (!free_blocks_.empty()) {
    const uint32_t n = free_blocks_.back();
    free_blocks_.pop_back();
    groups_[n].use = Use::whole;
    in_use_ += per_;
    *index = n * per_;
    return CUDA_SUCCESS;
  }
  // An empty group: if none, one whose chunks are all free, released.
  while (!keep_free_ && empty_.empty() && heads_[0] != kNone) {
    if (!release_singles(heads_[0])) break;
  }
  if (empty_.empty() || !room_for(per_)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint32_t n = empty_.back();
  empty_.pop_back();
  if (CUresult r = make(n * per_, per_); r != CUDA_SUCCESS) {
    empty_.push_back(n);
    return r;
  }
  groups_[n].use = Use::whole;
  in_use_ += per_;
  *index = n * per_;
  return CUDA_SUCCESS;
}

void ChunkPool::give(uint32_t index) {
  const uint32_t n = index / per_;
  groups_[n].used &= ~(uint32_t{1} << (index % per_));
  --in_use_;
  ++free_singles_;
  relist(n);
}

void ChunkPool::give_block(uint32_t index) {
  const uint32_t n = index / per_;
  groups_[n].use = Use::free_block;
  in_use_ -= per_;
  free_blocks_.push_back(n);
}

void ChunkPool::set_limit(uint64_t blocks) {
  limit_ = std::min(blocks, capacity_);
}

uint64_t ChunkPool::release_free(uint64_t floor) {
  const uint64_t before = made_;
  std::vector<uint32_t> blocks = std::move(free_blocks_);
  free_blocks_.clear();
  for (uint32_t n : blocks) {
    if (made_ <= floor) {
      free_blocks_.push_back(n);
      continue;
    }
    release_block(n);  // one that will not go goes back on the list
  }
  // Groups with free single chunks, fewest in use first; one whose chunks would not go is left.
  std::vector<uint32_t> groups;
  for (uint32_t k = 0; k < per_ && !heads_.empty(); ++k) {
    for (uint32_t n = heads_[k]; n != kNone; n = groups_[n].next) groups.push_back(n);
  }
  for (size_t k = 0; made_ > floor && k < groups.size(); ++k) release_singles(groups[k]);
  return before - made_;
}

uint64_t ChunkPool::trim_to_limit() {
  return release_free(limit_ * per_);
}

uint64_t ChunkPool::trim() {
  return release_free(0);
}

CUresult ChunkPool::destroy() {
  CUresult first = CUDA_SUCCESS;
  auto note = [&first](CUresult r) {
    if (first == CUDA_SUCCESS) first = r;
  };
  for (uint32_t n = 0; n < groups_.size(); ++n) {
    Group& g = groups_[n];
    bool still_mapped = true;
    if (g.use == Use::whole || g.use == Use::free_block) {
      if (CUresult r = release(n * per_, per_, &still_mapped); r != CUDA_SUCCESS) note(r);
    } else if (g.use == Use::singles) {
      for (uint32_t made = g.made; made != 0; made &= made - 1) {
        const uint32_t i = static_cast<uint32_t>(std::countr_zero(made));
        if (CUresult r = release(n * per_ + i, 1, &still_mapped); r != CUDA_SUCCESS) note(r);
      }
    }
    g = Group{};
  }
  free_blocks_.clear();
  empty_.clear();
  heads_.assign(heads_.size(), kNone);
  lengths_.assign(lengths_.size(), 0);
  free_singles_ = 0;
  in_use_ = 0;
  if (window_ != 0 && made_ == 0) {
    if (CUresult r = driver_->mem_address_free(window_, capacity_ * block_bytes());
        r != CUDA_SUCCESS) {
      note(r);
    }
    window_ = 0;
  }
  return first;
}

}  // namespace umswap::vmm::detail
