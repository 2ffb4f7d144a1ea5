#include "umswap/vmm/chunk_arena.h"

#include <algorithm>
#include <bit>
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
  return gpu_.limit() * block_bytes();
}

void ChunkArena::set_gpu_limit_bytes(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  gpu_.set_limit(bytes / block_bytes());
}

uint64_t ChunkArena::trim_to_limit() {
  std::lock_guard lock(mutex_);
  if (!driver_.complete() || staged_ > 0) return 0;
  return gpu_.trim_to_limit() * kChunk;
}

uint32_t ChunkArena::chunks_per_block_for(uint64_t gpu_limit_bytes) {
  uint32_t per = detail::ChunkPool::kMaxChunksPerBlock;
  while (per > 1 && gpu_limit_bytes / (uint64_t{per} * kChunk) < kMinBlocks) per /= 2;
  return std::min<uint32_t>(per, kLargestBlock / kChunk);
}

ChunkArena::ChunkArena(const VmmDriver& driver, CUdevice device, uint64_t gpu_limit_bytes,
                       uint64_t host_limit_bytes, uint32_t chunks_per_block)
    : driver_(driver),
      device_(device),
      per_(std::clamp<uint32_t>(std::bit_floor(std::max<uint32_t>(chunks_per_block, 1)), 1,
                                detail::ChunkPool::kMaxChunksPerBlock)),
      gpu_capacity_(gpu_limit_bytes / block_bytes()),
      host_capacity_(host_limit_bytes / block_bytes()),
      gpu_(&driver_, device_location(device), device, gpu_capacity_, per_),
      host_(&driver_, host_location(), device, host_capacity_, per_) {}

ChunkArena::~ChunkArena() {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return;
  for (auto& [base, range] : ranges_) {
    unmap_range(base, range);
    if (range.owns_addresses) driver_.mem_address_free(base, range.reserved);
  }
  ranges_.clear();
  gpu_.destroy();
  host_.destroy();
}

CUresult ChunkArena::count(CUresult result) {
  if (result != CUDA_SUCCESS) ++stats_.failures;
  return result;
}

void ChunkArena::give(Location where, uint32_t chunk, bool whole) {
  if (whole) {
    pool(where).give_block(chunk);
  } else {
    pool(where).give(chunk);
  }
}

CUresult ChunkArena::take(Location where, bool whole, uint32_t* chunk) {
  return whole ? pool(where).take_block(chunk) : pool(where).take(chunk);
}

CUresult ChunkArena::map_slot(CUdeviceptr at, uint64_t bytes, Location where, uint32_t chunk) {
  detail::ChunkPool& p = pool(where);
  if (CUresult r = count(driver_.mem_map(at, bytes, 0, p.handle(chunk), 0)); r != CUDA_SUCCESS) {
    return r;
  }
  const CUmemAccessDesc access = detail::device_access(device_);
  if (CUresult r = count(driver_.mem_set_access(at, bytes, &access, 1)); r != CUDA_SUCCESS) {
    // Mapped without access is no use to a kernel; undo, so that the caller's rollback maps the
    // other chunk at a free slot.
    count(driver_.mem_unmap(at, bytes));
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
      CUresult r = count(driver_.mem_unmap(base + range.offset(i), range.bytes(i)));
      if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
      slot.mapped = false;
    } else {
      --stats_.holes;
    }
    give(slot.where, slot.chunk, range.whole(i));
  }
  return first;
}

CUresult ChunkArena::allocate(uint64_t bytes, CUdeviceptr* address) {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == 0 || address == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate_locked(bytes, 0, address);
}

CUresult ChunkArena::allocate_at(CUdeviceptr address, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == 0 || address == 0 || address % kChunk != 0 || bytes % kChunk != 0 ||
      address > std::numeric_limits<uint64_t>::max() - bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // No live range may share a byte with it.
  const auto after = ranges_.lower_bound(address);
  if (after != ranges_.end() && after->first < address + bytes) return CUDA_ERROR_INVALID_VALUE;
  if (find(address) != ranges_.end()) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr out = 0;
  return allocate_locked(bytes, address, &out);
}

