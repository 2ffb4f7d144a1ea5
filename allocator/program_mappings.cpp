#include "umswap/allocator/program_mappings.h"

#include <algorithm>
#include <new>

namespace umswap {

uint64_t ProgramMappings::created(uint64_t handle, uint64_t bytes, bool on_gpu) {
  std::lock_guard lock(mutex_);
  ++handles_;
  if (!on_gpu || bytes == 0) return gpu_bytes_;
  try {
    const auto [it, fresh] = gpu_handles_.try_emplace(handle, bytes);
    if (!fresh) {
      // A handle value the driver gave out again without our seeing its release: recount it.
      gpu_bytes_ -= it->second;
      it->second = bytes;
    }
  } catch (const std::bad_alloc&) {
    return gpu_bytes_;
  }
  gpu_bytes_ += bytes;
  gpu_bytes_peak_ = std::max(gpu_bytes_peak_, gpu_bytes_);
  return gpu_bytes_;
}

uint64_t ProgramMappings::released(uint64_t handle) {
  std::lock_guard lock(mutex_);
  const auto it = gpu_handles_.find(handle);
  if (it == gpu_handles_.end()) return gpu_bytes_;
  gpu_bytes_ -= it->second;
  gpu_handles_.erase(it);
  return gpu_bytes_;
}

uint64_t ProgramMappings::gpu_bytes() const {
  std::lock_guard lock(mutex_);
  return gpu_bytes_;
}

uint64_t ProgramMappings::gpu_bytes_peak() const {
  std::lock_guard lock(mutex_);
  return gpu_bytes_peak_;
}

uint64_t ProgramMappings::handles() const {
  std::lock_guard lock(mutex_);
  return handles_;
}

}  // namespace umswap
