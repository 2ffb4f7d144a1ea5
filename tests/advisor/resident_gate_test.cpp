// The launch path's gate for kernels that must find their memory on the GPU (resident_gate.h),
// with the driver and the tracer's ports (tracer_ports.h) replaced by fakes: which launches it
// asks about, what it prefetches and tells the residency sink, and how it orders a launch
// against the advisor's migrations.
#include "umswap/advisor/resident_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "umswap/advisor/progress.h"
#include "umswap/advisor/resident_launches.h"

namespace umswap::advisor {
namespace {

constexpr uint64_t kP = 2 << 20;
constexpr const char* kAttention =
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_"
    "cga1x1x1_kernel0_0";

class FakeLog final : public tracer::StepLogReader {
 public:
  std::map<uint32_t, std::string> names;
  mutable std::atomic<int> asked{0};
  uint64_t logged_steps() const override { return 0; }
  std::vector<uint32_t> copy_keys(uint64_t, uint64_t) const override { return {}; }
  bool copy_steps(uint64_t, uint64_t, tracer::StepLog*) const override { return false; }
  std::string_view key_view(uint32_t key) const override {
    asked.fetch_add(1);
    const auto it = names.find(key);
    return it == names.end() ? std::string_view() : std::string_view(it->second);
  }
  std::vector<tracer::LifetimeEvent> copy_lifetimes(uint64_t, uint64_t) const override {
    return {};
  }
};

struct Populate {
  uint64_t address, length;
  bool operator==(const Populate&) const = default;
};

class FakeSink final : public tracer::ResidencySink {
 public:
  std::vector<Populate> populates;
  void note_launch_populate(uint64_t address, uint64_t bytes) override {
    populates.push_back({address, bytes});
  }
  void note_residency_by_copy(uint64_t, uint64_t, bool, uint32_t, uint64_t) override {
    ADD_FAILURE() << "the gate moves nothing by copy";
  }
  uint32_t last_own_copy() const override { return 0; }
  void note_own_copy(uint32_t, uint64_t, uint64_t, bool) override {
    ADD_FAILURE() << "the gate copies nothing";
  }
  void untrace_this_thread() override {}
};

// The fake driver's record of what it was asked, in order.
struct Call {
  std::string what;  // "record", "wait", "prefetch"
  uintptr_t a = 0, b = 0;
  uint64_t length = 0;
};
std::mutex g_mutex;
std::vector<Call> g_calls;
std::atomic<bool> g_fail_prefetch{false};
std::atomic<uintptr_t> g_next_event{0x100};

CUstream stream(uintptr_t n) {
  return reinterpret_cast<CUstream>(n);
}
uintptr_t id(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

CUresult CUDAAPI fake_event_create(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(g_next_event.fetch_add(1));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_record(CUevent e, CUstream s) {
  std::lock_guard lock(g_mutex);
  g_calls.push_back({"record", id(e), id(s)});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_wait_event(CUstream s, CUevent e, unsigned int) {
  std::lock_guard lock(g_mutex);
  g_calls.push_back({"wait", id(s), id(e)});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_prefetch(CUdeviceptr address, size_t length, CUmemLocation, unsigned int,
                               CUstream s) {
  if (g_fail_prefetch.load()) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  g_calls.push_back({"prefetch", static_cast<uintptr_t>(address), id(s), length});
  return CUDA_SUCCESS;
}

class ResidentGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::lock_guard lock(g_mutex);
    g_calls.clear();
    g_fail_prefetch = false;
    d.event_create = fake_event_create;
    d.event_record = fake_event_record;
    d.stream_wait_event = fake_stream_wait_event;
    d.mem_prefetch_async = fake_prefetch;
  }
  std::vector<Call> calls() {
    std::lock_guard lock(g_mutex);
    return g_calls;
  }

  AdvisorDriver d;
  FakeLog log;
  FakeSink sink;
};

TEST_F(ResidentGateTest, AsksTheStepLogOncePerKeyForTheKernelName) {
  log.names = {{1, kAttention}, {2, "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN"}};
  ResidentGate gate(d, log, sink);
  EXPECT_TRUE(gate.needs(1));
  EXPECT_FALSE(gate.needs(2));
  EXPECT_FALSE(gate.needs(3));  // unknown to the log: not a kernel that needs residency
  EXPECT_EQ(log.asked.load(), 3);
  EXPECT_TRUE(gate.needs(1));
  EXPECT_FALSE(gate.needs(2));
  EXPECT_FALSE(gate.needs(3));
  EXPECT_EQ(log.asked.load(), 3) << "a key's answer is kept";
  // Keys past the cache are asked each time, and still answered.
  log.names[1u << 20] = kAttention;
  EXPECT_TRUE(gate.needs(1u << 20));
  EXPECT_TRUE(gate.needs(1u << 20));
  EXPECT_EQ(log.asked.load(), 5);
}

TEST_F(ResidentGateTest, PrefetchesWhatTheParametersReachAndTellsTheSink) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  // Two buffers: a pointer into the middle of the first, the whole second one (a slab block
  // ending before its allocation does).
  std::vector<tracer::PointerHit> hits(2);
  hits[0].base = 16 * kP;
  hits[0].size = 5 * kP;
  hits[0].pointer = 16 * kP + kP + 4096;
  hits[1].base = 64 * kP;
  hits[1].size = 8 * kP;
  hits[1].pointer = 64 * kP;
  hits[1].limit = 64 * kP + 3 * kP + 1;
  gate.make_resident(&hits, stream(9), 0);
  gate.close(stream(9));

  std::vector<LaunchReach> reaches;
  for (const tracer::PointerHit& h : hits) {
    reaches.push_back({h.pointer, h.reach_end(), h.base, h.base + h.size});
  }
  std::vector<ResidentRange> expected;
  resident_ranges(reaches, expected, kP);
  ASSERT_EQ(expected.size(), 2u);

  std::vector<Populate> prefetched;
  for (const Call& c : calls()) {
    if (c.what != "prefetch") continue;
    EXPECT_EQ(c.b, id(stream(9))) << "on the launch's own stream";
    prefetched.push_back({c.a, c.length});
  }
  std::vector<Populate> want;
  for (const ResidentRange& r : expected) want.push_back({r.address, r.length});
  EXPECT_EQ(prefetched, want);
  EXPECT_EQ(sink.populates, want) << "every populate the gate issued is counted, no other";

  const nlohmann::json stats = gate.stats_json();
  EXPECT_EQ(stats["launches"], 1);
  EXPECT_EQ(stats["prefetch_calls"], 2);
  EXPECT_EQ(stats["prefetched_bytes"], want[0].length + want[1].length);
  EXPECT_EQ(stats["failed_calls"], 0);
}

TEST_F(ResidentGateTest, AFailedPrefetchIsCountedAndNotToldAsResident) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  std::vector<tracer::PointerHit> hits(1);
  hits[0].base = 4 * kP;
  hits[0].size = kP;
  hits[0].pointer = 4 * kP;
  g_fail_prefetch = true;
  gate.make_resident(&hits, stream(9), 0);
  gate.close(stream(9));
  EXPECT_TRUE(sink.populates.empty());
  EXPECT_EQ(gate.stats_json()["failed_calls"], 1);
  EXPECT_EQ(gate.stats_json()["prefetch_calls"], 0);
}

TEST_F(ResidentGateTest, AnUnscannedLaunchIsCountedAndPrefetchesNothing) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  EXPECT_TRUE(sink.populates.empty());
  EXPECT_EQ(gate.stats_json()["unscanned_launches"], 1);
}

// The launch waits for the advisor's migrations issued before it (an event recorded on the
// advisor's stream, waited for on the launch's), and those after it wait for the launch.
TEST_F(ResidentGateTest, OrdersTheLaunchBetweenTheAdvisorsMigrations) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  const std::vector<Call> c = calls();
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].what, "record");
  EXPECT_EQ(c[0].b, id(stream(7)));
  EXPECT_EQ(c[1].what, "wait");
  EXPECT_EQ(c[1].a, id(stream(9)));
  EXPECT_EQ(c[1].b, c[0].a);
  EXPECT_EQ(c[2].what, "record");
  EXPECT_EQ(c[2].b, id(stream(9)));
  EXPECT_EQ(c[3].what, "wait");
  EXPECT_EQ(c[3].a, id(stream(7)));
  EXPECT_EQ(c[3].b, c[2].a);
  EXPECT_NE(c[0].a, c[2].a);
}