uint64_t ChunkArena::reserved_for(uint64_t bytes) const {
  uint64_t chunks = (bytes + kChunk - 1) / kChunk;
  // With blocks of 16 MiB (the engine's for a pool of 512 MiB or more), a tail of half a block or
  // more is one piece, not four to seven chunks: fewer mappings per move and per allocation for
  // up to half a block more (run 218).
  if (per_ >= kRoundedTailBlock && 2 * (chunks % per_) >= per_) chunks += per_ - chunks % per_;
  return chunks * kChunk;
}

CUresult ChunkArena::allocate_locked(uint64_t bytes, CUdeviceptr at, CUdeviceptr* address) {
  if (bytes > std::numeric_limits<uint64_t>::max() - 2 * block_bytes()) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint64_t chunks = at == 0 ? reserved_for(bytes) / kChunk : (bytes + kChunk - 1) / kChunk;
  // Refused before any driver call when the two pools together cannot back the range.
  if (chunks > gpu_.available() + host_.available()) {
    ++stats_.out_of_memory;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }

  CUdeviceptr base = at;
  if (at == 0) {
    if (CUresult r = count(driver_.mem_address_reserve(&base, chunks * kChunk, kChunk, 0, 0));
        r != CUDA_SUCCESS) {
      return r;
    }
  }
  Range range;
  range.size = bytes;
  range.owns_addresses = at == 0;
  range.id = next_range_id_++;
  range.reserved = chunks * kChunk;
  range.block = block_bytes();
  // Whole blocks for the range's leading pieces, 2 MiB chunks for the rest; if blocks run out
  // where chunks would not (blocks split by small ranges), chunks only.
  const uint64_t fallbacks = stats_.gpu_create_fallbacks;
  CUresult r = back(base, range, per_ > 1 ? chunks / per_ : 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && range.large > 0) {
    stats_.gpu_create_fallbacks = fallbacks;  // counted again by the second try
    unmap_range(base, range);
    range.slots.clear();
    r = back(base, range, 0);
  }
  if (r == CUDA_SUCCESS) {
    // One call gives access to the whole range: every piece of it is mapped now.
    const CUmemAccessDesc access = detail::device_access(device_);
    r = count(driver_.mem_set_access(base, range.reserved, &access, 1));
  }
  if (r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) ++stats_.out_of_memory;
    unmap_range(base, range);
    if (range.owns_addresses) count(driver_.mem_address_free(base, range.reserved));
    return r;
  }
  stats_.pieces_whole += range.large;
  for (size_t i = 0; i < range.slots.size(); ++i) {
    if (range.slots[i].where == Location::host) stats_.bytes_allocated_on_host += range.bytes(i);
  }
  ranges_.emplace(base, std::move(range));
  ++stats_.allocations;
  *address = base;
  return CUDA_SUCCESS;
}

CUresult ChunkArena::back(CUdeviceptr base, Range& range, uint64_t large) {
  range.large = large;
  const uint64_t pieces = large + (range.reserved - large * range.block) / kChunk;
  range.slots.reserve(pieces);
  for (uint64_t i = 0; i < pieces; ++i) {
    const bool whole = range.whole(i);
    Slot slot;
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (whole ? gpu_.can_take_block() : gpu_.can_take()) {
      r = take(Location::gpu, whole, &slot.chunk);
      if (r == CUDA_SUCCESS) {
        slot.where = Location::gpu;
      } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        // The budget allows it but the device does not (memory used outside umswap): the chunk
        // goes to the host, where a kernel still reads it, more slowly.
        count(r);
        ++stats_.gpu_create_fallbacks;
      } else {
        count(r);
        return r;
      }
    }
    if (r != CUDA_SUCCESS) {
      r = take(Location::host, whole, &slot.chunk);
      slot.where = Location::host;
      if (r != CUDA_SUCCESS) {
        if (r != CUDA_ERROR_OUT_OF_MEMORY) count(r);
        return r;
      }
    }
    const detail::ChunkPool& p = pool(slot.where);
    r = count(driver_.mem_map(base + range.offset(i), range.bytes(i), 0, p.handle(slot.chunk), 0));
    if (r != CUDA_SUCCESS) {
      give(slot.where, slot.chunk, whole);
      return r;
    }
    slot.mapped = true;
    range.slots.push_back(slot);
  }
  return CUDA_SUCCESS;
}

