// The planner's iteration as blocks (planner_trace.h): the input checked, each step's blocks, the
// distances between a block's uses, and which gaps are dead (lifetimes). Pure.
#include "planner_trace.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace umswap::advisor::planner_detail {

[[noreturn]] void bad_input(const char* who, const std::string& what) {
  throw std::invalid_argument(std::string("umswap planner: ") + who + ": " + what);
}

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

void validate(const PlanInput& in, const char* who) {
  if (in.steps.empty()) bad_input(who, "steps is empty: an iteration needs at least one step");
  if (in.steps.size() > std::numeric_limits<uint32_t>::max())
    bad_input(who, "too many steps (" + std::to_string(in.steps.size()) + ")");
  if (in.budget_bytes == 0) bad_input(who, "budget_bytes is 0: the GPU budget must be positive");
  if (in.granularity == 0) bad_input(who, "granularity is 0: blocks must be at least one byte");
  if (!(in.lookahead_seconds >= 0) || !std::isfinite(in.lookahead_seconds))
    bad_input(who, "lookahead_seconds must be a finite number >= 0");
  for (size_t i = 0; i < in.ranges.size(); ++i) {
    const PlanRange& r = in.ranges[i];
    if (r.buffer >= in.buffer_sizes.size())
      bad_input(who, "range " + std::to_string(i) + " names buffer " + std::to_string(r.buffer) +
                         ", but there are " + std::to_string(in.buffer_sizes.size()) + " buffers");
    const uint64_t size = in.buffer_sizes[r.buffer];
    if (r.offset > size || r.length > size - r.offset)
      bad_input(who, "range " + std::to_string(i) + " [" + std::to_string(r.offset) + ", +" +
                         std::to_string(r.length) + ") is outside buffer " +
                         std::to_string(r.buffer) + " of " + std::to_string(size) + " bytes");
  }
  for (size_t t = 0; t < in.steps.size(); ++t) {
    const PlanStep& s = in.steps[t];
    if (s.first_range > in.ranges.size() || s.range_count > in.ranges.size() - s.first_range)
      bad_input(who, "step " + std::to_string(t) + " names ranges [" +
                         std::to_string(s.first_range) + ", +" + std::to_string(s.range_count) +
                         "), but there are " + std::to_string(in.ranges.size()) + " ranges");
    if (!(s.seconds >= 0) || !std::isfinite(s.seconds))
      bad_input(who, "step " + std::to_string(t) + " has seconds " + std::to_string(s.seconds) +
                         ": must be a finite number >= 0");
  }
  for (size_t i = 0; i < in.lifetimes.size(); ++i) {
    const PlanLifetime& l = in.lifetimes[i];
    const std::string name = "lifetime " + std::to_string(i);
    if (l.after_step >= in.steps.size())
      bad_input(who, name + " is after step " + std::to_string(l.after_step) +
                         ", but the iteration has " + std::to_string(in.steps.size()) + " steps");
    if (i > 0 && l.after_step < in.lifetimes[i - 1].after_step)
      bad_input(who, name + " is out of order (after step " + std::to_string(l.after_step) +
                         ", the one before it after step " +
                         std::to_string(in.lifetimes[i - 1].after_step) + ")");
    if (l.range.buffer >= in.buffer_sizes.size())
      bad_input(who, name + " names buffer " + std::to_string(l.range.buffer) + ", but there are " +
                         std::to_string(in.buffer_sizes.size()) + " buffers");
    const uint64_t size = in.buffer_sizes[l.range.buffer];
    if (l.range.length == 0 || l.range.offset > size || l.range.length > size - l.range.offset)
      bad_input(who, name + " [" + std::to_string(l.range.offset) + ", +" +
                         std::to_string(l.range.length) + ") is empty or outside buffer " +
                         std::to_string(l.range.buffer) + " of " + std::to_string(size) + " bytes");
  }
}

// Byte intervals [first, second) of one block, disjoint and sorted.
using Intervals = std::map<uint64_t, uint64_t>;

