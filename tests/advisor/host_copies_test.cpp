// HostCopies: the bookkeeping of evictions umswap copies to pinned host memory itself.
#include "umswap/advisor/host_copies.h"

#include <gtest/gtest.h>

#include <map>

namespace umswap::advisor {
namespace {

// Host memory as numbers: each allocation gets a distinct range; frees are recorded.
struct FakeHost {
  uint64_t next = 1ull << 40;
  std::map<uint64_t, uint64_t> live;  // host -> bytes
  uint64_t freed = 0;
  bool fail = false;
  HostCopies make(uint64_t limit) {
    return HostCopies(
        [this](uint64_t bytes) -> uint64_t {
          if (fail) return 0;
          const uint64_t h = next;
          next += bytes + 4096;
          live[h] = bytes;
          return h;
        },
        [this](uint64_t host, uint64_t) {
          live.erase(host);
          ++freed;
        },
        limit);
  }
};

constexpr uint64_t kMiB = 1 << 20;

TEST(HostCopies, TakeCopyDiscardGiveBack) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  const auto taken = c.take(100 * kMiB, 8 * kMiB, 1);
  ASSERT_TRUE(taken);
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_EQ((*taken)[0].address, 100 * kMiB);
  EXPECT_EQ((*taken)[0].length, 8 * kMiB);
  EXPECT_EQ(c.held_bytes(), 8 * kMiB);
  EXPECT_TRUE(c.holds(107 * kMiB, 109 * kMiB));
  EXPECT_FALSE(c.holds(108 * kMiB, 120 * kMiB));
  EXPECT_FALSE(c.holds(90 * kMiB, 100 * kMiB));
  // Nothing is discarded before its copy is seen done.
  EXPECT_TRUE(c.copied(0).empty());
  const auto discard = c.copied(1);
  ASSERT_EQ(discard.size(), 1u);
  EXPECT_EQ(discard[0].host, (*taken)[0].host);
  EXPECT_TRUE(c.copied(5).empty());  // once
  // Given back in two parts: each copies in from its own offset of the same block.
  const auto first = c.give_back(104 * kMiB, 4 * kMiB, 1);
  ASSERT_EQ(first.copy_in.size(), 1u);
  EXPECT_EQ(first.copy_in[0].address, 104 * kMiB);
  EXPECT_EQ(first.copy_in[0].host, (*taken)[0].host + 4 * kMiB);
  EXPECT_EQ(c.held_bytes(), 4 * kMiB);
  const auto second = c.give_back(96 * kMiB, 10 * kMiB, 2);
  ASSERT_EQ(second.copy_in.size(), 1u);
  EXPECT_EQ(second.copy_in[0].address, 100 * kMiB);
  EXPECT_EQ(second.copy_in[0].length, 4 * kMiB);
  EXPECT_EQ(c.held_bytes(), 0u);
}

TEST(HostCopies, ReachesTellsWhetherAPieceComesBackAfterALaunch) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 4 * kMiB, 1, /*due=*/100));
  ASSERT_TRUE(c.take(8 * kMiB, 4 * kMiB, 2, /*due=*/200));
  EXPECT_FALSE(c.reaches(0, 4 * kMiB, 100));  // back by launch 100: covered
  EXPECT_TRUE(c.reaches(0, 4 * kMiB, 99));
  EXPECT_TRUE(c.reaches(2 * kMiB, 10 * kMiB, 150));  // the second piece comes at 200
  EXPECT_FALSE(c.reaches(2 * kMiB, 10 * kMiB, 200));
  EXPECT_FALSE(c.reaches(4 * kMiB, 8 * kMiB, 0));  // between the pieces
  // A split keeps the launch.
  c.give_back(0, 2 * kMiB, 1);
  EXPECT_TRUE(c.reaches(2 * kMiB, 3 * kMiB, 99));
  EXPECT_FALSE(c.reaches(2 * kMiB, 3 * kMiB, 100));
}

TEST(HostCopies, ReturningRangesReachLaunchesCoveredOnlyBeforeTheirCopyBack) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(100 * kMiB, 8 * kMiB, 1, /*due=*/50));
  c.copied(1);
  // Given back at launch 50 (its wait: restored >= 51) with copy-in ticket 3.
  const auto back = c.give_back(100 * kMiB, 8 * kMiB, 3, /*back_by=*/50);
  ASSERT_EQ(back.copy_in.size(), 1u);
  EXPECT_FALSE(c.holds(100 * kMiB, 108 * kMiB));  // not held: the plan does not take it twice
  EXPECT_EQ(c.returning_count(), 1u);
  // A launch covered up to 49 would run before the copy back; up to 50, after it.
  EXPECT_TRUE(c.reaches(106 * kMiB, 107 * kMiB, 49));
  EXPECT_FALSE(c.reaches(106 * kMiB, 107 * kMiB, 50));
  EXPECT_TRUE(c.reaches(106 * kMiB, 107 * kMiB, UINT64_MAX));  // a launch with no cover
  EXPECT_FALSE(c.reaches(108 * kMiB, 120 * kMiB, 0));          // past its end
  EXPECT_FALSE(c.reaches(90 * kMiB, 100 * kMiB, 0));           // before it
  // Until the copy in is seen done.
  c.retire(1, 2);
  EXPECT_TRUE(c.reaches(100 * kMiB, 101 * kMiB, 10));
  c.retire(1, 3);
  EXPECT_EQ(c.returning_count(), 0u);
  EXPECT_FALSE(c.reaches(100 * kMiB, 101 * kMiB, 10));
}

