// While the advisor learns (no plan in force yet; UMSWAP_LEARN_EVICT, on by default): keeps what
// the launches touched within the budget, the least recently used out first. Pure bookkeeping in
// blocks of `block` bytes; the launch path says what each launch touches, issues the evictions
// this class picks and prefetches the blocks it newly counts, all on the launch's stream before
// the launch.
//
// A block counts as on the GPU from the first launch that touches it until it is picked for
// eviction. Blocks last touched by the launch being placed (or a later one) are never picked.
// Cost: O(log B) per block touched or picked (B: blocks counted). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace umswap::advisor {

// The budget of managed memory: `budget` less what the program mapped itself on the GPU
// (AdvisorConfig::program_gpu_bytes), at least one 2 MiB block (or the budget, when smaller).
inline uint64_t managed_budget(uint64_t budget, uint64_t program_gpu_bytes) {
  const uint64_t floor = std::min(budget, uint64_t{2} << 20);
  return budget > program_gpu_bytes + floor ? budget - program_gpu_bytes : floor;
}

class LearningEvictor {
 public:
  struct Range {
    uint64_t address = 0;
    uint64_t length = 0;
    bool operator==(const Range&) const = default;
  };

  // Throws std::invalid_argument for a block size of 0.
  explicit LearningEvictor(uint64_t budget, uint64_t block = 2 << 20);

  uint64_t budget() const { return budget_; }
  // A new budget from the next take_evictions() on (the program mapped memory of its own).
  void set_budget(uint64_t budget) { budget_ = budget; }
  // Launch `launch` touched [lo, hi) (rounded out to blocks; empty ranges are ignored) of the
  // allocation [alloc_lo, alloc_hi), which holds it. Launch numbers need not rise: a block keeps
  // the largest it was touched by. A block two allocations share belongs to the last that
  // touched it. With `fresh`, the blocks not counted before are appended to it, each clipped to
  // the allocation, adjacent ones coalesced (what to prefetch).
  void touch(uint64_t launch, uint64_t lo, uint64_t hi, uint64_t alloc_lo, uint64_t alloc_hi,
             std::vector<Range>* fresh = nullptr);
  uint64_t resident_bytes() const { return blocks_.size() * block_; }
  // Picks blocks, least recently used first, until the resident bytes fit in the budget, among
  // those last touched before launch `done_before`; they count as off the GPU from here.
  // Returned by address, adjacent blocks of one allocation coalesced, each range within its
  // allocation (the driver refuses a prefetch over two allocations).
  std::vector<Range> take_evictions(uint64_t done_before);
  // Forgets every block (something else moved them: a plan was in force).
  void clear();

 private:
  struct Block {
    uint64_t last = 0;
    uint64_t alloc_lo = 0, alloc_hi = 0;
  };
  uint64_t budget_;
  uint64_t block_;
  std::unordered_map<uint64_t, Block> blocks_;      // by block index
  std::set<std::pair<uint64_t, uint64_t>> by_age_;  // (last launch, block index)
};

}  // namespace umswap::advisor