CUresult ChunkArena::release(CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  if (!driver_.complete()) return CUDA_ERROR_NOT_INITIALIZED;
  const auto it = ranges_.find(address);
  if (it == ranges_.end()) return CUDA_ERROR_INVALID_VALUE;
  CUresult first = unmap_range(it->first, it->second);
  if (it->second.owns_addresses) {
    const CUresult freed = count(driver_.mem_address_free(it->first, it->second.reserved));
    if (first == CUDA_SUCCESS) first = freed;
  }
  ranges_.erase(it);
  ++stats_.releases;
  return first;
}

Moved ChunkArena::evict(CUdeviceptr address, uint64_t length, CUstream stream, Contents contents) {
  return move(address, length, stream, Location::host, contents);
}

Moved ChunkArena::restore(CUdeviceptr address, uint64_t length, CUstream stream,
                          Contents contents) {
  return move(address, length, stream, Location::gpu, contents);
}

CUresult ChunkArena::remap(CUdeviceptr at, uint64_t bytes, bool whole, Slot& slot, Location to,
                           uint32_t chunk) {
  const Location from = slot.where;
  if (CUresult r = count(driver_.mem_unmap(at, bytes)); r != CUDA_SUCCESS) {
    // Still mapped to the original, which still holds the data.
    give(to, chunk, whole);
    return r;
  }
  if (CUresult r = map_slot(at, bytes, to, chunk); r != CUDA_SUCCESS) {
    give(to, chunk, whole);
    // The original chunk was not given back yet and still holds the data: map it again.
    if (map_slot(at, bytes, from, slot.chunk) != CUDA_SUCCESS) {
      slot.mapped = false;
      ++stats_.holes;
    }
    return r;
  }
  give(from, slot.chunk, whole);
  slot.where = to;
  slot.chunk = chunk;
  ++stats_.remaps;
  return CUDA_SUCCESS;
}

Moved ChunkArena::move(CUdeviceptr address, uint64_t length, CUstream stream, Location to,
                       Contents contents) {
  StagedMove staged = stage(address, length, to, stream, {}, contents);
  return commit(staged);
}

StagedMove::StagedMove(StagedMove&& other) noexcept
    : to_(other.to_),
      stream_(other.stream_),
      items_(std::move(other.items_)),
      partial_(other.partial_),
      arena_(std::exchange(other.arena_, nullptr)) {}

StagedMove& StagedMove::operator=(StagedMove&& other) noexcept {
  if (this != &other) {
    if (arena_) arena_->abort(*this);
    to_ = other.to_;
    stream_ = other.stream_;
    items_ = std::move(other.items_);
    partial_ = other.partial_;
    arena_ = std::exchange(other.arena_, nullptr);
  }
  return *this;
}

StagedMove::~StagedMove() {
  if (arena_) arena_->abort(*this);
}

bool StagedMove::copies_enqueued() const {
  return std::any_of(items_.begin(), items_.end(), [](const Item& i) { return i.copied; });
}

std::vector<StagedMove::Chunk> StagedMove::chunks() const {
  std::vector<Chunk> out;
  out.reserve(items_.size());
  for (const Item& i : items_) out.push_back({i.slot, i.from, i.to, i.bytes});
  return out;
}