TEST(HostCopies, ReturningRangesOfARescueReachEveryLaunch) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 64 * kMiB, 1, 10));
  c.copied(1);
  // A short range given back untracked, a long one for no launch's cover.
  c.give_back(0, 2 * kMiB, 2);
  c.give_back(8 * kMiB, 32 * kMiB, 3, HostCopies::kNoLaunch);
  EXPECT_EQ(c.returning_count(), 1u);
  EXPECT_FALSE(c.reaches(kMiB, 2 * kMiB, 5));  // untracked
  // Found from an address near the long range's end (it starts far before).
  EXPECT_TRUE(c.reaches(39 * kMiB, 41 * kMiB, 1000000));
  // Past its end the piece still held is back by launch 10.
  EXPECT_FALSE(c.reaches(40 * kMiB, 41 * kMiB, 10));
}

TEST(HostCopies, GivingBackACopyInFlightForgetsIt) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 4 * kMiB, 1));
  const auto r = c.give_back(0, 4 * kMiB, 1);
  EXPECT_TRUE(r.copy_in.empty());  // the GPU pages were never discarded
  EXPECT_EQ(r.forgotten_bytes, 4 * kMiB);
  EXPECT_TRUE(c.copied(10).empty());  // and never will be
}

TEST(HostCopies, TakesOnlyWhatIsNotHeld) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(4 * kMiB, 2 * kMiB, 1));
  const auto t = c.take(0, 10 * kMiB, 2);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].address, 0u);
  EXPECT_EQ((*t)[0].length, 4 * kMiB);
  EXPECT_EQ((*t)[1].address, 6 * kMiB);
  EXPECT_EQ((*t)[1].length, 4 * kMiB);
  EXPECT_EQ((*t)[1].host, (*t)[0].host + 4 * kMiB);  // one block, packed
  EXPECT_EQ(c.held_bytes(), 10 * kMiB);
  const auto all = c.take(0, 10 * kMiB, 3);
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
}

TEST(HostCopies, BlocksAreReusedOnlyOnceTheirCopiesAreDone) {
  FakeHost host;
  HostCopies c = host.make(8 * kMiB);
  const auto a = c.take(0, 8 * kMiB, 1);
  ASSERT_TRUE(a);
  c.copied(1);
  c.give_back(0, 8 * kMiB, 7);  // copy in, ticket 7
  // The limit is used up by a block whose copy in may still read it.
  EXPECT_FALSE(c.take(64 * kMiB, 8 * kMiB, 2));
  c.retire(1, 6);
  EXPECT_FALSE(c.take(64 * kMiB, 8 * kMiB, 2));
  c.retire(1, 7);
  const auto b = c.take(64 * kMiB, 8 * kMiB, 2);
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].host, (*a)[0].host);  // the same block again
  EXPECT_EQ(c.blocks_allocated(), 1u);
}

TEST(HostCopies, CachedBlocksOfOtherSizesAreFreedForRoom) {
  FakeHost host;
  HostCopies c = host.make(8 * kMiB);
  ASSERT_TRUE(c.take(0, 6 * kMiB, 1));
  c.copied(1);
  c.give_back(0, 6 * kMiB, 1);
  c.retire(1, 1);
  EXPECT_EQ(c.host_bytes(), 6 * kMiB);
  ASSERT_TRUE(c.take(0, 4 * kMiB, 2));  // 6 + 4 > 8: the cached block goes
  EXPECT_EQ(host.freed, 1u);
  EXPECT_EQ(c.host_bytes(), 4 * kMiB);
}

TEST(HostCopies, FailedAllocationTakesNothing) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  host.fail = true;
  EXPECT_FALSE(c.take(0, 2 * kMiB, 1));
  EXPECT_EQ(c.held_bytes(), 0u);
  EXPECT_FALSE(c.holds(0, 2 * kMiB));
}

TEST(HostCopies, FrozenTakesNothingAndKeepsItsBlocks) {
  FakeHost host;
  {
    HostCopies c = host.make(64 * kMiB);
    ASSERT_TRUE(c.take(0, 2 * kMiB, 1));
    c.copied(1);
    c.freeze();
    EXPECT_FALSE(c.take(8 * kMiB, 2 * kMiB, 2));
    const auto r = c.give_back_all(3);
    ASSERT_EQ(r.copy_in.size(), 1u);
    c.retire(10, 10);
  }
  // A stalled stream may still copy into it: never freed.
  EXPECT_EQ(host.freed, 0u);
}

TEST(HostCopies, UnfrozenTakesAgainAndReusesBlocksOnceTheirCopiesAreDone) {
  FakeHost host;
  HostCopies c = host.make(8 * kMiB);
  ASSERT_TRUE(c.take(0, 8 * kMiB, 1));
  c.copied(1);
  c.freeze();
  EXPECT_EQ(c.give_back_all(2).copy_in.size(), 1u);
  c.unfreeze();
  c.retire(0, 0);  // the copies are not seen done: the block is not reused yet
  EXPECT_FALSE(c.take(64 * kMiB, 8 * kMiB, 3));
  c.retire(1, 2);
  EXPECT_TRUE(c.take(64 * kMiB, 8 * kMiB, 3));
  EXPECT_EQ(c.blocks_allocated(), 1u);
}

TEST(HostCopies, GiveBackAllReturnsEveryDiscardedPiece) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 2 * kMiB, 1));
  ASSERT_TRUE(c.take(10 * kMiB, 2 * kMiB, 2));
  ASSERT_TRUE(c.take(20 * kMiB, 2 * kMiB, 3));
  EXPECT_EQ(c.copied(2).size(), 2u);
  const auto r = c.give_back_all(1);
  EXPECT_EQ(r.copy_in.size(), 2u);
  EXPECT_EQ(r.forgotten_bytes, 2 * kMiB);
  EXPECT_EQ(c.held_bytes(), 0u);
}

}  // namespace
}  // namespace umswap::advisor
