// Kernels that must find their memory on the GPU: which names, and the ranges brought there.
#include "umswap/advisor/resident_launches.h"

#include <gtest/gtest.h>

#include <vector>

namespace umswap::advisor {
namespace {

constexpr uint64_t kP = 2 << 20;

std::vector<ResidentRange> resident_ranges(std::span<const LaunchReach> reaches,
                                           uint64_t page = kP) {
  std::vector<ResidentRange> out = {{1, 1}};  // replaced
  advisor::resident_ranges(reaches, out, page);
  return out;
}

TEST(ResidentLaunches, NamesCudnnFusedAttentionOnly) {
  EXPECT_TRUE(needs_resident_memory(
      "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_"
      "cga1x1x1_kernel0_0"));
  EXPECT_TRUE(needs_resident_memory(
      "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_"
      "cga1x1x1_kernel0_0"));
  // Kernels seen faulting without changing results (GEMMs, elementwise, cuDNN convolutions).
  EXPECT_FALSE(needs_resident_memory("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN"));
  EXPECT_FALSE(needs_resident_memory(
      "_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfffLb0ELb1EL21cudnnKernelDataType_t2EEEv"));
  EXPECT_FALSE(needs_resident_memory("sdpa"));
  EXPECT_FALSE(needs_resident_memory(""));
}

constexpr uint64_t kAll = 1ull << 40;  // one allocation holding everything

TEST(ResidentLaunches, RoundsOutMergesAndSorts) {
  const std::vector<LaunchReach> reaches = {
      {10 * kP + 5, 11 * kP + 1, 0, kAll},  // pages 10..11
      {kP, kP + 1, 0, kAll},                // page 1
      {12 * kP, 13 * kP, 0, kAll},          // page 12: adjacent to 10..11, merged
      {4 * kP, 4 * kP, 0, kAll},            // empty: dropped
      {2 * kP - 1, 2 * kP + 1, 0, kAll},    // pages 1..2: overlaps page 1
      {11 * kP, 11 * kP + 7, 0, kAll},      // inside 10..12
  };
  const std::vector<ResidentRange> want = {{kP, 2 * kP}, {10 * kP, 3 * kP}};
  EXPECT_EQ(resident_ranges(reaches), want);
}

TEST(ResidentLaunches, ClippedToTheAllocationAndNeverSpanningTwo) {
  // Two allocations side by side, neither a whole number of pages: [kP + 100, 2 kP + 300) and
  // [2 kP + 300, 4 kP).
  const uint64_t a = kP + 100, a_end = 2 * kP + 300, b_end = 4 * kP;
  const std::vector<LaunchReach> reaches = {
      {a + 10, a_end, a, a_end},
      {a_end, a_end + 5, a_end, b_end},
  };
  const std::vector<ResidentRange> want = {{a, a_end - a}, {a_end, 3 * kP - a_end}};
  EXPECT_EQ(resident_ranges(reaches), want);
}

TEST(ResidentLaunches, NothingForNoReaches) {
  EXPECT_TRUE(resident_ranges({}).empty());
  const std::vector<LaunchReach> backwards = {{5 * kP, kP, 0, kAll}};
  EXPECT_TRUE(resident_ranges(backwards).empty());
}

TEST(ResidentLaunches, OtherPageSizes) {
  const std::vector<LaunchReach> reaches = {{4097, 8193, 0, kAll}};
  const std::vector<ResidentRange> want = {{4096, 8192}};
  EXPECT_EQ(resident_ranges(reaches, 4096), want);
}

}  // namespace
}  // namespace umswap::advisor
