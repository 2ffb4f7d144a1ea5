// SlabAllocator over fake events and a fake slab source: sizes, alignment and exact blocks,
// stream-ordered reuse (same stream at once, another stream only after an event), merging,
// pressure (waiting for events, giving slabs back), the per-thread stream, cudaFree, a random
// workload checked against a model of what each stream may reuse, the lifetime callback, and the
// discard modes (which dead pages are discarded, which are populated again, on which streams, in
// how many driver calls, and in what order with events), and placement (the arena, requests
// following the planned sequence or going elsewhere, slabs the arena replaces given back).
#include "umswap/allocator/slab_allocator.h"
#include "umswap/core/flight_recorder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace umswap {
namespace {

constexpr uint64_t KiB = uint64_t{1} << 10;
constexpr uint64_t MiB = uint64_t{1} << 20;
const CUstream kS = reinterpret_cast<CUstream>(uintptr_t{0x5a});
const CUstream kT = reinterpret_cast<CUstream>(uintptr_t{0x5b});

using DriverRange = std::pair<uint64_t, uint64_t>;  // (address, bytes)

// One batched discard or discard-and-prefetch call.
struct DriverCall {
  std::vector<DriverRange> ranges;
  CUstream stream = nullptr;
  bool operator==(const DriverCall&) const = default;
};
void PrintTo(const DriverCall& c, std::ostream* os) {
  *os << "{stream " << c.stream << ":";
  for (const auto& [address, bytes] : c.ranges) {
    *os << " [" << std::hex << address << ", +" << std::dec << bytes / MiB << " MiB)";
  }
  *os << "}";
}

struct FakeEvent {
  CUstream stream = nullptr;
  bool recorded = false;
  bool complete = false;
  int serial = 0;  // the value of Fakes::records when it was last recorded
};

// Everything the fakes see; recreated for every test.
struct Fakes {
  std::vector<std::unique_ptr<FakeEvent>> events;
  std::chrono::milliseconds call_takes{0};  // how long each discard or populate call blocks
  bool events_complete_at_once = false;     // a record on an idle stream completes at once
  int records = 0;
  int synchronizes = 0;
  int ctx_synchronizes = 0;
  std::vector<CUstream> stream_synchronizes;
  int destroyed = 0;
  // The slab source.
  uint64_t next = 0x7f0000000000;
  uint64_t source_limit = UINT64_MAX;  // bytes of live slabs the source allows
  uint64_t live = 0;
  std::map<CUdeviceptr, uint64_t> slabs;
  std::vector<uint64_t> created;  // sizes, in order
  std::vector<uint64_t> contexts;
  int destroys = 0;
  bool reuse_bases = false;              // create() hands out destroyed slabs' bases again
  std::vector<CUdeviceptr> freed_bases;  // destroyed slabs' bases
  std::vector<std::pair<CUdeviceptr, uint64_t>> destroyed_slabs;  // (base, bytes), in order
  // Discards and populating prefetches, one entry per driver call, and what residency heard.
  std::vector<DriverCall> discards, prefetches;
  std::vector<std::tuple<uint64_t, uint64_t, bool>> residency;
  bool discard_fails = false;
  bool prefetch_fails = false;
  // What lifetime heard: (address, bytes, freed).
  std::vector<std::tuple<uint64_t, uint64_t, bool>> lifetimes;
  // The discard policy: the pages it was asked about, and its answer (none: refuse).
  std::vector<uint64_t> asked;
  std::function<bool(uint64_t)> accept;
  std::function<bool(uint64_t)> later;  // populate_later's answer; empty: no
  // "alloc", "free", "ask", "discard", "prefetch" and "record", in the order they happened.
  std::vector<std::string> order;
  std::vector<std::pair<CUstream, CUevent>> waited;  // cuStreamWaitEvent calls
  bool capturing = false;                            // cuStreamIsCapturing's answer
};
Fakes* g = nullptr;

CUresult CUDAAPI fake_event_create(CUevent* e, unsigned) {
  g->events.push_back(std::make_unique<FakeEvent>());
  *e = reinterpret_cast<CUevent>(g->events.back().get());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_record(CUevent e, CUstream stream) {
  auto* f = reinterpret_cast<FakeEvent*>(e);
  f->stream = stream;
  f->recorded = true;
  f->complete = g->events_complete_at_once;
  f->serial = g->records++;
  g->order.push_back("record");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_query(CUevent e) {
  return reinterpret_cast<FakeEvent*>(e)->complete ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult CUDAAPI fake_event_synchronize(CUevent e) {
  reinterpret_cast<FakeEvent*>(e)->complete = true;
  ++g->synchronizes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_destroy(CUevent) {
  ++g->destroyed;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_wait_event(CUstream stream, CUevent e, unsigned) {
  g->order.push_back("wait");
  g->waited.emplace_back(stream, e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_is_capturing(CUstream, CUstreamCaptureStatus* status) {
  *status = g->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_synchronize(CUstream stream) {
  g->stream_synchronizes.push_back(stream);
  return CUDA_SUCCESS;
}
// DropOrder's driver over the fakes above (drop_order.h).
DropOrder::Driver order_driver() {
  return {.event_create = &fake_event_create,
          .event_record = &fake_event_record,
          .event_query = &fake_event_query,
          .stream_wait_event = &fake_stream_wait_event,
          .stream_is_capturing = &fake_stream_is_capturing};
}

CUresult CUDAAPI fake_ctx_synchronize() {
  ++g->ctx_synchronizes;
  for (auto& e : g->events) e->complete = e->recorded;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_discard(CUdeviceptr* ptrs, size_t* sizes, size_t count, unsigned long long,
                              CUstream stream) {
  if (g->discard_fails) return CUDA_ERROR_NOT_SUPPORTED;
  std::this_thread::sleep_for(g->call_takes);
  DriverCall call{.ranges = {}, .stream = stream};
  for (size_t i = 0; i < count; ++i) call.ranges.emplace_back(ptrs[i], sizes[i]);
  g->discards.push_back(call);
  g->order.push_back("discard");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_discard_and_prefetch(CUdeviceptr* ptrs, size_t* sizes, size_t count,
                                           CUmemLocation* where, size_t* where_from,
                                           size_t where_count, unsigned long long,
                                           CUstream stream) {
  EXPECT_EQ(where_count, 1u);
  EXPECT_EQ(where_from[0], 0u);
  EXPECT_EQ(where[0].type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(where[0].id, 3);
  if (g->prefetch_fails) return CUDA_ERROR_NOT_SUPPORTED;
  std::this_thread::sleep_for(g->call_takes);
  DriverCall call{.ranges = {}, .stream = stream};
  for (size_t i = 0; i < count; ++i) call.ranges.emplace_back(ptrs[i], sizes[i]);
  g->prefetches.push_back(call);
  g->order.push_back("prefetch");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_ctx_get_device(CUdevice* device) {
  *device = 3;
  return CUDA_SUCCESS;
}

// Only what the slab allocator calls; the rest of the table stays null.
DriverApi fake_driver() {
  DriverApi d;
  d.event_create = &fake_event_create;
  d.event_record = &fake_event_record;
  d.event_query = &fake_event_query;
  d.event_synchronize = &fake_event_synchronize;
  d.event_destroy = &fake_event_destroy;
  d.ctx_synchronize = &fake_ctx_synchronize;
  d.stream_synchronize = &fake_stream_synchronize;
  d.mem_discard_batch_async = &fake_discard;
  d.mem_discard_and_prefetch_batch_async = &fake_discard_and_prefetch;
  d.ctx_get_device = &fake_ctx_get_device;
  return d;
}

SlabSource fake_source() {
  return {.create =
              [](uint64_t bytes, uint64_t context, CUdeviceptr* out) {
                if (bytes > g->source_limit - std::min(g->live, g->source_limit)) {
                  return CUDA_ERROR_OUT_OF_MEMORY;
                }
                if (g->reuse_bases && !g->freed_bases.empty()) {
                  *out = g->freed_bases.back();
                  g->freed_bases.pop_back();
                } else {
                  *out = g->next;
                  g->next += bytes + 64 * MiB;  // gaps: slabs are never adjacent
                }
                g->live += bytes;
                g->slabs[*out] = bytes;
                g->created.push_back(bytes);
                g->contexts.push_back(context);
                return CUDA_SUCCESS;
              },
          .destroy =
              [](CUdeviceptr base) {
                g->live -= g->slabs.at(base);
                g->destroyed_slabs.emplace_back(base, g->slabs.at(base));
                g->slabs.erase(base);
                g->freed_bases.push_back(base);
                ++g->destroys;
              },
          .residency = [](uint64_t address, uint64_t bytes,
                          bool on_gpu) { g->residency.emplace_back(address, bytes, on_gpu); },
          .lifetime =
              [](uint64_t address, uint64_t bytes, bool freed) {
                g->lifetimes.emplace_back(address, bytes, freed);
                g->order.push_back(freed ? "free" : "alloc");
              },
          .discard_page =
              [](uint64_t page) {
                g->asked.push_back(page);
                g->order.push_back("ask");
                return g->accept && g->accept(page);
              },
          .populate_later = [](uint64_t page) { return g->later && g->later(page); }};
}

void complete_all_events() {
  for (auto& e : g->events) e->complete = e->recorded;
}

class SlabAllocatorTest : public testing::Test {
 protected:
  void SetUp() override {
    fakes_ = std::make_unique<Fakes>();
    g = fakes_.get();
    slabs_ = std::make_unique<SlabAllocator>(fake_driver(), fake_source());
  }
  void TearDown() override {
    slabs_.reset();
    g = nullptr;
  }

  // Planned discards of every candidate page (what the advisor's plan asks for).
  void discard_every_page() {
    ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
    g->accept = [](uint64_t) { return true; };
  }

  CUdeviceptr alloc(uint64_t bytes, CUstream stream = kS) {
    CUdeviceptr p = 0;
    EXPECT_EQ(slabs_->allocate(bytes, stream, &p, [] { return uint64_t{7}; }), CUDA_SUCCESS)
        << bytes;
    return p;
  }
  void release(CUdeviceptr p, CUstream stream = kS) {
    EXPECT_EQ(slabs_->free(p, stream), std::optional<CUresult>(CUDA_SUCCESS));
  }
  // Planned mode; a 64 MiB block allocated and freed with the pages at 0, 2, 6 and 10 MiB of it
  // discarded (the policy keeps accepting them: `chosen` must outlive it). Returns the block.
  CUdeviceptr discard_four_pages(std::vector<uint64_t>& chosen);

  std::unique_ptr<Fakes> fakes_;
  std::unique_ptr<SlabAllocator> slabs_;
};

TEST_F(SlabAllocatorTest, SmallRequestsShareOneSmallSlabAndAre512Aligned) {
  const CUdeviceptr a = alloc(100);
  const CUdeviceptr b = alloc(1000);
  const CUdeviceptr c = alloc(512);
  EXPECT_EQ(g->created, std::vector<uint64_t>{SlabAllocator::kSmallSlab});
  EXPECT_EQ(g->contexts, std::vector<uint64_t>{7});  // the context, asked for the slab only
  for (CUdeviceptr p : {a, b, c}) EXPECT_EQ(p % 512, 0u);
  EXPECT_EQ(b - a, 512u);
  EXPECT_EQ(c - b, 1024u);
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.blocks_in_use, 3u);
  EXPECT_EQ(s.bytes_in_use, 2048u);
}

TEST_F(SlabAllocatorTest, LargeRequestsGetLargeSlabsOfAtLeast64MiBOrTheRequest) {
  alloc(3 * MiB);
  alloc(100 * MiB + 1);
  EXPECT_EQ(g->created, (std::vector<uint64_t>{64 * MiB, 102 * MiB}));
  // A small request never lands in a large slab, and the reverse.
  const CUdeviceptr small = alloc(4 * KiB);
  EXPECT_EQ(g->created.size(), 3u);
  EXPECT_EQ(g->created.back(), SlabAllocator::kSmallSlab);
  EXPECT_EQ(g->slabs.count(small), 1u);
}

TEST_F(SlabAllocatorTest, LiveBlockIsExactlyTheAllocationRoundedTo512) {
  const CUdeviceptr a = alloc(3 * MiB + 100);
  const CUdeviceptr b = alloc(5 * MiB);
  using Range = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(slabs_->live_block(a), Range(a, a + 3 * MiB + 512));
  EXPECT_EQ(slabs_->live_block(a + 3 * MiB), Range(a, a + 3 * MiB + 512));
  EXPECT_EQ(slabs_->live_block(b + 5 * MiB - 1), Range(b, b + 5 * MiB));
  EXPECT_EQ(slabs_->live_block(b + 5 * MiB), std::nullopt);  // free rest of the slab
  EXPECT_EQ(slabs_->live_block(a - 1), std::nullopt);        // outside every slab
  EXPECT_TRUE(slabs_->owns(b + 5 * MiB));
  EXPECT_FALSE(slabs_->owns(a + 64 * MiB));
  release(a);
  EXPECT_EQ(slabs_->live_block(a), std::nullopt);
}

TEST_F(SlabAllocatorTest, TheSameStreamReusesAFreedBlockAtOnceWithoutAnEvent) {
  const CUdeviceptr a = alloc(8 * MiB);
  alloc(8 * MiB);
  release(a);
  EXPECT_EQ(alloc(8 * MiB), a);
  EXPECT_EQ(g->records, 0);
}

TEST_F(SlabAllocatorTest, AnotherStreamWaitsForAnEventRecordedAfterTheFree) {
  const CUdeviceptr a = alloc(8 * MiB);
  const CUdeviceptr b = alloc(56 * MiB);  // fills the 64 MiB slab
  release(a);
  const CUdeviceptr c = alloc(8 * MiB, kT);  // s's work may still use a: not reused
  EXPECT_NE(c, a);
  ASSERT_EQ(g->records, 1);
  EXPECT_EQ(g->events[0]->stream, kS);
  EXPECT_EQ(g->created.size(), 2u);
  complete_all_events();
  release(c, kT);
  EXPECT_EQ(alloc(8 * MiB, kT), a);  // s passed the free: a is free for every stream
  (void)b;
}

TEST_F(SlabAllocatorTest, TheSameRequestsGiveTheSameAddressesEveryIteration) {
  // An iteration-like sequence: weights stay, activations come and go in a fixed order.
  const std::vector<uint64_t> sizes = {3 * MiB, 700 * KiB, 12 * MiB, 5 * KiB, 40 * MiB, 3 * MiB};
  alloc(20 * MiB);  // a weight
  std::vector<std::vector<CUdeviceptr>> rounds;
  for (int round = 0; round < 4; ++round) {
    std::vector<CUdeviceptr> got;
    std::vector<CUdeviceptr> live;
    for (uint64_t s : sizes) {
      live.push_back(alloc(s));
      got.push_back(live.back());
      if (live.size() == 3) {  // free the oldest but one, as a backward pass would
        release(live[1]);
        live.erase(live.begin() + 1);
      }
    }
    for (CUdeviceptr p : live) release(p);
    rounds.push_back(got);
  }
  for (int round = 1; round < 4; ++round) EXPECT_EQ(rounds[round], rounds[0]) << round;
}

TEST_F(SlabAllocatorTest, NeighboursMergeSoTheirSumFitsWhereTheyWere) {
  const CUdeviceptr a = alloc(4 * MiB);
  const CUdeviceptr b = alloc(4 * MiB);
  const CUdeviceptr c = alloc(4 * MiB);
  const CUdeviceptr d = alloc(52 * MiB);  // the slab is full
  release(b);
  release(a);
  release(c);
  EXPECT_EQ(alloc(12 * MiB), a);
  EXPECT_EQ(g->created.size(), 1u);
  (void)d;
}

TEST_F(SlabAllocatorTest, BlocksFreedOnDifferentStreamsDoNotMergeUntilTheirEventsComplete) {
  const CUdeviceptr a = alloc(32 * MiB);
  const CUdeviceptr b = alloc(32 * MiB);
  release(a, kS);
  release(b, kT);
  // Neither stream may take 64 MiB there yet: s may use a but not b.
  const CUdeviceptr c = alloc(64 * MiB, kS);
  EXPECT_NE(c, a);
  complete_all_events();
  release(c, kS);
  EXPECT_EQ(alloc(64 * MiB, kS), a);
}

TEST_F(SlabAllocatorTest, UnderPressureItWaitsForEventsBeforeFailing) {
  g->source_limit = 64 * MiB;
  const CUdeviceptr a = alloc(64 * MiB);
  release(a, kS);
  // Stream t finds no room, no slab can be made: it waits for s's event and reuses a.
  EXPECT_EQ(alloc(64 * MiB, kT), a);
  EXPECT_GE(g->synchronizes, 1);
  EXPECT_EQ(slabs_->stats().pressure_waits, 1u);
  CUdeviceptr p = 0;
  EXPECT_EQ(slabs_->allocate(MiB * 2, kT, &p), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(SlabAllocatorTest, UnderPressureWhollyFreeSlabsAreGivenBack) {
  g->source_limit = 128 * MiB;
  const CUdeviceptr a = alloc(64 * MiB);
  const CUdeviceptr b = alloc(64 * MiB);
  release(a);
  release(b);
  // 100 MiB fits in neither 64 MiB slab: both go back, then a 100 MiB slab is made.
  const CUdeviceptr c = alloc(100 * MiB);
  EXPECT_NE(c, 0u);
  EXPECT_EQ(g->destroys, 2);
  EXPECT_EQ(slabs_->stats().slabs, 1u);
  EXPECT_EQ(slabs_->stats().slab_bytes, 100 * MiB);
}

TEST_F(SlabAllocatorTest, AFullSizeSlabFallsBackToTheRequestRoundedTo2MiB) {
  g->source_limit = 10 * MiB;
  alloc(3 * MiB);
  EXPECT_EQ(g->created, std::vector<uint64_t>{4 * MiB});
}

TEST_F(SlabAllocatorTest, FreesOfWhatIsNotABlockInUseAreNotItsOwn) {
  const CUdeviceptr a = alloc(4 * MiB);
  EXPECT_EQ(slabs_->free(a + 512, kS), std::nullopt);  // inside a block
  EXPECT_EQ(slabs_->free(0x1234, kS), std::nullopt);   // elsewhere
  release(a);
  EXPECT_EQ(slabs_->free(a, kS), std::nullopt);  // twice
  EXPECT_EQ(slabs_->free_sync(0x1234), std::nullopt);
}

TEST_F(SlabAllocatorTest, FreeSyncWaitsForTheContextAndFreesForEveryStream) {
  const CUdeviceptr a = alloc(4 * MiB);
  EXPECT_EQ(slabs_->free_sync(a), std::optional<CUresult>(CUDA_SUCCESS));
  EXPECT_EQ(g->ctx_synchronizes, 1);
  EXPECT_EQ(alloc(4 * MiB, kT), a);
  EXPECT_EQ(g->records, 0);
}

TEST_F(SlabAllocatorTest, PerThreadStreamFreesRecordTheirEventAtOnce) {
  CUdeviceptr a = 0;
  std::thread([&] {
    ASSERT_EQ(slabs_->allocate(4 * MiB, CU_STREAM_PER_THREAD, &a), CUDA_SUCCESS);
    ASSERT_EQ(slabs_->free(a, CU_STREAM_PER_THREAD), std::optional<CUresult>(CUDA_SUCCESS));
    EXPECT_EQ(g->records, 1);
    CUdeviceptr again = 0;  // the same thread's stream: at once
    ASSERT_EQ(slabs_->allocate(4 * MiB, CU_STREAM_PER_THREAD, &again), CUDA_SUCCESS);
    EXPECT_EQ(again, a);
    ASSERT_EQ(slabs_->free(again, CU_STREAM_PER_THREAD), std::optional<CUresult>(CUDA_SUCCESS));
  }).join();
  // Another thread's per-thread stream is another stream: only once the event completed. (The
  // free merged a with the rest of its slab, so the whole slab waits for that event.)
  CUdeviceptr b = 0;
  ASSERT_EQ(slabs_->allocate(64 * MiB, CU_STREAM_PER_THREAD, &b), CUDA_SUCCESS);
  EXPECT_NE(b, a);
  complete_all_events();
  CUdeviceptr c = 0;
  ASSERT_EQ(slabs_->allocate(64 * MiB, CU_STREAM_PER_THREAD, &c), CUDA_SUCCESS);
  EXPECT_EQ(c, a);
}

TEST_F(SlabAllocatorTest, AnEndedStreamIsNeverNamedAgainAndItsHandleMayComeBack) {
  const CUdeviceptr a = alloc(64 * MiB, kS);
  release(a, kS);
  slabs_->stream_ends(kS);  // the program destroys s: one event, recorded now, while s exists
  ASSERT_EQ(g->records, 1);
  EXPECT_EQ(g->events[0]->stream, kS);
  // Another stream finds a pending: no record on the destroyed handle, a new slab instead.
  const CUdeviceptr b = alloc(64 * MiB, kT);
  EXPECT_NE(b, a);
  EXPECT_EQ(g->records, 1);
  // A new stream with s's old handle is another stream: it waits for the event too.
  const CUdeviceptr c = alloc(64 * MiB, kS);
  EXPECT_NE(c, a);
  complete_all_events();
  EXPECT_EQ(alloc(64 * MiB, kS), a);
}

// --- lifetime ------------------------------------------------------------------------------------

TEST_F(SlabAllocatorTest, TheFlightRecorderHearsSlabsAndBlocksInOrder) {
  const std::vector<flight::Event> before = flight::snapshot();
  const uint64_t after = before.empty() ? 0 : before.back().seq;
  g->source_limit = 128 * MiB;
  const CUdeviceptr a = alloc(64 * MiB);
  const CUdeviceptr b = alloc(64 * MiB);
  release(a);
  release(b);
  const CUdeviceptr c = alloc(100 * MiB);  // both slabs go back first (pressure)
  using E = std::tuple<flight::Kind, uint64_t, uint64_t>;
  std::vector<E> got;
  for (const flight::Event& e : flight::snapshot()) {
    if (e.seq <= after) continue;
    got.emplace_back(e.kind, e.address, e.bytes);
    if (e.kind == flight::Kind::block_alloc || e.kind == flight::Kind::block_free) {
      EXPECT_EQ(e.stream, reinterpret_cast<uintptr_t>(kS));
    }
  }
  using K = flight::Kind;
  EXPECT_EQ(got, (std::vector<E>{{K::slab_create, a, 64 * MiB},
                                 {K::block_alloc, a, 64 * MiB},
                                 {K::slab_create, b, 64 * MiB},
                                 {K::block_alloc, b, 64 * MiB},
                                 {K::block_free, a, 64 * MiB},
                                 {K::block_free, b, 64 * MiB},
                                 {K::slab_free, a, 64 * MiB},
                                 {K::slab_free, b, 64 * MiB},
                                 {K::slab_create, c, 100 * MiB},
                                 {K::block_alloc, c, 100 * MiB}}));
}

TEST_F(SlabAllocatorTest, LifetimeHearsEveryBlockHandedOutAndTakenBackInOrder) {
  const CUdeviceptr a = alloc(100, kS);
  const CUdeviceptr b = alloc(3 * MiB + 1, kT);
  release(a, kS);
  EXPECT_EQ(slabs_->free(a, kS), std::nullopt);  // not a block in use: not heard
  EXPECT_EQ(slabs_->free_sync(b), std::optional<CUresult>(CUDA_SUCCESS));
  const CUdeviceptr c = alloc(4 * MiB, kS);
  using L = std::tuple<uint64_t, uint64_t, bool>;
  EXPECT_EQ(g->lifetimes, (std::vector<L>{{a, 512, false},
                                          {b, 3 * MiB + 512, false},
                                          {a, 512, true},
                                          {b, 3 * MiB + 512, true},
                                          {c, 4 * MiB, false}}));
  g->source_limit = 0;  // a failed allocation hands nothing out
  CUdeviceptr p = 0;
  EXPECT_EQ(slabs_->allocate(200 * MiB, kS, &p), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(g->lifetimes.size(), 5u);
}

// --- discards (DiscardMode::planned) ----------------------------------------------------------

// The 2 MiB pages at `base` + each offset (in MiB).
std::vector<uint64_t> pages_at(uint64_t base, std::initializer_list<uint64_t> offsets_mib) {
  std::vector<uint64_t> out;
  for (uint64_t offset : offsets_mib) out.push_back(base + offset * MiB);
  return out;
}

CUdeviceptr SlabAllocatorTest::discard_four_pages(std::vector<uint64_t>& chosen) {
  EXPECT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
  const CUdeviceptr a = alloc(64 * MiB);
  chosen = pages_at(a, {0, 2, 6, 10});
  g->accept = [&chosen](uint64_t page) { return std::ranges::find(chosen, page) != chosen.end(); };
  release(a);
  EXPECT_EQ(g->discards.size(), 1u);
  g->residency.clear();
  return a;
}

TEST_F(SlabAllocatorTest, DiscardIsOffByDefault) {
  g->accept = [](uint64_t) { return true; };
  release(alloc(8 * MiB));
  EXPECT_TRUE(g->asked.empty());
  EXPECT_TRUE(g->discards.empty());
  EXPECT_TRUE(g->prefetches.empty());
}

TEST_F(SlabAllocatorTest, DiscardModesNeedTheirDriverFunctions) {
  DriverApi d = fake_driver();
  d.mem_discard_batch_async = nullptr;
  SlabAllocator without(d, fake_source());
  EXPECT_FALSE(without.set_discard_mode(DiscardMode::planned));
  EXPECT_TRUE(without.set_discard_mode(DiscardMode::off));
  DriverApi no_device = fake_driver();
  no_device.ctx_get_device = nullptr;
  EXPECT_FALSE(SlabAllocator(no_device, fake_source()).set_discard_mode(DiscardMode::planned));
  EXPECT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
}

TEST_F(SlabAllocatorTest, PlannedDiscardsExactlyTheAcceptedPagesInOneCallOnTheFreeingStream) {
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
  const CUdeviceptr a = alloc(MiB + 512, kS);  // [base, base + 1 MiB + 512)
  const CUdeviceptr b = alloc(7 * MiB, kT);    // [base + 1 MiB + 512, base + 8 MiB + 1024)
  ASSERT_EQ(g->slabs.count(a), 1u);            // a starts the (2 MiB aligned) slab
  g->accept = [a](uint64_t page) { return page != a + 4 * MiB; };
  release(b, kT);
  // b overlaps the pages at 0..8 MiB. The one at 0 holds live a; the one at 8 MiB lies in the
  // free rest of the slab, which b merged with.
  EXPECT_EQ(g->asked, pages_at(a, {2, 4, 6, 8}));
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0],
            (DriverCall{.ranges = {{a + 2 * MiB, 2 * MiB}, {a + 6 * MiB, 4 * MiB}}, .stream = kT}));
  using R = std::tuple<uint64_t, uint64_t, bool>;
  EXPECT_EQ(g->residency,
            (std::vector<R>{{a + 2 * MiB, 2 * MiB, false}, {a + 6 * MiB, 4 * MiB, false}}));
  // The policy is asked after lifetime heard the free.
  EXPECT_EQ(g->order, (std::vector<std::string>{"alloc", "alloc", "free", "ask", "ask", "ask",
                                                "ask", "discard"}));
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.discarded_bytes, 6 * MiB);
  EXPECT_EQ(s.discard_calls, 1u);
  EXPECT_EQ(s.populated_bytes, 0u);
  EXPECT_EQ(s.populate_calls, 0u);
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["discard_calls"], 1);
  EXPECT_EQ(j["populate_calls"], 0);
  EXPECT_EQ(j["discarded_bytes"], 6 * MiB);
}

// With a DropOrder: a page an unfinished migration covers is kept (asked, not discarded), and
// the discard is told to the order, which leaves its pages out of a migration until it finished.
TEST_F(SlabAllocatorTest, PlannedDiscardsKeepThePagesOfUnfinishedMigrations) {
  DropOrder order(order_driver());
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned, &order));
  g->accept = [](uint64_t) { return true; };
  const CUdeviceptr a = alloc(8 * MiB, kS);
  std::vector<DropOrder::Range> parts;
  const uint64_t ticket = order.begin_migration(a + 2 * MiB + 4096, 4096, false, &parts);
  order.end_migration(ticket, kT);  // its event: not complete
  release(a, kS);
  EXPECT_EQ(g->asked, pages_at(a, {0, 2, 4, 6}));
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0],
            (DriverCall{.ranges = {{a, 2 * MiB}, {a + 4 * MiB, 4 * MiB}}, .stream = kS}));
  EXPECT_EQ(order.stats().pages_kept, 1u);
  // The discard is pending: a migration over the block moves only the kept page.
  order.begin_migration(a, 8 * MiB, false, &parts);
  EXPECT_EQ(parts, (std::vector<DropOrder::Range>{{a + 2 * MiB, a + 4 * MiB}}));
  slabs_->set_discard_mode(DiscardMode::off);  // forgets the order before it goes
}

// A page a prefetch covers (its calls ended, its event not complete) is discarded after the
// freeing stream waits for that event; an eviction's page is kept.
TEST_F(SlabAllocatorTest, PlannedDiscardsWaitForPrefetchesButKeepTheEvictionsPages) {
  DropOrder order(order_driver());
  order.allow_waits([] { return true; });  // as the advisor does while launches wait
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned, &order));
  g->accept = [](uint64_t) { return true; };
  const CUdeviceptr a = alloc(8 * MiB, kS);
  std::vector<DropOrder::Range> parts;
  order.end_migration(order.begin_migration(a + 2 * MiB, 2 * MiB, true, &parts), kT);
  const size_t recorded = g->events.size();
  order.end_migration(order.begin_migration(a + 6 * MiB, 4096, false, &parts), kT);
  g->order.clear();
  release(a, kS);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0], (DriverCall{.ranges = {{a, 6 * MiB}}, .stream = kS}));  // page 3 kept
  ASSERT_EQ(g->waited.size(), 1u);
  EXPECT_EQ(g->waited[0].first, kS);
  EXPECT_EQ(g->waited[0].second, reinterpret_cast<CUevent>(g->events[recorded - 1].get()));
  const auto wait = std::find(g->order.begin(), g->order.end(), "wait");
  const auto discard = std::find(g->order.begin(), g->order.end(), "discard");
  EXPECT_LT(wait, discard);  // the wait comes first, on the same stream
  EXPECT_EQ(order.stats().pages_after_waits, 1u);
  EXPECT_EQ(order.stats().kept_by_evictions, 1u);
  slabs_->set_discard_mode(DiscardMode::off);
}

// On a stream being captured nothing waits: the page a prefetch covers is kept, the others go.
TEST_F(SlabAllocatorTest, OnACapturedStreamAPrefetchsPageIsKeptAndTheOthersDiscarded) {
  DropOrder order(order_driver());
  order.allow_waits([] { return true; });
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned, &order));
  g->accept = [](uint64_t) { return true; };
  const CUdeviceptr a = alloc(8 * MiB, kS);
  std::vector<DropOrder::Range> parts;
  order.end_migration(order.begin_migration(a + 2 * MiB, 2 * MiB, true, &parts), kT);
  g->capturing = true;
  release(a, kS);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0],
            (DriverCall{.ranges = {{a, 2 * MiB}, {a + 4 * MiB, 4 * MiB}}, .stream = kS}));
  EXPECT_TRUE(g->waited.empty());
  EXPECT_EQ(order.stats().kept_capturing, 1u);
  slabs_->set_discard_mode(DiscardMode::off);
}

