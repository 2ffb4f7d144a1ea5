// Windows from the plan: see umswap/advisor/window_plan.h.
#include "umswap/advisor/window_plan.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace umswap::advisor {

uint32_t WindowPlan::segment_of(uint32_t step) const {
  const auto it = std::upper_bound(segment_start.begin(), segment_start.end(), step);
  return static_cast<uint32_t>(it - segment_start.begin()) - 1;
}

namespace {

constexpr uint64_t kMaxStepBlocks = uint64_t{1} << 28;  // as make_plan's blocks, at most

// in.lifetimes at segment boundaries (window_plan.h), in program order from the iteration's
// start: an allocation before the first segment's launches comes last (before the next
// iteration's), where the planner's cyclic reading puts it.
void segment_lifetimes(const PlanInput& in, WindowPlan& w) {
  const auto segments = static_cast<uint32_t>(w.segment_start.size());
  const auto steps = static_cast<uint32_t>(in.steps.size());
  struct Event {
    uint32_t at;     // after segment `at`
    int64_t since;   // an allocation: from where it counts against the frees before it (-1:
                     // the iteration's start, where `at` is the last segment, cyclically)
    uint32_t order;  // position in in.lifetimes
    bool freed;
  };
  std::vector<Event> events;
  events.reserve(in.lifetimes.size());
  for (uint32_t i = 0; i < in.lifetimes.size(); ++i) {
    const PlanLifetime& l = in.lifetimes[i];
    if (l.after_step >= steps)
      throw std::invalid_argument("umswap plan_windows: a lifetime after a step past the input's");
    if (i > 0 && l.after_step < in.lifetimes[i - 1].after_step)
      throw std::invalid_argument("umswap plan_windows: lifetimes out of program order");
    if (l.range.buffer >= in.buffer_sizes.size())
      throw std::invalid_argument("umswap plan_windows: a lifetime names no buffer");
    uint32_t at;
    int64_t since;
    if (l.freed) {
      at = w.segment_of(l.after_step);
      since = at;
    } else {  // before the segment of its first launch (the next iteration's first, cyclically)
      const bool wraps = l.after_step + 1 == steps;  // after the last launch
      const uint32_t next = wraps ? 0 : w.segment_of(l.after_step + 1);
      at = next == 0 ? segments - 1 : next - 1;
      since = next == 0 && !wraps ? -1 : int64_t{at};  // inside the first segment: its start
    }
    events.push_back({at, since, i, l.freed});
  }
  // A free whose bytes an allocation after it (in program order) takes again, and that moved
  // before it: left out.
  std::vector<uint8_t> left_out(events.size(), 0);
  std::vector<std::vector<uint32_t>> by_buffer(in.buffer_sizes.size());
  for (const Event& e : events) by_buffer[in.lifetimes[e.order].range.buffer].push_back(e.order);
  for (const std::vector<uint32_t>& list : by_buffer) {
    for (size_t f = 0; f < list.size(); ++f) {
      const Event& free = events[list[f]];
      if (!free.freed) continue;
      const PlanRange& fr = in.lifetimes[free.order].range;
      for (size_t a = f + 1; a < list.size(); ++a) {
        const Event& alloc = events[list[a]];
        const PlanRange& ar = in.lifetimes[alloc.order].range;
        if (!alloc.freed && alloc.since < free.since && ar.offset < fr.offset + fr.length &&
            fr.offset < ar.offset + ar.length) {
          left_out[free.order] = 1;
          ++w.frees_left_out;
          break;
        }
      }
    }
  }
  // Within a segment's group, the allocations moved to the iteration's start come last: they
  // take effect for the next iteration, after every free of this one (a free of the last segment
  // listed after them would end their life at once).
  std::stable_sort(events.begin(), events.end(), [](const Event& x, const Event& y) {
    if (x.at != y.at) return x.at < y.at;
    return (x.since < 0) < (y.since < 0);
  });
  for (const Event& e : events) {
    if (left_out[e.order]) continue;
    PlanLifetime l = in.lifetimes[e.order];
    l.after_step = e.at;
    w.segments.lifetimes.push_back(l);
  }
}

}  // namespace

