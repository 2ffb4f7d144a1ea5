// streams_before (advisor/include/umswap/advisor/plan_streams.h): the streams a replay plan's
// barrier covers, from a fake step log.
#include "umswap/advisor/plan_streams.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace umswap::advisor {
namespace {

class FakeLog final : public tracer::StepLogReader {
 public:
  std::vector<uint64_t> streams;  // step i's stream
  bool fail = false;
  mutable uint64_t asked_first = 0, asked_count = 0;
  uint64_t logged_steps() const override { return streams.size(); }
  std::vector<uint32_t> copy_keys(uint64_t, uint64_t) const override { return {}; }
  bool copy_steps(uint64_t first, uint64_t count, tracer::StepLog* out) const override {
    asked_first = first;
    asked_count = count;
    if (fail || first + count > streams.size()) return false;
    out->streams.assign(streams.begin() + static_cast<ptrdiff_t>(first),
                        streams.begin() + static_cast<ptrdiff_t>(first + count));
    return true;
  }
  std::string_view key_view(uint32_t) const override { return {}; }
  std::vector<tracer::LifetimeEvent> copy_lifetimes(uint64_t, uint64_t) const override {
    return {};
  }
};

TEST(PlanStreams, TheDistinctStreamsOfTheStepsBefore) {
  FakeLog log;
  log.streams = {9, 0, 7, 0, 7, 3, 0};
  // The last 4 steps before step 6: steps 2-5.
  EXPECT_EQ(streams_before(log, 6, 4), (std::vector<uint64_t>{0, 3, 7}));
  EXPECT_EQ(log.asked_first, 2u);
  EXPECT_EQ(log.asked_count, 4u);
  // The launch count may run past what is logged: only what is there.
  EXPECT_EQ(streams_before(log, 100, 2), (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(log.asked_first, 5u);
  // More asked than logged: all of it.
  EXPECT_EQ(streams_before(log, 7, 1000), (std::vector<uint64_t>{0, 3, 7, 9}));
}

TEST(PlanStreams, NothingLoggedOrNotGivenMeansNone) {
  FakeLog log;
  EXPECT_TRUE(streams_before(log, 10, 5).empty());  // nothing logged
  log.streams = {1, 2};
  EXPECT_TRUE(streams_before(log, 0, 5).empty());  // no step before the first
  log.fail = true;
  EXPECT_TRUE(streams_before(log, 2, 2).empty());
}

TEST(PlanStreams, AtMostTheCapIsCopied) {
  FakeLog log;
  log.streams.assign(kMostStepsForStreams + 10, 5);
  log.streams[0] = 1;  // beyond the cap from the end: not seen
  EXPECT_EQ(streams_before(log, log.streams.size(), UINT64_MAX), (std::vector<uint64_t>{5}));
  EXPECT_EQ(log.asked_count, kMostStepsForStreams);
}

}  // namespace
}  // namespace umswap::advisor
