#include "umswap/allocator/virtual_handles.h"

namespace umswap {

CUmemGenericAllocationHandle VirtualHandles::create(uint64_t bytes,
                                                    const CUmemAllocationProp& prop) {
  std::lock_guard lock(mutex_);
  const CUmemGenericAllocationHandle h = kTag | next_++;
  Handle& handle = handles_[h];
  handle.bytes = bytes;
  handle.prop = prop;
  return h;
}

VirtualHandles::MapDecision VirtualHandles::map(CUmemGenericAllocationHandle h, CUdeviceptr address,
                                                uint64_t bytes, uint64_t offset) {
  MapDecision d;
  if (!is_virtual(h)) return d;
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end() || it->second.references == 0) return d;  // the driver would refuse it
  Handle& handle = it->second;
  if (handle.real != 0) {
    d.action = MapAction::real;
    d.real_handle = handle.real;
    return d;
  }
  if (handle.mapped_at != 0 || handle.lost || handle.claimed) {
    d.action = MapAction::refuse;
    return d;
  }
  const bool whole = offset == 0 && bytes == handle.bytes && address != 0;
  d.action = whole ? MapAction::engine : MapAction::materialize;
  handle.claimed = true;  // until mapped(), set_real() or unclaim()
  d.bytes = handle.bytes;
  d.prop = handle.prop;
  return d;
}

void VirtualHandles::mapped(CUmemGenericAllocationHandle h, CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end()) return;
  it->second.mapped_at = address;
  it->second.claimed = false;
  mappings_[address] = Mapping{it->second.bytes, h};
}

void VirtualHandles::unclaim(CUmemGenericAllocationHandle h) {
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end()) return;
  it->second.claimed = false;
  drop_if_unused(it);
}

CUmemGenericAllocationHandle VirtualHandles::set_real(CUmemGenericAllocationHandle h,
                                                      CUmemGenericAllocationHandle real) {
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end()) return 0;
  if (it->second.real != 0) return it->second.real;
  if (it->second.mapped_at != 0 || it->second.lost) return 0;
  it->second.real = real;
  it->second.claimed = false;
  ++materialized_;
  return real;
}

std::optional<CUmemGenericAllocationHandle> VirtualHandles::real(
    CUmemGenericAllocationHandle h) const {
  if (!is_virtual(h)) return std::nullopt;
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end() || it->second.real == 0) return std::nullopt;
  return it->second.real;
}

VirtualHandles::Covered VirtualHandles::covering(CUdeviceptr address, uint64_t bytes) const {
  Covered c;
  const CUdeviceptr end = address + bytes;
  std::lock_guard lock(mutex_);
  auto it = mappings_.upper_bound(address);
  if (it != mappings_.begin()) {
    const auto before = std::prev(it);
    if (before->first + before->second.bytes > address) it = before;
  }
  CUdeviceptr at = address;
  for (; it != mappings_.end() && it->first < end; ++it) {
    if (it->first >= address && it->first + it->second.bytes <= end) {
      c.whole.emplace_back(it->first, it->second.bytes);
      if (at < it->first) c.others.emplace_back(at, it->first);
      at = it->first + it->second.bytes;
    } else {
      c.cuts = true;
    }
  }
  if (at < end) c.others.emplace_back(at, end);
  return c;
}

void VirtualHandles::unmapped(CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  const auto m = mappings_.find(address);
  if (m == mappings_.end()) return;
  const auto it = handles_.find(m->second.handle);
  mappings_.erase(m);
  if (it == handles_.end()) return;
  it->second.mapped_at = 0;
  it->second.lost = true;
  drop_if_unused(it);
}

std::optional<VirtualHandles::Released> VirtualHandles::release(CUmemGenericAllocationHandle h) {
  if (!is_virtual(h)) return std::nullopt;
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end() || it->second.references == 0) return std::nullopt;
  const Released r{--it->second.references, it->second.real};
  drop_if_unused(it);
  return r;
}

std::optional<CUmemGenericAllocationHandle> VirtualHandles::retain(CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  auto m = mappings_.upper_bound(address);
  if (m == mappings_.begin()) return std::nullopt;
  --m;
  if (address >= m->first + m->second.bytes) return std::nullopt;
  const auto it = handles_.find(m->second.handle);
  if (it == handles_.end()) return std::nullopt;
  ++it->second.references;
  return it->first;
}

std::optional<CUmemAllocationProp> VirtualHandles::properties(
    CUmemGenericAllocationHandle h) const {
  if (!is_virtual(h)) return std::nullopt;
  std::lock_guard lock(mutex_);
  const auto it = handles_.find(h);
  if (it == handles_.end() || it->second.references == 0) return std::nullopt;
  return it->second.prop;
}

uint64_t VirtualHandles::live() const {
  std::lock_guard lock(mutex_);
  return handles_.size();
}

uint64_t VirtualHandles::materialized() const {
  std::lock_guard lock(mutex_);
  return materialized_;
}

uint64_t VirtualHandles::pending_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t bytes = 0;
  for (const auto& [h, handle] : handles_) {
    if (handle.mapped_at == 0 && !handle.lost && handle.real == 0 && !handle.claimed) {
      bytes += handle.bytes;
    }
  }
  return bytes;
}

void VirtualHandles::drop_if_unused(std::unordered_map<uint64_t, Handle>::iterator it) {
  const Handle& h = it->second;
  // A materialized handle is the driver's from its last release (its mappings are the driver's).
  if (h.references == 0 && !h.claimed && (h.mapped_at == 0 || h.real != 0)) handles_.erase(it);
}

}  // namespace umswap
