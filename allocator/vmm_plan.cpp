#include "umswap/allocator/vmm_plan.h"

#include <algorithm>

#include "umswap/advisor/window_plan.h"

namespace umswap {

std::optional<RecordedIteration> IterationRecorder::begin() {
  std::optional<RecordedIteration> done;
  if (began_) done = finish();
  began_ = true;
  // The current iteration's ranges become the previous one's; the previous one's still live are
  // from now on themselves (by address).
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second.current) {
      it->second.current = false;
      ++it;
    } else {
      it = live_.erase(it);
    }
  }
  previous_ = std::move(current_);
  current_.clear();
  keys_.clear();
  first_range_.clear();
  step_ranges_.clear();
  ranges_.clear();
  persistent_index_.clear();
  local_index_.clear();
  events_.clear();
  return done;
}

std::optional<RecordedIteration> IterationRecorder::finish() const {
  if (keys_.empty()) return std::nullopt;
  RecordedIteration it;
  for (const Instance& i : current_) it.allocations.push_back(i.reserved);
  it.keys = keys_;
  it.first_range = first_range_;
  it.first_range.push_back(static_cast<uint32_t>(step_ranges_.size()));
  it.step_ranges = step_ranges_;
  it.ranges = ranges_;
  // Lifetimes: ordinals the steps reached, allocated once and freed once in this iteration.
  std::unordered_map<uint64_t, uint32_t> allocs, frees;
  for (const Event& e : events_) ++(e.freed ? frees : allocs)[e.ordinal];
  for (const Event& e : events_) {
    const auto index = local_index_.find(e.ordinal);
    if (index == local_index_.end() || allocs[e.ordinal] != 1 || frees[e.ordinal] != 1) continue;
    it.lifetimes.push_back({e.phase, e.freed, index->second});
  }
  return it;
}

void IterationRecorder::allocated(CUdeviceptr base, uint64_t reserved) {
  if (!began_) return;
  const uint64_t ordinal = current_.size();
  current_.push_back({base, reserved});
  live_[base] = {true, ordinal};
  events_.push_back({static_cast<uint32_t>(keys_.size()), false, ordinal});
}

void IterationRecorder::released(CUdeviceptr base) {
  const auto it = live_.find(base);
  if (it == live_.end()) return;
  const Where w = it->second;
  live_.erase(it);
  std::vector<Instance>& list = w.current ? current_ : previous_;
  if (w.ordinal < list.size()) list[w.ordinal].base = 0;
  events_.push_back({static_cast<uint32_t>(keys_.size()), true, w.ordinal});
}

uint32_t IterationRecorder::range_index(CUdeviceptr base, uint64_t reserved) {
  const auto live = live_.find(base);
  if (live != live_.end()) {
    const uint64_t k = live->second.ordinal;
    const auto [it, added] = local_index_.try_emplace(k, static_cast<uint32_t>(ranges_.size()));
    if (added) ranges_.push_back({reserved, true, k, 0});
    return it->second;
  }
  const auto [it, added] =
      persistent_index_.try_emplace(base, static_cast<uint32_t>(ranges_.size()));
  if (added) ranges_.push_back({reserved, false, 0, base});
  return it->second;
}

void IterationRecorder::step(uint32_t key, std::span<const CUdeviceptr> bases,
                             std::span<const uint64_t> reserved) {
  if (!began_) return;
  keys_.push_back(key);
  first_range_.push_back(static_cast<uint32_t>(step_ranges_.size()));
  for (size_t i = 0; i < bases.size() && i < reserved.size(); ++i) {
    step_ranges_.push_back(range_index(bases[i], reserved[i]));
  }
}

CUdeviceptr IterationRecorder::base_of(const TableRange& r) const {
  if (!r.local) return r.address;
  for (const std::vector<Instance>* list : {&current_, &previous_}) {
    if (r.ordinal < list->size()) {
      const Instance& i = (*list)[r.ordinal];
      if (i.base != 0 && i.reserved == r.reserved) return i.base;
    }
  }
  return 0;
}