// A sweep discards the accepted whole pages of free blocks every stream may take, on the per-thread
// stream, and only once; a free block still answering to its stream gets an event instead and is
// swept once that event completed; the pages are populated when an allocation overlaps them.
TEST_F(SlabAllocatorTest, ASweepDiscardsAcceptedFreePagesOnceTheirStreamPassedTheFree) {
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
  g->accept = [](uint64_t) { return false; };  // frees discard nothing
  const CUdeviceptr a = alloc(8 * MiB, kS);    // a 64 MiB slab: [a, a + 8 MiB) ...
  const CUdeviceptr b = alloc(8 * MiB, kS);    // ... [a + 8, a + 16 MiB) ...
  const CUdeviceptr c = alloc(8 * MiB, kS);    // ... [a + 16, a + 24 MiB), the rest free for all
  ASSERT_EQ(b, a + 8 * MiB);
  ASSERT_EQ(c, a + 16 * MiB);
  release(b, kS);  // free, but only for s
  std::vector<uint64_t> asked;
  const auto policy = [&](uint64_t page) {
    asked.push_back(page);
    return page != a + 30 * MiB;
  };
  EXPECT_EQ(slabs_->sweep_free_pages(policy, kT), (64 - 24 - 2) * MiB);
  // Only the free-for-all rest was asked about; b got an event on s.
  EXPECT_EQ(asked.front(), a + 24 * MiB);
  EXPECT_EQ(asked.size(), 20u);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0].stream, kT);  // the caller's stream, then synchronized
  EXPECT_EQ(g->stream_synchronizes, std::vector<CUstream>{kT});
  EXPECT_EQ(g->discards[0].ranges,
            (std::vector<DriverRange>{{a + 24 * MiB, 6 * MiB}, {a + 32 * MiB, 32 * MiB}}));
  ASSERT_EQ(g->records, 1);
  EXPECT_EQ(g->events[0]->stream, kS);
  // Nothing new until s passes the free; pages swept already are not asked about again.
  asked.clear();
  EXPECT_EQ(slabs_->sweep_free_pages(policy, kT), 0u);
  EXPECT_EQ(asked, pages_at(a, {30}));
  complete_all_events();
  asked.clear();
  EXPECT_EQ(slabs_->sweep_free_pages(policy, kT), 8 * MiB);  // b's pages, now free for all
  EXPECT_EQ(g->discards.back().ranges, (std::vector<DriverRange>{{a + 8 * MiB, 8 * MiB}}));
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.swept_bytes, 46 * MiB);
  EXPECT_EQ(s.discarded_bytes, 46 * MiB);
  // An allocation over swept pages populates them.
  const CUdeviceptr d = alloc(8 * MiB, kT);
  EXPECT_EQ(d, a + 8 * MiB);  // best fit: b's old block, lowest address
  ASSERT_EQ(g->prefetches.size(), 1u);
  EXPECT_EQ(g->prefetches[0].ranges, (std::vector<DriverRange>{{a + 8 * MiB, 8 * MiB}}));
}

