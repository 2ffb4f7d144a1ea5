// Checks the trace `umswap record` wrote for thread_streams (path in UMSWAP_TEST_TRACE; launches
// per thread in UMSWAP_TEST_LAUNCHES): all four threads' launches are there, none dropped, each
// thread's on one stream of its own and touching exactly its own buffer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "umswap/core/trace_file.h"

namespace {

constexpr uint64_t kMiB = 1 << 20;

class ThreadStreamsCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("UMSWAP_TEST_TRACE");
    const char* launches = std::getenv("UMSWAP_TEST_LAUNCHES");
    ASSERT_NE(path, nullptr) << "UMSWAP_TEST_TRACE not set";
    ASSERT_NE(launches, nullptr) << "UMSWAP_TEST_LAUNCHES not set";
    launches_ = std::strtoull(launches, nullptr, 10);
    std::string error;
    auto t = umswap::read_trace_file(path, &error);
    ASSERT_TRUE(t.has_value()) << error;
    trace_ = std::move(*t);
  }
  // Kernel steps of thread `t`, found by their kernel's name.
  std::vector<const umswap::trace::Step*> steps_of(int t) const {
    const std::string name = "umswap_thread" + std::to_string(t) + "_kernel";
    std::vector<const umswap::trace::Step*> steps;
    for (const auto& s : trace_.steps) {
      if (s.kind == umswap::trace::StepKind::kernel &&
          trace_.names[s.name].find(name) != std::string::npos) {
        steps.push_back(&s);
      }
    }
    return steps;
  }
  uint64_t launches_ = 0;
  umswap::trace::Trace trace_;
};

TEST_F(ThreadStreamsCheck, NothingDropped) {
  EXPECT_EQ(trace_.dropped_records, 0u);
}

TEST_F(ThreadStreamsCheck, EveryLaunchOfEveryThreadIsInTheTrace) {
  for (int t = 0; t < 4; ++t) EXPECT_EQ(steps_of(t).size(), launches_) << "thread " << t;
}

TEST_F(ThreadStreamsCheck, EachThreadOnItsOwnStream) {
  std::set<uint64_t> streams;
  for (int t = 0; t < 4; ++t) {
    std::set<uint64_t> mine;
    for (const auto* s : steps_of(t)) mine.insert(s->stream);
    ASSERT_EQ(mine.size(), 1u) << "thread " << t << " launched on " << mine.size() << " streams";
    streams.insert(*mine.begin());
  }
  EXPECT_EQ(streams.size(), 4u);
}

TEST_F(ThreadStreamsCheck, EachKernelTouchesItsThreadsBuffer) {
  for (int t = 0; t < 4; ++t) {
    for (const auto* s : steps_of(t)) {
      ASSERT_EQ(s->access_count, 1u) << "thread " << t;
      const auto& buffer = trace_.buffers[trace_.accesses[s->first_access].buffer];
      EXPECT_EQ(buffer.size, (t + 1) * kMiB) << "thread " << t;
    }
  }
}

TEST_F(ThreadStreamsCheck, GpuTimesRecorded) {
  for (int t = 0; t < 4; ++t) {
    for (const auto* s : steps_of(t)) {
      EXPECT_GT(s->start_ns, 0u);
      EXPECT_GE(s->end_ns, s->start_ns);
    }
  }
}

}  // namespace