void add_interval(Intervals& set, uint64_t a, uint64_t b) {
  auto it = set.upper_bound(a);
  if (it != set.begin() && std::prev(it)->second >= a) {
    --it;
    a = it->first;
  }
  while (it != set.end() && it->first <= b) {
    b = std::max(b, it->second);
    it = set.erase(it);
  }
  set.emplace(a, b);
}

void remove_interval(Intervals& set, uint64_t a, uint64_t b) {
  auto it = set.upper_bound(a);
  if (it != set.begin()) --it;
  while (it != set.end() && it->first < b) {
    const uint64_t first = it->first, second = it->second;
    if (second <= a) {
      ++it;
      continue;
    }
    it = set.erase(it);
    if (first < a) set.emplace(first, a);
    if (second > b) it = set.emplace(b, second).first;
  }
}

// tr.dead: per use, whether the block is wholly unallocated at some position of the gap ending
// there. The block's state at the iteration's start is its state at the end: running its
// lifetimes twice from "all allocated" reaches it (bytes no lifetime names stay allocated).
void mark_dead_gaps(const PlanInput& in, Trace& tr) {
  tr.dead.assign(tr.uses(), 0);
  tr.dead_hold.assign(tr.uses(), 1);
  if (in.lifetimes.empty()) return;
  const uint64_t g = tr.granularity;
  const uint32_t blocks = tr.blocks();
  auto for_each_block = [&](const PlanLifetime& l, auto&& fn) {
    const uint64_t last = (l.range.offset + l.range.length - 1) / g;
    for (uint64_t k = l.range.offset / g; k <= last; ++k) {
      const uint32_t b = tr.find(l.range.buffer, k);
      if (b != kNoBlock) fn(b, k);
    }
  };
  // Lifetimes by block (CSR), in program order.
  std::vector<uint64_t> begin(blocks + 1, 0);
  for (const PlanLifetime& l : in.lifetimes) {
    for_each_block(l, [&](uint32_t b, uint64_t) { ++begin[b + 1]; });
  }
  for (uint32_t b = 0; b < blocks; ++b) begin[b + 1] += begin[b];
  std::vector<uint32_t> of_block(begin[blocks]);
  {
    std::vector<uint64_t> fill(begin.begin(), begin.end() - 1);
    for (size_t i = 0; i < in.lifetimes.size(); ++i) {
      for_each_block(in.lifetimes[i],
                     [&](uint32_t b, uint64_t) { of_block[fill[b]++] = static_cast<uint32_t>(i); });
    }
  }
  const auto S = static_cast<int64_t>(tr.steps);
  std::vector<int64_t> empty_at;  // positions after which the block is wholly unallocated
  Intervals allocated;
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint64_t count = begin[b + 1] - begin[b];
    if (count == 0 || count > kMaxLifetimesPerBlock) continue;
    const uint64_t start = tr.block_index[b] * g, end = start + tr.block_bytes[b];
    allocated.clear();
    allocated.emplace(start, end);
    empty_at.clear();
    for (int pass = 0; pass < 2; ++pass) {
      for (uint64_t i = begin[b]; i < begin[b + 1]; ++i) {
        const PlanLifetime& l = in.lifetimes[of_block[i]];
        const uint64_t lo = std::max(start, l.range.offset);
        const uint64_t hi = std::min(end, l.range.offset + l.range.length);
        if (!l.freed) {
          add_interval(allocated, lo, hi);
        } else {
          remove_interval(allocated, lo, hi);
          if (pass == 1 && allocated.empty()) empty_at.push_back(l.after_step);
        }
      }
    }
    if (empty_at.empty()) continue;
    for (uint64_t i = tr.block_begin[b]; i < tr.block_begin[b + 1]; ++i) {
      const uint64_t j = tr.block_uses[i];
      const auto u2 = static_cast<int64_t>(tr.use_step[j]);
      const int64_t u1 = u2 - static_cast<int64_t>(tr.prev_dist[j]);
      bool dead;
      int64_t freed = 0;  // the first position at or after u1 after which it is unallocated
      // empty_at is sorted: the first entry at or after `from`, else the first one a lap later.
      const auto first_from = [&](int64_t from) {
        const auto it = std::lower_bound(empty_at.begin(), empty_at.end(), from);
        return it != empty_at.end() ? *it : empty_at.front() + S;
      };
      if (u1 <= u2 - S) {
        dead = true;  // the gap is the whole iteration (u1 < 0)
        freed = first_from(u1 + S) - S;
      } else if (u1 >= 0) {
        const auto it = std::lower_bound(empty_at.begin(), empty_at.end(), u1);
        dead = it != empty_at.end() && *it < u2;
        freed = dead ? *it : u1;
      } else {
        dead = empty_at.back() >= u1 + S || empty_at.front() < u2;
        freed = empty_at.back() >= u1 + S ? first_from(u1 + S) - S : empty_at.front();
      }
      tr.dead[j] = dead;
      if (dead) {
        tr.dead_hold[j] = static_cast<uint32_t>(std::clamp<int64_t>(freed + 1 - u1, 1, u2 - u1));
      }
    }
  }
}