// The events of the fake driver's calls named `what` on stream `on` ("wait": the events the
// stream waited for; "record": the events recorded on it).
std::vector<uintptr_t> events_of(const std::string& what, CUstream on) {
  std::lock_guard lock(g_mutex);
  std::vector<uintptr_t> events;
  const bool wait = what == "wait";  // a wait names (stream, event), a record (event, stream)
  for (const Call& c : g_calls) {
    if (c.what == what && (wait ? c.a : c.b) == id(on)) events.push_back(wait ? c.b : c.a);
  }
  return events;
}
// The advisor's stream (7) waiting for a resident launch; events recorded on the launch's (9).
std::vector<uintptr_t> waits_on_advisor() {
  return events_of("wait", stream(7));
}
std::vector<uintptr_t> recorded_on_launch_stream() {
  return events_of("record", stream(9));
}

// While launches wait on the counter, a close waits in a list under B, the highest launch whose
// actions its stream waited for: the advisor's stream waits for it only before a migration for a
// launch past B. Migrations up to B, which the launch's stream waits for, are not held behind it.
// A stream that waited for nothing closes at once; once the waits are off every pending close
// orders the stream at the next migration, and later ones at once.
TEST_F(ResidentGateTest, ClosesWaitForMigrationsPastWhatTheirStreamWaitedFor) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  Progress words;
  words.waits_from = 0;
  gate.defer(&words);
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));  // its stream waited for nothing: at once
  ASSERT_EQ(waits_on_advisor().size(), 1u);
  gate.note_counter_wait(stream(9), 30);
  gate.note_counter_wait(stream(8), 70);  // another stream's wait changes nothing here
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  gate.note_counter_wait(stream(9), 50);
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  const std::vector<uintptr_t> after = recorded_on_launch_stream();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_NE(after[1], after[2]) << "two pending closes need two events";
  EXPECT_EQ(waits_on_advisor().size(), 1u);
  gate.hold(30);
  EXPECT_EQ(waits_on_advisor().size(), 1u) << "a migration its stream waited for does not wait";
  gate.hold(31);
  EXPECT_EQ(waits_on_advisor().size(), 2u);
  EXPECT_EQ(waits_on_advisor().back(), after[1]);
  gate.hold(45);
  EXPECT_EQ(waits_on_advisor().size(), 2u);
  words.waits_off = true;  // the watchdog
  gate.hold(45);
  EXPECT_EQ(waits_on_advisor().size(), 3u);
  EXPECT_EQ(waits_on_advisor().back(), after[2]);
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  EXPECT_EQ(waits_on_advisor().size(), 4u) << "with the waits off, at once";
  EXPECT_EQ(gate.stats_json()["closes_deferred"], 2);
  EXPECT_EQ(gate.stats_json()["most_closes_pending"], 2);
}