StagedMove ChunkArena::stage(CUdeviceptr address, uint64_t length, Location to, CUstream stream,
                             const Copier& copy, Contents contents) {
  const bool copying = contents == Contents::keep;
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
    if (address < before->first + before->second.reserved) it = before;
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
    const uint64_t first = range.piece_at(std::max(address, base) - base);
    const uint64_t last =
        range.piece_at(std::min<CUdeviceptr>(end, base + range.reserved) - 1 - base);
    for (uint64_t i = first; i <= last; ++i) {
      Slot& slot = slots[i];
      const CUdeviceptr at = base + range.offset(i);
      const uint64_t bytes = range.bytes(i);
      const bool whole = range.whole(i);
      if (!slot.mapped) {
        // A hole left by an earlier rollback: map its chunk again before anything else.
        if (CUresult r = map_slot(at, bytes, slot.where, slot.chunk); r == CUDA_SUCCESS) {
          slot.mapped = true;
          --stats_.holes;
        } else {
          note(r);
          if (slot.where == from) moved.bytes_left += bytes;
          continue;
        }
      }
      if (slot.where != from) continue;
      if (stopped) {
        moved.bytes_left += bytes;
        continue;
      }
      uint32_t chunk = 0;
      CUresult r = take(to, whole, &chunk);
      const CUdeviceptr dst = r == CUDA_SUCCESS ? pool(to).window_address(chunk) : 0;
      const CUdeviceptr src = pool(from).window_address(slot.chunk);
      if (r == CUDA_SUCCESS && copying) {
        r = count(copy ? copy(dst, src, bytes, stream)
                       : driver_.memcpy_dtod_async(dst, src, bytes, stream));
        if (r != CUDA_SUCCESS) give(to, chunk, whole);
      } else if (r != CUDA_ERROR_OUT_OF_MEMORY) {
        count(r);
      }
      if (r != CUDA_SUCCESS) {
        note(r);
        // The pool had no whole block (not the device out of memory): the chunk pieces after it
        // may still fit.
        if (!(whole && r == CUDA_ERROR_OUT_OF_MEMORY && !pool(to).can_take_block())) stopped = true;
        moved.bytes_left += bytes;
        continue;
      }
      staged.items_.push_back(
          {at, range.id, from, slot.chunk, chunk, src, dst, bytes, whole, copying});
    }
  }
  if (!overlaps) moved.result = CUDA_ERROR_INVALID_VALUE;
  if (!staged.items_.empty()) {
    staged.arena_ = this;
    ++staged_;
    gpu_.keep_free(true);
    host_.keep_free(true);
  }
  return staged;
}

void ChunkArena::settle(StagedMove& staged) {
  if (!staged.arena_) return;
  staged.arena_ = nullptr;
  if (--staged_ == 0) {
    gpu_.keep_free(false);
    host_.keep_free(false);
  }
}

void ChunkArena::give_back(StagedMove& staged) {
  for (const StagedMove::Item& item : staged.items_) give(staged.to_, item.to_chunk, item.whole);
  staged.items_.clear();
}

void ChunkArena::abort(StagedMove& staged) {
  std::lock_guard lock(mutex_);
  // Its copies may still run: wait for them before anything free may be released or reused.
  if (staged.copies_enqueued()) count(driver_.stream_synchronize(staged.stream_));
  settle(staged);
  give_back(staged);
}

Moved ChunkArena::commit(StagedMove& staged) {
  Moved moved = staged.partial_;
  staged.partial_ = Moved();
  auto note = [&moved](CUresult r) {
    if (moved.result == CUDA_SUCCESS) moved.result = r;
  };
  std::lock_guard lock(mutex_);
  settle(staged);  // the copies are waited for below, before anything can be taken again
  if (staged.items_.empty()) return moved;
  const Location to = staged.to_;

  // Wait for the copies before any slot changes (a move of unwritten chunks enqueued none).
  const auto started = std::chrono::steady_clock::now();
  const CUresult synced =
      staged.copies_enqueued() ? count(driver_.stream_synchronize(staged.stream_)) : CUDA_SUCCESS;
  const auto copied = std::chrono::steady_clock::now();
  stats_.copy_wait_ns += elapsed_ns(started, copied);
  if (CUresult r = synced; r != CUDA_SUCCESS) {
    // The copies may not have happened: no slot changes, the new chunks go back.
    for (const StagedMove::Item& item : staged.items_) moved.bytes_left += item.bytes;
    give_back(staged);
    note(r);
    return moved;
  }
  uint64_t& copies = to == Location::host ? stats_.copies_to_host : stats_.copies_to_gpu;
  uint64_t& bytes = to == Location::host ? stats_.bytes_to_host : stats_.bytes_to_gpu;
  for (const StagedMove::Item& item : staged.items_)
    copies += item.copied ? item.bytes / kChunk : 0;

  // Then remap, chunk by chunk; the first failure stops the rest (their copies are wasted).
  bool stopped = false;
  for (const StagedMove::Item& item : staged.items_) {
    Slot* slot = nullptr;
    if (!stopped) {
      // The slot as it is now: still in the same range, still mapped to the chunk copied.
      if (const auto it = find(item.slot); it != ranges_.end() && it->second.id == item.range_id) {
        const Range& range = it->second;
        const uint64_t i = range.piece_at(item.slot - it->first);
        Slot& s = it->second.slots[i];
        if (range.offset(i) == item.slot - it->first && range.whole(i) == item.whole && s.mapped &&
            s.where == item.from_where && s.chunk == item.from_chunk) {
          slot = &s;
        }
      }
    }
    if (!slot) {  // stopped, or released or moved since stage(): the copy is not wanted
      give(to, item.to_chunk, item.whole);
      moved.bytes_left += item.bytes;
      continue;
    }
    if (CUresult r = remap(item.slot, item.bytes, item.whole, *slot, to, item.to_chunk);
        r != CUDA_SUCCESS) {
      note(r);
      stopped = true;
      moved.bytes_left += item.bytes;
      continue;
    }
    moved.bytes += item.bytes;
    (item.copied ? bytes : stats_.bytes_not_copied) += item.bytes;
  }
  staged.items_.clear();
  stats_.remap_ns += elapsed_ns(copied, std::chrono::steady_clock::now());
  return moved;
}

