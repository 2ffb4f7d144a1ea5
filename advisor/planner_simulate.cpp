// The planner's simulation of a plan over repeated iterations (planner.h: simulate). Pure.
#include "umswap/advisor/planner.h"

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

#include "planner_trace.h"

namespace umswap::advisor {

using namespace planner_detail;

Simulation simulate(const PlanInput& input, const Plan& plan, int iterations, bool drops_at_frees) {
  return simulate_on(build_trace(input, "simulate"), input, plan, iterations, drops_at_frees);
}

Simulation planner_detail::simulate_on(const Trace& tr, const PlanInput& input, const Plan& plan,
                                       int iterations, bool drops_at_frees) {
  const uint64_t S = tr.steps;
  const uint64_t g = tr.granularity;
  Simulation sim;

  // Residency of touched blocks by dense id; of others (a plan may name any block) in a set.
  std::vector<uint8_t> resident(tr.blocks(), 0);
  std::set<std::pair<uint32_t, uint64_t>> other;
  uint64_t resident_bytes = 0;
  auto for_blocks = [&](const PlanRange& r, const char* what, auto&& fn) {
    if (r.buffer >= input.buffer_sizes.size() || r.offset > input.buffer_sizes[r.buffer] ||
        r.length > input.buffer_sizes[r.buffer] - r.offset)
      bad_input("simulate", std::string(what) + " range of buffer " + std::to_string(r.buffer) +
                                " at offset " + std::to_string(r.offset) + " is outside it");
    if (r.length == 0) return;
    const uint64_t size = input.buffer_sizes[r.buffer];
    for (uint64_t k = r.offset / g; k <= (r.offset + r.length - 1) / g; ++k) {
      fn(r.buffer, k, std::min(g, size - k * g));
    }
  };
  // Sets residency; returns whether it was resident before.
  auto set_resident = [&](uint32_t buffer, uint64_t k, uint64_t bytes, bool on) {
    const uint32_t b = tr.find(buffer, k);
    bool was;
    if (b != kNoBlock) {
      was = resident[b];
      resident[b] = on;
    } else {
      was = on ? !other.insert({buffer, k}).second : other.erase({buffer, k}) > 0;
    }
    if (was && !on) resident_bytes -= bytes;
    if (!was && on) resident_bytes += bytes;
    return was;
  };
  for (const PlanRange& r : plan.resident_at_start) {
    for_blocks(r, "resident_at_start", [&](uint32_t buffer, uint64_t k, uint64_t bytes) {
      set_resident(buffer, k, bytes, true);
    });
  }
  sim.peak_resident_bytes = resident_bytes;

  std::vector<std::vector<const Action*>> at(S);
  for (const Action& a : plan.actions) {
    if (a.at_step >= S)
      bad_input("simulate", "an action is at step " + std::to_string(a.at_step) +
                                ", but the iteration has " + std::to_string(S) + " steps");
    at[a.at_step].push_back(&a);
  }
  // Steps back from step i to the block's latest use at or before i (cyclic), or S + 1 if none.
  auto back_to_use = [&](uint32_t b, uint64_t i) -> uint64_t {
    const auto first = tr.block_uses.begin() + static_cast<ptrdiff_t>(tr.block_begin[b]);
    const auto last = tr.block_uses.begin() + static_cast<ptrdiff_t>(tr.block_begin[b + 1]);
    auto it = std::upper_bound(first, last, i,
                               [&](uint64_t step, uint64_t j) { return step < tr.use_step[j]; });
    if (it == first) return i + S - tr.use_step[*(last - 1)];
    return i - tr.use_step[*(it - 1)];
  };

  // Drops: at the launch after last_use (with drops_at_frees, at room_at), of blocks whose gap
  // from last_use to next_use is dead.
  std::vector<std::vector<uint32_t>> drops_at(S);
  std::vector<uint8_t> dropped(tr.blocks(), 0);  // not resident because dropped
  for (const Drop& d : plan.drops) {
    if (d.last_use >= S || d.next_use >= S)
      bad_input("simulate", "a drop names step " +
                                std::to_string(std::max(d.last_use, d.next_use)) +
                                ", but the iteration has " + std::to_string(S) + " steps");
    for_blocks(d.range, "dropped", [&](uint32_t buffer, uint64_t k, uint64_t) {
      const uint32_t b = tr.find(buffer, k);
      const uint64_t j = b == kNoBlock ? UINT64_MAX : tr.use_at(b, d.last_use);
      if (j == UINT64_MAX || tr.use_step[tr.next_use[j]] != d.next_use || !tr.dead_after(j)) {
        sim.drop_of_live = true;
        return;
      }
      const bool at_free = drops_at_frees && d.room_at != Drop::kAfterLastUse;
      if (at_free && d.room_at >= S)
        bad_input("simulate", "a drop's room_at names step " + std::to_string(d.room_at) +
                                  ", but the iteration has " + std::to_string(S) + " steps");
      drops_at[at_free ? d.room_at : (d.last_use + 1) % S].push_back(b);
      // Dropped across the iteration boundary and not resident at the start: dropped already.
      if (!resident[b] && d.last_use == tr.last_use_step(b) && d.next_use == tr.first_use_step(b))
        dropped[b] = 1;
    });
  }

  for (int iteration = 0; iteration < iterations; ++iteration) {
    for (uint64_t i = 0; i < S; ++i) {
      for (const uint32_t b : drops_at[i]) {
        if (!resident[b]) continue;
        resident[b] = 0;
        dropped[b] = 1;
        resident_bytes -= tr.block_bytes[b];
        sim.bytes_dropped += tr.block_bytes[b];
      }
      for (const bool evict : {true, false}) {
        for (const Action* a : at[i]) {
          if ((a->kind == ActionKind::evict) != evict) continue;
          for_blocks(a->range, evict ? "evicted" : "prefetched",
                     [&](uint32_t buffer, uint64_t k, uint64_t bytes) {
                       if (evict) {
                         const uint32_t b = tr.find(buffer, k);
                         if (b != kNoBlock && back_to_use(b, i) < a->wait_back)
                           sim.eviction_before_last_use = true;
                         if (set_resident(buffer, k, bytes, false)) {
                           sim.bytes_out += bytes;
                         } else {
                           sim.evict_of_absent = true;
                         }
                       } else if (set_resident(buffer, k, bytes, true)) {
                         sim.prefetch_of_resident = true;
                       } else {
                         const uint32_t b = tr.find(buffer, k);
                         if (b != kNoBlock) dropped[b] = 0;
                         sim.bytes_in += bytes;
                       }
                     });
        }
      }
      sim.peak_resident_bytes = std::max(sim.peak_resident_bytes, resident_bytes);
      for (uint64_t j = tr.step_begin[i]; j < tr.step_begin[i + 1]; ++j) {
        const uint32_t b = tr.use_block[j];
        if (!resident[b]) {
          if (dropped[b] && tr.dead[j]) {
            sim.bytes_populated += tr.block_bytes[b];
          } else {
            ++sim.misses;
            sim.bytes_in += tr.block_bytes[b];
          }
          dropped[b] = 0;
          resident[b] = 1;
          resident_bytes += tr.block_bytes[b];
        }
      }
      sim.peak_resident_bytes = std::max(sim.peak_resident_bytes, resident_bytes);
      if (iteration + 1 == iterations) sim.resident_by_step.push_back(resident_bytes);
    }
  }
  return sim;
}

}  // namespace umswap::advisor
