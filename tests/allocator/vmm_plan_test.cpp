// Engine vmm's plan (vmm_plan.h): an iteration recorded with its ranges, the ranges allocated in
// it named by their place among its allocations (the next iteration's, or before those come the
// previous one's), lifetimes only for ordinals allocated and freed once, and the table of windows
// the planner makes from it: moves at ascending phases, on ranges of the iteration, steps past the
// budget left out, and each range's next use counted on into the next iteration.
#include "umswap/allocator/vmm_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace umswap {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

void step(IterationRecorder& r, uint32_t key, std::vector<CUdeviceptr> bases,
          std::vector<uint64_t> sizes) {
  r.step(key, bases, sizes);
}

TEST(IterationRecorder, NothingBeforeTheFirstBeginAndAWholeIterationAfterTheSecond) {
  IterationRecorder r;
  step(r, 1, {0x1000}, {2 * kMiB});
  EXPECT_FALSE(r.begin().has_value());
  EXPECT_EQ(r.phase(), 0u);
  step(r, 1, {0x1000}, {2 * kMiB});
  step(r, 2, {0x2000}, {4 * kMiB});
  EXPECT_EQ(r.phase(), 2u);
  const auto it = r.begin();
  ASSERT_TRUE(it.has_value());
  EXPECT_EQ(it->keys, (std::vector<uint32_t>{1, 2}));
  ASSERT_EQ(it->ranges.size(), 2u);
  EXPECT_FALSE(it->ranges[0].local);
  EXPECT_EQ(it->ranges[1].address, 0x2000u);
  EXPECT_EQ(it->ranges[1].reserved, 4 * kMiB);
  EXPECT_EQ(it->step_ranges, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(it->first_range, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(it->lifetimes.empty());
}

// An activation allocated in the forward pass and freed in the backward one, and a gradient
// allocated in the backward pass and freed in the next iteration's forward one: both by ordinal,
// both with one allocation and one free in the iteration, in program order.
TEST(IterationRecorder, OrdinalsNameTheIterationsOwnRangesAndTheOnesBefore) {
  IterationRecorder r;
  r.begin();
  // Iteration 1: activation A1 (ordinal 0), gradient G1 (ordinal 1) kept across the boundary.
  r.allocated(0xa1, 2 * kMiB);
  step(r, 1, {0xa1}, {2 * kMiB});
  r.allocated(0x91, 2 * kMiB);
  step(r, 2, {0xa1, 0x91}, {2 * kMiB, 2 * kMiB});
  r.released(0xa1);
  auto first = r.begin();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->allocations, (std::vector<uint64_t>{2 * kMiB, 2 * kMiB}));
  // Iteration 2: G1 freed first, then the same allocations.
  step(r, 0, {0x91}, {2 * kMiB});  // the optimizer reads the gradient of the iteration before
  r.released(0x91);
  r.allocated(0xa2, 2 * kMiB);
  // Before its own allocation of ordinal 1, the table's range means the previous iteration's.
  const TableRange grad{2 * kMiB, true, 1, 0};
  EXPECT_EQ(r.base_of(grad), 0u);  // G1 released, G2 not allocated yet
  const TableRange act{2 * kMiB, true, 0, 0};
  EXPECT_EQ(r.base_of(act), 0xa2u);
  step(r, 1, {0xa2}, {2 * kMiB});
  r.allocated(0x92, 2 * kMiB);
  EXPECT_EQ(r.base_of(grad), 0x92u);
  step(r, 2, {0xa2, 0x92}, {2 * kMiB, 2 * kMiB});
  r.released(0xa2);
  const auto second = r.begin();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->allocations, first->allocations);
  // Ranges: G (ordinal 1) first seen as G1, then A (ordinal 0); G2 is the same range as G1.
  ASSERT_EQ(second->ranges.size(), 2u);
  EXPECT_TRUE(second->ranges[0].local);
  EXPECT_EQ(second->ranges[0].ordinal, 1u);
  EXPECT_EQ(second->ranges[1].ordinal, 0u);
  EXPECT_EQ(second->step_ranges, (std::vector<uint32_t>{0, 1, 1, 0}));
  using E = RecordedIteration::Event;
  const std::vector<E> expected = {{1, true, 0}, {1, false, 1}, {2, false, 0}, {3, true, 1}};
  ASSERT_EQ(second->lifetimes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(second->lifetimes[i].phase, expected[i].phase) << i;
    EXPECT_EQ(second->lifetimes[i].freed, expected[i].freed) << i;
    EXPECT_EQ(second->lifetimes[i].range, expected[i].range) << i;
  }
  // A size that differs: no base for it.
  EXPECT_EQ(r.base_of({4 * kMiB, true, 0, 0}), 0u);
}

