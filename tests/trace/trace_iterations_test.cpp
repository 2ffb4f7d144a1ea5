// A trace's iterations (core/include/umswap/core/trace_iterations.h): the one a replay plans
// from, and the trace cut after its first ones.
#include "umswap/core/trace_iterations.h"
#include "umswap/core/trace_file.h"

#include <gtest/gtest.h>

#include "synthetic_trace.h"

namespace umswap::trace {
namespace {

constexpr uint64_t T = 5'000'000'000;  // three_iteration_trace()'s GPU clock at its first step

// Three iterations of 3 steps after one warm-up step (steps 0, 1-3, 4-6, 7-9), with a fault and a
// transfer late in the last iteration and lifetimes in the second and the third.
Trace traced() {
  Trace t = test::three_iteration_trace();
  t.faults.push_back({.time_ns = T + 1'900'000, .address = 0x20000000, .buffer = 1, .access = 1});
  t.transfers.push_back({.start_ns = T + 500'000, .end_ns = T + 510'000, .bytes = 4096});
  t.transfers.push_back({.start_ns = T + 1'850'000, .end_ns = T + 1'860'000, .bytes = 8192});
  t.lifetimes.push_back({.before_step = 5, .buffer = 0, .offset = 0, .length = 4096});
  t.lifetimes.push_back(
      {.before_step = 7, .buffer = 0, .offset = 0, .length = 4096, .freed = true});
  t.lifetimes.push_back({.before_step = 8, .buffer = 0, .offset = 4096, .length = 4096});
  return t;
}

TEST(ReplayIteration, TheLastOfThePeriodInPhaseWithTheFirst) {
  Trace t = traced();
  EXPECT_EQ(replay_iteration(t), 2u);
  t.iterations.back().step_count = 2;  // a last iteration of another length
  EXPECT_EQ(replay_iteration(t), 1u);
  t.iterations[1].first_step = 5;  // out of phase
  EXPECT_EQ(replay_iteration(t), 0u);
  t.detection.period = 0;
  EXPECT_EQ(replay_iteration(t), std::nullopt);
  EXPECT_EQ(replay_iteration(Trace{}), std::nullopt);
}

TEST(FirstIterations, KeepsTheWarmUpAndTheFirstIterations) {
  const Trace t = traced();
  ASSERT_EQ(check_trace(t), std::nullopt);
  const Trace cut = first_iterations(t, 2);
  EXPECT_EQ(check_trace(cut), std::nullopt);
  ASSERT_EQ(cut.steps.size(), 7u);
  EXPECT_TRUE(std::equal(cut.steps.begin(), cut.steps.end(), t.steps.begin()));
  EXPECT_EQ(cut.accesses.size(), 1u + 2 * 4);  // the memcpy's, then 2 + 1 + 1 an iteration
  ASSERT_EQ(cut.iterations.size(), 2u);
  EXPECT_EQ(cut.iterations[1], t.iterations[1]);
  EXPECT_EQ(cut.totals.gpu_page_faults, 110u);
  EXPECT_EQ(cut.totals.bytes_htod, 10u * 1024 * 1024);
  EXPECT_EQ(cut.totals.thrashing_events, 1u);
  EXPECT_EQ(cut.totals.cpu_page_faults, 0u);
  // Lifetimes up to before step 7 (after the last kept step), not the one before step 8.
  ASSERT_EQ(cut.lifetimes.size(), 2u);
  EXPECT_EQ(cut.lifetimes.back().before_step, 7u);
  // The late fault and transfer went; the first three faults and the early transfer stayed.
  EXPECT_EQ(cut.faults.size(), 3u);
  ASSERT_EQ(cut.transfers.size(), 1u);
  EXPECT_EQ(cut.transfers[0].bytes, 4096u);
  EXPECT_EQ(cut.detection, t.detection);
  EXPECT_EQ(cut.buffers.size(), t.buffers.size());
  EXPECT_EQ(cut.names, t.names);
}

TEST(FirstIterations, ShortTracesComeBackWhole) {
  const Trace t = traced();
  EXPECT_EQ(first_iterations(t, 3), t);
  EXPECT_EQ(first_iterations(t, 16), t);
  EXPECT_EQ(first_iterations(t, 0), t);
}

TEST(FirstIterations, OneIterationAndAFileRoundTrip) {
  const Trace cut = first_iterations(traced(), 1);
  EXPECT_EQ(cut.steps.size(), 4u);
  EXPECT_EQ(cut.iterations.size(), 1u);
  const std::string path = ::testing::TempDir() + "first_iterations.umtrace";
  std::string error;
  ASSERT_TRUE(write_trace_file(path, cut, &error)) << error;
  const std::optional<Trace> back = read_trace_file(path, &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(*back, cut);
}

}  // namespace
}  // namespace umswap::trace
