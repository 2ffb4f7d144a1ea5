// Checks the trace `umswap record` wrote for trace_probe (path in UMSWAP_TEST_TRACE): the period,
// exactly the buffers each kernel touches (identified by size), GPU times, and fault counters
// non-zero on the cold first iteration and zero once the buffers are resident.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "umswap/core/trace_file.h"

namespace {

constexpr uint64_t kMiB = 1 << 20;

class TraceCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("UMSWAP_TEST_TRACE");
    ASSERT_NE(path, nullptr) << "UMSWAP_TEST_TRACE not set";
    std::string error;
    auto t = umswap::read_trace_file(path, &error);
    ASSERT_TRUE(t.has_value()) << error;
    trace_ = std::move(*t);
  }
  // Sizes of the buffers a step touches.
  std::multiset<uint64_t> sizes_of(const umswap::trace::Step& s) const {
    std::multiset<uint64_t> sizes;
    for (uint64_t i = s.first_access; i < s.first_access + s.access_count; ++i) {
      sizes.insert(trace_.buffers[trace_.accesses[i].buffer].size);
    }
    return sizes;
  }
  const std::string& name_of(const umswap::trace::Step& s) const { return trace_.names[s.name]; }
  umswap::trace::Trace trace_;
};

TEST_F(TraceCheck, PeriodIsThreeLaunches) {
  EXPECT_EQ(trace_.detection.period, 3u);
  EXPECT_GE(trace_.iterations.size(), 8u);
}

TEST_F(TraceCheck, EachKernelTouchesExactlyItsBuffers) {
  int checked = 0;
  for (const auto& s : trace_.steps) {
    if (s.kind != umswap::trace::StepKind::kernel) continue;
    const std::string& name = name_of(s);
    if (name.find("direct") != std::string::npos) {
      EXPECT_EQ(sizes_of(s), (std::multiset<uint64_t>{1 * kMiB})) << name;
      ++checked;
    } else if (name.find("in_struct") != std::string::npos) {
      EXPECT_EQ(sizes_of(s), (std::multiset<uint64_t>{2 * kMiB})) << name;
      ++checked;
    } else if (name.find("two") != std::string::npos) {
      EXPECT_EQ(sizes_of(s), (std::multiset<uint64_t>{1 * kMiB, 3 * kMiB})) << name;
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
}

TEST_F(TraceCheck, KernelsHaveGpuTimes) {
  int timed = 0;
  for (const auto& s : trace_.steps) timed += s.end_ns > s.start_ns ? 1 : 0;
  EXPECT_GE(timed, 30);
}

TEST_F(TraceCheck, FaultsOnTheColdIterationNoneWhenResident) {
  ASSERT_GE(trace_.iterations.size(), 3u);
  EXPECT_GT(trace_.totals.gpu_page_faults, 0u) << "first touches of managed memory fault";
  const auto& last = trace_.iterations.back();
  EXPECT_EQ(last.counters.gpu_page_faults, 0u);
  EXPECT_EQ(last.counters.bytes_htod, 0u);
}

}  // namespace
