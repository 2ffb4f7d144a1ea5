// The planner's view of an iteration as blocks of its buffers, shared by make_plan (planner.cpp)
// and simulate (planner_simulate.cpp), built by planner_trace.cpp. Private to advisor/. Pure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "umswap/advisor/planner.h"

namespace umswap::advisor::planner_detail {

constexpr uint32_t kNoBlock = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kNoTable = std::numeric_limits<uint64_t>::max();
// Blocks of the buffers an iteration touches, at most: the block table costs 4 bytes each.
constexpr uint64_t kMaxBlocks = uint64_t{1} << 28;
// A block named by more lifetimes than this is treated as never empty (bounds the work per block).
constexpr uint32_t kMaxLifetimesPerBlock = 256;

// Throws std::invalid_argument("umswap planner: <who>: <what>").
[[noreturn]] void bad_input(const char* who, const std::string& what);

// The iteration as blocks: which blocks each step uses, and for each use how far away the
// block's previous and next uses are (cyclically).
struct Trace {
  uint64_t steps = 0;
  uint64_t granularity = 0;
  // Blocks the iteration touches; dense ids in first-touch order.
  std::vector<uint32_t> block_buffer;
  std::vector<uint64_t> block_index;  // within its buffer
  std::vector<uint64_t> block_bytes;
  // (buffer, block index) -> dense id: table[table_base[buffer] + index], kNoBlock if untouched;
  // table_base[buffer] = kNoTable for a buffer no step touches.
  std::vector<uint64_t> table_base;
  std::vector<uint32_t> table;
  // Uses, grouped by step: step t uses use_block[step_begin[t] .. step_begin[t + 1]), distinct.
  std::vector<uint64_t> step_begin;
  std::vector<uint32_t> use_block;
  std::vector<uint32_t> use_step;
  std::vector<uint64_t> step_bytes;
  // Steps from the block's previous use to this one, and from this one to its next (1..S).
  std::vector<uint32_t> prev_dist, next_dist;
  // The block's next use after use j (cyclically), and whether the gap ending at use j is dead
  // (the whole block unallocated at some moment of it; all 0 without lifetimes).
  std::vector<uint64_t> next_use;
  std::vector<uint8_t> dead;
  // Of a dead gap ending at use j: launches from the previous use to the first one after the
  // block's free (>= 1). Until then the block is allocated, and the allocator cannot discard it.
  std::vector<uint32_t> dead_hold;
  // Uses grouped by block, by step: block b's uses are block_uses[block_begin[b] .. [b + 1]).
  std::vector<uint64_t> block_begin;
  std::vector<uint64_t> block_uses;
  uint64_t footprint = 0;

  uint32_t blocks() const { return static_cast<uint32_t>(block_bytes.size()); }
  uint64_t uses() const { return use_block.size(); }
  uint32_t find(uint32_t buffer, uint64_t index) const {
    if (buffer >= table_base.size() || table_base[buffer] == kNoTable) return kNoBlock;
    return table[table_base[buffer] + index];
  }
  uint32_t first_use_step(uint32_t b) const { return use_step[block_uses[block_begin[b]]]; }
  uint32_t last_use_step(uint32_t b) const { return use_step[block_uses[block_begin[b + 1] - 1]]; }
  bool dead_after(uint64_t j) const { return dead[next_use[j]] != 0; }
  // The use of block b at step `step`, or UINT64_MAX.
  uint64_t use_at(uint32_t b, uint64_t step) const {
    const auto first = block_uses.begin() + static_cast<ptrdiff_t>(block_begin[b]);
    const auto last = block_uses.begin() + static_cast<ptrdiff_t>(block_begin[b + 1]);
    const auto it = std::lower_bound(first, last, step,
                                     [&](uint64_t j, uint64_t t) { return use_step[j] < t; });
    return it != last && use_step[*it] == step ? *it : UINT64_MAX;
  }
};

// The iteration of `in` as blocks, the input checked first (bad_input names `who`).
Trace build_trace(const PlanInput& in, const char* who);

// simulate() on a trace already built (make_plan checks its plan with it).
Simulation simulate_on(const Trace& tr, const PlanInput& input, const Plan& plan, int iterations,
                       bool drops_at_frees);

}  // namespace umswap::advisor::planner_detail
