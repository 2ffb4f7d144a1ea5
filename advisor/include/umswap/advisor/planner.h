// Planner: one iteration's accesses and a GPU budget in, a cyclic prefetch/evict schedule out.
//
// Input: the steps (kernel launches, memcpys, memsets) of ONE iteration in launch order, each with
// the byte ranges of buffers it touches and an estimated GPU duration; the loop repeats the
// iteration forever. Output: what the advisor does when the application launches step i: evict
// ranges whose data is dead until much later (after waiting for their last use to finish), then
// prefetch ranges that are needed soon, so that every step finds its data on the GPU and no more
// than budget_bytes are resident.
//
// Residency unit: a block, `granularity` bytes aligned within its buffer (the last block of a
// buffer is short: its real size counts). A range stands for all blocks it overlaps, e.g. 100
// bytes at offset 3 MiB of an 8 MiB buffer with 2 MiB blocks is the block [2 MiB, 4 MiB).
//
// Algorithm (n = block-uses of the iteration, S = steps, F = blocks touched):
//   1. Which data stays. Between two consecutive uses of a block (cyclically: the last use of an
//      iteration is followed by the first of the next) the block either stays resident (the gap
//      is "kept") or is evicted and brought back once. Belady's MIN (on a miss, evict the
//      resident block whose next use is furthest away, across the iteration boundary) is run on
//      the repeating sequence from an empty GPU until the GPU contents at an iteration boundary
//      repeat. A fixed point (an iteration starts and ends with the same contents) is a
//      self-consistent one-iteration schedule, and with equal block sizes no one-iteration
//      schedule moves fewer bytes (MIN is optimal on every finite prefix, so its steady average is
//      a lower bound). MIN may instead settle into a cycle of several iterations (e.g. A B C with
//      room for two: 1 and 2 loads in turn, while one iteration repeated needs 2): then each state
//      of the cycle is tried as the state every iteration starts and ends with (MIN with that end
//      constraint is optimal for it), and the best is improved by swapping blocks between the
//      cycle's states while that helps, within a work budget. This matched an exhaustive search
//      on 38,000 random small traces (tests/advisor/planner_test.cpp checks 200); it is not proven
//      optimal. Gaps that still fit in the room left are then kept too, shortest first (only
//      unequal block sizes leave any).
//   2. When data moves. A block whose gap is not kept is evicted at the launch after its last use
//      (wait_back = 1: as soon as its data is dead, leaving the most room for prefetches; the
//      bytes are the same whenever it happens) and prefetched at the earliest launch from which
//      it fits under the budget at every step until its use, under lookahead_bytes of data
//      prefetched but not yet used, and at most lookahead_seconds of estimated GPU time ahead.
//      Blocks are placed in order of use (the most urgent first, starting after the step with the
//      least room; within a step by buffer and offset, so that a range's blocks land in the same
//      launch and coalesce). A range tree over the S steps finds "the last step before the use
//      where this block does not fit" in O(log S).
//   3. Coalescing. Adjacent blocks of one buffer with the same launch and kind become one action
//      (one 4 GiB prefetch runs at 48.6 GB/s where 2 MiB calls run at 17.3 GB/s, DESIGN.md).
// Lifetimes (optional). With the allocations and frees of the iteration (PlanInput::lifetimes: a
// stream-ordered allocator's blocks inside a buffer), a gap between two uses of a block is "dead"
// when the whole block is unallocated at some moment of it (right after a free): its data is not
// needed by the next use, which writes a new tensor. A dead gap costs no transfer whether it is
// kept or not, so MIN evicts blocks entering a dead gap first, only dead gaps still cost nothing
// when not kept, and the gaps that fit in the room left are kept live ones first. A dead gap that
// is not kept is a Drop, not an eviction and a prefetch: the allocator discards the block at the
// free that empties it (no transfer) and populates it on the GPU when it hands it out again.
// Bytes no lifetime names stay allocated throughout; a block named by more than 256 lifetimes is
// treated as never empty. Cost: O(L log L) more for L lifetime-blocks.
// Steps whose own blocks exceed the budget ("unfit") cannot be served. No prefetch ever takes the
// GPU past the budget: whatever of their data is not resident by then faults in, everything else
// is evicted before they launch, and the plan is valid for all other steps.
//
// Cost: O(n log n) time, O(n + S + F) memory: usually 2 to 4 MIN iterations; at most 8, plus,
// when MIN cycles, trials of one iteration each, at least 4 and no more than ~4M block-uses of
// work. ~17 ms for 5,000 steps and ~0.28 s for 50,000 steps, 30,000 blocks and 530,000
// block-uses on one core (bench/planner_bench.cpp); ~0.31 s for the same with half the
// buffers given lifetimes (2026-11-22 17:08 UTC, this machine's 2 cores; with the holds until
// the free, the room waits and one simulation of the plan). prefetch_bytes_per_s and
// evict_bytes_per_s are not used yet: placement is bounded by room and lookahead, not by transfer
// time.
//
// Errors: make_plan() and simulate() throw std::invalid_argument naming the problem (budget 0,
// granularity 0, a range outside its buffer, a step's ranges out of bounds, ...).
// Thread safety: pure functions of their arguments; reentrant.
#pragma once

