#include "umswap/vmm/chunk_arena.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <utility>

namespace umswap::vmm {
namespace {

CUmemLocation device_location(CUdevice device) {
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  return location;
}

// Host chunks on NUMA node 0: pinned host memory the GPU reads over the link (measured 50 GB/s
// from a kernel on an H200). Node 0 until the engine learns the GPU's own node.
CUmemLocation host_location() {
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  location.id = 0;
  return location;
}

Location other(Location where) {
  return where == Location::gpu ? Location::host : Location::gpu;
}

uint64_t elapsed_ns(std::chrono::steady_clock::time_point from,
                    std::chrono::steady_clock::time_point to) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

}  // namespace

uint64_t ChunkArena::gpu_limit_bytes() const {
  std::lock_guard lock(mutex_);
  return gpu_.limit() * kChunk;
}

void ChunkArena::set_gpu_limit_bytes(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  gpu_.set_limit(bytes / kChunk);
}

uint64_t ChunkArena::trim_to_limit() {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return 0;
  return gpu_.trim_to_limit() * kChunk;
}

ChunkArena::ChunkArena(const VmmDriver& driver, CUdevice device, uint64_t gpu_limit_bytes,
                       uint64_t host_limit_bytes)
    : driver_(driver),
      device_(device),
      gpu_capacity_(gpu_limit_bytes / kChunk),
      host_capacity_(host_limit_bytes / kChunk),
      gpu_(&driver_, device_location(device), device, gpu_capacity_),
      host_(&driver_, host_location(), device, host_capacity_) {}

ChunkArena::~ChunkArena() {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return;
  for (auto& [base, range] : ranges_) {
    unmap_range(base, range);
    driver_.mem_address_free(base, range.slots.size() * kChunk);
  }
  ranges_.clear();
  gpu_.destroy();
  host_.destroy();
}

CUresult ChunkArena::count(CUresult result) {
  if (result != CUDA_SUCCESS) ++stats_.failures;
  return result;
}

CUresult ChunkArena::map_slot(CUdeviceptr at, Location where, uint32_t chunk) {
  if (CUresult r = count(driver_.mem_map(at, kChunk, 0, pool(where).handle(chunk), 0));
      r != CUDA_SUCCESS) {
    return r;
  }
  const CUmemAccessDesc access = detail::device_access(device_);
  if (CUresult r = count(driver_.mem_set_access(at, kChunk, &access, 1)); r != CUDA_SUCCESS) {
    // Mapped without access is no use to a kernel; undo, so that the caller's rollback maps the
    // other chunk at a free slot.
    count(driver_.mem_unmap(at, kChunk));
    return r;
  }
  return CUDA_SUCCESS;
}

CUresult ChunkArena::unmap_range(CUdeviceptr base, Range& range) {
  CUresult first = CUDA_SUCCESS;
  for (size_t i = 0; i < range.slots.size(); ++i) {
    Slot& slot = range.slots[i];
    if (slot.mapped) {
      // A failed unmap is reported; the chunk goes back to its pool all the same (the range is
      // being given up, and nothing reads it through this address any more).
      CUresult r = count(driver_.mem_unmap(base + i * kChunk, kChunk));
      if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
      slot.mapped = false;
    } else {
      --stats_.holes;
    }
    pool(slot.where).give(slot.chunk);
  }
  return first;
}

CUresult ChunkArena::allocate(uint64_t bytes, CUdeviceptr* address) {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == 0 || address == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > std::numeric_limits<uint64_t>::max() - kChunk) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t chunks = (bytes + kChunk - 1) / kChunk;
  // Refused before any driver call when the two pools together cannot back the range.
  if (chunks > gpu_.available() + host_.available()) {
    ++stats_.out_of_memory;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }

