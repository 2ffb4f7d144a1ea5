#include "umswap/advisor/replay.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "umswap/allocator/registry.h"
#include "umswap/allocator/slab_allocator.h"
#include "umswap/core/trace_file.h"

namespace umswap::advisor {

ReplayMatcher::ReplayMatcher(trace::Trace trace) : trace_(std::move(trace)) {
  std::map<Identity, uint64_t> seen;
  std::vector<uint32_t> order(trace_.buffers.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return trace_.buffers[a].id < trace_.buffers[b].id; });
  rank_.assign(trace_.buffers.size(), 0);
  for (uint32_t i : order) {
    rank_[i] = seen[{trace_.buffers[i].call_site, trace_.buffers[i].size}]++;
  }
}

void ReplayMatcher::index_live(std::span<const BufferRecord> live) {
  live_.clear();
  std::vector<const BufferRecord*> order;
  for (const BufferRecord& r : live) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const BufferRecord* a, const BufferRecord* b) { return a->id < b->id; });
  for (const BufferRecord* r : order) live_[{r->call_site, r->size}].push_back(r->base);
}

uint64_t ReplayMatcher::live_address(uint32_t buffer, std::span<const BufferRecord> live) {
  index_live(live);
  live_snapshot_ = nullptr;
  const trace::Buffer& b = trace_.buffers.at(buffer);
  auto it = live_.find({b.call_site, b.size});
  if (it == live_.end() || rank_[buffer] >= it->second.size()) return 0;
  return it->second[rank_[buffer]];
}

uint64_t ReplayMatcher::live_address(uint32_t buffer, const Registry& registry) {
  const auto snapshot = registry.snapshot();
  if (snapshot.get() != live_snapshot_) {
    index_live(snapshot->records());
    live_snapshot_ = snapshot.get();
  }
  const trace::Buffer& b = trace_.buffers.at(buffer);
  auto it = live_.find({b.call_site, b.size});
  if (it == live_.end() || rank_[buffer] >= it->second.size()) return 0;
  return it->second[rank_[buffer]];
}

bool ReplayMatcher::still_there(uint32_t buffer, uint64_t address, const Registry& registry) const {
  const std::optional<BufferRecord> r = registry.find(address);
  const trace::Buffer& b = trace_.buffers.at(buffer);
  return r && r->base == address && r->size == b.size && r->call_site == b.call_site;
}

bool replay_should_relearn(uint64_t skipped_bytes, const Plan& plan) {
  const uint64_t moved = plan.bytes_prefetched_per_iteration + plan.bytes_evicted_per_iteration;
  return skipped_bytes > 0 && skipped_bytes >= moved / 100;
}

bool ReplayMatcher::matches(uint64_t index, uint32_t key,
                            const std::function<std::string(uint32_t)>& name_of) {
  const auto& steps = trace_.steps;
  uint64_t step = index;
  if (step >= steps.size()) {
    const uint64_t period = trace_.detection.period;
    const uint64_t base = trace_.detection.warmup_steps;
    if (period == 0 || steps.size() < base + period) return false;
    // The last full period of the trace, at the same phase.
    const uint64_t last_start = base + ((steps.size() - base) / period - 1) * period;
    step = last_start + (index - base) % period;
  }
  auto it = key_to_name_.find(key);
  if (it == key_to_name_.end()) {
    const std::string name = name_of(key);
    uint32_t found = UINT32_MAX;
    for (uint32_t n = 0; n < trace_.names.size(); ++n) {
      if (trace_.names[n] == name) found = n;
    }
    it = key_to_name_.emplace(key, found).first;
  }
  return it->second == steps[step].name;
}

std::unique_ptr<ReplayMatcher> load_replay(const std::string& path, std::string* error) {
  std::string why;
  auto t = read_trace_file(path, &why);
  if (!t) {
    *error = why;
    return nullptr;
  }
  if (t->iterations.empty() || t->detection.period == 0) {
    *error = "trace " + path + " holds no complete iteration";
    return nullptr;
  }
  return std::make_unique<ReplayMatcher>(std::move(*t));
}

