// Replay matching: trace buffers to live allocations by identity, launches to trace steps by
// position, and the planner input taken from a trace iteration.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "umswap/advisor/replay.h"
#include "umswap/allocator/registry.h"
#include "umswap/allocator/slab_allocator.h"
#include "umswap/core/trace_file.h"

namespace umswap::advisor {
namespace {

trace::Buffer tb(uint64_t id, uint64_t size, uint64_t site) {
  trace::Buffer b;
  b.id = id;
  b.size = size;
  b.call_site = site;
  b.base = 0x1000 * id;  // recording-process addresses: never used for matching
  return b;
}

BufferRecord live(uint64_t id, uint64_t base, uint64_t size, uint64_t site) {
  BufferRecord r;
  r.id = id;
  r.base = base;
  r.size = size;
  r.call_site = site;
  return r;
}

// Two kernels "a", "b" repeated: a b a b ...; warm-up "w" first.
trace::Trace two_step_trace() {
  trace::Trace t;
  t.names = {"w", "a", "b"};
  t.buffers = {tb(3, 100, 7), tb(5, 100, 7), tb(9, 64, 8)};
  t.steps.resize(1 + 2 * 3);
  t.steps[0].name = 0;
  for (size_t i = 1; i < t.steps.size(); ++i) t.steps[i].name = (i % 2) ? 1 : 2;
  for (size_t i = 1; i < t.steps.size(); ++i) {
    t.steps[i].first_access = t.accesses.size();
    if (i % 2) {
      t.accesses.push_back({0, 0, 100});
      t.accesses.push_back({2, 0, 64});
    } else {
      t.accesses.push_back({1, 10, 50});
    }
    t.steps[i].access_count = (i % 2) ? 2 : 1;
  }
  t.detection.period = 2;
  t.detection.warmup_steps = 1;
  t.detection.confidence = 1.0;
  t.detection.source = "period";
  for (uint64_t f = 1; f + 2 <= t.steps.size(); f += 2) t.iterations.push_back({f, 2, 0, 0, {}});
  return t;
}

TEST(ReplayMatcher, MatchesBuffersByCallSiteSizeAndRankNotAddress) {
  ReplayMatcher m(two_step_trace());
  // Live process: other ids and addresses, an unrelated allocation in between, listed unsorted.
  const std::vector<BufferRecord> records = {live(20, 0xB000, 64, 8), live(11, 0xA000, 100, 7),
                                             live(12, 0xC000, 100, 9), live(14, 0xD000, 100, 7)};
  EXPECT_EQ(m.live_address(0, records), 0xA000u);  // first (7, 100)
  EXPECT_EQ(m.live_address(1, records), 0xD000u);  // second (7, 100), not the (9, 100) one
  EXPECT_EQ(m.live_address(2, records), 0xB000u);
}

TEST(ReplayMatcher, UnallocatedOrResizedBuffersDoNotMatch) {
  ReplayMatcher m(two_step_trace());
  const std::vector<BufferRecord> records = {live(1, 0xA000, 100, 7), live(2, 0xB000, 128, 8)};
  EXPECT_EQ(m.live_address(0, records), 0xA000u);
  EXPECT_EQ(m.live_address(1, records), 0u);  // second (7, 100) not allocated yet
  EXPECT_EQ(m.live_address(2, records), 0u);  // another batch size: another size
}

TEST(ReplayMatcher, LiveAddressFollowsTheRegistry) {
  ReplayMatcher m(two_step_trace());
  Registry registry;
  EXPECT_EQ(m.live_address(2, registry), 0u);
  registry.insert(live(1, 0x5000, 64, 8));
  EXPECT_EQ(m.live_address(2, registry), 0x5000u);
}

TEST(ReplayMatcher, AnAddressFoundEarlierMustStillHoldThatIdentity) {
  ReplayMatcher m(two_step_trace());
  Registry registry;
  registry.insert(live(1, 0x5000, 64, 8));
  ASSERT_EQ(m.live_address(2, registry), 0x5000u);
  EXPECT_TRUE(m.still_there(2, 0x5000, registry));
  EXPECT_FALSE(m.still_there(2, 0x5008, registry));  // inside, not at its start
  registry.remove(0x5000);
  EXPECT_FALSE(m.still_there(2, 0x5000, registry));
  registry.insert(live(2, 0x5000, 32, 8));  // made again smaller at the same address
  EXPECT_FALSE(m.still_there(2, 0x5000, registry));
  registry.remove(0x5000);
  registry.insert(live(3, 0x5000, 64, 9));  // same size, another call site
  EXPECT_FALSE(m.still_there(2, 0x5000, registry));
}

TEST(ReplayMatcher, LaunchesMatchByPositionAndPeriodBeyondTheTrace) {
  ReplayMatcher m(two_step_trace());
  // This process interns names in another order: key 0 = "a", 1 = "w", 2 = "b", 3 = "z".
  const std::vector<std::string> names = {"a", "w", "b", "z"};
  auto name_of = [&](uint32_t k) { return names.at(k); };
  EXPECT_TRUE(m.matches(0, 1, name_of));    // w
  EXPECT_TRUE(m.matches(1, 0, name_of));    // a
  EXPECT_TRUE(m.matches(2, 2, name_of));    // b
  EXPECT_FALSE(m.matches(2, 0, name_of));   // a where b was
  EXPECT_TRUE(m.matches(101, 0, name_of));  // past the trace: phase (101 - 1) % 2 = 0 -> a
  EXPECT_TRUE(m.matches(102, 2, name_of));
  EXPECT_FALSE(m.matches(102, 3, name_of));  // a kernel the trace never ran
}

TEST(ReplayPlan, InputComesFromTheTraceIterationAndPlansCycleFromItsStart) {
  ReplayMatcher m(two_step_trace());
  const PlanInput in = plan_input_from_trace(m.trace(), 2, 1 << 30);
  ASSERT_EQ(in.steps.size(), 2u);
  EXPECT_EQ(in.buffer_sizes, (std::vector<uint64_t>{100, 100, 64}));
  EXPECT_EQ(in.steps[0].range_count, 2u);
  EXPECT_EQ(in.ranges[in.steps[1].first_range], (PlanRange{1, 10, 50}));
  Plan plan;
  uint64_t base = 0, period = 0;
  std::string why;
  ASSERT_TRUE(make_replay_plan(m, 1 << 30, 40e9, 12e9, &plan, &base, &period, &why)) << why;
  EXPECT_EQ(base, 1u);
  EXPECT_EQ(period, 2u);
  EXPECT_TRUE(plan.actions.empty());  // fits: nothing to move
}

// two_step_trace with buffer 2 a small slab: 2 MiB, stream-ordered, touched by every "a".
trace::Trace small_slab_trace() {
  trace::Trace t = two_step_trace();
  t.buffers[2].size = SlabAllocator::kSmallSlab;
  t.buffers[2].api = static_cast<uint8_t>(AllocApi::cudaMallocAsync);
  for (trace::Access& a : t.accesses) {
    if (a.buffer == 2) a.length = SlabAllocator::kSmallSlab;
  }
  t.lifetimes = {{6, 2, 0, 4096, false}, {6, 1, 0, 32, false}, {7, 2, 0, 4096, true}};
  return t;
}

TEST(ReplayPlan, SmallSlabsAreLeftOutResidentAndOutOfTheBudget) {
  const trace::Trace t = small_slab_trace();
  EXPECT_TRUE(is_small_slab(t.buffers[2]));
  EXPECT_FALSE(is_small_slab(t.buffers[0]));
  trace::Buffer not_async = t.buffers[2];
  not_async.api = static_cast<uint8_t>(AllocApi::cudaMalloc);
  EXPECT_FALSE(is_small_slab(not_async)) << "a program's own 2 MiB cudaMalloc";
  std::vector<PlanRange> resident;
  const PlanInput in = plan_input_from_trace(t, 2, 1 << 30, true, &resident);
  EXPECT_EQ(in.budget_bytes, (uint64_t{1} << 30) - SlabAllocator::kSmallSlab);
  ASSERT_EQ(in.steps.size(), 2u);
  EXPECT_EQ(in.steps[0].range_count, 1u) << "step a: buffer 0 only";
  EXPECT_EQ(in.ranges[in.steps[0].first_range].buffer, 0u);
  EXPECT_EQ(in.steps[1].first_range, 1u);
  EXPECT_EQ(in.lifetimes, (std::vector<PlanLifetime>{{0, false, {1, 0, 32}}}))
      << "the small slab's block events are left out too";
  EXPECT_EQ(resident, (std::vector<PlanRange>{{2, 0, SlabAllocator::kSmallSlab}}));

  ReplayMatcher m(small_slab_trace());
  Plan plan;
  uint64_t base = 0, period = 0;
  std::string why;
  ASSERT_TRUE(make_replay_plan(m, 1 << 30, 40e9, 12e9, &plan, &base, &period, &why)) << why;
  EXPECT_NE(std::find(plan.resident_at_start.begin(), plan.resident_at_start.end(),
                      PlanRange{2, 0, SlabAllocator::kSmallSlab}),
            plan.resident_at_start.end())
      << "the replay plan keeps it on the GPU";
  for (const Action& a : plan.actions) EXPECT_NE(a.range.buffer, 2u);
}

TEST(ReplayPlan, SmallSlabsOfMoreThanHalfTheBudgetArePlannedAsUsual) {
  std::vector<PlanRange> resident;
  const uint64_t budget = SlabAllocator::kSmallSlab * 3 / 2;
  const PlanInput in = plan_input_from_trace(small_slab_trace(), 2, budget, true, &resident);
  EXPECT_EQ(in.budget_bytes, budget);
  EXPECT_TRUE(resident.empty());
  EXPECT_EQ(in.steps[0].range_count, 2u);
}

TEST(ReplayLoad, UnreadableOrIterationlessTracesAreRefusedWithTheReason) {
  std::string error;
  EXPECT_EQ(load_replay("/nonexistent/run.umtrace", &error), nullptr);
  EXPECT_NE(error.find("/nonexistent/run.umtrace"), std::string::npos) << error;
  trace::Trace t = two_step_trace();
  t.iterations.clear();
  t.detection.period = 0;
  const std::string path = ::testing::TempDir() + "/no_iterations.umtrace";
  ASSERT_TRUE(write_trace_file(path, t, &error)) << error;
  error.clear();
  EXPECT_EQ(load_replay(path, &error), nullptr);
  EXPECT_NE(error.find("no complete iteration"), std::string::npos) << error;
}

TEST(ReplayPlan, LifetimesComeFromTheIterationsWindow) {
  trace::Trace t = two_step_trace();
  // Iteration 2 is steps 5 and 6: events before step 6 (after its first launch) up to before
  // step 7 (after its last) belong to it, at iteration-relative positions 0 and 1.
  t.lifetimes = {{5, 1, 0, 64, true},
                 {6, 1, 0, 32, false},
                 {6, 1, 0, 32, true},
                 {7, 1, 40, 8, false},
                 {8, 1, 0, 64, true}};
  const PlanInput in = plan_input_from_trace(t, 2, 1 << 30);
  EXPECT_EQ(in.lifetimes,
            (std::vector<PlanLifetime>{
                {0, false, {1, 0, 32}}, {0, true, {1, 0, 32}}, {1, false, {1, 40, 8}}}));
  EXPECT_TRUE(plan_input_from_trace(t, 2, 1 << 30, false).lifetimes.empty());
}

TEST(ReplayRelearn, OnlyANoticeableShareOfSkippedBytesRelearns) {
  Plan plan;
  plan.bytes_prefetched_per_iteration = 600 << 20;
  plan.bytes_evicted_per_iteration = 400 << 20;  // 1000 MiB moved: 1% is 10 MiB
  EXPECT_FALSE(replay_should_relearn(0, plan));
  EXPECT_FALSE(replay_should_relearn((10 << 20) - 2048, plan));
  EXPECT_TRUE(replay_should_relearn(10 << 20, plan));
  EXPECT_TRUE(replay_should_relearn(uint64_t{3} << 30, plan));
  Plan still;  // moves nothing: any skipped byte is a buffer the plan lost
  EXPECT_FALSE(replay_should_relearn(0, still));
  EXPECT_TRUE(replay_should_relearn(1, still));
}

}  // namespace
}  // namespace umswap::advisor
