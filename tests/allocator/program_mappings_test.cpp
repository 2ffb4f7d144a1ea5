// ProgramMappings: the GPU memory a program maps itself, counted from cuMemCreate until its last
// reference is released and its last mapping unmapped, as the driver frees it.
#include "umswap/allocator/program_mappings.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace umswap {
namespace {

TEST(ProgramMappings, CountsTheGpuHandlesUntilTheirRelease) {
  ProgramMappings m;
  m.created(1, 100, true);
  m.created(2, 50, false);  // host memory is not the budget's
  m.created(3, 30, true);
  EXPECT_EQ(m.gpu_bytes(), 130u);
  m.released(1);
  EXPECT_EQ(m.gpu_bytes(), 30u);
  m.released(1);   // twice: nothing
  m.released(2);   // never counted
  m.released(99);  // unknown
  EXPECT_EQ(m.gpu_bytes(), 30u);
  EXPECT_EQ(m.gpu_bytes_peak(), 130u);
  EXPECT_EQ(m.handles(), 3u);
  // A handle value given out again after its end is counted afresh.
  m.created(1, 10, true);
  EXPECT_EQ(m.gpu_bytes(), 40u);
  // And one given out again without its end seen: counted once, at its new size.
  m.created(1, 20, true);
  EXPECT_EQ(m.gpu_bytes(), 50u);
  m.released(1);
  EXPECT_EQ(m.gpu_bytes(), 30u);
  m.created(4, 0, true);  // nothing to count
  EXPECT_EQ(m.gpu_bytes(), 30u);
}

// NCCL's way: create, map, release at once; the memory lives while it is mapped.
TEST(ProgramMappings, AMappedHandleCountsUntilItsLastUnmap) {
  ProgramMappings m;
  m.created(7, 4096, true);
  m.mapped(0x10000, 2048, 7);
  m.mapped(0x20000, 2048, 7);  // the other half, elsewhere
  m.released(7);
  EXPECT_EQ(m.gpu_bytes(), 4096u);  // still mapped
  m.unmapped(0x10000, 2048);
  EXPECT_EQ(m.gpu_bytes(), 4096u);   // one mapping left
  m.unmapped(0x20000 + 4096, 2048);  // past it: nothing
  EXPECT_EQ(m.gpu_bytes(), 4096u);
  m.unmapped(0x1f000, 0x2000);  // a range holding its start
  EXPECT_EQ(m.gpu_bytes(), 0u);
  m.unmapped(0x20000, 2048);    // twice: nothing
  m.mapped(0x30000, 2048, 99);  // an unknown handle: nothing
  m.unmapped(0x30000, 2048);
  EXPECT_EQ(m.gpu_bytes(), 0u);
}

// NCCL's shareable buffers: the handle retained again from an address, released per reference.
TEST(ProgramMappings, ARetainedHandleCountsUntilItsLastRelease) {
  ProgramMappings m;
  m.created(9, 100, true);
  m.retained(9);
  m.retained(9);
  m.released(9);
  m.released(9);
  EXPECT_EQ(m.gpu_bytes(), 100u);  // one reference left
  m.released(9);
  EXPECT_EQ(m.gpu_bytes(), 0u);
  m.retained(9);  // unknown now: nothing
  m.released(9);
  EXPECT_EQ(m.gpu_bytes(), 0u);
}

TEST(ProgramMappings, ManyThreadsAtOnce) {
  ProgramMappings m;
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (uint64_t i = 0; i < 1000; ++i) {
        const uint64_t h = t * 1000000 + i;
        m.created(h, 2, true);
        m.mapped(h * 16, 2, h);
        m.released(h);
        if (i % 2) m.unmapped(h * 16, 2);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(m.gpu_bytes(), 4u * 500 * 2);
  EXPECT_EQ(m.handles(), 4000u);
}

}  // namespace
}  // namespace umswap
