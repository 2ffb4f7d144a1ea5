// find_copy_clashes: UMSWAP_EVICT_COPY's copies against the steps that reach their pages.
#include "umswap/tracer/copy_clashes.h"

#include <gtest/gtest.h>

#include <vector>

namespace umswap::tracer {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// One 4 MiB range at 100 MiB copied out at [100, 200] ns and back at [500, 600] ns.
std::vector<OwnCopySpan> one_round_trip() {
  return {{100 * kMiB, 4 * kMiB, false, 100, 200}, {100 * kMiB, 4 * kMiB, true, 500, 600}};
}

TEST(CopyClashes, StepsBeforeTheCopyOutOrAfterTheCopyBackAreFine) {
  const auto copies = one_round_trip();
  const std::vector<StepAccessSpan> steps = {
      {1, 10, 90, 100 * kMiB, 104 * kMiB},    // before
      {2, 610, 700, 100 * kMiB, 104 * kMiB},  // after
      {3, 300, 400, 104 * kMiB, 110 * kMiB},  // another range, meanwhile
  };
  const CopyClashReport r = find_copy_clashes(copies, steps);
  EXPECT_EQ(r.copies, 2u);
  EXPECT_EQ(r.pages_checked, 2u);  // two 2 MiB pages
  EXPECT_EQ(r.clashes, 0u);
  EXPECT_TRUE(r.first.empty());
}

TEST(CopyClashes, AStepWhileThePageIsDiscardedOrComingBackIsHarmful) {
  const auto copies = one_round_trip();
  const std::vector<StepAccessSpan> steps = {
      {7, 300, 310, 103 * kMiB, 103 * kMiB + 4096},  // discarded (second page only)
      {8, 550, 560, 100 * kMiB, 101 * kMiB},         // during the copy back (first page)
      {5, 150, 160, 101 * kMiB, 102 * kMiB},         // during the copy out: reported, not harmful
  };
  const CopyClashReport r = find_copy_clashes(copies, steps, 8);
  EXPECT_EQ(r.clashes, 3u);
  EXPECT_EQ(r.harmful, 2u);
  ASSERT_EQ(r.first.size(), 3u);
  // Harmful ones first, by step.
  EXPECT_EQ(r.first[0].step, 7u);
  EXPECT_EQ(r.first[0].kind, CopyClashKind::discarded);
  EXPECT_EQ(r.first[0].page, 102 * kMiB);
  EXPECT_EQ(r.first[0].since_ns, 100u);  // 300 - 200
  EXPECT_EQ(r.first[1].step, 8u);
  EXPECT_EQ(r.first[1].kind, CopyClashKind::during_copy_back);
  EXPECT_EQ(r.first[2].step, 5u);
  EXPECT_EQ(r.first[2].kind, CopyClashKind::during_copy_out);
  EXPECT_STREQ(to_string(r.first[0].kind), "discarded");
}

TEST(CopyClashes, ACopyOutWithoutACopyBackIsNotChecked) {
  const std::vector<OwnCopySpan> copies = {{0, 2 * kMiB, false, 100, 200}};
  const std::vector<StepAccessSpan> steps = {{1, 300, 400, 0, kMiB}};
  const CopyClashReport r = find_copy_clashes(copies, steps);
  EXPECT_EQ(r.pages_checked, 0u);
  EXPECT_EQ(r.clashes, 0u);
}

TEST(CopyClashes, EachRoundTripOfAPageIsItsOwnWindow) {
  // Out, back, out again, back again: a step between the first copy back and the second copy out
  // finds the page on the GPU.
  const std::vector<OwnCopySpan> copies = {{0, 2 * kMiB, false, 100, 200},
                                           {0, 2 * kMiB, true, 300, 400},
                                           {0, 2 * kMiB, false, 1000, 1100},
                                           {0, 2 * kMiB, true, 1500, 1600}};
  const std::vector<StepAccessSpan> steps = {{1, 500, 900, 0, 2 * kMiB},
                                             {2, 1200, 1300, 0, 2 * kMiB},
                                             {3, 0, 0, 0, 2 * kMiB}};  // no GPU time: skipped
  const CopyClashReport r = find_copy_clashes(copies, steps);
  EXPECT_EQ(r.pages_checked, 2u);
  EXPECT_EQ(r.clashes, 1u);
  ASSERT_EQ(r.first.size(), 1u);
  EXPECT_EQ(r.first[0].step, 2u);
  EXPECT_EQ(r.first[0].kind, CopyClashKind::discarded);
}

TEST(CopyClashes, KeepsOnlyTheFirstFew) {
  const auto copies = one_round_trip();
  std::vector<StepAccessSpan> steps;
  for (uint64_t i = 0; i < 10; ++i) steps.push_back({i, 300, 310, 100 * kMiB, 104 * kMiB});
  const CopyClashReport r = find_copy_clashes(copies, steps, 3);
  EXPECT_EQ(r.clashes, 20u);  // 10 steps x 2 pages
  EXPECT_EQ(r.harmful, 20u);
  EXPECT_EQ(r.first.size(), 3u);
}

// copy_busy: overlapping copies of one direction count once, the overlap of the two directions
// is its own figure, and each window sees only its part.
TEST(CopyBusy, UnionsEachDirectionAndClipsToTheWindows) {
  const std::vector<OwnCopySpan> copies = {
      {0, kMiB, false, 100, 300},
      {0, kMiB, false, 200, 400},  // out: [100, 400)
      {0, kMiB, false, 600, 700},  // out: [600, 700)
      {0, kMiB, true, 350, 650},
      {0, kMiB, true, 900, 1000}};  // in: [350, 650), [900, 1000)
  const std::vector<std::pair<uint64_t, uint64_t>> windows = {
      {0, 500}, {500, 1000}, {0, 2000}, {1000, 2000}, {50, 50}};
  const std::vector<CopyBusy> b = copy_busy(copies, windows);
  ASSERT_EQ(b.size(), 5u);
  // [0, 500): out 100..400 = 300; in 350..500 = 150; both 350..400 = 50.
  EXPECT_EQ(b[0].out_ns, 300u);
  EXPECT_EQ(b[0].in_ns, 150u);
  EXPECT_EQ(b[0].both_ns, 50u);
  // [500, 1000): out 600..700 = 100; in 500..650 + 900..1000 = 250; both 600..650 = 50.
  EXPECT_EQ(b[1].out_ns, 100u);
  EXPECT_EQ(b[1].in_ns, 250u);
  EXPECT_EQ(b[1].both_ns, 50u);
  // The whole run.
  EXPECT_EQ(b[2].out_ns, 400u);
  EXPECT_EQ(b[2].in_ns, 400u);
  EXPECT_EQ(b[2].both_ns, 100u);
  EXPECT_EQ(b[3].out_ns + b[3].in_ns + b[3].both_ns, 0u);
  EXPECT_EQ(b[4].out_ns + b[4].in_ns, 0u);  // an empty window
}

TEST(CopyBusy, WindowsInAnyOrderMatchADirectSum) {
  std::vector<OwnCopySpan> copies;
  uint64_t x = 12345;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  for (int i = 0; i < 300; ++i) {
    const uint64_t start = next() % 100000, len = next() % 900;
    copies.push_back({0, kMiB, (next() >> 33) % 2 == 0, start, start + len});
  }
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (int i = 0; i < 40; ++i) {
    const uint64_t lo = next() % 100000;
    windows.emplace_back(lo, lo + next() % 20000);
  }
  const std::vector<CopyBusy> b = copy_busy(copies, windows);
  // Direct: per nanosecond of each window, whether some copy of each direction covers it.
  for (size_t w = 0; w < windows.size(); ++w) {
    uint64_t out = 0, in = 0, both = 0;
    for (uint64_t t = windows[w].first; t < windows[w].second; ++t) {
      bool o = false, n = false;
      for (const OwnCopySpan& c : copies) {
        if (c.start_ns <= t && t < c.end_ns) (c.to_gpu ? n : o) = true;
      }
      out += o;
      in += n;
      both += o && n;
    }
    EXPECT_EQ(b[w].out_ns, out) << w;
    EXPECT_EQ(b[w].in_ns, in) << w;
    EXPECT_EQ(b[w].both_ns, both) << w;
  }
}

TEST(CopyIdleGaps, LongestFirstWithTheStepsBusyInThem) {
  const std::vector<OwnCopySpan> copies = {
      {0, kMiB, false, 100, 200}, {0, kMiB, true, 150, 300}, {0, kMiB, false, 700, 800}};
  // Steps: [320, 400) and [350, 450) (union 320..450), [900, 950).
  const std::vector<std::pair<uint64_t, uint64_t>> steps = {{350, 450}, {320, 400}, {900, 950}};
  const std::vector<CopyIdleGap> g = copy_idle_gaps(copies, steps, 0, 1000, 2);
  // Gaps: [0, 100), [300, 700), [800, 1000); the two longest kept.
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].start_ns, 300u);
  EXPECT_EQ(g[0].length_ns, 400u);
  EXPECT_EQ(g[0].step_busy_ns, 130u);
  EXPECT_EQ(g[1].start_ns, 800u);
  EXPECT_EQ(g[1].length_ns, 200u);
  EXPECT_EQ(g[1].step_busy_ns, 50u);
  EXPECT_TRUE(copy_idle_gaps(copies, steps, 500, 500, 4).empty());
  // A window inside one copy has no gap; one with no copies is one gap.
  EXPECT_TRUE(copy_idle_gaps(copies, steps, 160, 190, 4).empty());
  const std::vector<CopyIdleGap> all = copy_idle_gaps({}, steps, 0, 1000, 4);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].length_ns, 1000u);
  EXPECT_EQ(all[0].step_busy_ns, 180u);
}

}  // namespace
}  // namespace umswap::tracer