WindowTable make_window_table(const RecordedIteration& it, uint64_t budget, uint64_t block,
                              double fill) {
  WindowTable table;
  table.keys = it.keys;
  table.ranges = it.ranges;
  const uint32_t steps = static_cast<uint32_t>(it.keys.size());
  if (steps == 0) return table;
  advisor::PlanInput in;
  in.budget_bytes = budget;
  in.granularity = block;
  for (const TableRange& r : it.ranges) in.buffer_sizes.push_back(r.reserved);
  for (uint32_t s = 0; s < steps; ++s) {
    advisor::PlanStep step;
    step.first_range = in.ranges.size();
    uint64_t bytes = 0;
    for (uint32_t i = it.first_range[s]; i < it.first_range[s + 1]; ++i) {
      bytes += it.ranges[it.step_ranges[i]].reserved;
    }
    if (bytes > budget) {
      ++table.steps_left_out;
    } else {
      for (uint32_t i = it.first_range[s]; i < it.first_range[s + 1]; ++i) {
        const uint32_t r = it.step_ranges[i];
        in.ranges.push_back({r, 0, it.ranges[r].reserved});
        ++step.range_count;
      }
    }
    in.steps.push_back(step);
  }
  // An event before the first step happens after the iteration before's last: after_step is the
  // last step, and it comes after the events that follow the last step (program order, cyclic).
  std::vector<RecordedIteration::Event> events = it.lifetimes;
  std::stable_partition(events.begin(), events.end(),
                        [](const RecordedIteration::Event& e) { return e.phase != 0; });
  for (const RecordedIteration::Event& e : events) {
    const uint32_t after = e.phase == 0 ? steps - 1 : std::min(e.phase, steps) - 1;
    in.lifetimes.push_back({after, e.freed, {e.range, 0, it.ranges[e.range].reserved}});
  }
  std::vector<std::vector<uint32_t>> uses(it.ranges.size());
  for (uint32_t s = 0; s < steps; ++s) {
    for (uint32_t i = it.first_range[s]; i < it.first_range[s + 1]; ++i) {
      std::vector<uint32_t>& u = uses[it.step_ranges[i]];
      if (u.empty() || u.back() != s) u.push_back(s);
    }
  }
  for (const std::vector<uint32_t>& u : uses) {
    table.first_use.push_back(static_cast<uint32_t>(table.use_phases.size()));
    table.use_phases.insert(table.use_phases.end(), u.begin(), u.end());
  }
  table.first_use.push_back(static_cast<uint32_t>(table.use_phases.size()));
  const advisor::WindowPlan wp = advisor::plan_windows(in, {fill});
  table.bytes_in = wp.plan.bytes_prefetched_per_iteration;
  table.bytes_out = wp.plan.bytes_evicted_per_iteration;
  for (const advisor::Action& a : wp.plan.actions) {
    const uint32_t phase = wp.segment_start[a.at_step];
    if (table.window_phase.empty() || table.window_phase.back() != phase) {
      table.window_phase.push_back(phase);
      table.first_move.push_back(static_cast<uint32_t>(table.moves.size()));
    }
    table.moves.push_back(
        {a.kind == advisor::ActionKind::prefetch, a.range.buffer, a.range.offset, a.range.length});
  }
  table.first_move.push_back(static_cast<uint32_t>(table.moves.size()));
  return table;
}

uint32_t steps_to_next_use(const WindowTable& table, uint32_t r, uint32_t phase) {
  if (r + 1 >= table.first_use.size()) return 0;
  const auto first = table.use_phases.begin() + table.first_use[r];
  const auto last = table.use_phases.begin() + table.first_use[r + 1];
  if (first == last) return 0;
  const auto next = std::upper_bound(first, last, phase);
  const uint32_t steps = static_cast<uint32_t>(table.keys.size());
  return next != last ? *next - phase : steps - phase + *first;
}

}  // namespace umswap