uint64_t ChunkArena::trim() {
  std::lock_guard lock(mutex_);
  if (!driver_.complete() || staged_ > 0) return 0;
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
  return address < it->first + it->second.reserved ? it : ranges_.end();
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
  const Range& range = it->second;
  info.reserved = range.reserved;
  for (size_t i = 0; i < range.slots.size(); ++i) {
    const Slot& slot = range.slots[i];
    if (!slot.mapped) {
      info.unmapped_bytes += range.bytes(i);
    } else if (slot.where == Location::gpu) {
      info.gpu_bytes += range.bytes(i);
    } else {
      info.host_bytes += range.bytes(i);
    }
  }
  return info;
}

std::optional<Location> ChunkArena::chunk_location(CUdeviceptr address) const {
  std::lock_guard lock(mutex_);
  const auto it = find(address);
  if (it == ranges_.end()) return std::nullopt;
  const Slot& slot = it->second.slots[it->second.piece_at(address - it->first)];
  if (!slot.mapped) return std::nullopt;
  return slot.where;
}

bool ChunkArena::fits_on_gpu(CUdeviceptr address) const {
  std::lock_guard lock(mutex_);
  const auto it = find(address);
  if (it == ranges_.end()) return true;
  const Range& range = it->second;
  uint64_t blocks = 0, chunks = 0;
  for (size_t i = 0; i < range.slots.size(); ++i) {
    if (range.slots[i].where == Location::gpu) continue;  // a hole there is mapped again in place
    ++(range.whole(i) ? blocks : chunks);
  }
  return gpu_.can_place(blocks, chunks);
}

uint64_t ChunkArena::bytes_available() const {
  std::lock_guard lock(mutex_);
  return (gpu_.available() + host_.available()) * kChunk;
}

bool ChunkArena::fits_new_on_gpu(uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  const uint64_t chunks = reserved_for(bytes) / kChunk;
  // As allocate() backs a range: whole blocks first, then chunks (a piece the GPU pool cannot
  // take goes to the host; chunks alone only when neither side has a block).
  const uint64_t blocks = per_ > 1 ? chunks / per_ : 0;
  return gpu_.can_place(blocks, chunks - blocks * per_);
}

bool ChunkArena::on_gpu(CUdeviceptr address) const {
  const std::optional<RangeInfo> info = range(address);
  return info && info->gpu_bytes == info->reserved;
}

std::pair<uint64_t, uint64_t> ChunkArena::bytes_moved() const {
  std::lock_guard lock(mutex_);
  return {stats_.bytes_to_gpu, stats_.bytes_to_host};
}

ArenaStats ChunkArena::stats() const {
  std::lock_guard lock(mutex_);
  ArenaStats s = stats_;
  s.ranges = ranges_.size();
  s.chunks_mapped = 0;
  for (const auto& [base, range] : ranges_) {
    for (size_t i = 0; i < range.slots.size(); ++i) {
      s.chunks_mapped += range.slots[i].mapped ? range.bytes(i) / kChunk : 0;
    }
  }
  s.gpu_chunks_made = gpu_.made();
  s.host_chunks_made = host_.made();
  s.block_bytes = block_bytes();
  return s;
}

}  // namespace umswap::vmm
