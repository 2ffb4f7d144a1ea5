// Registry: which allocation an address belongs to.
//
// Maps address ranges [base, base + size) to buffer records. Built for the kernel-launch path,
// which asks about every 8-byte word of every launch's parameters:
//   * readers read an immutable, sorted snapshot, and each thread keeps the snapshot it used
//     last until the registry changes: snapshot() is one atomic load (the generation) and a
//     shared_ptr copy; only a thread that sees a new generation takes the lock (and the first
//     after a change copies the records under it, see below). Hot paths
//     take one snapshot and make all their lookups against it (a binary search each);
//   * writers (allocations and frees) serialize on a mutex and change the records in place; the
//     first reader after a change makes the new snapshot (an O(n) copy), so that writes between
//     two reads cost one copy, not one each (engine vmm's allocations and frees of every tensor
//     come several between two launches).
// Thread safety: every member function may be called from any thread at any time. A Snapshot stays
// valid for as long as the caller holds it, whatever writers do meanwhile.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace umswap {

// Allocation order within one process, starting at 1. Together with size and call site it forms a
// buffer's identity across runs (addresses differ between runs; these do not).
using BufferId = uint64_t;
// Hash of the allocation's call stack as (module, offset) pairs: stable under ASLR.
using CallSiteId = uint64_t;

// Which API made the allocation (for stats and identity).
enum class AllocApi : uint8_t {
  cudaMalloc,
  cudaMallocPitch,
  cudaMallocAsync,
  cudaMallocManaged,
  cuMemAlloc,
  cuMemAllocPitch,
  cuMemAllocAsync,
  cuMemAllocManaged,
  cuMemMap,  // engine vmm: the program's mapping of a handle it virtualized (virtual_handles.h)
};
inline constexpr int kAllocApiCount = 9;
const char* to_string(AllocApi api);
// A stream-ordered allocation's API (a pool's, freed with cuMemFreeAsync).
inline constexpr bool stream_ordered(AllocApi api) {
  return api == AllocApi::cudaMallocAsync || api == AllocApi::cuMemAllocAsync;
}

struct BufferRecord {
  uint64_t base = 0;
  uint64_t size = 0;  // bytes requested by the program (> 0)
  BufferId id = 0;
  CallSiteId call_site = 0;
  AllocApi api = AllocApi::cudaMalloc;
  bool from_pool = false;    // stream-ordered pool allocation (freed with cuMemFreeAsync)
  bool app_managed = false;  // the program asked for managed memory itself
  bool slab = false;         // holds many program allocations (see BlockFinder)
  // A segment whose blocks the program's own allocator carves (PyTorch's caching allocator),
  // found by the registry's second BlockFinder (torch_blocks.h).
  bool carved = false;

  uint64_t end() const { return base + size; }
  // Its program allocations are blocks inside it, each ending before the record does.
  bool has_blocks() const { return slab || carved; }
  bool contains(uint64_t address) const { return address - base < size; }
};

// Where the program's allocation around an address begins and ends, inside a record marked
// `slab` (memory umswap sub-allocates, slab_allocator.h) or `carved` (torch_blocks.h): [first,
// second), or nullopt for space no live allocation holds. Called on the kernel-launch path: must
// be quick and thread-safe.
class BlockFinder {
 public:
  virtual std::optional<std::pair<uint64_t, uint64_t>> live_block(uint64_t address) const = 0;

 protected:
  ~BlockFinder() = default;
};

class Registry {
 public:
  // An immutable view of the registry at one moment.
  class Snapshot {
   public:
    // The record whose range holds `address`, or nullptr. Pointer valid while the Snapshot lives.
    const BufferRecord* find(uint64_t address) const;
    std::span<const BufferRecord> records() const { return records_; }
    size_t size() const { return records_.size(); }
    // The end of the program's allocation around `address` in `record` (found by find()): the
    // record's end, or for a slab or a carved segment the end of the live block around it;
    // nullopt when it has no live block there (free space, not a pointer the program may use).
    std::optional<uint64_t> allocation_end(const BufferRecord& record, uint64_t address) const;

   private:
    friend class Registry;
    std::vector<BufferRecord> records_;  // sorted by base, non-overlapping
    const BlockFinder* blocks_ = nullptr;
    const BlockFinder* carved_blocks_ = nullptr;
    uint64_t lowest_ = UINT64_MAX;  // fast reject for values that are not addresses at all
    uint64_t highest_end_ = 0;
  };

  Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Adds a record. Returns false (and changes nothing) if its range is empty or overlaps one
  // already registered.
  bool insert(const BufferRecord& record);
  // Removes the record that starts exactly at `base` and returns it; with `which`, only a record
  // it accepts (another stays, and nullopt comes back), in one step.
  std::optional<BufferRecord> remove(uint64_t base, bool (*which)(const BufferRecord&) = nullptr);
  // Lookup of one address (copy of the record). Lock-free unless the registry changed since this
  // thread's last lookup.
  std::optional<BufferRecord> find(uint64_t address) const;
  bool contains(uint64_t address) const;
  // The current snapshot; hold it to make many lookups against one consistent view.
  std::shared_ptr<const Snapshot> snapshot() const;
  size_t size() const { return snapshot()->size(); }
  // The sub-allocator of the records marked `slab` (nullptr: none). It must outlive its use here;
  // set it back to nullptr before it goes.
  void set_block_finder(const BlockFinder* finder);
  // The finder of the blocks in records marked `carved`, with the same contract.
  void set_carved_block_finder(const BlockFinder* finder);
  // Marks `carved` the record that starts exactly at `base`; false when there is none.
  bool mark_carved(uint64_t base);

 private:
  // The snapshot of the records as they are now, made first if they changed since the last one.
  std::shared_ptr<const Snapshot> load_current() const;
  // After a change to records_ or the finders (under mutex_): the next reader makes a snapshot.
  void changed();

  // Taken by writers, and by a reader that sees a new generation (libstdc++ 12's
  // std::atomic<std::shared_ptr> is lock-based as well).
  mutable std::mutex mutex_;
  // Under mutex_: the records (sorted by base, non-overlapping), the finders, and the snapshot of
  // them made last (stale_: they changed since).
  std::vector<BufferRecord> records_;
  const BlockFinder* blocks_ = nullptr;
  const BlockFinder* carved_blocks_ = nullptr;
  mutable std::shared_ptr<const Snapshot> current_;
  mutable bool stale_ = false;
  std::atomic<uint64_t> generation_{0};
  const uint64_t instance_;  // distinguishes registries in the per-thread cache
};

}  // namespace umswap
