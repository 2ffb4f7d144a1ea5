// SlabAllocator over fake events and a fake slab source: sizes, alignment and exact blocks,
// stream-ordered reuse (same stream at once, another stream only after an event), merging,
// pressure (waiting for events, giving slabs back), the per-thread stream, cudaFree, and a random
// workload checked against a model of what each stream may reuse.
#include "umswap/allocator/slab_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

namespace umswap {
namespace {

constexpr uint64_t KiB = uint64_t{1} << 10;
constexpr uint64_t MiB = uint64_t{1} << 20;
const CUstream kS = reinterpret_cast<CUstream>(uintptr_t{0x5a});
const CUstream kT = reinterpret_cast<CUstream>(uintptr_t{0x5b});

struct FakeEvent {
  CUstream stream = nullptr;
  bool recorded = false;
  bool complete = false;
  int serial = 0;  // the value of Fakes::records when it was last recorded
};

// Everything the fakes see; recreated for every test.
struct Fakes {
  std::vector<std::unique_ptr<FakeEvent>> events;
  bool events_complete_at_once = false;  // a record on an idle stream completes at once
  int records = 0;
  int synchronizes = 0;
  int ctx_synchronizes = 0;
  int destroyed = 0;
  // The slab source.
  uint64_t next = 0x7f0000000000;
  uint64_t source_limit = UINT64_MAX;  // bytes of live slabs the source allows
  uint64_t live = 0;
  std::map<CUdeviceptr, uint64_t> slabs;
  std::vector<uint64_t> created;  // sizes, in order
  std::vector<uint64_t> contexts;
  int destroys = 0;
  // Discards and populating prefetches: (address, bytes, stream) and what residency heard.
  std::vector<std::tuple<uint64_t, uint64_t, CUstream>> discards, prefetches;
  std::vector<std::tuple<uint64_t, uint64_t, bool>> residency;
  bool discard_fails = false;
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
CUresult CUDAAPI fake_ctx_synchronize() {
  ++g->ctx_synchronizes;
  for (auto& e : g->events) e->complete = e->recorded;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_discard(CUdeviceptr* ptrs, size_t* sizes, size_t count, unsigned long long,
                              CUstream stream) {
  if (g->discard_fails) return CUDA_ERROR_NOT_SUPPORTED;
  for (size_t i = 0; i < count; ++i) g->discards.emplace_back(ptrs[i], sizes[i], stream);
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
  for (size_t i = 0; i < count; ++i) g->prefetches.emplace_back(ptrs[i], sizes[i], stream);
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
                *out = g->next;
                g->next += bytes + 64 * MiB;  // gaps: slabs are never adjacent
                g->live += bytes;
                g->slabs[*out] = bytes;
                g->created.push_back(bytes);
                g->contexts.push_back(context);
                return CUDA_SUCCESS;
              },
          .destroy =
              [](CUdeviceptr base) {
                g->live -= g->slabs.at(base);
                g->slabs.erase(base);
                ++g->destroys;
              },
          .residency = [](uint64_t address, uint64_t bytes,
                          bool on_gpu) { g->residency.emplace_back(address, bytes, on_gpu); }};
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

  CUdeviceptr alloc(uint64_t bytes, CUstream stream = kS) {
    CUdeviceptr p = 0;
    EXPECT_EQ(slabs_->allocate(bytes, stream, &p, [] { return uint64_t{7}; }), CUDA_SUCCESS)
        << bytes;
    return p;
  }
  void release(CUdeviceptr p, CUstream stream = kS) {
    EXPECT_EQ(slabs_->free(p, stream), std::optional<CUresult>(CUDA_SUCCESS));
  }

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

// --- UMSWAP_DISCARD_FREED ------------------------------------------------------------------------

TEST_F(SlabAllocatorTest, DiscardIsOffByDefault) {
  release(alloc(8 * MiB));
  EXPECT_TRUE(g->discards.empty());
  EXPECT_TRUE(g->prefetches.empty());
}

TEST_F(SlabAllocatorTest, AFreeDiscardsOnlyTheWhole2MiBPagesInsideTheBlock) {
  ASSERT_TRUE(slabs_->set_discard_freed(true));
  const CUdeviceptr a = alloc(MiB + 512, kS);  // [base, base + 1 MiB + 512): no whole page
  const CUdeviceptr b = alloc(7 * MiB, kS);    // [base + 1 MiB + 512, ...): pages 2..8 MiB
  ASSERT_EQ(g->slabs.count(a), 1u);            // a starts the (2 MiB aligned) slab
  g->prefetches.clear();
  release(a, kS);
  EXPECT_TRUE(g->discards.empty());
  release(b, kS);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(g->discards[0], std::make_tuple(a + 2 * MiB, 6 * MiB, kS));
  EXPECT_EQ(g->residency.back(), std::make_tuple(a + 2 * MiB, 6 * MiB, false));
  EXPECT_EQ(slabs_->stats().discarded_bytes, 6 * MiB);
}

TEST_F(SlabAllocatorTest, TheLegacyStreamDiscardsOnThePerThreadStream) {
  ASSERT_TRUE(slabs_->set_discard_freed(true));
  const CUdeviceptr a = alloc(64 * MiB, nullptr);
  release(a, nullptr);
  ASSERT_EQ(g->discards.size(), 1u);
  EXPECT_EQ(std::get<2>(g->discards[0]), CU_STREAM_PER_THREAD);
}

TEST_F(SlabAllocatorTest, AnAllocationPopulatesItsWholePagesInItsStream) {
  ASSERT_TRUE(slabs_->set_discard_freed(true));
  const CUdeviceptr a = alloc(5 * MiB, kT);
  ASSERT_EQ(g->prefetches.size(), 1u);
  EXPECT_EQ(g->prefetches[0], std::make_tuple(a, 4 * MiB, kT));
  EXPECT_EQ(g->residency.back(), std::make_tuple(a, 4 * MiB, true));
  alloc(64 * MiB, nullptr);  // the legacy stream: on the per-thread stream
  EXPECT_EQ(std::get<2>(g->prefetches.back()), CU_STREAM_PER_THREAD);
  alloc(4096, kT);  // a small block has no whole page
  EXPECT_EQ(g->prefetches.size(), 2u);
}

TEST_F(SlabAllocatorTest, AFailingDiscardTurnsDiscardingOff) {
  ASSERT_TRUE(slabs_->set_discard_freed(true));
  g->discard_fails = true;
  release(alloc(8 * MiB));
  g->discard_fails = false;
  g->prefetches.clear();
  release(alloc(8 * MiB));
  EXPECT_TRUE(g->discards.empty());
  EXPECT_TRUE(g->prefetches.empty());
}

TEST_F(SlabAllocatorTest, DiscardNeedsItsDriverFunctions) {
  DriverApi d = fake_driver();
  d.mem_discard_batch_async = nullptr;
  SlabAllocator without(d, fake_source());
  EXPECT_FALSE(without.set_discard_freed(true));
  EXPECT_TRUE(without.set_discard_freed(false));
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

}  // namespace
}  // namespace umswap
