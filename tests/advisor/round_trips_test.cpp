// umswap run --verify's round trips (round_trips.h): each page's hash as it left against its
// hash once back, slots handed out in runs and freed only when the GPU is done with them.
#include "umswap/advisor/round_trips.h"

#include <gtest/gtest.h>

#include <map>

namespace umswap::advisor {
namespace {

constexpr uint64_t kPage = RoundTrips::kPage;

// What the GPU wrote into each slot (the hash kernel's result, here set by the test).
struct Slots {
  std::map<uint64_t, uint64_t> value;
  uint64_t operator()(uint64_t slot) const { return value.at(slot); }
};

TEST(RoundTrips, SameHashBackIsCheckedAnotherIsAMismatchWithItsLaunches) {
  RoundTrips r(64);
  Slots gpu;
  const auto a = r.leave(0x40000000, 2, 1, 10);  // two pages
  const auto b = r.leave(0x50000000, 1, 2, 11);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*b, *a + 2);  // consecutive runs
  gpu.value[*a] = 111;
  gpu.value[*a + 1] = 112;
  gpu.value[*b] = 222;
  r.settle(2, 0, gpu);
  EXPECT_EQ(r.away(), 3u);
  const auto a2 = r.back(0x40000000, 2, 1, 20);
  const auto b2 = r.back(0x50000000, 1, 1, 20);
  ASSERT_TRUE(a2 && b2);
  gpu.value[*a2] = 111;
  gpu.value[*a2 + 1] = 112;
  gpu.value[*b2] = 999;  // not what left
  r.settle(2, 0, gpu);   // the copies back are not done: nothing compared
  EXPECT_EQ(r.counts().checked + r.counts().mismatches, 0u);
  EXPECT_EQ(r.returning(), 3u);
  r.settle(2, 1, gpu);
  EXPECT_EQ(r.counts().checked, 2u);
  EXPECT_EQ(r.counts().mismatches, 1u);
  ASSERT_EQ(r.mismatches().size(), 1u);
  const RoundTrips::Mismatch& m = r.mismatches()[0];
  EXPECT_EQ(m.page, 0x50000000u);
  EXPECT_EQ(m.left_at, 11u);
  EXPECT_EQ(m.back_at, 20u);
  EXPECT_EQ(m.left_hash, 222u);
  EXPECT_EQ(m.back_hash, 999u);
  EXPECT_EQ(r.away(), 0u);
  EXPECT_EQ(r.returning(), 0u);
}

// A range often comes back in other pieces than it left in: by page, every one is compared.
TEST(RoundTrips, PagesBackInOtherPiecesAreEachCompared) {
  RoundTrips r(64);
  Slots gpu;
  const auto a = r.leave(0x40000000, 4, 1, 1);
  ASSERT_TRUE(a);
  for (uint64_t i = 0; i < 4; ++i) gpu.value[*a + i] = 50 + i;
  const auto lo = r.back(0x40000000, 1, 1, 2);
  const auto hi = r.back(0x40000000 + 2 * kPage, 2, 2, 3);
  ASSERT_TRUE(lo && hi);
  gpu.value[*lo] = 50;
  gpu.value[*hi] = 52;
  gpu.value[*hi + 1] = 53;
  r.settle(1, 2, gpu);
  EXPECT_EQ(r.counts().checked, 3u);
  EXPECT_EQ(r.away(), 1u);  // the second page has not come back
  EXPECT_EQ(r.counts().mismatches, 0u);
}

TEST(RoundTrips, AReturnSeenBeforeItsLeaveWaitsForTheLeavesHash) {
  RoundTrips r(8);
  Slots gpu;
  const auto a = r.leave(0x40000000, 1, 5, 1);
  const auto a2 = r.back(0x40000000, 1, 3, 2);
  ASSERT_TRUE(a && a2);
  gpu.value[*a] = 7;
  gpu.value[*a2] = 7;
  r.settle(4, 3, gpu);  // the copy back seen done, its copy out not yet
  EXPECT_EQ(r.counts().checked, 0u);
  r.settle(5, 3, gpu);
  EXPECT_EQ(r.counts().checked, 1u);
}

TEST(RoundTrips, SlotsAreFreedOnlyWhenTheirCopiesAreDone) {
  RoundTrips r(4);
  Slots gpu;
  const auto a = r.leave(0x40000000, 3, 1, 1);
  ASSERT_TRUE(a);
  EXPECT_FALSE(r.leave(0x50000000, 2, 2, 1));  // one slot left of four: the run does not fit
  EXPECT_EQ(r.counts().no_slot, 2u);
  for (uint64_t i = 0; i < 3; ++i) gpu.value[*a + i] = i;
  r.settle(0, 0, gpu);  // copy out 1 not done: its slots stay busy
  EXPECT_FALSE(r.leave(0x60000000, 2, 3, 2));
  r.settle(1, 0, gpu);  // done: the three hashes read, their slots free
  const auto c = r.leave(0x60000000, 2, 4, 2);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, 0u);  // the ring came round
  // The pages that left unhashed come back uncompared, and are not counted twice.
  const auto back = r.back(0x50000000, 2, 1, 3);
  ASSERT_TRUE(back);  // slots 2 and 3 (the kernel writes them): drained with copy back 1
  EXPECT_EQ(*back, 2u);
  EXPECT_EQ(r.counts().no_slot, 4u);  // 0x50000000's two pages, 0x60000000's first try
  EXPECT_EQ(r.counts().unmatched, 0u);
  EXPECT_EQ(r.returning(), 0u);
  EXPECT_FALSE(r.leave(0x70000000, 1, 5, 4));  // every slot busy
  r.settle(1, 1, gpu);  // slots 2 and 3 free; the ring's head (0) is c's, not done
  EXPECT_FALSE(r.leave(0x70000000, 1, 6, 4));
  gpu.value[0] = gpu.value[1] = 9;
  r.settle(4, 1, gpu);
  EXPECT_TRUE(r.leave(0x70000000, 1, 7, 4));
}

TEST(RoundTrips, APageBackThatWasNotSeenLeavingOrLeftTwiceIsUnmatched) {
  RoundTrips r(16);
  Slots gpu;
  const auto x = r.back(0x40000000, 1, 1, 1);  // never left (hashed)
  ASSERT_TRUE(x);
  EXPECT_EQ(r.counts().unmatched, 1u);
  const auto a = r.leave(0x50000000, 1, 1, 1);
  const auto b = r.leave(0x50000000, 1, 2, 2);  // again, before coming back
  ASSERT_TRUE(a && b);
  EXPECT_EQ(r.counts().unmatched, 2u);
  EXPECT_EQ(r.away(), 1u);
  // Draining slots are freed with their tickets: x's with copy back 1, a's with copy out 1.
  gpu.value[*b] = 1;
  r.settle(2, 1, gpu);
  EXPECT_EQ(r.away(), 1u);
  EXPECT_EQ(r.counts().checked, 0u);
}

}  // namespace
}  // namespace umswap::advisor