  CUdeviceptr base = 0;
  if (CUresult r = count(driver_.mem_address_reserve(&base, chunks * kChunk, kChunk, 0, 0));
      r != CUDA_SUCCESS) {
    return r;
  }
  Range range;
  range.size = bytes;
  range.id = next_range_id_++;
  range.slots.reserve(chunks);
  CUresult r = CUDA_SUCCESS;
  for (uint64_t i = 0; i < chunks && r == CUDA_SUCCESS; ++i) {
    Slot slot;
    r = CUDA_ERROR_OUT_OF_MEMORY;
    if (gpu_.available() > 0) {
      r = gpu_.take(&slot.chunk);
      if (r == CUDA_SUCCESS) {
        slot.where = Location::gpu;
      } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        // The budget allows it but the device does not (memory used outside umswap): the chunk
        // goes to the host, where a kernel still reads it, more slowly.
        count(r);
        ++stats_.gpu_create_fallbacks;
      } else {
        count(r);
        break;
      }
    }
    if (r != CUDA_SUCCESS) {
      r = host_.take(&slot.chunk);
      slot.where = Location::host;
      if (r != CUDA_SUCCESS) {
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
          ++stats_.out_of_memory;
        } else {
          count(r);
        }
        break;
      }
    }
    const CUdeviceptr at = base + i * kChunk;
    r = count(driver_.mem_map(at, kChunk, 0, pool(slot.where).handle(slot.chunk), 0));
    if (r != CUDA_SUCCESS) {
      pool(slot.where).give(slot.chunk);
      break;
    }
    slot.mapped = true;
    range.slots.push_back(slot);
  }
  if (r == CUDA_SUCCESS) {
    // One call gives access to the whole range: every chunk of it is mapped now.
    const CUmemAccessDesc access = detail::device_access(device_);
    r = count(driver_.mem_set_access(base, chunks * kChunk, &access, 1));
  }
  if (r != CUDA_SUCCESS) {
    unmap_range(base, range);
    count(driver_.mem_address_free(base, chunks * kChunk));
    return r;
  }
  ranges_.emplace(base, std::move(range));
  ++stats_.allocations;
  *address = base;
  return CUDA_SUCCESS;
}

CUresult ChunkArena::release(CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return CUDA_ERROR_NOT_INITIALIZED;
  const auto it = ranges_.find(address);
  if (it == ranges_.end()) return CUDA_ERROR_INVALID_VALUE;
  CUresult first = unmap_range(it->first, it->second);
  const CUresult freed =
      count(driver_.mem_address_free(it->first, it->second.slots.size() * kChunk));
  if (first == CUDA_SUCCESS) first = freed;
  ranges_.erase(it);
  ++stats_.releases;
  return first;
}

Moved ChunkArena::evict(CUdeviceptr address, uint64_t length, CUstream stream) {
  return move(address, length, stream, Location::host);
}

Moved ChunkArena::restore(CUdeviceptr address, uint64_t length, CUstream stream) {
  return move(address, length, stream, Location::gpu);
}

CUresult ChunkArena::remap(CUdeviceptr at, Slot& slot, Location to, uint32_t chunk) {
  const Location from = slot.where;
  if (CUresult r = count(driver_.mem_unmap(at, kChunk)); r != CUDA_SUCCESS) {
    // Still mapped to the original, which still holds the data.
    pool(to).give(chunk);
    return r;
  }
  if (CUresult r = map_slot(at, to, chunk); r != CUDA_SUCCESS) {
    pool(to).give(chunk);
    // The original chunk was not given back yet and still holds the data: map it again.
    if (map_slot(at, from, slot.chunk) != CUDA_SUCCESS) {
      slot.mapped = false;
      ++stats_.holes;
    }
    return r;
  }
  pool(from).give(slot.chunk);
  slot.where = to;
  slot.chunk = chunk;
  ++stats_.remaps;
  return CUDA_SUCCESS;
}

Moved ChunkArena::move(CUdeviceptr address, uint64_t length, CUstream stream, Location to) {
  StagedMove staged = stage(address, length, to, stream);
  return commit(staged);
}

std::vector<StagedMove::Chunk> StagedMove::chunks() const {
  std::vector<Chunk> out;
  out.reserve(items_.size());
  for (const Item& i : items_) out.push_back({i.slot, i.from, i.to});
  return out;
}

