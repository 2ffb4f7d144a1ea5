// ProgramMappings: the GPU memory a program maps itself, counted from cuMemCreate to cuMemRelease.
#include "umswap/allocator/program_mappings.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace umswap {
namespace {

TEST(ProgramMappings, CountsTheGpuHandlesUntilTheirRelease) {
  ProgramMappings m;
  EXPECT_EQ(m.created(1, 100, true), 100u);
  EXPECT_EQ(m.created(2, 50, false), 100u);  // host memory is not the budget's
  EXPECT_EQ(m.created(3, 30, true), 130u);
  EXPECT_EQ(m.released(1), 30u);
  EXPECT_EQ(m.released(1), 30u);   // twice: nothing
  EXPECT_EQ(m.released(2), 30u);   // never counted
  EXPECT_EQ(m.released(99), 30u);  // unknown
  EXPECT_EQ(m.gpu_bytes(), 30u);
  EXPECT_EQ(m.gpu_bytes_peak(), 130u);
  EXPECT_EQ(m.handles(), 3u);
  // A handle value given out again after its release is counted afresh.
  EXPECT_EQ(m.created(1, 10, true), 40u);
  // And one given out again without a release seen: counted once, at its new size.
  EXPECT_EQ(m.created(1, 20, true), 50u);
  EXPECT_EQ(m.released(1), 30u);
  EXPECT_EQ(m.created(4, 0, true), 30u);  // nothing to count
}

TEST(ProgramMappings, ManyThreadsAtOnce) {
  ProgramMappings m;
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (uint64_t i = 0; i < 1000; ++i) {
        const uint64_t h = t * 1000000 + i;
        m.created(h, 2, true);
        if (i % 2) m.released(h);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(m.gpu_bytes(), 4u * 500 * 2);
  EXPECT_EQ(m.handles(), 4000u);
}

}  // namespace
}  // namespace umswap