Trace build_trace_once(const PlanInput& in, const char* who) {
  Trace tr;
  const uint64_t g = in.granularity;
  tr.steps = in.steps.size();
  tr.granularity = g;

  // Block tables only for the buffers some step touches.
  tr.table_base.assign(in.buffer_sizes.size(), kNoTable);
  for (const PlanStep& s : in.steps) {
    for (uint64_t r = s.first_range; r < s.first_range + s.range_count; ++r) {
      if (in.ranges[r].length > 0) tr.table_base[in.ranges[r].buffer] = 0;
    }
  }
  uint64_t table_size = 0;
  for (size_t b = 0; b < in.buffer_sizes.size(); ++b) {
    if (tr.table_base[b] == kNoTable) continue;
    tr.table_base[b] = table_size;
    table_size += ceil_div(in.buffer_sizes[b], g);
    if (table_size > kMaxBlocks)
      bad_input(who, "granularity " + std::to_string(g) +
                         " makes more than 2^28 blocks of the buffers touched; use a larger one");
  }
  tr.table.assign(table_size, kNoBlock);

  tr.step_begin.reserve(tr.steps + 1);
  tr.step_bytes.reserve(tr.steps);
  for (uint64_t t = 0; t < tr.steps; ++t) {
    const PlanStep& s = in.steps[t];
    const uint64_t begin = tr.use_block.size();
    tr.step_begin.push_back(begin);
    for (uint64_t r = s.first_range; r < s.first_range + s.range_count; ++r) {
      const PlanRange& range = in.ranges[r];
      if (range.length == 0) continue;
      const uint64_t base = tr.table_base[range.buffer];
      const uint64_t last = (range.offset + range.length - 1) / g;
      for (uint64_t k = range.offset / g; k <= last; ++k) {
        uint32_t& id = tr.table[base + k];
        if (id == kNoBlock) {
          if (tr.block_bytes.size() >= kNoBlock) bad_input(who, "too many blocks");
          id = static_cast<uint32_t>(tr.block_bytes.size());
          tr.block_buffer.push_back(range.buffer);
          tr.block_index.push_back(k);
          tr.block_bytes.push_back(std::min(g, in.buffer_sizes[range.buffer] - k * g));
        }
        tr.use_block.push_back(id);
      }
    }
    // Distinct blocks per step (ranges of one step may overlap).
    const auto first = tr.use_block.begin() + static_cast<ptrdiff_t>(begin);
    std::sort(first, tr.use_block.end());
    tr.use_block.erase(std::unique(first, tr.use_block.end()), tr.use_block.end());
    uint64_t bytes = 0;
    for (auto it = first; it != tr.use_block.end(); ++it) bytes += tr.block_bytes[*it];
    tr.step_bytes.push_back(bytes);
  }
  tr.step_begin.push_back(tr.use_block.size());
  for (uint64_t bytes : tr.block_bytes) tr.footprint += bytes;

  const uint64_t n = tr.uses();
  tr.use_step.resize(n);
  for (uint64_t t = 0; t < tr.steps; ++t) {
    for (uint64_t j = tr.step_begin[t]; j < tr.step_begin[t + 1]; ++j) {
      tr.use_step[j] = static_cast<uint32_t>(t);
    }
  }
  // Uses by block (counting sort keeps step order).
  const uint32_t blocks = tr.blocks();
  tr.block_begin.assign(blocks + 1, 0);
  for (uint32_t b : tr.use_block) ++tr.block_begin[b + 1];
  for (uint32_t b = 0; b < blocks; ++b) tr.block_begin[b + 1] += tr.block_begin[b];
  tr.block_uses.resize(n);
  {
    std::vector<uint64_t> fill(tr.block_begin.begin(), tr.block_begin.end() - 1);
    for (uint64_t j = 0; j < n; ++j) tr.block_uses[fill[tr.use_block[j]]++] = j;
  }
  tr.prev_dist.resize(n);
  tr.next_dist.resize(n);
  tr.next_use.resize(n);
  const auto S = static_cast<uint32_t>(tr.steps);
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint64_t lo = tr.block_begin[b], hi = tr.block_begin[b + 1];
    for (uint64_t i = lo; i < hi; ++i) {
      const uint64_t j = tr.block_uses[i];
      const uint64_t next = tr.block_uses[i + 1 < hi ? i + 1 : lo];
      const uint32_t d = tr.use_step[next] - tr.use_step[j] + (i + 1 < hi ? 0 : S);
      tr.next_dist[j] = d;
      tr.next_use[j] = next;
      tr.prev_dist[next] = d;
    }
  }
  mark_dead_gaps(in, tr);
  return tr;
}

}  // namespace

