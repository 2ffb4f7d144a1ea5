// Sweeps (advisor/include/umswap/advisor/sweeps.h) with a fake driver: a sweep runs only once a
// fence recorded on the advisor's stream after its due launch has completed, never while the
// advisor's migrations before it may still run; three sweeps a plan, one period apart.
#include "umswap/advisor/sweeps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace umswap::advisor {
namespace {

std::vector<std::string> g_log;    // the fake driver's calls and the sweeps, in order
CUresult g_query = CUDA_SUCCESS;   // what event_query answers
CUresult g_record = CUDA_SUCCESS;  // what event_record answers

CUresult CUDAAPI fake_event_create(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(uintptr_t{0xe0});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_record(CUevent, CUstream s) {
  g_log.push_back("record on " + std::to_string(reinterpret_cast<uintptr_t>(s)));
  return g_record;
}
CUresult CUDAAPI fake_event_query(CUevent) {
  g_log.push_back("query");
  return g_query;
}

class SweepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_log.clear();
    g_query = g_record = CUDA_SUCCESS;
    d.event_create = fake_event_create;
    d.event_record = fake_event_record;
    d.event_query = fake_event_query;
    ASSERT_TRUE(sweeps.set_up(d));
  }
  void tend(uint64_t n) {
    sweeps.tend(d, advisor, n, kPeriod, [] {
      g_log.push_back("sweep");
      return uint64_t{1} << 21;
    });
  }
  static constexpr uint64_t kPeriod = 100;
  AdvisorDriver d;
  Sweeps sweeps;
  CUstream advisor = reinterpret_cast<CUstream>(uintptr_t{7});
};

TEST_F(SweepsTest, ASweepWaitsForTheFenceOnTheAdvisorsStream) {
  sweeps.start(50);
  tend(50);  // not past the plan's first launch yet
  EXPECT_TRUE(g_log.empty());
  tend(51);  // due: the fence goes on the advisor's stream, nothing is swept yet
  EXPECT_EQ(g_log, std::vector<std::string>({"record on 7"}));
  g_query = CUDA_ERROR_NOT_READY;  // the advisor's migrations still run
  tend(52);
  tend(53);
  EXPECT_EQ(g_log, std::vector<std::string>({"record on 7", "query", "query"}));
  g_query = CUDA_SUCCESS;
  tend(54);
  EXPECT_EQ(g_log, std::vector<std::string>({"record on 7", "query", "query", "query", "sweep"}));
  EXPECT_EQ(sweeps.done(), (std::vector<std::pair<uint64_t, uint64_t>>{{54, 2u << 20}}));
  EXPECT_EQ(sweeps.swept_bytes(), 2u << 20);
}

TEST_F(SweepsTest, ThreeSweepsOnePeriodApart) {
  sweeps.start(0);
  for (uint64_t n = 1; n <= 400; ++n) tend(n);
  ASSERT_EQ(sweeps.done().size(), 3u);
  EXPECT_EQ(sweeps.done()[0].first, 2u);    // fenced at 1, swept at the next pass
  EXPECT_EQ(sweeps.done()[1].first, 102u);  // due after 100
  EXPECT_EQ(sweeps.done()[2].first, 202u);
  EXPECT_EQ(sweeps.swept_bytes(), 6u << 20);
  sweeps.start(1000);  // a new plan: three more
  for (uint64_t n = 1001; n <= 1400; ++n) tend(n);
  EXPECT_EQ(sweeps.done().size(), 6u);
}

// A fence that cannot be recorded, or that fails, skips its sweep: nothing unordered is swept.
TEST_F(SweepsTest, NoFenceNoSweep) {
  sweeps.start(0);
  g_record = CUDA_ERROR_INVALID_VALUE;
  tend(1);
  g_record = CUDA_SUCCESS;
  tend(101);
  g_query = CUDA_ERROR_LAUNCH_FAILED;
  tend(102);
  EXPECT_EQ(std::count(g_log.begin(), g_log.end(), "sweep"), 0);
  EXPECT_EQ(sweeps.done(), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 0}, {102, 0}}));
  EXPECT_EQ(sweeps.swept_bytes(), 0u);
}

}  // namespace
}  // namespace umswap::advisor
