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
  empty_.clear();
  for (uint64_t g = capacity_; g > 0; --g) empty_.push_back(static_cast<uint32_t>(g - 1));
  return CUDA_SUCCESS;
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

void ChunkPool::list_singles(uint32_t group) {
  if (groups_[group].listed) return;
  groups_[group].listed = true;
  singles_.push_back(group);
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
  return all;
}

bool ChunkPool::room_for(uint64_t chunks) {
  const uint64_t cap = limit_ * per_;
  while (made_ + chunks > cap && !free_blocks_.empty()) {
    const uint32_t g = free_blocks_.back();
    free_blocks_.pop_back();
    if (!release_block(g)) break;
  }
  for (size_t k = 0; made_ + chunks > cap && k < singles_.size(); ++k) {
    const uint32_t g = singles_[k];
    if (groups_[g].use == Use::singles && (groups_[g].made & ~groups_[g].used) != 0) {
      release_singles(g);
    }
  }
  return made_ + chunks <= cap;
}

CUresult ChunkPool::take(uint32_t* index) {
  if (!can_take()) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = reserve_window(); r != CUDA_SUCCESS) return r;
  // The fullest group holding a free single chunk, else the fullest with a place to make one:
  // singles packed into few groups leave the others whole for blocks. Stale entries dropped.
  uint32_t with_free = UINT32_MAX, with_place = UINT32_MAX;
  int most_free = -1, most_place = -1;
  for (size_t k = 0; k < singles_.size();) {
    const uint32_t n = singles_[k];
    Group& g = groups_[n];
    if (g.use != Use::singles) {
      g.listed = false;
      singles_[k] = singles_.back();
      singles_.pop_back();
      continue;
    }
    const int used = std::popcount(g.used);
    if ((g.made & ~g.used) != 0 && used > most_free) {
      most_free = used;
      with_free = n;
    } else if (std::popcount(g.made) < static_cast<int>(per_) && used > most_place) {
      most_place = used;
      with_place = n;
    }
    ++k;
  }
  if (with_free != UINT32_MAX) {
    Group& g = groups_[with_free];
    const uint32_t i = static_cast<uint32_t>(std::countr_zero(g.made & ~g.used));
    g.used |= uint32_t{1} << i;
    --free_singles_;
    ++in_use_;
    *index = with_free * per_ + i;
    return CUDA_SUCCESS;
  }
  if (!room_for(1)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint32_t n = with_place;
  if (n == UINT32_MAX || groups_[n].use != Use::singles) {
    if (empty_.empty()) return CUDA_ERROR_OUT_OF_MEMORY;
    n = empty_.back();
    empty_.pop_back();
    groups_[n] = Group{Use::singles, 0, 0, groups_[n].listed};
    list_singles(n);
  }
  Group& g = groups_[n];
  const uint32_t i = static_cast<uint32_t>(std::countr_one(g.made));
  if (CUresult r = make(n * per_ + i, 1); r != CUDA_SUCCESS) {
    if (g.made == 0) {
      g.use = Use::empty;
      empty_.push_back(n);
    }
    return r;
  }
  g.made |= uint32_t{1} << i;
  g.used |= uint32_t{1} << i;
  ++in_use_;
  *index = n * per_ + i;
  return CUDA_SUCCESS;
}

bool ChunkPool::can_place(uint64_t blocks, uint64_t chunks) const {
  if (in_use_ + blocks * per_ + chunks > limit_ * per_) return false;
  if (blocks == 0) return true;
  uint64_t whole = free_blocks_.size() + (window_ == 0 ? capacity_ : empty_.size());
  for (size_t k = 0; whole < blocks && k < singles_.size(); ++k) {
    const Group& g = groups_[singles_[k]];
    whole += g.use == Use::singles && g.used == 0 ? 1 : 0;
  }
  return whole >= blocks;
}

bool ChunkPool::can_take_block() const {
  if (!free_blocks_.empty()) return true;
  if (in_use_ + per_ > limit_ * per_) return false;
  if (!empty_.empty() || window_ == 0) return true;
  for (uint32_t n : singles_) {
    if (groups_[n].use == Use::singles && groups_[n].used == 0) return true;
  }
  return false;
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
  // An empty group: if none, one whose singles are all free, released.
  for (size_t k = 0; empty_.empty() && k < singles_.size(); ++k) {
    const uint32_t n = singles_[k];
    if (groups_[n].use == Use::singles && groups_[n].used == 0) release_singles(n);
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
  Group& g = groups_[index / per_];
  g.used &= ~(uint32_t{1} << (index % per_));
  --in_use_;
  ++free_singles_;
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
  for (size_t k = 0; made_ > floor && k < singles_.size(); ++k) {
    const uint32_t n = singles_[k];
    if (groups_[n].use == Use::singles) release_singles(n);
  }
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
  singles_.clear();
  empty_.clear();
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