// With PlanInput::hold_until_free, a block stays resident from its last use to its free: each
// dead gap whose block is freed launches after its last use gets a use at the launch after which
// the free comes (where the block is last allocated). Its gap then splits into a live one up to
// that use and a dead one from it, which the allocator can discard at once.
Trace build_trace(const PlanInput& in, const char* who) {
  validate(in, who);
  Trace tr = build_trace_once(in, who);
  if (!in.hold_until_free || in.lifetimes.empty()) return tr;
  const uint64_t S = tr.steps;
  std::vector<std::vector<uint32_t>> held(S);  // by step: blocks used there to hold them
  bool any = false;
  for (uint64_t j = 0; j < tr.uses(); ++j) {
    if (!tr.dead[j] || tr.dead_hold[j] < 2) continue;
    const uint64_t u1 = tr.use_step[j] + S - tr.prev_dist[j];
    held[(u1 + tr.dead_hold[j] - 1) % S].push_back(tr.use_block[j]);
    any = true;
  }
  if (!any) return tr;
  PlanInput with_holds;
  with_holds.buffer_sizes = in.buffer_sizes;
  with_holds.granularity = in.granularity;
  with_holds.lifetimes = in.lifetimes;
  with_holds.steps = in.steps;
  with_holds.ranges.reserve(in.ranges.size() + tr.uses());
  const uint64_t g = tr.granularity;
  for (uint64_t t = 0; t < S; ++t) {
    const PlanStep& s = in.steps[t];
    with_holds.steps[t].first_range = with_holds.ranges.size();
    with_holds.ranges.insert(
        with_holds.ranges.end(), in.ranges.begin() + static_cast<ptrdiff_t>(s.first_range),
        in.ranges.begin() + static_cast<ptrdiff_t>(s.first_range + s.range_count));
    for (const uint32_t b : held[t]) {
      with_holds.ranges.push_back({tr.block_buffer[b], tr.block_index[b] * g, tr.block_bytes[b]});
    }
    const uint64_t count = with_holds.ranges.size() - with_holds.steps[t].first_range;
    if (count > UINT32_MAX) bad_input(who, "a step holds more than 2^32 ranges");
    with_holds.steps[t].range_count = static_cast<uint32_t>(count);
  }
  return build_trace_once(with_holds, who);
}

}  // namespace umswap::advisor::planner_detail
