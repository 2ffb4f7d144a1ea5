// Engine vmm's window log: bounded, and its records summed per iteration by launch (records
// before, between or after the iterations left out).
#include "umswap/allocator/vmm_window_log.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace umswap {
namespace {

TEST(WindowLog, RecordsUpToItsBoundThenCountsOnly) {
  WindowLog log;
  for (size_t i = 0; i < WindowLog::kMaxRecords + 3; ++i) log.add({i, 1, 0, 0});
  EXPECT_EQ(log.records().size(), WindowLog::kMaxRecords);
  EXPECT_EQ(log.records().back().launch, WindowLog::kMaxRecords - 1);
  EXPECT_EQ(log.dropped(), 3u);
}

TEST(WindowsByIteration, EachRecordGoesToTheIterationHoldingItsLaunch) {
  // Iterations [10, 20), [20, 30), and [40, 45) after a gap.
  const std::vector<uint64_t> first = {10, 20, 40}, count = {10, 10, 5};
  const std::vector<WindowRecord> records = {
      {5, 1'000'000, 1, 1},     // before the first: left out
      {10, 2'000'000, 100, 0},  // first launch of iteration 0
      {19, 1'000'000, 50, 7},   // last of iteration 0
      {20, 500'000, 0, 3},      // iteration 1
      {35, 1'000'000, 9, 9},    // between 1 and 2: left out
      {44, 3'000'000, 4, 0},    // last of iteration 2
      {45, 1'000'000, 1, 1},    // after: left out
  };
  const std::vector<IterationWindows> by = windows_by_iteration(first, count, records);
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[0].windows, 2u);
  EXPECT_DOUBLE_EQ(by[0].ms, 3.0);
  EXPECT_EQ(by[0].bytes_to_gpu, 150u);
  EXPECT_EQ(by[0].bytes_to_host, 7u);
  EXPECT_EQ(by[1].windows, 1u);
  EXPECT_DOUBLE_EQ(by[1].ms, 0.5);
  EXPECT_EQ(by[1].bytes_to_host, 3u);
  EXPECT_EQ(by[2].windows, 1u);
  EXPECT_EQ(by[2].bytes_to_gpu, 4u);
  EXPECT_TRUE(windows_by_iteration({}, {}, records).empty());
}

}  // namespace
}  // namespace umswap