TEST_F(SlabAllocatorTest, ASweepDoesNothingWithoutADiscardMode) {
  alloc(8 * MiB);
  EXPECT_EQ(slabs_->sweep_free_pages([](uint64_t) { return true; }, kT), 0u);
  EXPECT_TRUE(g->discards.empty());
}

TEST_F(SlabAllocatorTest, TheLegacyStreamDiscardsAndPopulatesOnThePerThreadStream) {
  discard_every_page();
  const CUdeviceptr a = alloc(64 * MiB, nullptr);
  release(a, nullptr);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0],
            (DriverCall{.ranges = {{a, 64 * MiB}}, .stream = CU_STREAM_PER_THREAD}));
  EXPECT_EQ(alloc(4 * MiB, CU_STREAM_LEGACY), a);
  ASSERT_EQ(g->prefetches.size(), 1u);
  EXPECT_EQ(g->prefetches[0],
            (DriverCall{.ranges = {{a, 4 * MiB}}, .stream = CU_STREAM_PER_THREAD}));
}

TEST_F(SlabAllocatorTest, APageSharedByTwoBlocksIsACandidateOnlyAtTheSecondFree) {
  discard_every_page();
  const CUdeviceptr a = alloc(3 * MiB);  // [0, 3 MiB)
  const CUdeviceptr b = alloc(3 * MiB);  // [3, 6 MiB): shares the page at 2 MiB with a
  alloc(58 * MiB);                       // fills the slab
  release(a);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0], (DriverCall{.ranges = {{a, 2 * MiB}}, .stream = kS}));
  release(b);
  ASSERT_EQ(g->discards.size(), 2u);
  EXPECT_EQ(g->discards[1], (DriverCall{.ranges = {{a + 2 * MiB, 4 * MiB}}, .stream = kS}));
  // Asked about the page at 2 MiB only at b's free: a's pages [0, 2), then b's [2, 6).
  EXPECT_EQ(g->asked, pages_at(a, {0, 2, 4}));
  EXPECT_EQ(slabs_->stats().discarded_bytes, 6 * MiB);
}