// A plan dropped (its waits gone: waits_from back to UINT64_MAX): the pending closes order the
// advisor's stream at its next migration, whatever launch that is for.
TEST_F(ResidentGateTest, PendingClosesOrderTheStreamOnceNoLaunchWaits) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  Progress words;
  words.waits_from = 0;
  gate.defer(&words);
  gate.note_counter_wait(stream(9), 50);
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  gate.hold(10);
  EXPECT_TRUE(waits_on_advisor().empty());
  words.waits_from = UINT64_MAX;
  gate.hold(10);
  EXPECT_EQ(waits_on_advisor(), recorded_on_launch_stream());
}

// A launch open when the advisor thread asks for a migration for a later launch: hold() waits for
// its close, which goes to the list, and then orders the advisor's stream after it before the
// migration (not after it, as a check before the wait would).
TEST_F(ResidentGateTest, AHoldOrdersAfterALaunchThatClosesWhileItWaits) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  Progress words;
  words.waits_from = 0;
  gate.defer(&words);
  gate.note_counter_wait(stream(9), 20);
  std::atomic<bool> opened{false}, go_close{false};
  std::thread launcher([&] {
    gate.make_resident(nullptr, stream(9), 0);
    opened = true;
    while (!go_close.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    gate.close(stream(9));
  });
  while (!opened.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  std::thread advisor([&] {
    auto lock = gate.hold(30);
    EXPECT_EQ(waits_on_advisor().size(), 1u) << "the migration comes after the launch";
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  go_close = true;
  launcher.join();
  advisor.join();
  ASSERT_EQ(recorded_on_launch_stream().size(), 1u);
  EXPECT_EQ(waits_on_advisor(), recorded_on_launch_stream());
}

// Before set_up() there is no advisor stream to order against: nothing is recorded or waited.
TEST_F(ResidentGateTest, BeforeSetUpNoOrderIsPlaced) {
  ResidentGate gate(d, log, sink);
  gate.make_resident(nullptr, stream(9), 0);
  gate.close(stream(9));
  EXPECT_TRUE(calls().empty());
}

// The advisor thread's hold() does not return while a launch is between make_resident() and
// close(): it returns once the launch has closed, with no timeout counted.
TEST_F(ResidentGateTest, HoldWaitsForAnOpenLaunchToClose) {
  ResidentGate gate(d, log, sink);
  ASSERT_TRUE(gate.set_up(stream(7)));
  std::atomic<bool> opened{false}, go_close{false}, closed{false};
  std::thread launcher([&] {
    gate.make_resident(nullptr, stream(9), 0);
    opened = true;
    while (!go_close.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    closed = true;
    gate.close(stream(9));
  });
  while (!opened.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  std::atomic<bool> held{false};
  std::thread advisor([&] {
    auto lock = gate.hold(5);
    EXPECT_TRUE(closed.load()) << "hold() returned while the launch was still open";
    held = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(held.load());
  go_close = true;
  launcher.join();
  advisor.join();
  EXPECT_TRUE(held.load());
  EXPECT_LE(gate.stats_json()["migrations_held"], 1);  // 0 if the advisor came after the close
  EXPECT_EQ(gate.stats_json()["hold_timeouts"], 0);
}

}  // namespace
}  // namespace umswap::advisor