// An ordinal freed twice in one iteration (the previous instance and its own) is not steady: no
// lifetimes for it (the plan counts it live throughout).
TEST(IterationRecorder, AnOrdinalFreedTwiceGetsNoLifetimes) {
  IterationRecorder r;
  r.begin();
  r.allocated(0xa1, 2 * kMiB);
  step(r, 1, {0xa1}, {2 * kMiB});
  r.begin();
  step(r, 1, {0xa1}, {2 * kMiB});
  r.released(0xa1);
  r.allocated(0xa2, 2 * kMiB);
  step(r, 2, {0xa2}, {2 * kMiB});
  r.released(0xa2);
  const auto it = r.begin();
  ASSERT_TRUE(it.has_value());
  EXPECT_TRUE(it->lifetimes.empty());
}

// A forward and backward pass over L layers: weights persistent, activations allocated in the
// forward pass and freed in the backward one. Under a budget of a third of it the table moves
// something, at ascending phases, only ranges of the iteration, within them, and the plan's
// bytes each way match its moves.
TEST(WindowTable, AForwardBackwardIterationGetsWindowsAtAscendingPhases) {
  constexpr int kLayers = 12;
  IterationRecorder r;
  std::optional<RecordedIteration> recorded;
  CUdeviceptr next = 0x100000000;
  for (int it = 0; it < 3; ++it) {
    recorded = r.begin();
    std::vector<CUdeviceptr> act(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      act[l] = next;
      next += 64 * kMiB;
      r.allocated(act[l], 8 * kMiB);
      step(r, static_cast<uint32_t>(l), {0x1000 + l * 0x1000u, act[l]}, {4 * kMiB, 8 * kMiB});
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      step(r, static_cast<uint32_t>(100 + l), {0x1000 + l * 0x1000u, act[l]}, {4 * kMiB, 8 * kMiB});
      r.released(act[l]);
    }
  }
  ASSERT_TRUE(recorded.has_value());
  EXPECT_EQ(recorded->lifetimes.size(), 2u * kLayers);
  const uint64_t footprint = kLayers * 12 * kMiB;
  const WindowTable t = make_window_table(*recorded, footprint / 3, 2 * kMiB);
  EXPECT_EQ(t.keys.size(), 2u * kLayers);
  EXPECT_EQ(t.steps_left_out, 0u);
  ASSERT_FALSE(t.window_phase.empty());
  EXPECT_LT(t.window_phase.size(), 2u * kLayers);  // fewer windows than steps
  ASSERT_EQ(t.first_move.size(), t.window_phase.size() + 1);
  uint64_t in = 0, out = 0;
  for (size_t w = 0; w < t.window_phase.size(); ++w) {
    if (w > 0) {
      EXPECT_LT(t.window_phase[w - 1], t.window_phase[w]);
    }
    EXPECT_LT(t.window_phase[w], t.keys.size());
    EXPECT_LT(t.first_move[w], t.first_move[w + 1]);
    for (uint32_t m = t.first_move[w]; m < t.first_move[w + 1]; ++m) {
      const PlannedMove& move = t.moves[m];
      ASSERT_LT(move.range, t.ranges.size());
      EXPECT_LE(move.offset + move.length, t.ranges[move.range].reserved);
      (move.to_gpu ? in : out) += move.length;
    }
  }
  EXPECT_EQ(in, t.bytes_in);
  EXPECT_EQ(out, t.bytes_out);
  EXPECT_GT(in, 0u);
}