TEST_F(SlabAllocatorTest, APageDiscardedAlreadyIsNeitherAskedAboutNorDiscardedAgain) {
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
  g->accept = [](uint64_t) { return true; };
  const CUdeviceptr a = alloc(4 * MiB);
  alloc(4 * MiB);
  release(a);
  EXPECT_EQ(g->asked, pages_at(a, {0, 2}));
  g->asked.clear();
  release(a + 4 * MiB);  // merges with a's discarded pages and the rest of the slab
  EXPECT_EQ(g->asked, pages_at(a, {4, 6}));
  ASSERT_EQ(g->discards.size(), 2u);
  EXPECT_EQ(g->discards[1], (DriverCall{.ranges = {{a + 4 * MiB, 4 * MiB}}, .stream = kS}));
}

TEST_F(SlabAllocatorTest, ANeighbourFreedByAnotherStreamAndStillPendingKeepsItsPagesOut) {
  discard_every_page();
  const CUdeviceptr a = alloc(3 * MiB, kS);  // [0, 3 MiB)
  const CUdeviceptr b = alloc(3 * MiB, kS);  // [3, 6 MiB)
  alloc(58 * MiB, kS);                       // fills the slab
  release(a, kT);
  alloc(4 * MiB, kS);  // finds no room on s: records t's event for a, which stays pending
  ASSERT_EQ(g->records, 1);
  ASSERT_EQ(g->events[0]->stream, kT);
  ASSERT_FALSE(g->events[0]->complete);
  release(b, kS);  // a is not safe for s: no merge, so the shared page is no candidate
  ASSERT_EQ(g->discards.size(), 2u);
  EXPECT_EQ(g->discards[0], (DriverCall{.ranges = {{a, 2 * MiB}}, .stream = kT}));
  EXPECT_EQ(g->discards[1], (DriverCall{.ranges = {{a + 4 * MiB, 2 * MiB}}, .stream = kS}));
}

TEST_F(SlabAllocatorTest, AnAllocationPopulatesExactlyTheDiscardedPagesItOverlapsInOneCall) {
  std::vector<uint64_t> chosen;
  const CUdeviceptr a = discard_four_pages(chosen);
  // [0, 7 MiB + 512) on t (once s passed the free): the pages at 0, 2 and 6 MiB, the last one
  // only partly covered.
  g->events_complete_at_once = true;
  const CUdeviceptr b = alloc(7 * MiB + 1, kT);
  ASSERT_EQ(b, a);
  ASSERT_EQ(g->prefetches.size(), 1u);
  EXPECT_EQ(g->prefetches[0],
            (DriverCall{.ranges = {{a, 4 * MiB}, {a + 6 * MiB, 2 * MiB}}, .stream = kT}));
  using R = std::tuple<uint64_t, uint64_t, bool>;
  EXPECT_EQ(g->residency, (std::vector<R>{{a, 4 * MiB, true}, {a + 6 * MiB, 2 * MiB, true}}));
  EXPECT_EQ(slabs_->stats().populated_bytes, 6 * MiB);
  EXPECT_EQ(slabs_->stats().populate_calls, 1u);
  // The next block, [7 MiB + 512, 12 MiB + 512), overlaps the page at 6 MiB (populated already)
  // and the one at 10 MiB.
  const CUdeviceptr c = alloc(5 * MiB, kT);
  ASSERT_EQ(c, a + 7 * MiB + 512);
  ASSERT_EQ(g->prefetches.size(), 2u);
  EXPECT_EQ(g->prefetches[1], (DriverCall{.ranges = {{a + 10 * MiB, 2 * MiB}}, .stream = kT}));
  // Freed and allocated again with the policy refusing: nothing left to populate.
  g->accept = {};
  release(b, kT);
  release(c, kT);
  EXPECT_EQ(alloc(12 * MiB, kT), a);
  EXPECT_EQ(g->prefetches.size(), 2u);
  EXPECT_EQ(g->discards.size(), 1u);
}

// The host time the freeing and allocating threads spend inside the discard and populate calls
// (a managed-memory call blocks while about 57 wait on the GPU): in the stats.
TEST_F(SlabAllocatorTest, TheTimeInsideDiscardAndPopulateCallsIsCounted) {
  g->call_takes = std::chrono::milliseconds(20);
  std::vector<uint64_t> chosen;
  const CUdeviceptr a = discard_four_pages(chosen);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_GE(slabs_->stats().discard_call_seconds, 0.020);
  EXPECT_EQ(slabs_->stats().populate_call_seconds, 0.0);
  g->events_complete_at_once = true;
  ASSERT_EQ(alloc(7 * MiB + 1, kT), a);
  ASSERT_EQ(g->prefetches.size(), 1u);
  const SlabStats s = slabs_->stats();
  EXPECT_GE(s.populate_call_seconds, 0.020);
  EXPECT_LT(s.discard_call_seconds, 10.0);
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j.at("discard_call_seconds"), s.discard_call_seconds);
  EXPECT_EQ(j.at("populate_call_seconds"), s.populate_call_seconds);
}

