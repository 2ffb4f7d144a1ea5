// The flight recorder's ring: order, wrap-around, the launch clock, the stats file's shape, and
// writers on several threads at once (no torn or repeated event in a snapshot).
#include "umswap/core/flight_recorder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

namespace umswap::flight {
namespace {

uint64_t g_launches = 0;
uint64_t launches() {
  return g_launches;
}

// The events recorded after `seq` (the ring is one per process: tests share it).
std::vector<Event> since(uint64_t seq) {
  std::vector<Event> out;
  for (const Event& e : snapshot()) {
    if (e.seq > seq) out.push_back(e);
  }
  return out;
}
uint64_t last_seq() {
  const std::vector<Event> all = snapshot();
  return all.empty() ? 0 : all.back().seq;
}

TEST(FlightRecorderTest, KeepsEventsInOrderWithTheLaunchesSeen) {
  const uint64_t before = last_seq();
  set_launch_clock(&launches);
  g_launches = 7;
  int stream = 0;
  record(Kind::block_alloc, 0x1000, 512, &stream);
  g_launches = 9;
  record(Kind::evict, 0x2000, 4096);
  set_launch_clock(nullptr);
  const std::vector<Event> got = since(before);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].seq + 1, got[1].seq);
  EXPECT_EQ(got[0].kind, Kind::block_alloc);
  EXPECT_EQ(got[0].address, 0x1000u);
  EXPECT_EQ(got[0].bytes, 512u);
  EXPECT_EQ(got[0].launch, 7u);
  EXPECT_EQ(got[0].stream, reinterpret_cast<uintptr_t>(&stream));
  EXPECT_EQ(got[1].kind, Kind::evict);
  EXPECT_EQ(got[1].launch, 9u);
  EXPECT_EQ(got[1].stream, 0u);
  EXPECT_LE(got[0].time_ns, got[1].time_ns);
  const nlohmann::json j = to_json(got);
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0][3], "block alloc");
  EXPECT_EQ(j["events"][0][4], "0x1000");
  EXPECT_EQ(j["events"][1][3], "evict");
  EXPECT_EQ(j["columns"].size(), j["events"][0].size());
  EXPECT_TRUE(j["dropped"].is_number());
}

TEST(FlightRecorderTest, KeepsOnlyTheLastEventsOnceTheRingWraps) {
  for (uint64_t i = 0; i < kEvents + 100; ++i) record(Kind::discard, i, 1);
  const std::vector<Event> all = snapshot();
  ASSERT_EQ(all.size(), kEvents);
  EXPECT_EQ(all.back().address, kEvents + 99);
  EXPECT_EQ(all.front().address, 100u);
  for (size_t i = 1; i < all.size(); ++i) ASSERT_EQ(all[i].seq, all[i - 1].seq + 1);
}

TEST(FlightRecorderTest, WritersOnSeveralThreadsLoseNothingInTheLastRing) {
  // Each event's bytes are a function of its address: a torn slot would break it.
  constexpr int kThreads = 4;
  constexpr uint64_t kEach = kEvents;  // the ring wraps several times under the writers
  const uint64_t dropped_before = dropped();
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([t] {
      for (uint64_t i = 0; i < kEach; ++i) {
        const uint64_t address = (uint64_t(t) << 40) | i;
        record(Kind::prefetch, address, address * 3 + 1);
      }
    });
  }
  std::vector<Event> during;
  for (int k = 0; k < 20; ++k) {
    for (const Event& e : snapshot()) during.push_back(e);
  }
  for (std::thread& w : writers) w.join();
  const std::vector<Event> all = snapshot();
  // A slot a writer still held when the ring came round again lost the later event (counted).
  EXPECT_LE(all.size(), kEvents);
  EXPECT_GE(all.size() + (dropped() - dropped_before), kEvents);
  std::set<uint64_t> seqs;
  for (const Event& e : all) {
    EXPECT_EQ(e.bytes, e.address * 3 + 1);
    EXPECT_TRUE(seqs.insert(e.seq).second);
  }
  for (const Event& e : during) {
    if (e.kind == Kind::prefetch) {
      ASSERT_EQ(e.bytes, e.address * 3 + 1) << e.seq;
    }
  }
}

}  // namespace
}  // namespace umswap::flight