// A step whose ranges together pass the budget is left out of the plan (no window could bring
// them in); the rest is planned.
TEST(WindowTable, AStepPastTheBudgetIsLeftOut) {
  IterationRecorder r;
  std::optional<RecordedIteration> recorded;
  for (int it = 0; it < 2; ++it) {
    recorded = r.begin();
    step(r, 1, {0x1000}, {4 * kMiB});
    step(r, 2, {0x2000, 0x3000}, {8 * kMiB, 8 * kMiB});
    step(r, 3, {0x4000}, {4 * kMiB});
  }
  ASSERT_TRUE(recorded.has_value());
  const WindowTable t = make_window_table(*recorded, 10 * kMiB, 2 * kMiB);
  EXPECT_EQ(t.steps_left_out, 1u);
  for (const PlannedMove& m : t.moves) {
    const CUdeviceptr a = t.ranges[m.range].address;
    EXPECT_TRUE(a == 0x1000 || a == 0x4000) << a;
  }
}

// The table knows at which phases each range is reached (steps left out of the plan included):
// the steps to its next use from any phase, past the iteration's end into the next one.
TEST(WindowTable, StepsToTheNextUseCountOnIntoTheNextIteration) {
  IterationRecorder r;
  std::optional<RecordedIteration> recorded;
  for (int it = 0; it < 2; ++it) {
    recorded = r.begin();
    step(r, 1, {0x1000}, {4 * kMiB});                                      // phase 0
    step(r, 2, {0x2000}, {4 * kMiB});                                      // 1
    step(r, 3, {0x1000, 0x3000}, {4 * kMiB, 8 * kMiB});                    // 2
    step(r, 4, {0x2000, 0x3000, 0x4000}, {4 * kMiB, 8 * kMiB, 4 * kMiB});  // 3: past the budget
    step(r, 5, {0x1000, 0x1000}, {4 * kMiB, 4 * kMiB});                    // 4: one range twice
    step(r, 6, {0x5000}, {2 * kMiB});                                      // 5
  }
  ASSERT_TRUE(recorded.has_value());
  const WindowTable t = make_window_table(*recorded, 14 * kMiB, 2 * kMiB);
  EXPECT_EQ(t.steps_left_out, 1u);
  auto index = [&](CUdeviceptr a) {
    for (uint32_t i = 0; i < t.ranges.size(); ++i) {
      if (t.ranges[i].address == a) return i;
    }
    ADD_FAILURE() << a;
    return uint32_t{0};
  };
  const uint32_t a = index(0x1000), b = index(0x2000), c = index(0x3000), d = index(0x5000);
  EXPECT_EQ(steps_to_next_use(t, a, 0), 2u);
  EXPECT_EQ(steps_to_next_use(t, a, 2), 2u);
  EXPECT_EQ(steps_to_next_use(t, a, 4), 2u);  // phase 0 of the next iteration
  EXPECT_EQ(steps_to_next_use(t, b, 1), 2u);  // the step left out of the plan counts
  EXPECT_EQ(steps_to_next_use(t, b, 3), 4u);
  EXPECT_EQ(steps_to_next_use(t, c, 0), 2u);
  EXPECT_EQ(steps_to_next_use(t, d, 5), 6u);  // its own step, one iteration on
  EXPECT_EQ(steps_to_next_use(t, d, 0), 5u);
  EXPECT_EQ(steps_to_next_use(t, index(0x4000), 0), 3u);  // reached only by the step left out
  EXPECT_EQ(steps_to_next_use(t, static_cast<uint32_t>(t.ranges.size()), 0), 0u);  // no such range
}

}  // namespace
}  // namespace umswap