TEST_F(SlabAllocatorTest, PagesLeftToPopulateLaterAreForgottenNotPopulated) {
  std::vector<uint64_t> chosen;
  const CUdeviceptr a = discard_four_pages(chosen);
  // The pages at 2 and 10 MiB are someone else's to populate: the allocation over [0, 12 MiB)
  // populates 0 and 6 only.
  g->later = [&](uint64_t page) { return page == a + 2 * MiB || page == a + 10 * MiB; };
  g->events_complete_at_once = true;
  const CUdeviceptr b = alloc(12 * MiB, kT);
  ASSERT_EQ(b, a);
  ASSERT_EQ(g->prefetches.size(), 1u);
  EXPECT_EQ(g->prefetches[0],
            (DriverCall{.ranges = {{a, 2 * MiB}, {a + 6 * MiB, 2 * MiB}}, .stream = kT}));
  EXPECT_EQ(slabs_->stats().populated_bytes, 4 * MiB);
  EXPECT_EQ(slabs_->stats().populate_deferred_bytes, 4 * MiB);
  // Forgotten: freed (not discarded again) and allocated again, nothing is populated.
  g->accept = {};
  release(b, kT);
  EXPECT_EQ(alloc(12 * MiB, kT), a);
  EXPECT_EQ(g->prefetches.size(), 1u);
  // Every page left for later: no call at all.
  g->later = [](uint64_t) { return true; };
  g->accept = [&](uint64_t page) { return std::ranges::find(chosen, page) != chosen.end(); };
  release(a, kT);
  EXPECT_EQ(alloc(12 * MiB, kT), a);
  EXPECT_EQ(g->prefetches.size(), 1u);
  EXPECT_EQ(slabs_->stats().populate_deferred_bytes, 4 * MiB + 8 * MiB);  // all four pages
}

TEST_F(SlabAllocatorTest, AnotherStreamsAllocationOverDiscardedPagesWaitsLikeAnyOther) {
  discard_every_page();
  const CUdeviceptr a = alloc(64 * MiB, kS);
  release(a, kS);
  const CUdeviceptr b = alloc(64 * MiB, kT);  // s's event pending: a new slab, never discarded
  EXPECT_NE(b, a);
  EXPECT_TRUE(g->prefetches.empty());
  complete_all_events();
  release(b, kT);
  EXPECT_EQ(alloc(64 * MiB, kT), a);    // the lower of the two free slabs
  ASSERT_EQ(g->prefetches.size(), 1u);  // 32 contiguous pages: one range
  EXPECT_EQ(g->prefetches[0], (DriverCall{.ranges = {{a, 64 * MiB}}, .stream = kT}));
}

TEST_F(SlabAllocatorTest, APolicyRefusingEverythingMakesNoDriverCalls) {
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
  g->accept = [](uint64_t) { return false; };
  const CUdeviceptr a = alloc(20 * MiB);
  const CUdeviceptr b = alloc(30 * MiB, kT);
  release(a);
  release(b, kT);
  release(alloc(40 * MiB, kS));
  EXPECT_FALSE(g->asked.empty());
  EXPECT_TRUE(g->discards.empty());
  EXPECT_TRUE(g->prefetches.empty());
  EXPECT_TRUE(g->residency.empty());
  EXPECT_EQ(slabs_->stats().discard_calls, 0u);
}

TEST_F(SlabAllocatorTest, FreeSyncDiscardsNothing) {
  discard_every_page();
  EXPECT_EQ(slabs_->free_sync(alloc(64 * MiB)), std::optional<CUresult>(CUDA_SUCCESS));
  EXPECT_TRUE(g->discards.empty());
}

TEST_F(SlabAllocatorTest, TheDiscardIsEnqueuedBeforeTheFreesEvent) {
  discard_every_page();
  // The policy's answers are not what this test follows.
  const auto calls = [] {
    std::vector<std::string> out;
    for (const std::string& c : g->order) {
      if (c != "ask") out.push_back(c);
    }
    return out;
  };
  // The per-thread stream records its event at the free itself.
  const CUdeviceptr a = alloc(64 * MiB, CU_STREAM_PER_THREAD);
  release(a, CU_STREAM_PER_THREAD);
  EXPECT_EQ(calls(), (std::vector<std::string>{"alloc", "free", "discard", "record"}));
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0].stream, CU_STREAM_PER_THREAD);
  // The event covers the merged block: another thread's stream waits for it.
  CUdeviceptr other = 0;
  std::thread([&] {
    ASSERT_EQ(slabs_->allocate(64 * MiB, CU_STREAM_PER_THREAD, &other), CUDA_SUCCESS);
  }).join();
  EXPECT_NE(other, a);
  // Another stream's event is recorded later, when a stream finds no room: after the discard.
  g->order.clear();
  const CUdeviceptr b = alloc(64 * MiB, kS);
  release(b, kS);
  alloc(64 * MiB, kT);
  EXPECT_EQ(calls(), (std::vector<std::string>{"alloc", "free", "discard", "record", "alloc"}));
}

TEST_F(SlabAllocatorTest, AFailingDiscardTurnsDiscardingOffWithOneWarning) {
  discard_every_page();
  const CUdeviceptr a = alloc(4 * MiB);
  alloc(4 * MiB);
  alloc(56 * MiB);  // fills the slab
  release(a);       // discards the pages at 0 and 2 MiB
  ASSERT_EQ(g->discards.size(), 1u);
  testing::internal::CaptureStderr();
  g->discard_fails = true;
  release(a + 4 * MiB);
  g->discard_fails = false;
  release(alloc(8 * MiB, kT));  // another slab: would be discarded
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(g->discards.size(), 1u);
  // The pages discarded before are forgotten: an allocation over them populates nothing.
  EXPECT_EQ(alloc(8 * MiB, kS), a);
  EXPECT_TRUE(g->prefetches.empty());
  size_t warnings = 0;
  for (size_t at = err.find("cuMemDiscardBatchAsync failed"); at != std::string::npos;
       at = err.find("cuMemDiscardBatchAsync failed", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << err;
  EXPECT_EQ(slabs_->stats().discard_calls, 1u);
}

TEST_F(SlabAllocatorTest, AFailingPopulateTurnsDiscardingOff) {
  discard_every_page();
  const CUdeviceptr a = alloc(64 * MiB);
  release(a);
  testing::internal::CaptureStderr();
  g->prefetch_fails = true;
  EXPECT_EQ(alloc(4 * MiB), a);  // the block is still handed out
  g->prefetch_fails = false;
  EXPECT_EQ(alloc(4 * MiB), a + 4 * MiB);  // discarded once, but forgotten now
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cuMemDiscardAndPrefetchBatchAsync failed"), std::string::npos) << err;
  EXPECT_TRUE(g->prefetches.empty());
  release(a);
  EXPECT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(slabs_->stats().populate_calls, 0u);
}

TEST_F(SlabAllocatorTest, TurningDiscardsOffForgetsTheDiscardedPages) {
  discard_every_page();
  const CUdeviceptr a = alloc(64 * MiB);
  release(a);
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::off));
  discard_every_page();
  EXPECT_EQ(alloc(64 * MiB), a);
  EXPECT_TRUE(g->prefetches.empty());
}

TEST_F(SlabAllocatorTest, AGivenBackSlabForgetsItsDiscardedPages) {
  discard_every_page();
  g->source_limit = 128 * MiB;
  g->reuse_bases = true;
  const CUdeviceptr a = alloc(64 * MiB);
  const CUdeviceptr b = alloc(64 * MiB);
  release(a);
  release(b);
  ASSERT_EQ(g->discards.size(), 2u);
  // 100 MiB fits in neither slab: both go back, and the new slab starts where one of them did.
  const CUdeviceptr c = alloc(100 * MiB);
  ASSERT_EQ(g->destroys, 2);
  ASSERT_TRUE(c == a || c == b);
  EXPECT_TRUE(g->prefetches.empty());
}

TEST_F(SlabAllocatorTest, TheLegacyStreamHandleIsTheNullStream) {
  const CUdeviceptr a = alloc(4 * MiB, nullptr);
  release(a, CU_STREAM_LEGACY);
  EXPECT_EQ(alloc(4 * MiB, nullptr), a);
  EXPECT_EQ(g->records, 0);
}

// Random allocations and frees on two streams. A model tracks, per byte range, which stream
// freed it and whether an event recorded after that free has completed; every block handed out
// must be free in the model and usable by the asking stream, and live blocks never overlap.
TEST_F(SlabAllocatorTest, RandomWorkloadNeverHandsOutMemoryAStreamMayStillUse) {
  std::mt19937_64 rng(42);
  struct Live {
    uint64_t size;
    CUstream stream;
  };
  std::map<CUdeviceptr, Live> live;
  // Freed ranges not yet safe for every stream: address -> (end, stream that freed it, the
  // number of event records made before the free).
  struct Freed {
    uint64_t end;
    CUstream stream;
    int records_before;
  };
  std::map<CUdeviceptr, Freed> freed;
  const CUstream streams[2] = {kS, kT};
  for (int step = 0; step < 4000; ++step) {
    if (rng() % 7 == 0) {
      complete_all_events();
      // An event recorded on stream x after a free on x covers it (all are complete now).
      for (auto it = freed.begin(); it != freed.end();) {
        bool covered = false;
        for (const auto& e : g->events) {
          covered |= e->recorded && e->stream == it->second.stream &&
                     e->serial >= it->second.records_before;
        }
        it = covered ? freed.erase(it) : std::next(it);
      }
    }
    if (!live.empty() && rng() % 2 == 0) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const CUstream by = streams[rng() % 2];
      ASSERT_EQ(slabs_->free(it->first, by), std::optional<CUresult>(CUDA_SUCCESS));
      const uint64_t end = it->first + (it->second.size + 511) / 512 * 512;
      freed[it->first] = {end, by, g->records};
      live.erase(it);
      continue;
    }
    const uint64_t size = rng() % 3 == 0 ? 1 + rng() % (64 * KiB) : 1 + rng() % (24 * MiB);
    const CUstream on = streams[rng() % 2];
    const CUdeviceptr p = alloc(size, on);
    const uint64_t end = p + (size + 511) / 512 * 512;
    // No overlap with live blocks.
    auto next = live.lower_bound(p);
    if (next != live.end()) {
      ASSERT_LE(end, next->first);
    }
    if (next != live.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + (prev->second.size + 511) / 512 * 512, p);
    }
    // Overlapping freed ranges must have been freed on this stream. The part reused is in
    // order on its own stream again; what lies either side stays pending.
    std::vector<std::pair<CUdeviceptr, Freed>> pieces;
    for (auto it = freed.begin(); it != freed.end();) {
      if (it->first < end && p < it->second.end) {
        ASSERT_EQ(it->second.stream, on) << "step " << step;
        if (it->first < p)
          pieces.push_back({it->first, {p, it->second.stream, it->second.records_before}});
        if (end < it->second.end) pieces.push_back({end, it->second});
        it = freed.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [a, f] : pieces) freed[a] = f;
    live[p] = {size, on};
    ASSERT_EQ(slabs_->live_block(p), (std::pair<uint64_t, uint64_t>(p, end)));
  }
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.blocks_in_use, live.size());
  EXPECT_LE(s.slab_bytes, s.slab_bytes_peak);
}

