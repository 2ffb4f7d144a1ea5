// Extents: each pointer's byte range ends at the next pointer seen into the same buffer (in the
// iteration, or in the step), or at the buffer's end.
#include "umswap/tracer/extents.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

namespace umswap::tracer {
namespace {

constexpr uint64_t kSeg = 0x7f0000000000;  // a caching-allocator segment
constexpr uint64_t kSegSize = 1 << 16;
constexpr uint64_t kOther = 0x7f0000100000;
constexpr uint64_t kOtherSize = 1 << 12;

PointerHit seg(uint64_t offset) {
  return {.buffer = 10, .base = kSeg, .size = kSegSize, .pointer = kSeg + offset};
}
PointerHit other(uint64_t offset) {
  return {.buffer = 20, .base = kOther, .size = kOtherSize, .pointer = kOther + offset};
}

// BufferId -> index into Trace::buffers.
uint32_t index_of(BufferId id) {
  return id == 10 ? 0 : 1;
}

using Range = std::tuple<uint32_t, uint64_t, uint64_t>;  // buffer index, offset, length

struct Result {
  std::vector<std::vector<Range>> per_step;
};

Result extents(const std::vector<std::vector<PointerHit>>& steps,
               ExtentScope scope = ExtentScope::iteration) {
  std::vector<std::span<const PointerHit>> spans(steps.begin(), steps.end());
  std::vector<trace::Access> accesses;
  std::vector<uint64_t> first;
  compute_extents(spans, index_of, accesses, first, scope);
  EXPECT_EQ(first.size(), steps.size() + 1);
  EXPECT_EQ(first.back(), accesses.size());
  Result r;
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<Range> ranges;
    for (uint64_t a = first[s]; a < first[s + 1]; ++a) {
      ranges.emplace_back(accesses[a].buffer, accesses[a].offset, accesses[a].length);
    }
    r.per_step.push_back(ranges);
  }
  return r;
}

TEST(Extents, PointersPackedInOneSegment) {
  const Result r = extents({{seg(0), seg(4096), seg(10000)}});
  EXPECT_EQ(r.per_step[0],
            (std::vector<Range>{{0, 0, 4096}, {0, 4096, 5904}, {0, 10000, kSegSize - 10000}}));
}

TEST(Extents, ASinglePointerReachesTheBufferEnd) {
  EXPECT_EQ(extents({{seg(100)}}).per_step[0], (std::vector<Range>{{0, 100, kSegSize - 100}}));
  EXPECT_EQ(extents({{other(0)}}).per_step[0], (std::vector<Range>{{1, 0, kOtherSize}}));
}

// A slab of stream-ordered allocations: each hit carries the end of its block (the limit).
PointerHit block(uint64_t offset, uint64_t block_end) {
  PointerHit h = seg(offset);
  h.limit = kSeg + block_end;
  return h;
}

TEST(Extents, AnExtentNeverRunsPastItsBlockInASlab) {
  // Blocks [0, 1000), [4096, 6000) and [10000, 10512): the free space between them and after the
  // last one belongs to no extent.
  const Result r = extents({{block(0, 1000), block(4096, 6000)}, {block(10000, 10512)}});
  EXPECT_EQ(r.per_step[0], (std::vector<Range>{{0, 0, 1000}, {0, 4096, 1904}}));
  EXPECT_EQ(r.per_step[1], (std::vector<Range>{{0, 10000, 512}}));
}

TEST(Extents, ANextPointerInsideTheBlockStillEndsTheExtent) {
  // Two views of one block: the first ends where the second starts.
  const Result r = extents({{block(0, 8192), block(2048, 8192)}});
  EXPECT_EQ(r.per_step[0], (std::vector<Range>{{0, 0, 2048}, {0, 2048, 6144}}));
}

TEST(Extents, InASlabOnlyTheSameStepsPointersEndAnExtent) {
  // The slab holds a 8192-byte tensor at 0 in step 0, later a tensor at 2048 (after the first was
  // freed): the later pointer must not cut the first tensor's extent, though it would in a
  // caching allocator's segment (PointersPackedInOneSegment, NextPointerAcrossTheIteration).
  const Result r = extents({{block(0, 8192)}, {block(2048, 4096)}, {block(0, 8192)}});
  EXPECT_EQ(r.per_step[0], (std::vector<Range>{{0, 0, 8192}}));
  EXPECT_EQ(r.per_step[1], (std::vector<Range>{{0, 2048, 2048}}));
  EXPECT_EQ(r.per_step[2], (std::vector<Range>{{0, 0, 8192}}));
}

TEST(Extents, ALimitOutsideTheBufferIsIgnored) {
  PointerHit h = seg(100);
  h.limit = kSeg + kSegSize + 4096;  // past the buffer: the buffer's end counts
  EXPECT_EQ(extents({{h}}).per_step[0], (std::vector<Range>{{0, 100, kSegSize - 100}}));
}

TEST(Extents, BuffersAreIndependent) {
  // The other buffer's pointers lie above the segment's: they must not end its extents.
  const Result r = extents({{seg(0), other(0), other(1000)}, {seg(60000)}});
  EXPECT_EQ(r.per_step[0],
            (std::vector<Range>{{0, 0, 60000}, {1, 0, 1000}, {1, 1000, kOtherSize - 1000}}));
  EXPECT_EQ(r.per_step[1], (std::vector<Range>{{0, 60000, kSegSize - 60000}}));
}

TEST(Extents, NextPointerAcrossTheIteration) {
  const std::vector<std::vector<PointerHit>> steps = {
      {seg(0)}, {seg(4096)}, {}, {seg(0), seg(10000)}};
  const Result it = extents(steps);
  EXPECT_EQ(it.per_step[0], (std::vector<Range>{{0, 0, 4096}}));
  EXPECT_EQ(it.per_step[1], (std::vector<Range>{{0, 4096, 5904}}));
  EXPECT_TRUE(it.per_step[2].empty());
  EXPECT_EQ(it.per_step[3], (std::vector<Range>{{0, 0, 4096}, {0, 10000, kSegSize - 10000}}));
  // Within each step only: step 0 alone reaches the end, step 3's first pointer the second.
  const Result st = extents(steps, ExtentScope::step);
  EXPECT_EQ(st.per_step[0], (std::vector<Range>{{0, 0, kSegSize}}));
  EXPECT_EQ(st.per_step[1], (std::vector<Range>{{0, 4096, kSegSize - 4096}}));
  EXPECT_EQ(st.per_step[3], (std::vector<Range>{{0, 0, 10000}, {0, 10000, kSegSize - 10000}}));
}

TEST(Extents, ABufferWithPointersCloserThan512BytesIsScopedByStep) {
  // cuDNN's workspace: descriptors at 0, 8 and 32 passed by different steps; a step given only
  // the base reaches the whole buffer, one given two pointers is cut at its own second one.
  const Result r = extents({{seg(0)}, {seg(8)}, {seg(32), seg(4096)}});
  EXPECT_EQ(r.per_step[0], (std::vector<Range>{{0, 0, kSegSize}}));
  EXPECT_EQ(r.per_step[1], (std::vector<Range>{{0, 8, kSegSize - 8}}));
  EXPECT_EQ(r.per_step[2], (std::vector<Range>{{0, 32, 4064}, {0, 4096, kSegSize - 4096}}));
  // Another buffer in the same iteration keeps the iteration's scope (its pointers 512 apart).
  const Result both = extents({{seg(0), other(0)}, {seg(8), other(512)}});
  EXPECT_EQ(both.per_step[0], (std::vector<Range>{{0, 0, kSegSize}, {1, 0, 512}}));
  EXPECT_EQ(both.per_step[1],
            (std::vector<Range>{{0, 8, kSegSize - 8}, {1, 512, kOtherSize - 512}}));
}

TEST(Extents, PointersExactly512BytesApartKeepTheIterationScope) {
  const Result r = extents({{seg(0)}, {seg(512)}});
  EXPECT_EQ(r.per_step[0], (std::vector<Range>{{0, 0, 512}}));
  EXPECT_EQ(r.per_step[1], (std::vector<Range>{{0, 512, kSegSize - 512}}));
}

TEST(Extents, RepeatedPointersAndTheLastByte) {
  const Result r = extents({{seg(8)}, {seg(8)}, {seg(kSegSize - 1)}});
  EXPECT_EQ(r.per_step[0], (std::vector<Range>{{0, 8, kSegSize - 9}}));
  EXPECT_EQ(r.per_step[1], (std::vector<Range>{{0, 8, kSegSize - 9}}));
  EXPECT_EQ(r.per_step[2], (std::vector<Range>{{0, kSegSize - 1, 1}}));
}

TEST(Extents, ByChunkEachChunkIsItsOwnIteration) {
  // Steps 0-1 (warm-up: a pointer at 4096), 2-3 and 4 (iterations): the warm-up's pointer does
  // not end a later iteration's extent, nor a later one an earlier one's.
  const std::vector<std::vector<PointerHit>> steps = {
      {seg(0)}, {seg(4096)}, {seg(0)}, {seg(10000)}, {seg(0)}};
  std::vector<std::span<const PointerHit>> spans(steps.begin(), steps.end());
  std::vector<trace::Access> accesses;
  std::vector<uint64_t> first;
  const std::vector<uint64_t> boundaries = {2, 4};
  compute_extents_by_chunk(spans, boundaries, index_of, accesses, first);
  ASSERT_EQ(first, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  const auto length = [&](size_t a) { return accesses[a].length; };
  EXPECT_EQ(length(0), 4096u);  // warm-up: cut by its own 4096
  EXPECT_EQ(length(1), kSegSize - 4096);
  EXPECT_EQ(length(2), 10000u);  // iteration 1: cut by its own 10000
  EXPECT_EQ(length(3), kSegSize - 10000);
  EXPECT_EQ(length(4), kSegSize);  // iteration 2: nothing of its own cuts it
  // Without boundaries it is compute_extents() over all the steps.
  compute_extents_by_chunk(spans, {}, index_of, accesses, first);
  EXPECT_EQ(accesses[4].length, 4096u);
  // Boundaries out of order or past the end are skipped; every step is still covered once.
  const std::vector<uint64_t> odd = {3, 1, 9};
  compute_extents_by_chunk(spans, odd, index_of, accesses, first);
  ASSERT_EQ(first, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(accesses[0].length, 4096u);             // chunk [0, 3)
  EXPECT_EQ(accesses[3].length, kSegSize - 10000);  // chunk [3, 5): step 3's 10000 ends
  EXPECT_EQ(accesses[4].length, 10000u);            // step 4's extent
}

TEST(Extents, NoStepsAndOutputReplaced) {
  std::vector<trace::Access> accesses = {{.buffer = 9, .offset = 1, .length = 1}};
  std::vector<uint64_t> first = {5, 6};
  compute_extents({}, index_of, accesses, first);
  EXPECT_TRUE(accesses.empty());
  EXPECT_EQ(first, (std::vector<uint64_t>{0}));
}

}  // namespace
}  // namespace umswap::tracer
