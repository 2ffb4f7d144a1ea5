#include "umswap/allocator/program_mappings.h"

#include <algorithm>
#include <new>

namespace umswap {

void ProgramMappings::created(uint64_t handle, uint64_t bytes, bool on_gpu) {
  std::lock_guard lock(mutex_);
  ++handles_;
  created_bytes_ += bytes;
  if (!on_gpu || bytes == 0) return;
  try {
    const auto [it, fresh] = gpu_handles_.try_emplace(handle, Handle{.bytes = bytes});
    if (!fresh) {
      // A handle value the driver gave out again without our seeing its end: counted afresh.
      gpu_bytes_ -= it->second.bytes;
      it->second = Handle{.bytes = bytes};
    }
  } catch (const std::bad_alloc&) {
    return;
  }
  gpu_bytes_ += bytes;
  gpu_bytes_peak_ = std::max(gpu_bytes_peak_, gpu_bytes_.load(std::memory_order_relaxed));
}

void ProgramMappings::retained(uint64_t handle) {
  std::lock_guard lock(mutex_);
  if (const auto it = gpu_handles_.find(handle); it != gpu_handles_.end()) {
    ++it->second.references;
  }
}

void ProgramMappings::released(uint64_t handle) {
  std::lock_guard lock(mutex_);
  const auto it = gpu_handles_.find(handle);
  if (it == gpu_handles_.end() || it->second.references == 0) return;
  --it->second.references;
  drop_if_unused(it);
}

void ProgramMappings::mapped(uint64_t address, uint64_t bytes, uint64_t handle) {
  std::lock_guard lock(mutex_);
  const auto it = gpu_handles_.find(handle);
  if (it == gpu_handles_.end() || bytes == 0) return;
  try {
    if (!mappings_.emplace(address, handle).second) return;  // the driver refuses that too
  } catch (const std::bad_alloc&) {
    return;
  }
  ++it->second.mappings;
}

void ProgramMappings::unmapped(uint64_t address, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto m = mappings_.lower_bound(address);
  while (m != mappings_.end() && m->first - address < bytes) {
    const auto it = gpu_handles_.find(m->second);
    m = mappings_.erase(m);
    if (it == gpu_handles_.end() || it->second.mappings == 0) continue;
    --it->second.mappings;
    drop_if_unused(it);
  }
}

void ProgramMappings::drop_if_unused(std::unordered_map<uint64_t, Handle>::iterator it) {
  if (it->second.references > 0 || it->second.mappings > 0) return;
  gpu_bytes_ -= it->second.bytes;
  gpu_handles_.erase(it);
}

uint64_t ProgramMappings::gpu_bytes_peak() const {
  std::lock_guard lock(mutex_);
  return gpu_bytes_peak_;
}

uint64_t ProgramMappings::handles() const {
  std::lock_guard lock(mutex_);
  return handles_;
}

uint64_t ProgramMappings::created_bytes() const {
  std::lock_guard lock(mutex_);
  return created_bytes_;
}

}  // namespace umswap
