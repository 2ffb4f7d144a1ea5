// Counted residency: the interval set against a byte-array model, and peaks by window.
#include "umswap/tracer/residency.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace umswap::tracer {
namespace {

TEST(ResidentSet, AddsMergeAndRemovesSplit) {
  ResidentSet s;
  s.add(100, 200);
  s.add(300, 400);
  EXPECT_EQ(s.bytes(), 200u);
  EXPECT_EQ(s.ranges(), 2u);
  s.add(200, 300);  // touches both: one range
  EXPECT_EQ(s.bytes(), 300u);
  EXPECT_EQ(s.ranges(), 1u);
  s.add(150, 350);  // already there
  EXPECT_EQ(s.bytes(), 300u);
  s.remove(180, 220);  // splits
  EXPECT_EQ(s.bytes(), 260u);
  EXPECT_EQ(s.ranges(), 2u);
  s.remove(0, 120);  // the front
  EXPECT_EQ(s.bytes(), 240u);
  s.remove(390, 1000);  // the back
  EXPECT_EQ(s.bytes(), 230u);
  s.remove(500, 600);  // nothing there
  s.add(7, 7);         // empty
  s.remove(9, 3);      // reversed: nothing
  EXPECT_EQ(s.bytes(), 230u);
  s.remove(0, 1000);
  EXPECT_EQ(s.bytes(), 0u);
  EXPECT_EQ(s.ranges(), 0u);
}

TEST(ResidentSet, MatchesAByteModelUnderRandomOperations) {
  constexpr uint64_t kSize = 512;
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    ResidentSet s;
    std::vector<bool> model(kSize, false);
    for (int op = 0; op < 200; ++op) {
      uint64_t lo = rng() % kSize, hi = rng() % (kSize + 1);
      if (lo > hi) std::swap(lo, hi);
      const bool add = rng() % 2 == 0;
      if (add) {
        s.add(lo, hi);
      } else {
        s.remove(lo, hi);
      }
      for (uint64_t i = lo; i < hi; ++i) model[i] = add;
      uint64_t expected = 0, runs = 0;
      for (uint64_t i = 0; i < kSize; ++i) {
        expected += model[i];
        runs += model[i] && (i == 0 || !model[i - 1]);
      }
      ASSERT_EQ(s.bytes(), expected) << "round " << round << " op " << op;
      ASSERT_EQ(s.ranges(), runs) << "round " << round << " op " << op;  // merged as it goes
    }
  }
}

TEST(ResidentSet, BytesOutsideAnotherSetMatchesAByteModel) {
  constexpr uint64_t kSize = 256;
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    ResidentSet a, b;
    std::vector<bool> in_a(kSize, false), in_b(kSize, false);
    for (int op = 0; op < 12; ++op) {
      uint64_t lo = rng() % kSize, hi = rng() % (kSize + 1);
      if (lo > hi) std::swap(lo, hi);
      const bool first = rng() % 2 == 0;
      (first ? a : b).add(lo, hi);
      for (uint64_t i = lo; i < hi; ++i) (first ? in_a : in_b)[i] = true;
    }
    uint64_t expected = 0;
    for (uint64_t i = 0; i < kSize; ++i) expected += in_a[i] && !in_b[i];
    ASSERT_EQ(a.bytes_outside(b), expected) << "round " << round;
  }
  ResidentSet a, none;
  a.add(10, 20);
  a.add(30, 40);
  EXPECT_EQ(a.bytes_within(0, 100), 20u);
  EXPECT_EQ(a.bytes_within(15, 35), 10u);
  EXPECT_EQ(a.bytes_within(20, 30), 0u);
  EXPECT_EQ(none.bytes_within(0, 100), 0u);
  a.remove(30, 40);
  EXPECT_EQ(a.bytes_outside(none), 10u);
  EXPECT_EQ(none.bytes_outside(a), 0u);
  EXPECT_EQ(a.bytes_outside(a), 0u);
}

TEST(CountResidency, PeaksOverallAndByWindowInTimeOrder) {
  // Out of time order on purpose; equal times keep their order (the leave at 30 comes first).
  std::vector<ResidencyEvent> events = {
      {30, 0, 100, false},     // 30: [0, 100) leaves: 200 -> 100
      {10, 0, 100, true},      // 10: 100
      {20, 200, 300, true},    // 20: 200
      {30, 400, 450, true},    // 30: 150
      {60, 200, 300, false},   // 60: 50
      {70, 1000, 1400, true},  // 70: 450
  };
  // Windows: [5, 25] sees 100 then 200; [26, 50] begins at 200; [55, 65] ends at 50 after 150;
  // [80, 90] sees nothing and holds 450 through.
  const std::vector<std::pair<uint64_t, uint64_t>> windows = {
      {5, 25}, {26, 50}, {55, 65}, {80, 90}};
  const ResidencyPeaks p = count_residency(events, windows);
  EXPECT_EQ(p.overall, 450u);
  ASSERT_EQ(p.by_window.size(), 4u);
  EXPECT_EQ(p.by_window[0], 200u);
  EXPECT_EQ(p.by_window[1], 200u);
  EXPECT_EQ(p.by_window[2], 150u);
  EXPECT_EQ(p.by_window[3], 450u);
  EXPECT_EQ(count_residency({}, windows).by_window, std::vector<uint64_t>(4, 0));
  EXPECT_EQ(p.free_by_window, p.by_window);  // no block was ever live
}