#include <cstdint>
#include <vector>

namespace umswap::advisor {

// A byte range of one buffer. `buffer` indexes PlanInput::buffer_sizes.
struct PlanRange {
  uint32_t buffer = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const PlanRange&) const = default;
};

// One step (kernel launch/memcpy/memset) of the iteration: the ranges it touches.
struct PlanStep {
  uint64_t first_range = 0;  // index into PlanInput::ranges
  uint32_t range_count = 0;
  double seconds = 0.0;  // estimated GPU duration; 0 = unknown (counted as 10 us)
};

// A block of a buffer handed out (freed false) or given back (freed true) by a stream-ordered
// allocator, after step `after_step` was launched and before the next step (after the last step:
// before the first step of the next iteration).
struct PlanLifetime {
  uint32_t after_step = 0;
  bool freed = false;
  PlanRange range;  // length > 0
  bool operator==(const PlanLifetime&) const = default;
};

struct PlanInput {
  std::vector<uint64_t> buffer_sizes;  // bytes, by buffer index
  std::vector<PlanRange> ranges;       // grouped by step; each within its buffer; length 0 = none
  std::vector<PlanStep> steps;         // ONE iteration in launch order; the loop repeats it forever
  uint64_t budget_bytes = 0;           // GPU-resident bytes allowed (> 0)
  uint64_t granularity = 2 << 20;  // residency unit: ranges widen to aligned blocks of this size,
                                   // clamped to the buffer end
  double prefetch_bytes_per_s = 40e9;  // host -> GPU (not used yet)
  double evict_bytes_per_s = 12e9;     // GPU -> host (not used yet)
  uint64_t lookahead_bytes = 0;        // most bytes in flight ahead of use; 0 = the budget
  // Prefetch at most this far before use (estimated GPU time: the seconds of the steps from
  // at_step to the use, use excluded); 0 = unbounded.
  double lookahead_seconds = 0.0;
  // In program order (after_step non-decreasing); the state at the iteration's end is the state
  // at its start. Empty: all data is live throughout.
  std::vector<PlanLifetime> lifetimes;
  // A block whose data is dead after its last use stays resident until its free (the allocator
  // cannot discard an allocated block): the plan counts it there, as a use at the launch after
  // which the free comes. False: its room counts as free from the launch after its last use,
  // which the GPU does not see when the free comes later (VGG-16 at 50%: a plan peak of 9.78 GiB
  // held 12.25 with drops at the frees).
  bool hold_until_free = true;
};

enum class ActionKind : uint8_t { evict = 0, prefetch = 1 };

// What to do when the application launches step `at_step` (iteration-relative).
struct Action {
  uint32_t at_step = 0;
  ActionKind kind = ActionKind::prefetch;
  // evict: wait for the step launched `wait_back` launches before step at_step to finish on the
  //        GPU (its last use); >= 1; may reach into the previous iteration (cyclic),
  //        < number of steps + 1. prefetch: 0.
  uint32_t wait_back = 0;
  // prefetch: the range is first needed by the step `use_ahead` launches after at_step (0 =
  // at_step itself; may reach into the next iteration). evict: 0.
  uint32_t use_ahead = 0;
  PlanRange range;  // block-aligned (granularity), coalesced
};

// A block range whose data is dead between a use and the next one, and which the plan does not
// keep: the allocator discards it when a free leaves it wholly unallocated at a position p with
// last_use <= p < next_use (cyclic; last_use == next_use: any position), and populates it on the
// GPU when it hands it out again. No bytes cross the link.
struct Drop {
  static constexpr uint32_t kAfterLastUse = UINT32_MAX;
  PlanRange range;  // block-aligned, coalesced (same buffer, adjacent, same window)
  uint32_t last_use = 0;
  uint32_t next_use = 0;
  // The first launch after the block's free, from which the allocator can discard it (a free
  // may come launches after the last use); kAfterLastUse: last_use + 1. The plan itself counts
  // the room free from last_use + 1 (see Plan::peak_resident_at_frees_bytes).
  uint32_t room_at = kAfterLastUse;
  // Whether a free after the launch at iteration phase `phase` falls in the window (and may
  // discard the block: it is populated at next_use, on the program's stream).
  bool covers(uint64_t phase) const {
    if (last_use == next_use) return true;
    if (last_use < next_use) return last_use <= phase && phase < next_use;
    return phase >= last_use || phase < next_use;
  }
};

