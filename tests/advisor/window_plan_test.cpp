// plan_windows (window_plan.h): the iteration cut into segments that fit a share of the budget,
// planned over the segments, so that engine vmm moves only at segment boundaries.
#include "umswap/advisor/window_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

namespace umswap::advisor {
namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;

struct Builder {
  PlanInput in;
  uint32_t buffer(uint64_t bytes) {
    in.buffer_sizes.push_back(bytes);
    return static_cast<uint32_t>(in.buffer_sizes.size() - 1);
  }
  void step(std::initializer_list<uint32_t> buffers) {
    PlanStep s;
    s.first_range = in.ranges.size();
    for (uint32_t b : buffers) in.ranges.push_back({b, 0, in.buffer_sizes[b]});
    s.range_count = static_cast<uint32_t>(buffers.size());
    in.steps.push_back(s);
  }
};

// A training iteration of `layers` layers: forward (3 launches a layer: weights, the activation
// before, its own), backward in reverse (3 a layer: activations, weights, the gradient buffers,
// the weight gradient), then an optimizer launch a layer.
PlanInput training(uint32_t layers) {
  Builder t;
  std::vector<uint32_t> w, a, dw;
  for (uint32_t l = 0; l < layers; ++l) {
    w.push_back(t.buffer(4 * MiB));
    a.push_back(t.buffer(8 * MiB));
    dw.push_back(t.buffer(4 * MiB));
  }
  const uint32_t g0 = t.buffer(8 * MiB), g1 = t.buffer(8 * MiB), input = t.buffer(8 * MiB);
  for (uint32_t l = 0; l < layers; ++l) {
    const uint32_t before = l == 0 ? input : a[l - 1];
    t.step({w[l], before, a[l]});
    t.step({a[l]});
    t.step({a[l]});
  }
  for (uint32_t l = layers; l-- > 0;) {
    const uint32_t before = l == 0 ? input : a[l - 1];
    const uint32_t grad_in = l % 2 ? g0 : g1, grad_out = l % 2 ? g1 : g0;
    t.step({a[l], grad_in});
    t.step({w[l], grad_in, grad_out});
    t.step({before, grad_in, dw[l]});
  }
  for (uint32_t l = 0; l < layers; ++l) t.step({w[l], dw[l]});
  return t.in;
}

uint64_t footprint(const PlanInput& in) {
  uint64_t bytes = 0;
  for (uint64_t b : in.buffer_sizes) bytes += b;
  return bytes;
}

TEST(WindowPlan, SegmentsFitTheirShareAndCoverEveryStep) {
  PlanInput in = training(40);
  in.budget_bytes = footprint(in) / 4;
  const WindowPlan w = plan_windows(in, {0.6});
  ASSERT_FALSE(w.segment_start.empty());
  EXPECT_EQ(w.segment_start[0], 0u);
  EXPECT_EQ(w.segments.steps.size(), w.segment_start.size());
  for (size_t s = 0; s < w.segment_start.size(); ++s) {
    const uint32_t first = w.segment_start[s];
    const uint32_t end =
        s + 1 < w.segment_start.size() ? w.segment_start[s + 1] : uint32_t(in.steps.size());
    ASSERT_LT(first, end);
    std::set<uint32_t> buffers;  // whole buffers of whole 2 MiB blocks here
    for (uint32_t t = first; t < end; ++t) {
      EXPECT_EQ(w.segment_of(t), s);
      for (uint64_t r = 0; r < in.steps[t].range_count; ++r) {
        buffers.insert(in.ranges[in.steps[t].first_range + r].buffer);
      }
    }
    uint64_t bytes = 0;
    for (uint32_t b : buffers) bytes += in.buffer_sizes[b];
    if (end - first > 1) {
      EXPECT_LE(double(bytes), 0.6 * double(in.budget_bytes));
    }
    // A segment ends where the next step would not have fitted.
    if (s + 1 < w.segment_start.size()) {
      const PlanStep& next = in.steps[end];
      uint64_t more = bytes;
      for (uint64_t r = 0; r < next.range_count; ++r) {
        const uint32_t b = in.ranges[next.first_range + r].buffer;
        if (buffers.insert(b).second) more += in.buffer_sizes[b];
      }
      EXPECT_GT(double(more), 0.6 * double(in.budget_bytes));
    }
  }
}

// The point of it: a handful of windows an iteration (here 17 at 25%, 7 at 50%) where moving at
// each launch that needs data takes one at most launches (153, 84), for a plan the simulation
// finds correct.
TEST(WindowPlan, ATrainingIterationMovesAtAFewBoundaries) {
  PlanInput in = training(40);  // 280 launches, 656 MiB
  for (const double share : {0.25, 0.5}) {
    SCOPED_TRACE(share);
    in.budget_bytes = uint64_t(share * double(footprint(in)));
    const Plan per_launch = make_plan(in);
    std::set<uint32_t> moving;  // launches where the per-launch plan moves something
    for (const Action& a : per_launch.actions) moving.insert(a.at_step);
    const WindowPlan w = plan_windows(in, {0.6});
    EXPECT_TRUE(w.plan.unfit_steps.empty());
    const Simulation sim = simulate(w.segments, w.plan, 3);
    EXPECT_EQ(sim.misses, 0u);
    EXPECT_LE(sim.peak_resident_bytes, in.budget_bytes);
    EXPECT_FALSE(sim.eviction_before_last_use);
    EXPECT_GT(w.windows, 0u);
    EXPECT_LE(w.windows * 5, moving.size())
        << w.windows << " windows, per launch " << moving.size();
    // Coarser, so it moves more, but not much more (here 1.08x at 25%, 1.02x at 50%).
    EXPECT_LE(double(w.plan.bytes_prefetched_per_iteration),
              1.5 * double(per_launch.bytes_prefetched_per_iteration));
  }
}

TEST(WindowPlan, AStepBiggerThanItsShareIsASegmentByItself) {
  Builder t;
  const uint32_t small = t.buffer(2 * MiB), big = t.buffer(20 * MiB), other = t.buffer(2 * MiB);
  t.step({small});
  t.step({big});
  t.step({other});
  t.in.budget_bytes = 16 * MiB;
  const WindowPlan w = plan_windows(t.in, {0.5});
  EXPECT_EQ(w.segment_start, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(w.plan.unfit_steps, std::vector<uint32_t>{1});  // 20 MiB over the budget
  t.in.budget_bytes = 64 * MiB;
  EXPECT_EQ(plan_windows(t.in, {0.5}).segment_start, (std::vector<uint32_t>{0}));  // all fit
}

// A tensor freed and another allocated at its bytes inside one segment: at segment granularity
// the first one's free would end the second's life, and the plan would drop live data. The free
// is left out, and the second tensor's bytes stay allocated until its own free.
TEST(WindowPlan, ABlockReusedInsideASegmentStaysLive) {
  Builder t;
  const uint32_t slab = t.buffer(2 * MiB), p = t.buffer(2 * MiB), q = t.buffer(2 * MiB);
  t.step({slab});  // X's last use                      segment 0
  t.step({slab});  // Y's first use (same bytes)        segment 0
  t.step({p});     //                                   segment 1
  t.step({q});     //                                   segment 2
  t.step({slab});  // Y's last use                      segment 3
  t.step({p});     //                                   segment 4
  const PlanRange block{slab, 0, 2 * MiB};
  // X freed and Y allocated after step 0, Y freed after step 4, X allocated for the next
  // iteration after step 5 (the last).
  t.in.lifetimes = {{0, true, block}, {0, false, block}, {4, true, block}, {5, false, block}};
  t.in.budget_bytes = 4 * MiB;
  const WindowPlan w = plan_windows(t.in, {0.5});
  ASSERT_EQ(w.segment_start, (std::vector<uint32_t>{0, 2, 3, 4, 5}));
  EXPECT_EQ(w.frees_left_out, 1u);
  for (const Drop& d : w.plan.drops) {
    EXPECT_FALSE(d.range.buffer == slab && d.last_use == 0) << "Y dropped between its uses";
  }
  const Simulation sim = simulate(w.segments, w.plan, 3);
  EXPECT_EQ(sim.misses, 0u);
  EXPECT_FALSE(sim.drop_of_live);
  // Y's free and X's allocation across the iteration's end: a dead gap the plan may drop.
  EXPECT_EQ(w.segments.lifetimes.size(), 3u);
}

TEST(WindowPlan, BadInputThrows) {
  PlanInput in = training(2);
  in.budget_bytes = footprint(in);
  EXPECT_THROW(plan_windows(in, {0.0}), std::invalid_argument);
  EXPECT_THROW(plan_windows(in, {1.5}), std::invalid_argument);
  in.granularity = 0;
  EXPECT_THROW(plan_windows(in, {0.6}), std::invalid_argument);
  in.granularity = 2 * MiB;
  in.steps[0].range_count = 1000;
  EXPECT_THROW(plan_windows(in, {0.6}), std::invalid_argument);
}

}  // namespace
}  // namespace umswap::advisor
