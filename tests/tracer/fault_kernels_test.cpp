// faults_by_kernel: GPU page faults counted for the steps running at their time.
#include "umswap/tracer/fault_kernels.h"

#include <gtest/gtest.h>

#include <vector>

namespace umswap::tracer {
namespace {

TEST(FaultKernels, EachFaultCountsForTheStepRunningThen) {
  // Kernel 7 runs twice, kernel 3 once; faults in any order, one between steps.
  const std::vector<StepSpan> steps = {{100, 200, 7}, {300, 400, 3}, {500, 600, 7}};
  const std::vector<uint64_t> faults = {550, 150, 350, 250, 160, 600};
  const FaultKernelReport r = faults_by_kernel(steps, faults);
  EXPECT_EQ(r.faults, 6u);
  EXPECT_EQ(r.outside, 1u);  // 250
  ASSERT_EQ(r.by_kernel.size(), 2u);
  EXPECT_EQ(r.by_kernel[0].name, 7u);
  EXPECT_EQ(r.by_kernel[0].faults, 4u);  // 150, 160, 550, 600 (its end counts)
  EXPECT_EQ(r.by_kernel[0].first_ns, 150u);
  EXPECT_EQ(r.by_kernel[1].name, 3u);
  EXPECT_EQ(r.by_kernel[1].faults, 1u);
  EXPECT_EQ(r.by_kernel[1].first_ns, 350u);
}

TEST(FaultKernels, OverlappingStepsBothCountAndUntimedStepsAreSkipped) {
  const std::vector<StepSpan> steps = {{100, 500, 1}, {200, 300, 2}, {0, 0, 9}, {250, 240, 8}};
  const std::vector<uint64_t> faults = {250, 400};
  const FaultKernelReport r = faults_by_kernel(steps, faults);
  EXPECT_EQ(r.outside, 0u);
  ASSERT_EQ(r.by_kernel.size(), 2u);
  EXPECT_EQ(r.by_kernel[0].name, 1u);
  EXPECT_EQ(r.by_kernel[0].faults, 2u);
  EXPECT_EQ(r.by_kernel[1].name, 2u);
  EXPECT_EQ(r.by_kernel[1].faults, 1u);
}

TEST(FaultKernels, KeepsTheKernelsWithTheMostFaults) {
  std::vector<StepSpan> steps;
  std::vector<uint64_t> faults;
  for (uint32_t k = 0; k < 20; ++k) {
    steps.push_back({1000 * (k + 1), 1000 * (k + 1) + 500, k});
    for (uint32_t i = 0; i <= k; ++i) faults.push_back(1000 * (k + 1) + i);  // k + 1 faults
  }
  const FaultKernelReport r = faults_by_kernel(steps, faults, 3);
  ASSERT_EQ(r.by_kernel.size(), 3u);
  EXPECT_EQ(r.by_kernel[0].name, 19u);
  EXPECT_EQ(r.by_kernel[0].faults, 20u);
  EXPECT_EQ(r.by_kernel[2].name, 17u);
  EXPECT_EQ(r.faults, 210u);
}

TEST(FaultKernels, NoStepsOrNoFaults) {
  const std::vector<uint64_t> faults = {1, 2};
  EXPECT_EQ(faults_by_kernel({}, faults).outside, 2u);
  const std::vector<StepSpan> steps = {{1, 2, 0}};
  const FaultKernelReport r = faults_by_kernel(steps, {});
  EXPECT_EQ(r.faults, 0u);
  EXPECT_TRUE(r.by_kernel.empty());
}

}  // namespace
}  // namespace umswap::tracer