WindowPlan plan_windows(const PlanInput& in, const WindowOptions& options) {
  if (!(options.fill > 0 && options.fill <= 1))
    throw std::invalid_argument("umswap plan_windows: fill must be in (0, 1]");
  if (in.granularity == 0) throw std::invalid_argument("umswap plan_windows: granularity is 0");
  const uint64_t g = in.granularity;
  const double limit = options.fill * static_cast<double>(in.budget_bytes);
  WindowPlan w;
  w.segments.buffer_sizes = in.buffer_sizes;
  w.segments.budget_bytes = in.budget_bytes;
  w.segments.granularity = in.granularity;
  w.segments.prefetch_bytes_per_s = in.prefetch_bytes_per_s;
  w.segments.evict_bytes_per_s = in.evict_bytes_per_s;
  w.segments.lookahead_bytes = in.lookahead_bytes;
  w.segments.lookahead_seconds = in.lookahead_seconds;
  w.segments.hold_until_free = in.hold_until_free;
  using Block = std::pair<uint32_t, uint64_t>;  // (buffer, block index)
  struct BlockHash {
    size_t operator()(const Block& b) const {
      return std::hash<uint64_t>()(b.second * 0x9E3779B97F4A7C15ull ^ b.first);
    }
  };
  std::unordered_set<Block, BlockHash> in_segment;  // the current segment's blocks
  std::vector<Block> blocks;                        // the step's, scratch
  double segment_bytes = 0;
  for (size_t t = 0; t < in.steps.size(); ++t) {
    const PlanStep& s = in.steps[t];
    if (s.first_range > in.ranges.size() || s.range_count > in.ranges.size() - s.first_range)
      throw std::invalid_argument("umswap plan_windows: step " + std::to_string(t) +
                                  " names ranges past the input's");
    blocks.clear();
    for (uint64_t r = s.first_range; r < s.first_range + s.range_count; ++r) {
      const PlanRange& range = in.ranges[r];
      if (range.length == 0) continue;
      if (range.buffer >= in.buffer_sizes.size())
        throw std::invalid_argument("umswap plan_windows: a range names no buffer");
      const uint64_t size = in.buffer_sizes[range.buffer];
      if (range.offset > size || range.length > size - range.offset)
        throw std::invalid_argument("umswap plan_windows: a range outside its buffer");
      const uint64_t first = range.offset / g, last = (range.offset + range.length - 1) / g;
      if (last - first >= kMaxStepBlocks - blocks.size())
        throw std::invalid_argument("umswap plan_windows: a step of more than 2^28 blocks");
      for (uint64_t k = first; k <= last; ++k) blocks.emplace_back(range.buffer, k);
    }
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    const auto bytes_of = [&](const Block& b) {
      const uint64_t size = in.buffer_sizes[b.first];
      return static_cast<double>(std::min(g, size - b.second * g));
    };
    double added = 0;
    for (const Block& b : blocks) {
      if (!in_segment.count(b)) added += bytes_of(b);
    }
    if (t == 0 || (added > 0 && segment_bytes + added > limit)) {
      w.segment_start.push_back(static_cast<uint32_t>(t));
      w.segments.steps.push_back({w.segments.ranges.size(), 0, 0.0});
      in_segment.clear();
      segment_bytes = 0;
      added = 0;
      for (const Block& b : blocks) {
        if (in_segment.insert(b).second) added += bytes_of(b);
      }
    } else {
      in_segment.insert(blocks.begin(), blocks.end());
    }
    segment_bytes += added;
    PlanStep& seg = w.segments.steps.back();
    w.segments.ranges.insert(
        w.segments.ranges.end(), in.ranges.begin() + static_cast<ptrdiff_t>(s.first_range),
        in.ranges.begin() + static_cast<ptrdiff_t>(s.first_range + s.range_count));
    if (uint64_t{seg.range_count} + s.range_count > UINT32_MAX)
      throw std::invalid_argument("umswap plan_windows: a segment of more than 2^32 ranges");
    seg.range_count += s.range_count;
    seg.seconds += s.seconds;
  }
  segment_lifetimes(in, w);
  w.plan = make_plan(w.segments);
  w.windows = steps_with_actions(w.plan);
  return w;
}

uint32_t steps_with_actions(const Plan& plan) {
  std::vector<uint32_t> at;
  for (const Action& a : plan.actions) at.push_back(a.at_step);
  std::sort(at.begin(), at.end());
  return static_cast<uint32_t>(std::unique(at.begin(), at.end()) - at.begin());
}

}  // namespace umswap::advisor