// Random allocations and frees on two streams, a random policy, slabs given back and made again
// at the same bases. A model of the discarded pages checks that a discard never touches a live
// block nor a page discarded already, and that an allocation populates exactly the discarded
// pages it overlaps (none of which overlaps another live block), in at most one call each.
TEST_F(SlabAllocatorTest, RandomWorkloadNeverDiscardsOrPopulatesLiveData) {
  ASSERT_TRUE(slabs_->set_discard_mode(DiscardMode::planned));
  std::mt19937_64 rng(7);
  g->accept = [&rng](uint64_t) { return rng() % 3 != 0; };
  g->source_limit = 256 * MiB;
  g->reuse_bases = true;
  std::map<CUdeviceptr, uint64_t> live;  // address -> rounded size
  uint64_t live_bytes = 0;
  int refused = 0;
  std::set<uint64_t> discarded;
  size_t destroyed_seen = 0;
  const auto overlaps_live = [&](uint64_t address, uint64_t bytes, CUdeviceptr except) {
    for (const auto& [p, size] : live) {
      if (p != except && p < address + bytes && address < p + size) return true;
    }
    return false;
  };
  const auto pages_of = [](const DriverCall& call) {
    std::vector<uint64_t> out;
    for (const auto& [address, bytes] : call.ranges) {
      EXPECT_EQ(address % (2 * MiB), 0u);
      EXPECT_EQ(bytes % (2 * MiB), 0u);
      for (uint64_t page = address; page < address + bytes; page += 2 * MiB) out.push_back(page);
    }
    return out;
  };
  const CUstream streams[2] = {kS, kT};
  for (int step = 0; step < 4000; ++step) {
    if (rng() % 7 == 0) complete_all_events();
    const size_t discards_before = g->discards.size();
    const size_t prefetches_before = g->prefetches.size();
    if (!live.empty() && (live_bytes > 128 * MiB || rng() % 2 == 0)) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const CUdeviceptr p = it->first;
      live_bytes -= it->second;
      live.erase(it);
      if (rng() % 50 == 0) {
        ASSERT_EQ(slabs_->free_sync(p), std::optional<CUresult>(CUDA_SUCCESS));
        ASSERT_EQ(g->discards.size(), discards_before) << "step " << step;
      } else {
        release(p, streams[rng() % 2]);
      }
      ASSERT_LE(g->discards.size(), discards_before + 1) << "step " << step;
      ASSERT_EQ(g->prefetches.size(), prefetches_before) << "step " << step;
      for (size_t i = discards_before; i < g->discards.size(); ++i) {
        for (uint64_t page : pages_of(g->discards[i])) {
          ASSERT_FALSE(overlaps_live(page, 2 * MiB, 0)) << "step " << step;
          ASSERT_TRUE(discarded.insert(page).second) << "discarded twice, step " << step;
        }
      }
      continue;
    }
    const uint64_t size = rng() % 3 == 0 ? 1 + rng() % (64 * KiB) : 1 + rng() % (24 * MiB);
    CUdeviceptr p = 0;
    const CUresult status = slabs_->allocate(size, streams[rng() % 2], &p);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) {  // the limit, with fragmentation: nothing happens
      ++refused;
      ASSERT_EQ(g->discards.size(), discards_before);
      ASSERT_EQ(g->prefetches.size(), prefetches_before);
      continue;
    }
    ASSERT_EQ(status, CUDA_SUCCESS);
    const uint64_t rounded = (size + 511) / 512 * 512;
    live[p] = rounded;
    live_bytes += rounded;
    // Slabs given back forget their pages (also those made again at the same base since).
    for (size_t i = destroyed_seen; i < g->destroyed_slabs.size(); ++i) {
      const auto& [base, bytes] = g->destroyed_slabs[i];
      std::erase_if(discarded, [&](uint64_t page) { return page >= base && page < base + bytes; });
    }
    destroyed_seen = g->destroyed_slabs.size();
    ASSERT_EQ(g->discards.size(), discards_before) << "step " << step;
    ASSERT_LE(g->prefetches.size(), prefetches_before + 1) << "step " << step;
    for (size_t i = prefetches_before; i < g->prefetches.size(); ++i) {
      for (uint64_t page : pages_of(g->prefetches[i])) {
        ASSERT_EQ(discarded.erase(page), 1u) << "populated a page never discarded, step " << step;
        ASSERT_TRUE(page < p + rounded && p < page + 2 * MiB) << "step " << step;
        ASSERT_FALSE(overlaps_live(page, 2 * MiB, p)) << "step " << step;
      }
    }
    for (uint64_t page : discarded) {
      ASSERT_FALSE(page < p + rounded && p < page + 2 * MiB)
          << "a discarded page left unpopulated under a new block, step " << step;
    }
  }
  const SlabStats s = slabs_->stats();
  EXPECT_GT(s.discard_calls, 100u);
  EXPECT_GT(s.populate_calls, 100u);
  EXPECT_GT(s.slabs_released, 0u);
  EXPECT_LT(refused, 400);
  EXPECT_EQ(s.discard_calls, g->discards.size());
  EXPECT_EQ(s.populate_calls, g->prefetches.size());
}

// --- placement (set_placement) -------------------------------------------------------------------

Placement placement_of(std::vector<uint64_t> sizes, std::vector<uint64_t> offsets,
                       uint64_t arena_bytes) {
  Placement p;
  p.arena_bytes = arena_bytes;
  p.sizes = std::move(sizes);
  p.offsets = std::move(offsets);
  for (uint64_t offset : p.offsets) p.placed += offset != Placement::kUnplaced ? 1 : 0;
  return p;
}

// Sets `p` on `slabs` and returns the arena's base: the slab the source made for it.
CUdeviceptr set_arena(SlabAllocator& slabs, Placement p) {
  const std::map<CUdeviceptr, uint64_t> before = g->slabs;
  EXPECT_TRUE(slabs.set_placement(std::move(p), [] { return uint64_t{9}; }));
  for (const auto& [base, bytes] : g->slabs) {
    if (!before.contains(base)) return base;
  }
  ADD_FAILURE() << "set_placement made no slab";
  return 0;
}

bool inside(uint64_t address, uint64_t base, uint64_t bytes) {
  return address >= base && address < base + bytes;
}

bool meet(uint64_t a, uint64_t a_bytes, uint64_t b, uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

TEST_F(SlabAllocatorTest, SetPlacementMakesOneArenaOfTheSizeRoundedTo2MiB) {
  const Placement p = placement_of({8 * MiB, 4 * MiB, 8 * MiB}, {0, 8 * MiB, 0}, 12 * MiB + 1000);
  const CUdeviceptr arena = set_arena(*slabs_, p);
  EXPECT_EQ(g->created, std::vector<uint64_t>{14 * MiB});
  EXPECT_EQ(g->contexts, std::vector<uint64_t>{9});
  EXPECT_TRUE(slabs_->owns(arena + 14 * MiB - 1));
  EXPECT_FALSE(slabs_->owns(arena + 14 * MiB));
  SlabStats s = slabs_->stats();
  EXPECT_EQ(s.arena_bytes, 14 * MiB);
  EXPECT_EQ(s.slabs, 1u);
  EXPECT_EQ(s.slab_bytes, 14 * MiB);
  EXPECT_EQ(s.slabs_created, 1u);
  EXPECT_EQ(alloc(8 * MiB), arena);
  EXPECT_EQ(to_json(slabs_->stats()).at("arena_bytes"), 14 * MiB);
}

// A second placement replaces the first: its arena serves the sequence, the old one takes no new
// block and goes back once wholly free.
TEST_F(SlabAllocatorTest, ASecondPlacementReplacesTheFirstAndItsArenaGoesBack) {
  const CUdeviceptr old_arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  const CUdeviceptr a = alloc(8 * MiB);
  ASSERT_EQ(a, old_arena);
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({4 * MiB}, {0}, 4 * MiB));
  ASSERT_NE(arena, old_arena);
  EXPECT_EQ(slabs_->stats().arena_bytes, 4 * MiB);
  EXPECT_EQ(alloc(4 * MiB), arena);
  const CUdeviceptr b = alloc(8 * MiB);  // unmatched now: an ordinary slab, not the old arena
  EXPECT_FALSE(inside(b, old_arena, 8 * MiB));
  EXPECT_EQ(g->destroys, 0);
  release(a);
  complete_all_events();
  alloc(4 * KiB);  // records the event for the old arena's free block
  complete_all_events();
  alloc(4 * KiB);
  EXPECT_EQ(g->destroys, 1);
  EXPECT_EQ(g->slabs.count(old_arena), 0u);
  EXPECT_TRUE(slabs_->owns(arena));
}

TEST_F(SlabAllocatorTest, AnEmptyPlacementOrOneWithoutAnArenaIsRefused) {
  EXPECT_FALSE(slabs_->set_placement(Placement{}));
  EXPECT_FALSE(slabs_->set_placement(placement_of({}, {}, 8 * MiB)));
  EXPECT_FALSE(slabs_->set_placement(placement_of({8 * MiB}, {0}, 0)));
  EXPECT_TRUE(g->created.empty());
  EXPECT_EQ(slabs_->stats().arena_bytes, 0u);
  // The source refuses the arena: refused, and large requests are served as before.
  g->source_limit = 8 * MiB;
  EXPECT_FALSE(slabs_->set_placement(placement_of({8 * MiB}, {0}, 16 * MiB)));
  EXPECT_EQ(slabs_->stats().arena_bytes, 0u);
  g->source_limit = UINT64_MAX;
  alloc(8 * MiB);
  EXPECT_EQ(g->created.back(), 64 * MiB);
  EXPECT_EQ(slabs_->stats().placement_unmatched, 0u);
  // Nothing was changed by the refusals: a good placement still takes.
  set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  EXPECT_EQ(slabs_->stats().arena_bytes, 8 * MiB);
}

