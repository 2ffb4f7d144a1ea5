// SmallSlabs (engine vmm's small allocations share 2 MiB slabs): 512-byte units, first fit, the
// slab last taken from first; a slab emptied is kept while it is the only empty one, else given
// back; what is not small or not taken is refused; and, over random allocations and frees, no
// two live allocations overlap and each lies inside its slab.
#include "umswap/allocator/vmm_small.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace umswap {
namespace {

constexpr uint64_t kSlab = SmallSlabs::kSlab;
constexpr CUdeviceptr kA = 0x10000000, kB = 0x20000000, kC = 0x30000000;

TEST(SmallSlabs, OnlySmallAllocationsAndOnlyWithASlab) {
  SmallSlabs s;
  EXPECT_FALSE(SmallSlabs::small(0));
  EXPECT_TRUE(SmallSlabs::small(1));
  EXPECT_TRUE(SmallSlabs::small(SmallSlabs::kMaxSmall));
  EXPECT_FALSE(SmallSlabs::small(SmallSlabs::kMaxSmall + 1));
  EXPECT_EQ(s.take(100), 0u);  // no slab yet
  s.add_slab(kA);
  EXPECT_EQ(s.take(SmallSlabs::kMaxSmall + 1), 0u);
  EXPECT_FALSE(s.give(kA).has_value());  // nothing taken there
}

TEST(SmallSlabs, UnitsFirstFitAndReuse) {
  SmallSlabs s;
  s.add_slab(kA);
  const CUdeviceptr a = s.take(1);
  const CUdeviceptr b = s.take(513);  // two units
  const CUdeviceptr c = s.take(512);
  EXPECT_EQ(a, kA);
  EXPECT_EQ(b, kA + 512);
  EXPECT_EQ(c, kA + 1536);
  EXPECT_EQ(s.live(), 3u);
  EXPECT_EQ(s.live_bytes(), 1026u);
  EXPECT_EQ(*s.slab_of(b), kA);
  // b's two units free again: a one-unit allocation takes the first of them.
  ASSERT_TRUE(s.give(b).has_value());
  EXPECT_FALSE(s.slab_of(b).has_value());
  EXPECT_EQ(s.take(100), kA + 512);
  // Three units do not fit in the one left between; they go after c.
  EXPECT_EQ(s.take(1536), kA + 2048);
}

TEST(SmallSlabs, AFullSlabSendsTheNextToAnotherAndOneEmptySlabIsKept) {
  SmallSlabs s;
  s.add_slab(kA);
  const CUdeviceptr a1 = s.take(SmallSlabs::kMaxSmall);
  const CUdeviceptr a2 = s.take(SmallSlabs::kMaxSmall);
  EXPECT_EQ(a2, kA + SmallSlabs::kMaxSmall);
  EXPECT_EQ(s.take(1), 0u);  // full
  s.add_slab(kB);
  const CUdeviceptr b1 = s.take(1);
  EXPECT_EQ(b1, kB);
  // kB emptied: kept (the only empty one), still a slab.
  auto g = s.give(b1);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->slab, kB);
  EXPECT_FALSE(g->release_slab);
  EXPECT_EQ(s.slabs(), 2u);
  // kA emptied too: given back, kB still kept.
  EXPECT_FALSE(s.give(a1)->release_slab);
  g = s.give(a2);
  EXPECT_EQ(g->slab, kA);
  EXPECT_TRUE(g->release_slab);
  EXPECT_EQ(s.slabs(), 1u);
  // The kept slab is taken again, and is no longer the empty one.
  EXPECT_EQ(s.take(4096), kB);
  s.add_slab(kC);
  const CUdeviceptr c1 = s.take(SmallSlabs::kMaxSmall);  // the last slab taken from first
  EXPECT_EQ(c1, kC);
  EXPECT_FALSE(s.give(c1)->release_slab);  // the only empty one now
}

TEST(SmallSlabs, TheKeptEmptySlabCanBeDropped) {
  SmallSlabs s;
  EXPECT_EQ(s.drop_empty(), 0u);
  s.add_slab(kA);
  const CUdeviceptr a = s.take(100);
  EXPECT_EQ(s.drop_empty(), 0u);  // not empty
  EXPECT_FALSE(s.give(a)->release_slab);
  EXPECT_EQ(s.drop_empty(), kA);
  EXPECT_EQ(s.slabs(), 0u);
  EXPECT_EQ(s.take(100), 0u);  // gone
}

// First fit over a fragmented slab: every other unit taken, then a run of two found only past
// them; runs crossing word boundaries count.
TEST(SmallSlabs, RunsAcrossWordsAndFragments) {
  SmallSlabs s;
  s.add_slab(kA);
  std::vector<CUdeviceptr> units;
  for (int i = 0; i < 200; ++i) units.push_back(s.take(512));
  for (int i = 0; i < 200; i += 2) s.give(units[i]);
  EXPECT_EQ(s.take(1024), kA + 200 * 512);  // no two free units in a row among the first 200
  EXPECT_EQ(s.take(512), kA);               // one unit: the first hole
  // Odd units 61-65 freed beside the even ones: units 60-66 free, over the first word's end; a
  // run of 3 units starts at 60.
  for (int i = 61; i <= 65; i += 2) s.give(units[i]);
  EXPECT_EQ(s.take(1536), kA + 60 * 512);
  EXPECT_EQ(s.take(2048), kA + 63 * 512);   // 4 units: the rest of that run
  EXPECT_EQ(s.take(2048), kA + 202 * 512);  // and then only past the 200
}

TEST(SmallSlabs, RandomAllocationsNeverOverlapAndStayInTheirSlab) {
  std::mt19937_64 rng(7);
  SmallSlabs s;
  std::map<CUdeviceptr, uint64_t> live;  // address -> bytes
  CUdeviceptr next_slab = 0x100000000;
  uint64_t slabs_added = 0, slabs_given = 0;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 100 < 55) {
      const uint64_t bytes = rng() % 4 == 0 ? 1 + rng() % SmallSlabs::kMaxSmall : 1 + rng() % 8192;
      CUdeviceptr p = s.take(bytes);
      if (p == 0) {
        s.add_slab(next_slab);
        next_slab += 4 * kSlab;
        ++slabs_added;
        p = s.take(bytes);
      }
      ASSERT_NE(p, 0u);
      ASSERT_EQ(p % SmallSlabs::kUnit, 0u);
      const CUdeviceptr slab = *s.slab_of(p);
      ASSERT_LE(p + bytes, slab + kSlab);
      auto after = live.lower_bound(p);
      if (after != live.end()) {
        ASSERT_GE(after->first, p + bytes);
      }
      if (after != live.begin()) {
        const auto before = std::prev(after);
        ASSERT_LE(before->first + before->second, p);
      }
      live[p] = bytes;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const auto g = s.give(it->first);
      ASSERT_TRUE(g.has_value());
      slabs_given += g->release_slab ? 1 : 0;
      live.erase(it);
    }
    uint64_t bytes = 0;
    for (const auto& [p, b] : live) bytes += b;
    ASSERT_EQ(s.live_bytes(), bytes);
    ASSERT_EQ(s.slabs(), slabs_added - slabs_given);
  }
  EXPECT_GT(slabs_given, 0u);
}

}  // namespace
}  // namespace umswap