struct Plan {
  // Sorted by at_step; within one step all evictions (by buffer, offset) before prefetches (most
  // urgent first: by use_ahead, then buffer, offset).
  std::vector<Action> actions;
  // Steady state: the ranges resident on the GPU when step 0 of an iteration is launched, before
  // its actions (coalesced, by buffer and offset).
  std::vector<PlanRange> resident_at_start;
  uint64_t bytes_prefetched_per_iteration = 0;
  uint64_t bytes_evicted_per_iteration = 0;
  uint64_t peak_resident_bytes = 0;  // simulated, steady state (as simulate() counts it)
  // The same with each drop at its room_at (simulate(..., drops_at_frees = true)): what the GPU
  // holds when dead blocks leave at their frees. Above the budget when the plan gave a block's
  // room away between its last use and its free (VGG-16 at 50%: 12.25 GiB for 9.78).
  uint64_t peak_resident_at_frees_bytes = 0;
  uint64_t footprint_bytes = 0;  // all blocks the iteration touches
  // Steps whose own blocks exceed the budget (they fault; the plan is still valid for the rest).
  std::vector<uint32_t> unfit_steps;
  // The most bytes one step's own blocks take: no budget below it holds every step (it is the
  // smallest budget with no unfit step).
  uint64_t largest_step_bytes = 0;
  uint64_t prefetch_calls = 0, evict_calls = 0;  // actions per iteration
  std::vector<Drop> drops;                       // by buffer, offset
  uint64_t bytes_dropped_per_iteration = 0;
  uint64_t dead_gap_bytes = 0;  // bytes of all dead gaps (kept or dropped) per iteration
  // By step: for the GPU to hold no more than the plan's peak while the step runs, the evictions
  // of the step launched this many launches before it (0: its own; cyclic) must be done, and
  // with them everything the advisor issued before. kNoRoomWait: whatever the advisor has not
  // done yet fits in the room the plan leaves there (an eviction whose room only a later
  // prefetch uses needs no wait: that prefetch runs after it). Looks back one iteration;
  // O(S log S). For UMSWAP_EVICT_WAIT.
  static constexpr uint32_t kNoRoomWait = UINT32_MAX;
  std::vector<uint32_t> room_wait_back;
};

// Throws std::invalid_argument with a clear message for bad input (no steps, budget 0,
// granularity 0, a range outside its buffer or naming no buffer, a step's ranges out of bounds,
// negative or non-finite seconds, a lifetime of length 0, outside its buffer, after a step past
// the iteration or out of order).
Plan make_plan(const PlanInput& input);

// Replays a plan over `iterations` consecutive iterations from the resident_at_start state, block
// by block, and reports what happened. Used by tests and by the runtime's bookkeeping.
//
// At the launch of step i: first i's evictions (each block leaves the resident set), then i's
// prefetches (each block enters), then step i's blocks are checked: one not resident is a miss
// (the step would fault), becomes resident as a fault would make it, and counts in bytes_in.
// Resident bytes are counted after each step's actions and after its misses; the peak is over all.
// An eviction at step i with wait_back w is correct only if no step in (i - w, i] (cyclic: the
// steps launched after the awaited one, up to and including i) touches the block.
struct Simulation {
  uint64_t peak_resident_bytes = 0;
  uint64_t misses = 0;  // block-uses whose block was not resident at the step's launch (faults)
  uint64_t bytes_in = 0, bytes_out = 0;  // prefetched + faulted in; evicted
  // An eviction whose wait_back step is before a use of that block that precedes at_step in cycle
  // order (i.e., it evicts data still needed by an already-launched step).
  bool eviction_before_last_use = false;
  bool prefetch_of_resident = false;  // wasted prefetch (block already resident)
  bool evict_of_absent = false;
  // Drops: applied at the launch after last_use (at room_at with drops_at_frees), before
  // evictions; a block dropped and not resident is populated (not a miss, no bytes in) at its
  // next use.
  uint64_t bytes_dropped = 0, bytes_populated = 0;
  bool drop_of_live = false;  // a drop whose window is not a dead gap of its block
  // Of the last iteration simulated: the bytes resident at each step, after its actions and its
  // misses.
  std::vector<uint64_t> resident_by_step;
};
// Throws std::invalid_argument for bad input (as make_plan) or an action outside the iteration or
// its buffer.
// With drops_at_frees, each drop with a room_at applies there instead of after its last use.
Simulation simulate(const PlanInput& input, const Plan& plan, int iterations,
                    bool drops_at_frees = false);

}  // namespace umswap::advisor