TEST_F(SlabAllocatorTest, PlannedAllocationsLandAtTheirOffsetsEveryIteration) {
  // a, b; a freed; c where a was; d; all freed.
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB, 4 * MiB, 8 * MiB, 2 * MiB},
                                                            {0, 8 * MiB, 0, 12 * MiB}, 14 * MiB));
  std::vector<std::vector<CUdeviceptr>> rounds;
  for (int round = 0; round < 3; ++round) {
    const CUdeviceptr a = alloc(8 * MiB);
    const CUdeviceptr b = alloc(4 * MiB);
    release(a);
    const CUdeviceptr c = alloc(8 * MiB);
    const CUdeviceptr d = alloc(2 * MiB);
    release(b);
    release(c);
    release(d);
    rounds.push_back({a, b, c, d});
  }
  EXPECT_EQ(rounds[0], (std::vector<CUdeviceptr>{arena, arena + 8 * MiB, arena, arena + 12 * MiB}));
  EXPECT_EQ(rounds[1], rounds[0]);
  EXPECT_EQ(rounds[2], rounds[0]);
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.placed, 12u);
  EXPECT_EQ(s.placement_taken, 0u);
  EXPECT_EQ(s.placement_unmatched, 0u);
  EXPECT_EQ(g->created.size(), 1u);  // the arena held everything
  EXPECT_EQ(g->records, 0);          // one stream, and the arena's frees record nothing
}

TEST_F(SlabAllocatorTest, ARequestTakesTheNextEntryOfItsSize) {
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB, 4 * MiB, 8 * MiB, 2 * MiB},
                                                            {0, 8 * MiB, 0, 12 * MiB}, 14 * MiB));
  const CUdeviceptr a = alloc(8 * MiB);
  EXPECT_EQ(a, arena);
  // The program skips b and c this time: d's entry is the next 2 MiB one.
  EXPECT_EQ(alloc(2 * MiB), arena + 12 * MiB);
  release(a);
  // The sequence goes on after d's entry, wrapping round to a's.
  EXPECT_EQ(alloc(8 * MiB), arena);
  EXPECT_EQ(slabs_->stats().placed, 3u);
}

TEST_F(SlabAllocatorTest, TheSequenceIsSearchedOnlyWithinTheLookahead) {
  // 70 entries of 2 MiB, but the 65th is 8 MiB; each has a range of its own.
  std::vector<uint64_t> sizes(70, 2 * MiB);
  std::vector<uint64_t> offsets;
  for (uint64_t i = 0; i < 70; ++i) offsets.push_back(i * 8 * MiB);
  const size_t far = SlabAllocator::kPlacementLookahead;
  sizes[far] = 8 * MiB;
  const CUdeviceptr arena = set_arena(*slabs_, placement_of(sizes, offsets, 70 * 8 * MiB));
  const CUdeviceptr early = alloc(8 * MiB);  // entries 0 to 63 looked at: no match
  EXPECT_FALSE(inside(early, arena, 70 * 8 * MiB));
  EXPECT_EQ(slabs_->stats().placement_unmatched, 1u);
  EXPECT_EQ(alloc(2 * MiB), arena);  // entry 0
  EXPECT_EQ(alloc(8 * MiB), arena + far * 8 * MiB);
  EXPECT_EQ(slabs_->stats().placed, 2u);
}

TEST_F(SlabAllocatorTest, AnUnmatchedSizeGoesToAnOrdinarySlab) {
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  const CUdeviceptr p = alloc(6 * MiB);
  EXPECT_FALSE(inside(p, arena, 8 * MiB));
  EXPECT_EQ(g->created, (std::vector<uint64_t>{8 * MiB, 64 * MiB}));
  SlabStats s = slabs_->stats();
  EXPECT_EQ(s.placement_unmatched, 1u);
  EXPECT_EQ(s.placed, 0u);
  EXPECT_EQ(alloc(8 * MiB), arena);  // the expected size still follows the placement
  s = slabs_->stats();
  EXPECT_EQ(s.placed, 1u);
  EXPECT_EQ(s.placement_unmatched, 1u);
}

TEST_F(SlabAllocatorTest, ATakenRangeSendsTheAllocationElsewhereWithoutOverlap) {
  // Two entries whose ranges overlap, as a stale placement's might.
  const CUdeviceptr arena =
      set_arena(*slabs_, placement_of({8 * MiB, 8 * MiB}, {0, 4 * MiB}, 12 * MiB));
  const CUdeviceptr a = alloc(8 * MiB);
  ASSERT_EQ(a, arena);
  const CUdeviceptr b = alloc(8 * MiB);  // [4, 12) MiB holds a's second half
  EXPECT_FALSE(meet(b, 8 * MiB, a, 8 * MiB));
  EXPECT_FALSE(inside(b, arena, 12 * MiB));
  EXPECT_EQ(slabs_->stats().placement_taken, 1u);
  const CUdeviceptr c = alloc(8 * MiB);  // entry 0 again: a, the previous instance, still lives
  EXPECT_FALSE(meet(c, 8 * MiB, a, 8 * MiB));
  EXPECT_FALSE(meet(c, 8 * MiB, b, 8 * MiB));
  EXPECT_EQ(slabs_->stats().placement_taken, 2u);
  release(a);
  EXPECT_EQ(alloc(8 * MiB), arena + 4 * MiB);  // entry 1, free now
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.placed, 2u);
  EXPECT_EQ(s.placement_taken, 2u);
  EXPECT_EQ(s.placement_unmatched, 0u);
}

TEST_F(SlabAllocatorTest, APlannedRangeReachingIntoALiveBlockIsTaken) {
  const CUdeviceptr arena =
      set_arena(*slabs_, placement_of({4 * MiB, 8 * MiB}, {4 * MiB, 0}, 8 * MiB));
  const CUdeviceptr a = alloc(4 * MiB);
  ASSERT_EQ(a, arena + 4 * MiB);  // the free space in front stays free
  EXPECT_EQ(slabs_->live_block(arena), std::nullopt);
  const CUdeviceptr b = alloc(8 * MiB);  // [0, 8) MiB: only [0, 4) is free
  EXPECT_FALSE(meet(b, 8 * MiB, a, 4 * MiB));
  EXPECT_FALSE(inside(b, arena, 8 * MiB));
  EXPECT_EQ(slabs_->stats().placement_taken, 1u);
  using Range = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(slabs_->live_block(a), Range(a, a + 4 * MiB));
}

TEST_F(SlabAllocatorTest, AnUnplacedEntryGoesWhereItWouldHaveGone) {
  const CUdeviceptr arena =
      set_arena(*slabs_, placement_of({16 * MiB, 8 * MiB}, {Placement::kUnplaced, 0}, 8 * MiB));
  const CUdeviceptr a = alloc(16 * MiB);
  EXPECT_FALSE(inside(a, arena, 8 * MiB));
  EXPECT_EQ(slabs_->stats().placement_taken, 1u);
  EXPECT_EQ(alloc(8 * MiB), arena);  // the sequence moved on past the unplaced entry
  EXPECT_EQ(slabs_->stats().placed, 1u);
}

TEST_F(SlabAllocatorTest, SmallRequestsNeverGoToTheArena) {
  // A placement that (wrongly) plans small sizes too, with free arena space for them.
  const CUdeviceptr arena = set_arena(
      *slabs_,
      placement_of({512 * KiB, SlabAllocator::kSmallLimit, 8 * MiB}, {0, 0, 2 * MiB}, 10 * MiB));
  const CUdeviceptr s1 = alloc(512 * KiB);
  const CUdeviceptr s2 = alloc(SlabAllocator::kSmallLimit);
  EXPECT_FALSE(inside(s1, arena, 10 * MiB));
  EXPECT_FALSE(inside(s2, arena, 10 * MiB));
  EXPECT_EQ(g->created.back(), SlabAllocator::kSmallSlab);
  SlabStats s = slabs_->stats();
  EXPECT_EQ(s.placed, 0u);
  EXPECT_EQ(s.placement_taken, 0u);
  EXPECT_EQ(s.placement_unmatched, 0u);
  EXPECT_EQ(alloc(8 * MiB), arena + 2 * MiB);
  EXPECT_EQ(slabs_->stats().placed, 1u);
}

TEST_F(SlabAllocatorTest, AnOffsetPastTheArenasEndIsTakenNeverSpillingOver) {
  // A wrong placement: the second entry's range ends beyond the arena.
  const CUdeviceptr arena =
      set_arena(*slabs_, placement_of({4 * MiB, 8 * MiB}, {0, 6 * MiB}, 8 * MiB));
  EXPECT_EQ(alloc(4 * MiB), arena);
  const CUdeviceptr b = alloc(8 * MiB);
  EXPECT_FALSE(meet(b, 8 * MiB, arena, 8 * MiB));
  EXPECT_TRUE(slabs_->owns(b));
  EXPECT_EQ(slabs_->stats().placement_taken, 1u);
  using Range = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(slabs_->live_block(b), Range(b, b + 8 * MiB));
}

TEST_F(SlabAllocatorTest, FindBySizeNeverUsesTheArena) {
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 64 * MiB));
  const CUdeviceptr a = alloc(4 * MiB);  // unmatched; the arena is empty but not looked at
  EXPECT_FALSE(inside(a, arena, 64 * MiB));
  EXPECT_EQ(g->created, (std::vector<uint64_t>{64 * MiB, 64 * MiB}));
  const CUdeviceptr b = alloc(8 * MiB);
  ASSERT_EQ(b, arena);
  const CUdeviceptr c = alloc(8 * MiB);  // matched but taken: 56 MiB free in the arena, unused
  EXPECT_FALSE(inside(c, arena, 64 * MiB));
  const CUdeviceptr d = alloc(52 * MiB);  // fills the second slab
  EXPECT_FALSE(inside(d, arena, 64 * MiB));
  EXPECT_EQ(g->created.size(), 2u);
  const CUdeviceptr e = alloc(20 * MiB);  // a third slab rather than the arena's free space
  EXPECT_FALSE(inside(e, arena, 64 * MiB));
  EXPECT_EQ(g->created.size(), 3u);
  // Nothing but b in the arena.
  for (uint64_t at = arena + 8 * MiB; at < arena + 64 * MiB; at += MiB) {
    EXPECT_EQ(slabs_->live_block(at), std::nullopt);
  }
}

