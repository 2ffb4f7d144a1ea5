// Placement: where each of an iteration's stream-ordered allocations should go, planned from the
// allocations of two recorded iterations.
//
// Why: a training iteration allocates and frees the same sequence of blocks every time. Served
// first come first fit, the blocks scatter over more address space than they ever hold at once
// (VGG-16 batch 256: 33.6 GiB of slab pages touched per iteration for a 19.55 GiB live peak),
// and with managed memory every touched page is GPU memory that must be held or dropped. A
// driver pool maps physical pages wherever it likes; managed memory cannot, so the addresses
// themselves must be packed. Knowing each block's lifetime in the iteration, they can be: pack
// the lifetimes (intervals on the iteration's circle of events) into one arena whose size is
// close to the most bytes live at once. This is the static memory planning of compilers (dynamic
// storage allocation: NP-hard in general; a few greedy orders get within a few percent here, and
// a local search over the best one's order closes much of the rest).
//
// Contract (pure, reentrant, no CUDA):
//   * Input: the block events of at least two consecutive iterations, in program order, each
//     with `when` (a step count; the iteration containing `when` is found from `start` and
//     `period`), the block's address and rounded size; allocations of `min_bytes` or less are
//     left out (they stay in the small slabs).
//   * The two iterations [start - period, start) and [start, start + period) must allocate the
//     same sequence of sizes, else there is no placement (why says so). The second one's
//     allocations are planned: one freed in that iteration lives from its allocation to its free;
//     one freed in the next iteration lives round the iteration's end to where the first
//     iteration's allocation of the same position was freed in the second (if that free came
//     after the allocation, it lives longer than an iteration and is not placed, nor is one whose
//     free is not in the events).
//   * Output: the sequence of sizes, an offset per allocation (kUnplaced for those not placed),
//     the arena size, and each greedy order's arena and page peak (the smallest arena is chosen).
//     When the smallest is above the live peak, rounds of random swaps and moves in the best
//     order (first gap, fixed seeds: the same events give the same placement) search for a
//     smaller one, within a bounded amount of work (about 1 s on a slow core), stopping at the
//     live peak, or earlier when `stop` (asked before every try; empty: never) says
//     so, with the best found by then; listed as "local search from the best" when it found a
//     smaller arena. Without `stop`, the same events give the same placement; with it, how far
//     the search got depends on when it said so.
//     No two placed allocations whose lifetimes overlap overlap in the arena; offsets are multiples
//     of `alignment`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace umswap {

// A block handed out (freed false) or given back (freed true).
struct BlockEvent {
  uint64_t when = 0;  // steps logged before the event
  uint64_t address = 0;
  uint64_t bytes = 0;
  bool freed = false;
};

// One greedy order tried: its arena, and the most 2 MiB pages of the arena (counted from its
// start, in bytes) that hold a live allocation at once. Managed memory is resident, dropped and
// moved by whole pages, so a page shared by allocations of different lifetimes stays resident
// while any of them lives: the page peak, not the arena, is what a budget must hold.
struct PlacementCandidate {
  std::string order;
  uint64_t arena_bytes = 0;
  uint64_t page_peak = 0;
};

struct Placement {
  static constexpr uint64_t kUnplaced = UINT64_MAX;
  static constexpr uint64_t kPage = uint64_t{2} << 20;  // page_peak's unit
  uint64_t arena_bytes = 0;
  std::vector<uint64_t> sizes;    // the iteration's allocations (> min_bytes), in order
  std::vector<uint64_t> offsets;  // in the arena, or kUnplaced
  uint64_t live_peak = 0;         // most bytes the placed allocations hold at once: a lower bound
  uint64_t page_peak = 0;         // of the chosen order (PlacementCandidate)
  uint64_t placed = 0;            // allocations with an offset
  std::string order;              // the greedy order that gave the smallest arena
  std::vector<PlacementCandidate> candidates;  // every order tried, the chosen one among them
};

// At most this many allocations per iteration are planned (the packing is quadratic).
inline constexpr size_t kMaxPlacedAllocations = 20000;

std::optional<Placement> plan_placement(std::span<const BlockEvent> events, uint64_t start,
                                        uint64_t period, uint64_t min_bytes, uint64_t alignment,
                                        std::string* why, const std::function<bool()>& stop = {});

}  // namespace umswap