TEST(CountResidency, SaysWhatOfEachPeakLayInNoLiveBlock) {
  // A block [0, 100) lives 1-40 and is freed; its pages stay until 50. A block [200, 300) lives
  // from 45. Window [0, 42]: peak 100 at 10, all in the live block. Window [43, 60]: peak 200
  // from 46 to 50 ([0, 100) freed, [200, 300) live): 100 free. Blocks change no peak.
  const std::vector<ResidencyEvent> events = {
      {1, 0, 100, true, true},    {10, 0, 100, true},   {40, 0, 100, false, true},
      {45, 200, 300, true, true}, {46, 200, 300, true}, {50, 0, 100, false},
      {55, 200, 300, false, true}};
  const std::vector<std::pair<uint64_t, uint64_t>> windows = {{0, 42}, {43, 60}};
  std::vector<std::pair<uint64_t, uint64_t>> seen;  // (resident, live) bytes at each peak
  const ResidencyPeaks p =
      count_residency(events, windows, [&](size_t, const ResidentSet& r, const ResidentSet& l) {
        seen.emplace_back(r.bytes(), l.bytes());
      });
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, uint64_t>>{{100, 100}, {200, 100}}));
  EXPECT_EQ(p.overall, 200u);
  EXPECT_EQ(p.by_window, (std::vector<uint64_t>{100, 200}));
  EXPECT_EQ(p.free_by_window, (std::vector<uint64_t>{0, 100}));
  EXPECT_EQ(p.when_by_window, (std::vector<uint64_t>{10, 46}));
}

TEST(OwnRecordTime, DiscardsAfterTheStepBeforePopulatesAtTheStepAfter) {
  const std::vector<StepTime> steps{{100, 200}, {250, 400}, {0, 0}, {700, 800}};
  // Noted after two launches: between step 1 (ends 400) and step 2.
  EXPECT_EQ(own_record_time(steps, 2, true, 5), 400u);
  // Step 2 has no GPU time: a populate falls back to the end of step 1.
  EXPECT_EQ(own_record_time(steps, 2, false, 5), 400u);
  EXPECT_EQ(own_record_time(steps, 1, true, 5), 200u);
  EXPECT_EQ(own_record_time(steps, 1, false, 5), 250u);
  // Before any launch: a discard has no step before it, so the next step's start.
  EXPECT_EQ(own_record_time(steps, 0, true, 5), 100u);
  // Step 2 unknown and the record noted before step 3: the discard falls back to step 3's start.
  EXPECT_EQ(own_record_time(steps, 3, true, 5), 700u);
  // After the last launch, and outside the log (not recording): the host clock.
  EXPECT_EQ(own_record_time(steps, 4, false, 5), 800u);
  EXPECT_EQ(own_record_time(steps, 4, true, 5), 800u);
  EXPECT_EQ(own_record_time(steps, UINT64_MAX, true, 5), 5u);
  EXPECT_EQ(own_record_time({}, 0, false, 9), 9u);
}

TEST(NotedBefore, LaunchPathNotesAtTheLaunchingStep) {
  EXPECT_EQ(noted_before(NotedAt::between_launches, 3), 3u);
  EXPECT_EQ(noted_before(NotedAt::launching_step, 3), 2u);
  EXPECT_EQ(noted_before(NotedAt::launching_step, 0), 0u);
  EXPECT_EQ(noted_before(NotedAt::between_launches, UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(noted_before(NotedAt::launching_step, UINT64_MAX), UINT64_MAX);
}

// A dropped block written by step 1 alone: the launch path populates it at step 1, the free after
// step 1 discards it. Counted from the next step's start, the populate outlived the discard.
TEST(NotedBefore, APopulateAtItsLaunchEndsWithTheDiscardAfterIt) {
  const std::vector<StepTime> steps{{100, 200}, {300, 400}, {500, 600}};
  const uint64_t lo = 1 << 21, hi = 2 << 21;
  const auto count = [&](NotedAt populate) {
    // Step 1 logged, then its populate (launch path), then the free after it (between launches).
    const uint64_t populated = own_record_time(steps, noted_before(populate, 2), false, 0);
    const uint64_t discarded =
        own_record_time(steps, noted_before(NotedAt::between_launches, 2), true, 0);
    std::vector<ResidencyEvent> events{
        {populated, lo, hi, true, false},
        {steps[1].start_ns, lo, hi, true, false},  // step 1's extent
        {discarded, lo, hi, false, false},
    };
    const std::vector<std::pair<uint64_t, uint64_t>> windows{{550, 600}};  // step 2
    return count_residency(events, windows).by_window[0];
  };
  EXPECT_EQ(count(NotedAt::launching_step), 0u);
  EXPECT_EQ(count(NotedAt::between_launches), hi - lo);  // what was counted until 2026-11-26
}

}  // namespace
}  // namespace umswap::tracer
