// LearningEvictor: least recently used out first, within the budget, never what the GPU may still
// run; against a direct model on random touches.
#include "umswap/advisor/learning_evictor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

namespace umswap::advisor {
namespace {

constexpr uint64_t kB = 2 << 20;
using Range = LearningEvictor::Range;
constexpr uint64_t kAll = 1ull << 40;  // one allocation holding everything

void touch(LearningEvictor& e, uint64_t launch, uint64_t lo, uint64_t hi) {
  e.touch(launch, lo, hi, 0, kAll);
}

TEST(LearningEvictor, CountsBlocksAndRoundsOut) {
  LearningEvictor e(10 * kB);
  touch(e, 0, 100, 200);        // one block
  touch(e, 1, kB - 1, kB + 1);  // blocks 0 and 1
  touch(e, 2, 5 * kB, 5 * kB);  // empty: nothing
  touch(e, 3, 7 * kB, 9 * kB);  // blocks 7 and 8
  EXPECT_EQ(e.resident_bytes(), 4 * kB);
  EXPECT_TRUE(e.take_evictions(100).empty());  // within the budget
  EXPECT_THROW(LearningEvictor(1, 0), std::invalid_argument);
}

// The program's own GPU memory counts against the budget: the evictor's budget shrinks by it.
TEST(LearningEvictor, ASmallerBudgetEvictsMore) {
  EXPECT_EQ(managed_budget(10 * kB, 3 * kB), 7 * kB);
  EXPECT_EQ(managed_budget(10 * kB, 0), 10 * kB);
  EXPECT_EQ(managed_budget(10 * kB, 9 * kB + 1), kB);  // at least one block
  EXPECT_EQ(managed_budget(10 * kB, 50 * kB), kB);
  EXPECT_EQ(managed_budget(kB / 2, 0), kB / 2);  // a budget below a block stays itself
  EXPECT_EQ(managed_budget(kB / 2, kB), kB / 2);
  LearningEvictor e(4 * kB);
  touch(e, 0, 0, 4 * kB);
  EXPECT_TRUE(e.take_evictions(1).empty());
  e.set_budget(managed_budget(4 * kB, 2 * kB));
  EXPECT_EQ(e.budget(), 2 * kB);
  uint64_t out = 0;
  for (const Range& r : e.take_evictions(1)) out += r.length;
  EXPECT_EQ(out, 2 * kB);
  EXPECT_EQ(e.resident_bytes(), 2 * kB);
}

TEST(LearningEvictor, EvictsLeastRecentlyUsedFirstAndCoalesces) {
  LearningEvictor e(3 * kB);
  touch(e, 0, 0, 2 * kB);        // blocks 0, 1 at launch 0
  touch(e, 1, 4 * kB, 5 * kB);   // block 4
  touch(e, 2, 2 * kB, 3 * kB);   // block 2
  touch(e, 3, 0, kB);            // block 0 again: now the newest
  touch(e, 4, 9 * kB, 10 * kB);  // block 9: 5 blocks, 2 over
  // Oldest first: block 1 (launch 0), then 4 (launch 1).
  EXPECT_EQ(e.take_evictions(5), (std::vector<Range>{{kB, kB}, {4 * kB, kB}}));
  EXPECT_EQ(e.resident_bytes(), 3 * kB);
  // Touched again after eviction: back on the GPU. 5 blocks: the two oldest, 2 (launch 2) and
  // 0 (launch 3), leave; block 1 between them is newer.
  touch(e, 5, kB, 2 * kB);
  touch(e, 6, 11 * kB, 12 * kB);
  EXPECT_EQ(e.take_evictions(7), (std::vector<Range>{{0, kB}, {2 * kB, kB}}));
  EXPECT_EQ(e.resident_bytes(), 3 * kB);
  // Adjacent blocks picked together are one range.
  touch(e, 7, 20 * kB, 22 * kB);
  touch(e, 8, 22 * kB, 23 * kB);
  EXPECT_EQ(e.take_evictions(9), (std::vector<Range>{{kB, kB}, {9 * kB, kB}, {11 * kB, kB}}));
  touch(e, 9, 30 * kB, 33 * kB);
  EXPECT_EQ(e.take_evictions(10), (std::vector<Range>{{20 * kB, 3 * kB}}));
}

TEST(LearningEvictor, NeverPicksWhatTheGpuMayStillRun) {
  LearningEvictor e(kB);
  touch(e, 10, 0, kB);
  touch(e, 11, kB, 2 * kB);
  touch(e, 12, 2 * kB, 3 * kB);
  EXPECT_TRUE(e.take_evictions(10).empty());  // nothing done before launch 10
  EXPECT_EQ(e.take_evictions(12), (std::vector<Range>{{0, 2 * kB}}));
  EXPECT_EQ(e.resident_bytes(), kB);
  EXPECT_TRUE(e.take_evictions(100).empty());  // fits
}

TEST(LearningEvictor, AnOlderLaunchDoesNotMakeABlockOlder) {
  LearningEvictor e(kB);
  touch(e, 5, 0, kB);
  touch(e, 3, 0, kB);  // noted late, by an older launch: block 0 stays at 5
  touch(e, 4, kB, 2 * kB);
  EXPECT_EQ(e.take_evictions(6), (std::vector<Range>{{kB, kB}}));
}

TEST(LearningEvictor, RangesStayWithinTheirAllocations) {
  LearningEvictor e(0);
  // Allocation A = [1 MiB, 5 MiB) (blocks 0-2), B = [5 MiB, 9 MiB) (blocks 2-4): block 2 is
  // shared, and belongs to B, which touched it last.
  const uint64_t mb = 1 << 20;
  e.touch(1, mb, 5 * mb, mb, 5 * mb);
  e.touch(2, 5 * mb, 9 * mb, 5 * mb, 9 * mb);
  EXPECT_EQ(e.take_evictions(3), (std::vector<Range>{{mb, 3 * mb}, {5 * mb, 4 * mb}}));
  EXPECT_EQ(e.resident_bytes(), 0u);
}

TEST(LearningEvictor, SaysWhichBlocksAreNewlyCountedClippedAndCoalesced) {
  LearningEvictor e(100 * kB);
  const uint64_t mb = 1 << 20;
  std::vector<Range> fresh;
  // Allocation [1 MiB, 9 MiB): blocks 0-4; touching [3 MiB, 7 MiB) counts blocks 1-3.
  e.touch(1, 3 * mb, 7 * mb, mb, 9 * mb, &fresh);
  EXPECT_EQ(fresh, (std::vector<Range>{{2 * mb, 6 * mb}}));
  // Again, wider: only blocks 0 (clipped to the allocation's start) and 4 are new.
  fresh.clear();
  e.touch(2, mb, 9 * mb, mb, 9 * mb, &fresh);
  EXPECT_EQ(fresh, (std::vector<Range>{{mb, mb}, {8 * mb, mb}}));
  // The next allocation starts at 9 MiB, inside block 4 (already counted), and runs on into
  // block 5: one new range, not joined to the previous allocation's.
  fresh.clear();
  e.touch(3, 9 * mb, 12 * mb, 9 * mb, 12 * mb, &fresh);
  EXPECT_EQ(fresh, (std::vector<Range>{{10 * mb, 2 * mb}}));
  // Two allocations meeting at a block boundary, both new, stay two ranges.
  fresh.clear();
  e.touch(4, 20 * kB, 21 * kB, 20 * kB, 21 * kB, &fresh);
  e.touch(4, 21 * kB, 22 * kB, 21 * kB, 22 * kB, &fresh);
  EXPECT_EQ(fresh, (std::vector<Range>{{20 * kB, kB}, {21 * kB, kB}}));
  EXPECT_EQ(e.resident_bytes(), 8 * kB);
  // Cleared: nothing counted, and everything is new again.
  e.clear();
  EXPECT_EQ(e.resident_bytes(), 0u);
  EXPECT_TRUE(e.take_evictions(100).empty());
  fresh.clear();
  e.touch(5, 3 * mb, 4 * mb, mb, 9 * mb, &fresh);
  EXPECT_EQ(fresh, (std::vector<Range>{{2 * mb, 2 * mb}}));
}

// Against a model: a map block -> last launch; evict the oldest eligible while over budget.
TEST(LearningEvictor, MatchesADirectModelOnRandomTouches) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const uint64_t budget = (1 + rng() % 12) * kB;
    LearningEvictor e(budget);
    std::map<uint64_t, uint64_t> model;
    uint64_t launch = 0;
    for (int step = 0; step < 60; ++step) {
      ++launch;
      const uint64_t lo = rng() % (32 * kB);
      const uint64_t hi = lo + rng() % (4 * kB);
      touch(e, launch, lo, hi);
      if (hi > lo) {
        for (uint64_t b = lo / kB; b <= (hi - 1) / kB; ++b) model[b] = launch;
      }
      if (rng() % 3 == 0) {
        const uint64_t done = launch - std::min<uint64_t>(launch, rng() % 5);
        std::vector<uint64_t> expect;
        while (model.size() * kB > budget) {
          auto oldest = model.end();
          for (auto it = model.begin(); it != model.end(); ++it) {
            if (it->second < done && (oldest == model.end() || it->second < oldest->second)) {
              oldest = it;
            }
          }
          if (oldest == model.end()) break;
          expect.push_back(oldest->first);
          model.erase(oldest);
        }
        std::sort(expect.begin(), expect.end());
        std::vector<uint64_t> got;
        for (const Range& r : e.take_evictions(done)) {
          ASSERT_EQ(r.address % kB, 0u);
          ASSERT_EQ(r.length % kB, 0u);
          for (uint64_t a = r.address; a < r.address + r.length; a += kB) got.push_back(a / kB);
        }
        ASSERT_EQ(got, expect) << "round " << round << " step " << step;
        ASSERT_EQ(e.resident_bytes(), model.size() * kB);
      }
    }
  }
}

}  // namespace
}  // namespace umswap::advisor