bool is_small_slab(const trace::Buffer& b) {
  return b.size == SlabAllocator::kSmallSlab &&
         b.api == static_cast<uint8_t>(AllocApi::cudaMallocAsync);
}

PlanInput plan_input_from_trace(const trace::Trace& t, size_t iteration, uint64_t budget,
                                bool lifetimes, std::vector<PlanRange>* resident) {
  const trace::Iteration& it = t.iterations.at(iteration);
  // The small slabs the iteration touches, left out when they take half the budget or less.
  std::vector<uint8_t> left_out(t.buffers.size(), 0);
  uint64_t small = 0;
  for (uint64_t s = it.first_step; s < it.first_step + it.step_count; ++s) {
    const trace::Step& step = t.steps.at(s);
    for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
      const uint32_t b = t.accesses.at(a).buffer;
      if (!left_out[b] && is_small_slab(t.buffers.at(b))) {
        left_out[b] = 1;
        small += t.buffers[b].size;
      }
    }
  }
  if (small > budget / 2) {
    std::fill(left_out.begin(), left_out.end(), 0);
    small = 0;
  }
  PlanInput in;
  for (const trace::Buffer& b : t.buffers) in.buffer_sizes.push_back(b.size);
  for (uint64_t s = it.first_step; s < it.first_step + it.step_count; ++s) {
    const trace::Step& step = t.steps.at(s);
    PlanStep ps;
    ps.first_range = in.ranges.size();
    ps.seconds = step.end_ns > step.start_ns ? (step.end_ns - step.start_ns) / 1e9 : 0.0;
    for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
      const trace::Access& acc = t.accesses.at(a);
      if (!left_out[acc.buffer]) in.ranges.push_back({acc.buffer, acc.offset, acc.length});
    }
    ps.range_count = in.ranges.size() - ps.first_range;
    in.steps.push_back(ps);
  }
  if (lifetimes) {
    append_lifetimes(t.lifetimes, it.first_step, it.step_count, in);
    std::erase_if(in.lifetimes,
                  [&](const PlanLifetime& l) { return left_out[l.range.buffer] != 0; });
  }
  in.budget_bytes = budget - small;
  for (uint32_t b = 0; b < left_out.size() && resident; ++b) {
    if (left_out[b]) resident->push_back({b, 0, t.buffers[b].size});
  }
  return in;
}

void append_lifetimes(std::span<const trace::Lifetime> lifetimes, uint64_t first_step,
                      uint64_t step_count, PlanInput& in) {
  const auto first = std::lower_bound(
      lifetimes.begin(), lifetimes.end(), first_step + 1,
      [](const trace::Lifetime& l, uint64_t step) { return l.before_step < step; });
  for (auto l = first; l != lifetimes.end() && l->before_step <= first_step + step_count; ++l) {
    in.lifetimes.push_back({static_cast<uint32_t>(l->before_step - first_step - 1),
                            l->freed,
                            {l->buffer, l->offset, l->length}});
  }
}

bool make_replay_plan(const ReplayMatcher& matcher, uint64_t budget, double prefetch_bytes_per_s,
                      double evict_bytes_per_s, Plan* plan, uint64_t* base, uint64_t* period,
                      std::string* why, bool lifetimes) {
  const trace::Trace& t = matcher.trace();
  const uint64_t p = t.detection.period;
  if (const std::optional<size_t> i = replay_iteration(t)) {
    const uint64_t first = t.iterations.front().first_step;
    std::vector<PlanRange> small_slabs;
    PlanInput in = plan_input_from_trace(t, *i, budget, lifetimes, &small_slabs);
    in.prefetch_bytes_per_s = prefetch_bytes_per_s;
    in.evict_bytes_per_s = evict_bytes_per_s;
    try {
      *plan = make_plan(in);
    } catch (const std::exception& e) {
      *why = std::string("planning from the trace failed: ") + e.what();
      return false;
    }
    plan->resident_at_start.insert(plan->resident_at_start.end(), small_slabs.begin(),
                                   small_slabs.end());
    *base = first;
    *period = p;
    return true;
  }
  *why = "the trace has no iteration of its detected period";
  return false;
}

}  // namespace umswap::advisor