TEST_F(SlabAllocatorTest, AnOldLargeSlabWhollyFreedIsGivenBackOnceItsEventCompleted) {
  const CUdeviceptr x = alloc(8 * MiB);  // a 64 MiB slab, from before the placement
  const CUdeviceptr y = alloc(8 * MiB);
  ASSERT_EQ(y, x + 8 * MiB);
  const CUdeviceptr small = alloc(4 * KiB);
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({16 * MiB}, {0}, 16 * MiB));
  release(x);  // half free: nothing to give back
  release(alloc(4 * KiB));
  EXPECT_EQ(g->records, 0);
  release(y, kS);  // wholly free: the next allocation records an event on the freeing stream
  EXPECT_EQ(g->records, 0);
  release(alloc(4 * KiB));
  ASSERT_EQ(g->records, 1);
  EXPECT_EQ(g->events[0]->stream, kS);
  release(alloc(4 * KiB));  // the event has not completed: kept, and no second event
  EXPECT_EQ(g->records, 1);
  EXPECT_EQ(g->destroys, 0);
  EXPECT_TRUE(slabs_->owns(x));
  complete_all_events();
  g->residency.clear();
  EXPECT_EQ(g->destroys, 0);  // only an allocation gives it back
  alloc(4 * KiB);
  EXPECT_EQ(g->destroys, 1);
  EXPECT_FALSE(slabs_->owns(x));
  EXPECT_EQ(g->slabs.count(x), 0u);
  using R = std::tuple<uint64_t, uint64_t, bool>;
  EXPECT_EQ(g->residency, (std::vector<R>{{x, 64 * MiB, false}}));
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.slabs_released, 1u);
  EXPECT_EQ(s.slabs, 2u);  // the small slab and the (wholly free) arena stay
  EXPECT_EQ(s.slab_bytes, SlabAllocator::kSmallSlab + 16 * MiB);
  EXPECT_TRUE(slabs_->owns(arena));
  EXPECT_TRUE(slabs_->owns(small));
}

TEST_F(SlabAllocatorTest, AnOldSlabIsGivenBackAtTheNextAllocationWhenItsEventCompletesAtOnce) {
  g->events_complete_at_once = true;
  const CUdeviceptr x = alloc(100 * MiB);  // a slab of its size
  set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  release(x, kT);
  EXPECT_EQ(g->records, 0);
  alloc(8 * MiB);  // records the event on t, which completes at once
  ASSERT_EQ(g->records, 1);
  EXPECT_EQ(g->events[0]->stream, kT);
  EXPECT_EQ(g->destroys, 0);
  alloc(4 * KiB);
  EXPECT_EQ(g->destroys, 1);
  using R = std::tuple<uint64_t, uint64_t, bool>;
  EXPECT_EQ(g->residency, (std::vector<R>{{x, 100 * MiB, false}}));
  EXPECT_EQ(slabs_->stats().slab_bytes, 8 * MiB + SlabAllocator::kSmallSlab);
}

TEST_F(SlabAllocatorTest, OnlyTheSlabsThePlacementReplacedAreGivenBack) {
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  // Unmatched, every iteration: its slab, made after the placement, stays (no churn).
  for (int i = 0; i < 4; ++i) {
    const CUdeviceptr a = alloc(20 * MiB);
    release(a);
    complete_all_events();
    release(alloc(8 * MiB));
    EXPECT_TRUE(slabs_->owns(a));
  }
  EXPECT_EQ(g->destroys, 0);
  EXPECT_EQ(g->created.size(), 2u);  // the arena and one 64 MiB slab
  EXPECT_TRUE(slabs_->owns(arena));
}

TEST_F(SlabAllocatorTest, AnOldSlabFreedOnTwoStreamsIsGivenBackOnceBothPassedTheirFrees) {
  const CUdeviceptr x = alloc(32 * MiB, kS);
  const CUdeviceptr y = alloc(32 * MiB, kT);  // the 64 MiB slab is full
  ASSERT_EQ(y, x + 32 * MiB);
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  release(x, kS);
  release(y, kT);               // the slab is wholly free now, in two blocks of two streams
  release(alloc(8 * MiB, kS));  // an event on each stream
  std::set<CUstream> recorded_on;
  for (const auto& e : g->events) {
    if (e->recorded) recorded_on.insert(e->stream);
  }
  EXPECT_EQ(recorded_on, (std::set<CUstream>{kS, kT}));
  EXPECT_EQ(g->destroys, 0);
  complete_all_events();
  release(alloc(8 * MiB, kS));
  EXPECT_EQ(g->destroys, 1);
  EXPECT_FALSE(slabs_->owns(x));
  EXPECT_TRUE(slabs_->owns(arena));
}

TEST_F(SlabAllocatorTest, TheArenaIsNeverGivenBackUnderPressure) {
  g->source_limit = 8 * MiB + 64 * MiB + 2 * MiB;
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  const CUdeviceptr big = alloc(64 * MiB);  // unmatched: 2 MiB left in the source
  EXPECT_FALSE(inside(big, arena, 8 * MiB));
  // No room for 4 MiB outside the (wholly free) arena: the arena stays, the request fails.
  CUdeviceptr p = 0;
  EXPECT_EQ(slabs_->allocate(4 * MiB, kS, &p), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(g->destroys, 0);
  EXPECT_EQ(g->slabs.count(arena), 1u);
  EXPECT_TRUE(slabs_->owns(arena));
  EXPECT_EQ(slabs_->stats().pressure_waits, 1u);
  // The arena still serves its sequence.
  EXPECT_EQ(alloc(8 * MiB), arena);
  // Under pressure a wholly free ordinary slab goes back, the arena does not.
  release(big);
  release(arena);
  EXPECT_NE(alloc(66 * MiB), 0u);  // fits in no slab: `big` goes, then it fits
  EXPECT_EQ(g->destroys, 1);
  EXPECT_EQ(g->slabs.count(big), 0u);
  EXPECT_EQ(g->slabs.count(arena), 1u);
}

TEST_F(SlabAllocatorTest, APlannedRangeAnotherStreamFreedWaitsForItsEvent) {
  const CUdeviceptr arena = set_arena(*slabs_, placement_of({8 * MiB}, {0}, 8 * MiB));
  const CUdeviceptr a = alloc(8 * MiB, kS);
  ASSERT_EQ(a, arena);
  release(a, kS);
  const CUdeviceptr b = alloc(8 * MiB, kT);  // s may still use the range
  EXPECT_NE(b, arena);
  EXPECT_FALSE(inside(b, arena, 8 * MiB));
  EXPECT_EQ(slabs_->stats().placement_taken, 1u);
  // t found no room: an event was recorded on s for the arena's free block.
  ASSERT_GE(g->records, 1);
  EXPECT_EQ(g->events[0]->stream, kS);
  const CUdeviceptr c = alloc(8 * MiB, kT);  // still pending: elsewhere again
  EXPECT_FALSE(inside(c, arena, 8 * MiB));
  EXPECT_EQ(slabs_->stats().placement_taken, 2u);
  complete_all_events();
  EXPECT_EQ(alloc(8 * MiB, kT), arena);  // s passed the free
  const SlabStats s = slabs_->stats();
  EXPECT_EQ(s.placed, 2u);
  EXPECT_EQ(s.placement_taken, 2u);
}

// Three iterations recorded through `lifetime` without a placement, planned with
// plan_placement, then followed: every large allocation lands at its planned address, the same
// in every iteration, and the slabs used before go back.
TEST_F(SlabAllocatorTest, APlanFromRecordedIterationsIsFollowedExactly) {
  alloc(40 * MiB);  // a weight, live throughout
  CUdeviceptr gradient = 0;
  std::vector<BlockEvent> events;
  uint64_t iteration = 0;
  const auto run = [&] {
    const size_t from = g->lifetimes.size();
    std::vector<CUdeviceptr> got;
    if (gradient != 0) release(gradient);  // the previous iteration's
    const CUdeviceptr a1 = alloc(24 * MiB);
    const CUdeviceptr a2 = alloc(24 * MiB);
    const CUdeviceptr a3 = alloc(10 * MiB);
    const CUdeviceptr tiny = alloc(100 * KiB);
    release(a3);
    gradient = alloc(30 * MiB);
    release(a2);
    const CUdeviceptr a4 = alloc(12 * MiB);
    release(a1);
    release(a4);
    release(tiny);
    for (size_t i = from; i < g->lifetimes.size(); ++i) {
      const auto& [address, bytes, freed] = g->lifetimes[i];
      events.push_back({.when = iteration * 1000 + (i - from),
                        .address = address,
                        .bytes = bytes,
                        .freed = freed});
    }
    ++iteration;
    return std::vector<CUdeviceptr>{a1, a2, a3, gradient, a4};
  };
  for (int i = 0; i < 3; ++i) run();
  std::string why;
  auto plan = plan_placement(events, 2000, 1000, SlabAllocator::kSmallLimit,
                             SlabAllocator::kAlignment, &why);
  ASSERT_TRUE(plan.has_value()) << why;
  ASSERT_EQ(plan->placed, 5u);
  const std::vector<uint64_t> offsets = plan->offsets;
  const uint64_t arena_bytes = plan->arena_bytes;
  const uint64_t bytes_before = slabs_->stats().slab_bytes;
  const CUdeviceptr arena = set_arena(*slabs_, std::move(*plan));
  const std::vector<CUdeviceptr> first = run();
  const std::vector<CUdeviceptr> second = run();
  for (size_t j = 0; j < first.size(); ++j) EXPECT_EQ(first[j], arena + offsets[j]) << j;
  EXPECT_EQ(second, first);
  SlabStats s = slabs_->stats();
  EXPECT_EQ(s.placed, 10u);
  EXPECT_EQ(s.placement_taken, 0u);
  EXPECT_EQ(s.placement_unmatched, 0u);
  // The weight keeps its slab; the activations' slabs, wholly free, go at the next allocation.
  complete_all_events();
  alloc(4 * KiB);
  s = slabs_->stats();
  EXPECT_GE(s.slabs_released, 1u);
  EXPECT_EQ(g->destroys, static_cast<int>(s.slabs_released));
  // What stays: the weight's slab, the small slab, the arena.
  EXPECT_EQ(s.slab_bytes, 64 * MiB + SlabAllocator::kSmallSlab +
                              (arena_bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB));
  EXPECT_LT(s.slab_bytes, bytes_before + arena_bytes);
}

}  // namespace
}  // namespace umswap
