// EventRing (advisor/include/umswap/advisor/event_ring.h) with a fake driver: a wait places a
// cuStreamWaitEvent only for the launch its slot holds, and a launch kEventRing later cannot
// record the slot between the wait's check and its cuStreamWaitEvent.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include "umswap/advisor/event_ring.h"

namespace umswap::advisor {
namespace {

// What the fake driver saw: each call bumps `calls`; a wait notes how many records had been made
// when it began and when it ended, and runs `during_wait` in between.
std::atomic<int> g_records{0};
std::atomic<int> g_waits{0};
std::atomic<int> g_records_when_wait_began{-1};
std::atomic<int> g_records_when_wait_ended{-1};
std::function<void()> g_during_wait;

CUresult CUDAAPI fake_event_record(CUevent, CUstream) {
  g_records.fetch_add(1);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_wait_event(CUstream, CUevent, unsigned int) {
  g_waits.fetch_add(1);
  g_records_when_wait_began = g_records.load();
  if (g_during_wait) g_during_wait();
  g_records_when_wait_ended = g_records.load();
  return CUDA_SUCCESS;
}

class EventRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_records = 0;
    g_waits = 0;
    g_records_when_wait_began = g_records_when_wait_ended = -1;
    g_during_wait = nullptr;
    d.event_record = fake_event_record;
    d.stream_wait_event = fake_stream_wait_event;
  }
  void TearDown() override { g_during_wait = nullptr; }
  AdvisorDriver d;
  EventRing ring;
  CUstream program = reinterpret_cast<CUstream>(uintptr_t{0x10});
  CUstream advisor = reinterpret_cast<CUstream>(uintptr_t{0x20});
};

TEST_F(EventRingTest, WaitsOnlyForTheLaunchTheSlotHolds) {
  ring.record(d, 5, program);
  EXPECT_TRUE(ring.wait(d, 5, advisor, 100));
  EXPECT_EQ(g_waits.load(), 1);
  // Launch 5 + kEventRing took the slot: launch 5's event is gone, nothing is waited for.
  ring.record(d, 5 + kEventRing, program);
  EXPECT_FALSE(ring.wait(d, 5, advisor, 5 + kEventRing + 1));
  EXPECT_EQ(g_waits.load(), 1);
  // Never recorded, and the launches are far past it: no wait, no 20 ms spin.
  EXPECT_FALSE(ring.wait(d, 7, advisor, 1000));
  EXPECT_EQ(g_waits.load(), 1);
}

// The race: the advisor checks that slot j holds launch j, and while it places its wait, the
// program (kEventRing launches ahead) records the same slot for launch j + kEventRing. The wait
// must be for launch j's record: the later record waits until the wait is placed.
TEST_F(EventRingTest, ALaterLaunchCannotRecordTheSlotWhileAWaitIsPlaced) {
  constexpr uint64_t j = 42;
  ring.record(d, j, program);
  std::thread recorder;
  std::atomic<bool> recorded{false};
  g_during_wait = [&] {
    recorder = std::thread([&] {
      ring.record(d, j + kEventRing, program);
      recorded = true;
    });
    // Long enough for an unguarded record to land inside the wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  EXPECT_TRUE(ring.wait(d, j, advisor, j + 1));
  recorder.join();
  EXPECT_TRUE(recorded.load());
  EXPECT_EQ(g_records_when_wait_began.load(), 1);
  EXPECT_EQ(g_records_when_wait_ended.load(), 1) << "the slot was recorded again during the wait";
  EXPECT_EQ(g_records.load(), 2);
  EXPECT_EQ(ring.index[j % kEventRing].load(), j + kEventRing);
}

}  // namespace
}  // namespace umswap::advisor
