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

uint64_t ChunkPool::available() const {
  return split_free_chunks_ + available_blocks() * per_;
}

CUresult ChunkPool::reserve_window() {
  if (window_ != 0) return CUDA_SUCCESS;
  // Reserved on first use: an arena that never needs host chunks reserves no host window.
  return driver_->mem_address_reserve(&window_, capacity_ * block_bytes(), block_bytes(), 0, 0);
}

CUresult ChunkPool::block(uint32_t* number) {
  if (!free_blocks_.empty()) {
    *number = free_blocks_.back();
    free_blocks_.pop_back();
    return CUDA_SUCCESS;
  }
  if (made_ >= limit_) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = reserve_window(); r != CUDA_SUCCESS) return r;

  const uint32_t n = vacant_.empty() ? static_cast<uint32_t>(handles_.size()) : vacant_.back();
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = driver_->mem_create(&handle, block_bytes(), &prop_, 0); r != CUDA_SUCCESS) {
    return r;
  }
  const CUdeviceptr at = window_address(n * per_);
  CUresult r = driver_->mem_map(at, block_bytes(), 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    r = driver_->mem_set_access(at, block_bytes(), &access_, 1);
    if (r != CUDA_SUCCESS) driver_->mem_unmap(at, block_bytes());
  }
  if (r != CUDA_SUCCESS) {
    driver_->mem_release(handle);
    return r;
  }
  if (!vacant_.empty()) {
    vacant_.pop_back();
    handles_[n] = handle;
  } else {
    handles_.push_back(handle);
    use_.push_back(Use::none);
    used_.push_back(0);
  }
  ++made_;
  *number = n;
  return CUDA_SUCCESS;
}

CUresult ChunkPool::take(uint32_t* index) {
  // Every split block with a free chunk is listed (stale entries too, dropped here).
  if (split_free_chunks_ == 0) split_free_.clear();
  while (!split_free_.empty()) {
    const uint32_t n = split_free_.back();
    const uint32_t full = full_mask();
    if (use_[n] != Use::split || used_[n] == full) {
      split_free_.pop_back();  // stale: whole since, or no free chunk left
      continue;
    }
    const uint32_t i = static_cast<uint32_t>(std::countr_one(used_[n]));
    used_[n] |= uint32_t{1} << i;
    if (used_[n] == full) split_free_.pop_back();
    --split_free_chunks_;
    ++in_use_;
    *index = n * per_ + i;
    return CUDA_SUCCESS;
  }
  uint32_t n = 0;
  if (CUresult r = block(&n); r != CUDA_SUCCESS) return r;
  use_[n] = Use::split;
  used_[n] = 1;
  split_free_chunks_ += per_ - 1;
  if (per_ > 1) split_free_.push_back(n);
  ++in_use_;
  *index = n * per_;
  return CUDA_SUCCESS;
}

CUresult ChunkPool::take_block(uint32_t* index) {
  uint32_t n = 0;
  if (CUresult r = block(&n); r != CUDA_SUCCESS) return r;
  use_[n] = Use::whole;
  in_use_ += per_;
  *index = n * per_;
  return CUDA_SUCCESS;
}

void ChunkPool::give(uint32_t index) {
  const uint32_t n = index / per_;
  const bool was_full = used_[n] == full_mask();
  used_[n] &= ~(uint32_t{1} << (index % per_));
  --in_use_;
  if (used_[n] == 0) {
    use_[n] = Use::free;
    split_free_chunks_ -= per_ - 1;
    free_blocks_.push_back(n);
  } else {
    ++split_free_chunks_;
    if (was_full) split_free_.push_back(n);  // it has a free chunk again
  }
}

void ChunkPool::give_block(uint32_t index) {
  const uint32_t n = index / per_;
  use_[n] = Use::free;
  in_use_ -= per_;
  free_blocks_.push_back(n);
}

void ChunkPool::set_limit(uint64_t blocks) {
  limit_ = std::min(blocks, capacity_);
}

uint64_t ChunkPool::trim_to_limit() {
  return release_free(limit_);
}

uint64_t ChunkPool::release_free(uint64_t floor) {
  uint64_t released = 0;
  std::vector<uint32_t> kept;
  for (uint32_t n : free_blocks_) {
    if (made_ <= floor) {
      kept.push_back(n);
      continue;
    }
    bool still_mapped = true;
    if (release_block(n, &still_mapped) == CUDA_SUCCESS) {
      ++released;
    } else if (still_mapped) {
      kept.push_back(n);
    }  // else unmapped and not released: never handed out again (the memory stays counted)
  }
  free_blocks_ = std::move(kept);
  return released;
}

CUresult ChunkPool::release_block(uint32_t n, bool* still_mapped) {
  if (still_mapped) *still_mapped = true;
  const CUdeviceptr at = window_address(n * per_);
  if (CUresult r = driver_->mem_unmap(at, block_bytes()); r != CUDA_SUCCESS) return r;
  // Unmapped and released: the driver frees the memory now (no other mapping is left).
  if (CUresult r = driver_->mem_release(handles_[n]); r != CUDA_SUCCESS) {
    // Keep the block usable: map it back where it was.
    const bool back = driver_->mem_map(at, block_bytes(), 0, handles_[n], 0) == CUDA_SUCCESS &&
                      driver_->mem_set_access(at, block_bytes(), &access_, 1) == CUDA_SUCCESS;
    if (still_mapped) *still_mapped = back;
    return r;
  }
  handles_[n] = 0;
  use_[n] = Use::none;
  used_[n] = 0;
  vacant_.push_back(n);
  --made_;
  return CUDA_SUCCESS;
}

uint64_t ChunkPool::trim() {
  return release_free(0);
}

CUresult ChunkPool::destroy() {
  CUresult first = CUDA_SUCCESS;
  for (uint32_t n = 0; n < handles_.size(); ++n) {
    if (handles_[n] == 0) continue;
    if (CUresult r = release_block(n); r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
  }
  free_blocks_.clear();
  split_free_.clear();
  split_free_chunks_ = 0;
  if (window_ != 0 && made_ == 0) {
    if (CUresult r = driver_->mem_address_free(window_, capacity_ * block_bytes());
        r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
      first = r;
    }
    window_ = 0;
  }
  return first;
}

}  // namespace umswap::vmm::detail