StagedMove ChunkArena::stage(CUdeviceptr address, uint64_t length, Location to, CUstream stream,
                             const Copier& copy) {
  StagedMove staged;
  staged.to_ = to;
  staged.stream_ = stream;
  Moved& moved = staged.partial_;
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) {
    moved.result = CUDA_ERROR_NOT_INITIALIZED;
    return staged;
  }
  const CUdeviceptr end =
      length > std::numeric_limits<CUdeviceptr>::max() - address ? 0 : address + length;
  if (length == 0 || end == 0) {
    moved.result = CUDA_ERROR_INVALID_VALUE;
    return staged;
  }
  const Location from = other(to);
  auto note = [&moved](CUresult r) {
    if (moved.result == CUDA_SUCCESS) moved.result = r;
  };

  // The first range that ends after `address`.
  auto it = ranges_.upper_bound(address);
  if (it != ranges_.begin()) {
    const auto before = std::prev(it);
    if (address < before->first + before->second.slots.size() * kChunk) it = before;
  }

  // Every chunk to move gets its new chunk and its copy, while its slot stays mapped to the
  // original. The copy reads the original at its pool window, where it stays mapped for its whole
  // life: a range released before commit() leaves the copy a valid source (commit() skips it).
  bool overlaps = false;
  bool stopped = false;
  for (; it != ranges_.end() && it->first < end; ++it) {
    overlaps = true;
    const CUdeviceptr base = it->first;
    Range& range = it->second;
    std::vector<Slot>& slots = range.slots;
    const uint64_t first = (std::max(address, base) - base) / kChunk;
    const uint64_t last =
        (std::min<CUdeviceptr>(end, base + slots.size() * kChunk) - 1 - base) / kChunk;
    for (uint64_t i = first; i <= last; ++i) {
      Slot& slot = slots[i];
      const CUdeviceptr at = base + i * kChunk;
      if (!slot.mapped) {
        // A hole left by an earlier rollback: map its chunk again before anything else.
        if (CUresult r = map_slot(at, slot.where, slot.chunk); r == CUDA_SUCCESS) {
          slot.mapped = true;
          --stats_.holes;
        } else {
          note(r);
          if (slot.where == from) moved.bytes_left += kChunk;
          continue;
        }
      }
      if (slot.where != from) continue;
      if (stopped) {
        moved.bytes_left += kChunk;
        continue;
      }
      uint32_t chunk = 0;
      CUresult r = pool(to).take(&chunk);
      const CUdeviceptr dst = r == CUDA_SUCCESS ? pool(to).window_address(chunk) : 0;
      const CUdeviceptr src = pool(from).window_address(slot.chunk);
      if (r == CUDA_SUCCESS) {
        r = count(copy ? copy(dst, src, kChunk, stream)
                       : driver_.memcpy_dtod_async(dst, src, kChunk, stream));
        if (r != CUDA_SUCCESS) pool(to).give(chunk);
      } else if (r != CUDA_ERROR_OUT_OF_MEMORY) {
        count(r);
      }
      if (r != CUDA_SUCCESS) {
        note(r);
        stopped = true;
        moved.bytes_left += kChunk;
        continue;
      }
      staged.items_.push_back({at, range.id, from, slot.chunk, chunk, src, dst});
    }
  }
  if (!overlaps) moved.result = CUDA_ERROR_INVALID_VALUE;
  return staged;
}

void ChunkArena::give_back(StagedMove& staged) {
  for (const StagedMove::Item& item : staged.items_) pool(staged.to_).give(item.to_chunk);
  staged.items_.clear();
}

void ChunkArena::abort(StagedMove& staged) {
  std::lock_guard lock(mutex_);
  give_back(staged);
}

