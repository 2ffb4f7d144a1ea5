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

}  // namespace
}  // namespace umswap::tracer
