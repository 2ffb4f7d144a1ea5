#include "umswap/vmm/detail/chunk_pool.h"

#include <algorithm>
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
                     uint64_t capacity)
    : driver_(driver), access_(device_access(device)), capacity_(capacity), limit_(capacity) {
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
  return driver_->mem_address_reserve(&window_, capacity_ * kChunk, kChunk, 0, 0);
}

CUresult ChunkPool::take(uint32_t* index) {
  if (!free_.empty()) {
    *index = free_.back();
    free_.pop_back();
    return CUDA_SUCCESS;
  }
  if (made_ >= limit_) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = reserve_window(); r != CUDA_SUCCESS) return r;

  uint32_t slot;
  if (!vacant_.empty()) {
    slot = vacant_.back();
  } else {
    slot = static_cast<uint32_t>(handles_.size());
  }
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = driver_->mem_create(&handle, kChunk, &prop_, 0); r != CUDA_SUCCESS) return r;
  const CUdeviceptr at = window_address(slot);
  CUresult r = driver_->mem_map(at, kChunk, 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    r = driver_->mem_set_access(at, kChunk, &access_, 1);
    if (r != CUDA_SUCCESS) driver_->mem_unmap(at, kChunk);
  }
  if (r != CUDA_SUCCESS) {
    driver_->mem_release(handle);
    return r;
  }
  if (!vacant_.empty()) {
    vacant_.pop_back();
    handles_[slot] = handle;
  } else {
    handles_.push_back(handle);
  }
  ++made_;
  *index = slot;
  return CUDA_SUCCESS;
}

void ChunkPool::give(uint32_t index) {
  free_.push_back(index);
}

void ChunkPool::set_limit(uint64_t chunks) {
  limit_ = std::min(chunks, capacity_);
}

uint64_t ChunkPool::trim_to_limit() {
  return release_free(limit_);
}

uint64_t ChunkPool::release_free(uint64_t floor) {
  uint64_t released = 0;
  std::vector<uint32_t> kept;
  for (uint32_t index : free_) {
    if (made_ <= floor) {
      kept.push_back(index);
      continue;
    }
    bool still_mapped = true;
    if (release_chunk(index, &still_mapped) == CUDA_SUCCESS) {
      ++released;
    } else if (still_mapped) {
      kept.push_back(index);
    }  // else unmapped and not released: never handed out again (the memory stays counted)
  }
  free_ = std::move(kept);
  return released;
}

CUresult ChunkPool::release_chunk(uint32_t index, bool* still_mapped) {
  if (still_mapped) *still_mapped = true;
  if (CUresult r = driver_->mem_unmap(window_address(index), kChunk); r != CUDA_SUCCESS) return r;
  // Unmapped and released: the driver frees the memory now (no other mapping is left).
  if (CUresult r = driver_->mem_release(handles_[index]); r != CUDA_SUCCESS) {
    // Keep the chunk usable: map it back where it was.
    const bool back =
        driver_->mem_map(window_address(index), kChunk, 0, handles_[index], 0) == CUDA_SUCCESS &&
        driver_->mem_set_access(window_address(index), kChunk, &access_, 1) == CUDA_SUCCESS;
    if (still_mapped) *still_mapped = back;
    return r;
  }
  handles_[index] = 0;
  vacant_.push_back(index);
  --made_;
  return CUDA_SUCCESS;
}

uint64_t ChunkPool::trim() {
  return release_free(0);
}

CUresult ChunkPool::destroy() {
  CUresult first = CUDA_SUCCESS;
  for (uint32_t index = 0; index < handles_.size(); ++index) {
    if (handles_[index] == 0) continue;
    if (CUresult r = release_chunk(index); r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
  }
  free_.clear();
  if (window_ != 0 && made_ == 0) {
    if (CUresult r = driver_->mem_address_free(window_, capacity_ * kChunk);
        r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
      first = r;
    }
    window_ = 0;
  }
  return first;
}

}  // namespace umswap::vmm::detail
