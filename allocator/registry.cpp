#include "umswap/allocator/registry.h"

#include <algorithm>

namespace umswap {
namespace {

std::atomic<uint64_t> g_next_instance{1};

// Per-thread cache: the snapshot this thread read last, valid while the registry's generation is
// unchanged. Keeps the registry's lock off the lookup path.
struct CachedSnapshot {
  uint64_t instance = 0;
  uint64_t generation = UINT64_MAX;
  std::shared_ptr<const Registry::Snapshot> snapshot;
  ~CachedSnapshot();
};
thread_local CachedSnapshot t_cache;
// Trivially destructible, so still readable after t_cache is gone: at exit() the main thread's
// thread_local objects are destroyed before atexit handlers and library destructors run, and
// those (the tracer's final flush, the stats file) still look buffers up. Reading a destroyed
// t_cache there freed its snapshot twice and corrupted the heap.
thread_local bool t_cache_destroyed = false;
CachedSnapshot::~CachedSnapshot() {
  t_cache_destroyed = true;
}

}  // namespace

const char* to_string(AllocApi api) {
  switch (api) {
    case AllocApi::cudaMalloc:
      return "cudaMalloc";
    case AllocApi::cudaMallocPitch:
      return "cudaMallocPitch";
    case AllocApi::cudaMallocAsync:
      return "cudaMallocAsync";
    case AllocApi::cudaMallocManaged:
      return "cudaMallocManaged";
    case AllocApi::cuMemAlloc:
      return "cuMemAlloc";
    case AllocApi::cuMemAllocPitch:
      return "cuMemAllocPitch";
    case AllocApi::cuMemAllocAsync:
      return "cuMemAllocAsync";
    case AllocApi::cuMemAllocManaged:
      return "cuMemAllocManaged";
    case AllocApi::cuMemMap:
      return "cuMemMap";
  }
  return "unknown";
}

const BufferRecord* Registry::Snapshot::find(uint64_t address) const {
  if (address < lowest_ || address >= highest_end_) return nullptr;
  // First record whose base is above the address; the candidate is the one before it.
  auto it = std::upper_bound(records_.begin(), records_.end(), address,
                             [](uint64_t a, const BufferRecord& r) { return a < r.base; });
  if (it == records_.begin()) return nullptr;
  --it;
  return it->contains(address) ? &*it : nullptr;
}

std::optional<uint64_t> Registry::Snapshot::allocation_end(const BufferRecord& record,
                                                           uint64_t address) const {
  const BlockFinder* finder = record.slab ? blocks_ : record.carved ? carved_blocks_ : nullptr;
  if (finder == nullptr) return record.end();
  const auto block = finder->live_block(address);
  if (!block) return std::nullopt;
  return std::min(block->second, record.end());
}

Registry::Registry()
    : current_(std::make_shared<const Snapshot>()),
      instance_(g_next_instance.fetch_add(1, std::memory_order_relaxed)) {}

bool Registry::insert(const BufferRecord& record) {
  if (record.size == 0 || record.base + record.size < record.base) return false;
  std::lock_guard lock(mutex_);
  auto it = std::lower_bound(records_.begin(), records_.end(), record.base,
                             [](const BufferRecord& r, uint64_t b) { return r.base < b; });
  if (it != records_.end() && it->base < record.end()) return false;  // next one overlaps
  if (it != records_.begin() && std::prev(it)->end() > record.base) return false;  // previous
  records_.insert(it, record);
  changed();
  return true;
}

std::optional<BufferRecord> Registry::remove(uint64_t base, bool (*which)(const BufferRecord&)) {
  std::lock_guard lock(mutex_);
  auto it = std::lower_bound(records_.begin(), records_.end(), base,
                             [](const BufferRecord& r, uint64_t b) { return r.base < b; });
  if (it == records_.end() || it->base != base) return std::nullopt;
  if (which && !which(*it)) return std::nullopt;
  const BufferRecord removed = *it;
  records_.erase(it);
  changed();
  return removed;
}

void Registry::set_block_finder(const BlockFinder* finder) {
  std::lock_guard lock(mutex_);
  blocks_ = finder;
  changed();
}

void Registry::set_carved_block_finder(const BlockFinder* finder) {
  std::lock_guard lock(mutex_);
  carved_blocks_ = finder;
  changed();
}

bool Registry::mark_carved(uint64_t base) {
  std::lock_guard lock(mutex_);
  auto it = std::lower_bound(records_.begin(), records_.end(), base,
                             [](const BufferRecord& r, uint64_t b) { return r.base < b; });
  if (it == records_.end() || it->base != base) return false;
  if (!it->carved) {
    it->carved = true;
    changed();
  }
  return true;
}

void Registry::changed() {
  stale_ = true;
  generation_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const Registry::Snapshot> Registry::snapshot() const {
  if (t_cache_destroyed) return load_current();
  // Read the generation before the snapshot: if a writer changes the records in between, the cached
  // generation is older than the snapshot and the next call simply reloads.
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (t_cache.instance != instance_ || t_cache.generation != generation) {
    t_cache.snapshot = load_current();
    t_cache.generation = generation;
    t_cache.instance = instance_;
  }
  return t_cache.snapshot;
}

std::optional<BufferRecord> Registry::find(uint64_t address) const {
  const auto view = snapshot();
  const BufferRecord* r = view->find(address);
  return r ? std::optional<BufferRecord>(*r) : std::nullopt;
}

bool Registry::contains(uint64_t address) const {
  return snapshot()->find(address) != nullptr;
}

std::shared_ptr<const Registry::Snapshot> Registry::load_current() const {
  std::lock_guard lock(mutex_);
  if (stale_) {
    auto next = std::make_shared<Snapshot>();
    next->records_ = records_;
    next->blocks_ = blocks_;
    next->carved_blocks_ = carved_blocks_;
    if (!records_.empty()) {
      next->lowest_ = records_.front().base;
      for (const BufferRecord& r : records_) {
        next->highest_end_ = std::max(next->highest_end_, r.end());
      }
    }
    current_ = std::move(next);
    stale_ = false;
  }
  return current_;
}

}  // namespace umswap