namespace umswap::tracer {
namespace {

// find_unforeseen_faults: a fault on a page between its copy out and its copy back is an access
// nobody foresaw; faults before, after, on other pages, or after a copy out that was never copied
// back (its range freed) are not.
TEST(UnforeseenFaults, OnlyFaultsInsideADiscardedWindowCount) {
  const std::vector<OwnCopySpan> copies = {
      {100 * kMiB, 4 * kMiB, false, 100, 200},
      {100 * kMiB, 4 * kMiB, true, 500, 600},
      // 200 MiB: out, out again (the first one's range was freed), then back.
      {200 * kMiB, 2 * kMiB, false, 100, 150},
      {200 * kMiB, 2 * kMiB, false, 700, 750},
      {200 * kMiB, 2 * kMiB, true, 900, 950}};
  const std::vector<FaultAt> faults = {
      {50, 100 * kMiB, 1},          // before the copy out
      {300, 103 * kMiB + 64, 1},    // second page, discarded: counts
      {150, 101 * kMiB, 2},         // during the copy out: the page was still there
      {650, 100 * kMiB, 2},         // after the copy back
      {400, 110 * kMiB, 2},         // another page
      {400, 200 * kMiB + 4096, 2},  // between the two copies out: the first range was freed
      {800, 200 * kMiB + 8192, 3},  // after the second copy out, before its copy back: counts
  };
  const UnforeseenReport r = find_unforeseen_faults(copies, faults);
  EXPECT_EQ(r.windows, 3u);  // two pages of the first range, one of the second
  EXPECT_EQ(r.faults, 2u);
  ASSERT_EQ(r.first.size(), 2u);
  EXPECT_EQ(r.first[0].address, 103 * kMiB + 64);
  EXPECT_EQ(r.first[0].page, 102 * kMiB);
  EXPECT_EQ(r.first[0].ns_into_window, 100u);
  EXPECT_EQ(r.first[1].address, 200 * kMiB + 8192);
  EXPECT_EQ(r.first[1].access, 3);
  EXPECT_EQ(r.first[1].ns_into_window, 50u);
}

// A copy out of a page that starts before the copy back before it has ended read pages not yet
// filled (issue 36).
TEST(UnforeseenFaults, ACopyOutBeforeTheCopyBackEndedIsCounted) {
  const std::vector<OwnCopySpan> copies = {
      {0, 4 * kMiB, false, 0, 10},
      {0, 4 * kMiB, true, 100, 200},
      {0, 2 * kMiB, false, 150, 260},          // first page: out while its copy back still ran
      {2 * kMiB, 2 * kMiB, false, 300, 310}};  // second page: out after the copy back
  const UnforeseenReport r = find_unforeseen_faults(copies, {});
  EXPECT_EQ(r.outs_before_back, 1u);
  ASSERT_EQ(r.outs_before_back_pages.size(), 1u);
  EXPECT_EQ(r.outs_before_back_pages[0], 0u);
}

TEST(UnforeseenFaults, KeepsTheFirstByTime) {
  const std::vector<OwnCopySpan> copies = {{0, 2 * kMiB, false, 0, 10},
                                           {0, 2 * kMiB, true, 1000, 1010}};
  std::vector<FaultAt> faults;
  for (uint64_t t = 900; t > 20; t -= 10) faults.push_back({t, 4096, 1});
  const UnforeseenReport r = find_unforeseen_faults(copies, faults, 3);
  EXPECT_EQ(r.faults, faults.size());
  ASSERT_EQ(r.first.size(), 3u);
  EXPECT_EQ(r.first[0].time_ns, 30u);
  EXPECT_EQ(r.first[2].time_ns, 50u);
}

}  // namespace
}  // namespace umswap::tracer
