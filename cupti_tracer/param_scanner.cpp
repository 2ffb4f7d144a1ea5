#include "umswap/tracer/param_scanner.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

namespace umswap::tracer {
namespace {

void scan_bytes(const std::byte* bytes, size_t size, const Registry::Snapshot& snapshot,
                std::vector<PointerHit>& hits) {
  for (size_t offset = 0; offset + sizeof(uint64_t) <= size; offset += 4) {
    uint64_t value = 0;
    std::memcpy(&value, bytes + offset, sizeof value);
    if (const BufferRecord* r = snapshot.find(value)) {
      // In a slab, a value in free space is no allocation of the program's: not a pointer.
      const std::optional<uint64_t> end = snapshot.allocation_end(*r, value);
      if (!end) continue;
      hits.push_back({.buffer = r->id,
                      .base = r->base,
                      .size = r->size,
                      .pointer = value,
                      .limit = r->has_blocks() ? *end : 0});
    }
  }
}

void sort_unique(std::vector<PointerHit>& hits) {
  if (hits.size() < 2) return;
  std::sort(hits.begin(), hits.end(), [](const PointerHit& a, const PointerHit& b) {
    return a.base != b.base ? a.base < b.base : a.pointer < b.pointer;
  });
  hits.erase(std::unique(hits.begin(), hits.end()), hits.end());
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: handles are aligned, spread their bits
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void scan_kernel_params(std::span<const ParamSlot> layout, const void* const* params,
                        const Registry::Snapshot& snapshot, std::vector<PointerHit>& hits) {
  hits.clear();
  if (params == nullptr) return;
  for (size_t k = 0; k < layout.size(); ++k) {
    if (params[k] == nullptr || layout[k].size < sizeof(uint64_t)) continue;
    scan_bytes(static_cast<const std::byte*>(params[k]), layout[k].size, snapshot, hits);
  }
  sort_unique(hits);
}

void scan_param_buffer(std::span<const ParamSlot> layout, std::span<const std::byte> buffer,
                       const Registry::Snapshot& snapshot, std::vector<PointerHit>& hits) {
  hits.clear();
  for (const ParamSlot& slot : layout) {
    if (slot.size < sizeof(uint64_t) || slot.offset >= buffer.size()) continue;
    const size_t size = std::min<size_t>(slot.size, buffer.size() - slot.offset);
    scan_bytes(buffer.data() + slot.offset, size, snapshot, hits);
  }
  sort_unique(hits);
}

ParamLayoutCache::ParamLayoutCache(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 16)),
      mask_(std::bit_ceil(2 * capacity_) - 1),
      slots_(std::make_unique<Slot[]>(mask_ + 1)) {}

ParamLayoutCache::~ParamLayoutCache() = default;

const FunctionLayout* ParamLayoutCache::find(uint64_t function) const {
  if (function == 0) return nullptr;
  for (size_t i = mix(function) & mask_, probes = 0; probes <= mask_;
       i = (i + 1) & mask_, ++probes) {
    const uint64_t f = slots_[i].function.load(std::memory_order_acquire);
    if (f == function) return slots_[i].layout.load(std::memory_order_acquire);
    if (f == 0) return nullptr;
  }
  return nullptr;
}

const FunctionLayout* ParamLayoutCache::insert(uint64_t function, std::span<const ParamSlot> params,
                                               uint32_t key) {
  if (function == 0) return nullptr;
  std::lock_guard lock(write_mutex_);
  for (size_t i = mix(function) & mask_, probes = 0; probes <= mask_;
       i = (i + 1) & mask_, ++probes) {
    Slot& slot = slots_[i];
    const uint64_t f = slot.function.load(std::memory_order_relaxed);
    if (f == function) {
      if (replaced_ >= capacity_) return nullptr;
      ++replaced_;
      owned_.push_back(std::make_unique<const FunctionLayout>(
          FunctionLayout{.params = {params.begin(), params.end()}, .key = key}));
      slot.layout.store(owned_.back().get(), std::memory_order_release);
      return owned_.back().get();
    }
    if (f == 0) {
      if (size_.load(std::memory_order_relaxed) >= capacity_) return nullptr;
      owned_.push_back(std::make_unique<const FunctionLayout>(
          FunctionLayout{.params = {params.begin(), params.end()}, .key = key}));
      // Layout first, then the handle: a reader that finds the handle sees the layout.
      slot.layout.store(owned_.back().get(), std::memory_order_release);
      slot.function.store(function, std::memory_order_release);
      size_.fetch_add(1, std::memory_order_relaxed);
      return owned_.back().get();
    }
  }
  return nullptr;
}

}  // namespace umswap::tracer
