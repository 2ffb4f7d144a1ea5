#include "umswap/advisor/pending_ops.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace umswap::advisor {
namespace {

// Streams and events as small integers; an event is "done" once the test says so.
struct FakeGpu {
  std::map<PendingOps::Event, PendingOps::Stream> recorded_on;
  std::set<PendingOps::Event> done, released;
  uintptr_t next = 1;
  bool can_record = true;
  PendingOps::Event record(PendingOps::Stream s) {
    if (!can_record) return nullptr;
    auto* e = reinterpret_cast<PendingOps::Event>(next++);
    recorded_on[e] = s;
    return e;
  }
  void run(PendingOps::Stream s) {  // the stream reaches every event recorded on it
    for (const auto& [e, on] : recorded_on) {
      if (on == s) done.insert(e);
    }
  }
  void retire(PendingOps& ops) {
    ops.retire([this](PendingOps::Event e) { return done.contains(e); },
               [this](PendingOps::Event e) { released.insert(e); });
  }
  void mark(PendingOps& ops) {
    ops.mark([this](PendingOps::Stream s) { return record(s); });
  }
};

const PendingOps::Stream kA = reinterpret_cast<PendingOps::Stream>(0xa);
const PendingOps::Stream kB = reinterpret_cast<PendingOps::Stream>(0xb);

TEST(PendingOps, NoCapIsNeverFull) {
  PendingOps ops(0);
  for (int i = 0; i < 100; ++i) ops.issued(kA);
  EXPECT_FALSE(ops.full());
  EXPECT_EQ(ops.waiting(), 100u);
}

TEST(PendingOps, FullAtTheCapUntilAStreamRunsItsCalls) {
  FakeGpu gpu;
  PendingOps ops(4);
  ops.issued(kA);
  ops.issued(kA);
  ops.issued(kB);
  EXPECT_FALSE(ops.full());
  ops.issued(kB);
  EXPECT_TRUE(ops.full());
  // Marked but not run: still waiting.
  gpu.mark(ops);
  gpu.retire(ops);
  EXPECT_TRUE(ops.full());
  EXPECT_EQ(gpu.recorded_on.size(), 2u);  // one event per stream with calls
  // Stream B's two calls run: room for two more; A's stay counted.
  gpu.run(kB);
  gpu.retire(ops);
  EXPECT_FALSE(ops.full());
  EXPECT_EQ(ops.waiting(), 2u);
  EXPECT_EQ(gpu.released.size(), 1u);
  gpu.run(kA);
  gpu.retire(ops);
  EXPECT_EQ(ops.waiting(), 0u);
  EXPECT_EQ(gpu.released.size(), 2u);
  EXPECT_EQ(ops.most_waiting(), 4u);
}

TEST(PendingOps, UnmarkedCallsAreNeverRetired) {
  FakeGpu gpu;
  PendingOps ops(2);
  ops.issued(kA);
  ops.issued(kA);
  gpu.run(kA);  // nothing recorded yet
  gpu.retire(ops);
  EXPECT_TRUE(ops.full());
  gpu.mark(ops);
  gpu.retire(ops);
  EXPECT_TRUE(ops.full());  // the mark came after the run
  gpu.run(kA);
  gpu.retire(ops);
  EXPECT_FALSE(ops.full());
}

TEST(PendingOps, ASecondMarkCoversOnlyLaterCalls) {
  FakeGpu gpu;
  PendingOps ops(8);
  ops.issued(kA);
  gpu.mark(ops);
  ops.issued(kA);
  ops.issued(kA);
  gpu.run(kA);  // the first mark's event is done
  gpu.retire(ops);
  EXPECT_EQ(ops.waiting(), 2u);
  gpu.mark(ops);
  gpu.run(kA);
  gpu.retire(ops);
  EXPECT_EQ(ops.waiting(), 0u);
}

TEST(PendingOps, CallsWhoseEventCouldNotBeRecordedCountAsRun) {
  FakeGpu gpu;
  gpu.can_record = false;
  PendingOps ops(2);
  ops.issued(kA);
  ops.issued(kB);
  EXPECT_TRUE(ops.full());
  gpu.mark(ops);
  EXPECT_FALSE(ops.full());
  EXPECT_EQ(ops.waiting(), 0u);
}

}  // namespace
}  // namespace umswap::advisor