Moved ChunkArena::commit(StagedMove& staged) {
  Moved moved = staged.partial_;
  staged.partial_ = Moved();
  auto note = [&moved](CUresult r) {
    if (moved.result == CUDA_SUCCESS) moved.result = r;
  };
  std::lock_guard lock(mutex_);
  if (staged.items_.empty()) return moved;
  const Location to = staged.to_;

  // Wait for the copies before any slot changes.
  const auto started = std::chrono::steady_clock::now();
  const CUresult synced = count(driver_.stream_synchronize(staged.stream_));
  const auto copied = std::chrono::steady_clock::now();
  stats_.copy_wait_ns += elapsed_ns(started, copied);
  if (CUresult r = synced; r != CUDA_SUCCESS) {
    // The copies may not have happened: no slot changes, the new chunks go back.
    moved.bytes_left += staged.items_.size() * kChunk;
    give_back(staged);
    note(r);
    return moved;
  }
  uint64_t& copies = to == Location::host ? stats_.copies_to_host : stats_.copies_to_gpu;
  uint64_t& bytes = to == Location::host ? stats_.bytes_to_host : stats_.bytes_to_gpu;
  copies += staged.items_.size();

  // Then remap, chunk by chunk; the first failure stops the rest (their copies are wasted).
  bool stopped = false;
  for (const StagedMove::Item& item : staged.items_) {
    Slot* slot = nullptr;
    if (!stopped) {
      // The slot as it is now: still in the same range, still mapped to the chunk copied.
      if (const auto it = find(item.slot); it != ranges_.end() && it->second.id == item.range_id) {
        Slot& s = it->second.slots[(item.slot - it->first) / kChunk];
        if (s.mapped && s.where == item.from_where && s.chunk == item.from_chunk) slot = &s;
      }
    }
    if (!slot) {  // stopped, or released or moved since stage(): the copy is not wanted
      pool(to).give(item.to_chunk);
      moved.bytes_left += kChunk;
      continue;
    }
    if (CUresult r = remap(item.slot, *slot, to, item.to_chunk); r != CUDA_SUCCESS) {
      note(r);
      stopped = true;
      moved.bytes_left += kChunk;
      continue;
    }
    moved.bytes += kChunk;
    bytes += kChunk;
  }
  staged.items_.clear();
  stats_.remap_ns += elapsed_ns(copied, std::chrono::steady_clock::now());
  return moved;
}

uint64_t ChunkArena::trim() {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return 0;
  return (gpu_.trim() + host_.trim()) * kChunk;
}

uint64_t ChunkArena::gpu_bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return gpu_.in_use() * kChunk;
}

uint64_t ChunkArena::host_bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return host_.in_use() * kChunk;
}

uint64_t ChunkArena::gpu_bytes_held() const {
  std::lock_guard lock(mutex_);
  return gpu_.made() * kChunk;
}

uint64_t ChunkArena::host_bytes_held() const {
  std::lock_guard lock(mutex_);
  return host_.made() * kChunk;
}

ChunkArena::RangeMap::iterator ChunkArena::find(CUdeviceptr address) {
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return address < it->first + it->second.slots.size() * kChunk ? it : ranges_.end();
}

ChunkArena::RangeMap::const_iterator ChunkArena::find(CUdeviceptr address) const {
  return const_cast<ChunkArena*>(this)->find(address);
}

std::optional<RangeInfo> ChunkArena::range(CUdeviceptr address) const {
  std::lock_guard lock(mutex_);
  const auto it = find(address);
  if (it == ranges_.end()) return std::nullopt;
  RangeInfo info;
  info.base = it->first;
  info.size = it->second.size;
  info.reserved = it->second.slots.size() * kChunk;
  for (const Slot& slot : it->second.slots) {
    if (!slot.mapped) {
      info.unmapped_bytes += kChunk;
    } else if (slot.where == Location::gpu) {
      info.gpu_bytes += kChunk;
    } else {
      info.host_bytes += kChunk;
    }
  }
  return info;
}

std::optional<Location> ChunkArena::chunk_location(CUdeviceptr address) const {
  std::lock_guard lock(mutex_);
  const auto it = find(address);
  if (it == ranges_.end()) return std::nullopt;
  const Slot& slot = it->second.slots[(address - it->first) / kChunk];
  if (!slot.mapped) return std::nullopt;
  return slot.where;
}

bool ChunkArena::on_gpu(CUdeviceptr address) const {
  const std::optional<RangeInfo> info = range(address);
  return info && info->gpu_bytes == info->reserved;
}

ArenaStats ChunkArena::stats() const {
  std::lock_guard lock(mutex_);
  ArenaStats s = stats_;
  s.ranges = ranges_.size();
  s.chunks_mapped = 0;
  for (const auto& [base, range] : ranges_) {
    for (const Slot& slot : range.slots) s.chunks_mapped += slot.mapped ? 1 : 0;
  }
  s.gpu_chunks_made = gpu_.made();
  s.host_chunks_made = host_.made();
  return s;
}

}  // namespace umswap::vmm
