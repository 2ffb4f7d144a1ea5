// VmmAllocator (engine vmm's allocations) over the fake driver of the vmm tests, which simulates
// physical memory (tests/vmm/fake_vmm_driver.h), and fake events whose completion each test
// decides: allocations are ranges placed on GPU chunks then host chunks and registered, plain
// frees synchronize the device before the range goes, stream-ordered frees wait for their event
// or serve their own stream at once (from several threads too), out-of-memory past both limits
// leaves nothing behind, pending frees drain at exit, and small allocations share slabs.
#include "umswap/allocator/vmm_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "../vmm/fake_vmm_driver.h"
#include "umswap/core/stats_schema.h"

namespace umswap {
namespace {

using vmm::fake::g_fake;
constexpr uint64_t kChunk = vmm::kChunk;
constexpr uint64_t MiB = 1024 * 1024;

const CUstream kStream = reinterpret_cast<CUstream>(uintptr_t{0x5a});

// Events, streams and synchronizations: what each test needs to see and decide.
struct FakeSync {
  struct Event {
    CUstream stream = nullptr;
    bool recorded = false;
    bool complete = false;
    bool destroyed = false;
    bool failed = false;  // the query answers an error of the context
  };
  std::map<CUevent, Event> events;
  std::mutex events_mutex;  // the fake event calls', for tests that free from several threads
  uintptr_t next = 1;
  bool fail_create = false;
  bool fail_record = false;
  std::vector<CUstream> stream_syncs;
  std::mutex mutex;  // ctx_syncs and watch_mapped_at_ctx_sync
  int ctx_syncs = 0;
  int event_syncs = 0;
  int queries = 0;
  // Whether `watch`'s slot was mapped when the device was synchronized: a free must synchronize
  // before it unmaps.
  CUdeviceptr watch = 0;
  std::vector<bool> watch_mapped_at_ctx_sync;
  CUresult ctx_sync_result = CUDA_SUCCESS;

  size_t live_events() const {
    size_t n = 0;
    for (const auto& [e, state] : events) n += state.destroyed ? 0 : 1;
    return n;
  }
  void complete_all() {
    for (auto& [e, state] : events) state.complete = true;
  }
};
std::unique_ptr<FakeSync> g_sync;

thread_local CUevent t_last_recorded = nullptr;  // the calling thread's last recorded event

CUresult CUDAAPI fake_event_create(CUevent* event, unsigned) {
  std::lock_guard lock(g_sync->events_mutex);
  if (g_sync->fail_create) return CUDA_ERROR_OUT_OF_MEMORY;
  *event = reinterpret_cast<CUevent>(g_sync->next++);
  g_sync->events[*event] = {};
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_record(CUevent event, CUstream stream) {
  std::lock_guard lock(g_sync->events_mutex);
  if (g_sync->fail_record) return CUDA_ERROR_INVALID_HANDLE;
  FakeSync::Event& e = g_sync->events.at(event);
  e.stream = stream;
  e.recorded = true;
  t_last_recorded = event;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_query(CUevent event) {
  std::lock_guard lock(g_sync->events_mutex);
  ++g_sync->queries;
  const FakeSync::Event& e = g_sync->events.at(event);
  if (e.destroyed) return CUDA_ERROR_INVALID_HANDLE;
  if (e.failed) return CUDA_ERROR_LAUNCH_FAILED;
  return e.complete ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult CUDAAPI fake_event_synchronize(CUevent event) {
  std::lock_guard lock(g_sync->events_mutex);
  ++g_sync->event_syncs;
  g_sync->events.at(event).complete = true;  // the wait returns when the stream got there
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_destroy(CUevent event) {
  std::lock_guard lock(g_sync->events_mutex);
  g_sync->events.at(event).destroyed = true;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_synchronize(CUstream stream) {
  g_sync->stream_syncs.push_back(stream);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_ctx_synchronize() {
  std::lock_guard lock(g_sync->mutex);  // the threaded test frees from several threads
  ++g_sync->ctx_syncs;
  g_sync->watch_mapped_at_ctx_sync.push_back(g_fake->handle_at(g_sync->watch) != 0);
  return g_sync->ctx_sync_result;
}

VmmSyncDriver fake_sync_driver() {
  VmmSyncDriver d;
  d.event_create = fake_event_create;
  d.event_record = fake_event_record;
  d.event_query = fake_event_query;
  d.event_synchronize = fake_event_synchronize;
  d.event_destroy = fake_event_destroy;
  d.stream_synchronize = fake_stream_synchronize;
  d.ctx_synchronize = fake_ctx_synchronize;
  return d;
}

class VmmAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = std::make_unique<vmm::fake::Fake>();
    g_fake->stream = kStream;
    g_sync = std::make_unique<FakeSync>();
  }
  void TearDown() override {
    allocator_.reset();
    // Whatever a test did, everything went back when the allocator went: chunks, ranges and
    // every event made for a stream-ordered free.
    EXPECT_EQ(g_fake->live_handles(), 0u);
    EXPECT_EQ(g_fake->live_reservations(), 0u);
    EXPECT_EQ(g_fake->live_mappings(), 0u);
    EXPECT_EQ(g_sync->live_events(), 0u);
    g_sync.reset();
    g_fake.reset();
  }

  VmmAllocator& make(uint64_t gpu_bytes, uint64_t host_bytes) {
    allocator_ = std::make_unique<VmmAllocator>(vmm::fake::fake_driver(), fake_sync_driver(),
                                                registry_, g_fake->device, gpu_bytes, host_bytes);
    return *allocator_;
  }
  CUdeviceptr allocate(uint64_t bytes, AllocApi api = AllocApi::cudaMalloc) {
    CUdeviceptr p = 0;
    EXPECT_EQ(allocator_->allocate(api, bytes, 77, api == AllocApi::cudaMallocAsync, &p),
              CUDA_SUCCESS);
    return p;
  }
  // A stream-ordered allocation on `stream`.
  CUdeviceptr allocate_on(uint64_t bytes, CUstream stream = kStream) {
    CUdeviceptr p = 0;
    EXPECT_EQ(allocator_->allocate(AllocApi::cudaMallocAsync, bytes, 0, true, &p, stream),
              CUDA_SUCCESS);
    return p;
  }
  // Whether the slot holding `p` is mapped (the chunks stay mapped in their pool's window too).
  static bool mapped(CUdeviceptr p) { return g_fake->handle_at(p) != 0; }
  // Bytes of GPU and host chunks behind `p`'s range, as the fake driver maps them.
  std::pair<uint64_t, uint64_t> chunks_of(CUdeviceptr p, uint64_t bytes) {
    uint64_t gpu = 0, host = 0;
    for (CUdeviceptr at = p; at < p + bytes; at += kChunk) {
      const CUmemGenericAllocationHandle h = g_fake->handle_at(at);
      EXPECT_NE(h, 0u) << "unmapped slot";
      if (h == 0) continue;
      (g_fake->is_host_handle(h) ? host : gpu) += kChunk;
    }
    return {gpu, host};
  }

  Registry registry_;
  std::unique_ptr<VmmAllocator> allocator_;
};

TEST_F(VmmAllocatorTest, AllocateAndFreeRoundTrip) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  const CUdeviceptr p = allocate(3 * MiB);
  ASSERT_NE(p, 0u);
  EXPECT_EQ(p % kChunk, 0u);
  // Registered as the program asked, with a fresh id; backed by whole chunks on the GPU.
  const std::optional<BufferRecord> r = registry_.find(p + 3 * MiB - 1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base, p);
  EXPECT_EQ(r->size, 3 * MiB);
  EXPECT_EQ(r->id, 1u);
  EXPECT_EQ(r->call_site, 77u);
  EXPECT_FALSE(r->from_pool);
  EXPECT_EQ(chunks_of(p, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  EXPECT_TRUE(g_fake->kernel_write(p, 3 * MiB, 5));
  EXPECT_EQ(g_fake->kernel_mismatches(p, 3 * MiB, 5), 0u);

  g_sync->watch = p + 2 * MiB;
  const std::optional<CUresult> freed = a.free(p);
  ASSERT_TRUE(freed);
  EXPECT_EQ(*freed, CUDA_SUCCESS);
  // The device was synchronized once, while the range was still mapped; then it went.
  ASSERT_EQ(g_sync->ctx_syncs, 1);
  EXPECT_TRUE(g_sync->watch_mapped_at_ctx_sync[0]);
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_TRUE(mapped(p));  // kept mapped, for an allocation of its size
  a.release_kept();
  EXPECT_FALSE(mapped(p));
  EXPECT_FALSE(mapped(p + 2 * MiB));
  const VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations[static_cast<int>(AllocApi::cudaMalloc)], 1u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.live_buffers, 0u);
  EXPECT_EQ(s.gpu_bytes, 0u);
  EXPECT_EQ(s.gpu_bytes_peak, 4 * MiB);
  EXPECT_EQ(s.requested_bytes_peak, 3 * MiB);
  EXPECT_EQ(s.requested_bytes, 0u);
  // The program's time in them is counted (each call takes some nanoseconds).
  EXPECT_GT(s.allocate_ms, 0.0);
  EXPECT_GT(s.free_ms, 0.0);
  EXPECT_EQ(to_json(s)["allocate_ms"], s.allocate_ms);
}

TEST_F(VmmAllocatorTest, PointersItDidNotHandOutAreLeftToTheDriver) {
  VmmAllocator& a = make(8 * MiB, 0);
  EXPECT_FALSE(a.free(0x1234));
  EXPECT_FALSE(a.free_async(0x1234, kStream));
  const CUdeviceptr p = allocate(MiB);
  EXPECT_FALSE(a.free(p + 256));  // inside, not the base
  EXPECT_TRUE(a.free(p));
  EXPECT_FALSE(a.free(p));  // twice
  EXPECT_FALSE(a.free_async(p, kStream));
  EXPECT_EQ(g_sync->ctx_syncs, 1);
}

// The program's own mapping of a virtual handle (map_program): a range at the program's
// addresses, registered as cuMemMap, never freed by free()/free_async(), and at unmap_program()
// released after a device synchronize, never kept, its addresses still the program's.
TEST_F(VmmAllocatorTest, TheProgramsMappingIsARangeAtItsAddresses) {
  VmmAllocator& a = make(4 * MiB, 8 * MiB);
  CUdeviceptr va = 0;
  ASSERT_EQ(vmm::fake::fake_reserve(&va, 8 * MiB, kChunk, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(a.map_program(va, 6 * MiB, 9), CUDA_SUCCESS);
  const std::optional<BufferRecord> r = registry_.find(va + 5 * MiB);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base, va);
  EXPECT_EQ(r->api, AllocApi::cuMemMap);
  EXPECT_EQ(chunks_of(va, 6 * MiB), std::make_pair(4 * MiB, 2 * MiB));
  EXPECT_TRUE(g_fake->kernel_write(va, 6 * MiB, 3));
  EXPECT_FALSE(a.free(va));
  EXPECT_FALSE(a.free_async(va, kStream));
  EXPECT_TRUE(registry_.find(va));
  EXPECT_FALSE(a.unmap_program(va + kChunk));  // not a mapping's start
  EXPECT_EQ(a.map_program(va + 2 * MiB, 2 * MiB, 9), CUDA_ERROR_INVALID_VALUE);  // overlaps

  g_sync->watch = va;
  const std::optional<CUresult> unmapped = a.unmap_program(va);
  ASSERT_TRUE(unmapped);
  EXPECT_EQ(*unmapped, CUDA_SUCCESS);
  ASSERT_EQ(g_sync->ctx_syncs, 1);
  EXPECT_TRUE(g_sync->watch_mapped_at_ctx_sync[0]);
  EXPECT_FALSE(mapped(va));  // not kept: the addresses are the program's
  EXPECT_FALSE(registry_.find(va));
  EXPECT_FALSE(a.unmap_program(va));
  const VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations[static_cast<int>(AllocApi::cuMemMap)], 1u);
  EXPECT_EQ(s.live_buffers, 0u);
  EXPECT_EQ(s.frees, 1u);
  // Past both limits: refused, nothing left.
  EXPECT_EQ(a.map_program(va, 14 * MiB, 9), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(registry_.find(va));
  EXPECT_EQ(vmm::fake::fake_address_free(va, 8 * MiB), CUDA_SUCCESS);
}

TEST_F(VmmAllocatorTest, PlacementIsFirstComeGpuThenHost) {
  VmmAllocator& a = make(4 * MiB + 5, 8 * MiB);  // the pool: whole chunks only
  const CUdeviceptr first = allocate(3 * MiB);
  const CUdeviceptr second = allocate(MiB);  // rounds up to a whole chunk, on the host
  const CUdeviceptr third = allocate(3 * MiB);
  EXPECT_EQ(chunks_of(first, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  EXPECT_EQ(chunks_of(second, 2 * MiB), std::make_pair(uint64_t{0}, 2 * MiB));
  EXPECT_EQ(chunks_of(third, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  const VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.gpu_limit, 4 * MiB);
  EXPECT_EQ(s.gpu_bytes_peak, 4 * MiB);
  EXPECT_EQ(s.host_bytes_peak, 6 * MiB);
  EXPECT_EQ(s.requested_bytes_peak, 7 * MiB);  // 10 MiB of chunks: 3 MiB lost to rounding
  EXPECT_EQ(s.arena.copies_to_host + s.arena.copies_to_gpu + s.arena.remaps, 0u);  // no moves
  // The first range freed, the next allocation takes its GPU chunks again.
  ASSERT_TRUE(a.free(first));
  const CUdeviceptr fourth = allocate(2 * MiB);
  EXPECT_EQ(chunks_of(fourth, 2 * MiB), std::make_pair(2 * MiB, uint64_t{0}));
}

TEST_F(VmmAllocatorTest, FreeAsyncWaitsForItsEvent) {
  VmmAllocator& a = make(8 * MiB, 0);
  const CUdeviceptr p = allocate(4 * MiB, AllocApi::cudaMallocAsync);
  EXPECT_TRUE(registry_.find(p)->from_pool);
  const std::optional<CUresult> freed = a.free_async(p, kStream);
  ASSERT_TRUE(freed);
  EXPECT_EQ(*freed, CUDA_SUCCESS);
  // Out of the registry at once; the range stays mapped while the stream may still use it.
  EXPECT_FALSE(registry_.contains(p));
  ASSERT_EQ(g_sync->events.size(), 1u);
  const FakeSync::Event& e = g_sync->events.begin()->second;
  EXPECT_TRUE(e.recorded);
  EXPECT_EQ(e.stream, kStream);
  EXPECT_EQ(a.poll(), 0u);
  EXPECT_TRUE(mapped(p) && mapped(p + 2 * MiB));
  EXPECT_TRUE(g_fake->kernel_write(p, 4 * MiB, 1));  // the stream's last kernels still run
  EXPECT_EQ(a.stats().pending_frees, 1u);
  EXPECT_EQ(a.stats().gpu_bytes, 4 * MiB);
  EXPECT_TRUE(g_sync->stream_syncs.empty());
  EXPECT_EQ(g_sync->ctx_syncs, 0);

  // Still not complete: the next allocation does not take its chunks.
  const CUdeviceptr q = allocate(2 * MiB, AllocApi::cudaMallocAsync);
  EXPECT_TRUE(mapped(p) && mapped(q));
  EXPECT_EQ(a.stats().gpu_bytes, 6 * MiB);
  // Complete: the next call releases it.
  g_sync->complete_all();
  ASSERT_TRUE(a.free_async(q, kStream));
  a.release_kept();  // p released, or kept for reuse until now
  const VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.frees_deferred, 1u);
  EXPECT_EQ(s.pending_frees, 1u);  // q's, just recorded
  EXPECT_EQ(s.gpu_bytes, 2 * MiB);
  EXPECT_EQ(g_sync->live_events(), 1u);  // p's event destroyed with its free
  EXPECT_FALSE(mapped(p));
  EXPECT_TRUE(mapped(q));
  g_sync->complete_all();
  EXPECT_EQ(a.poll(), 1u);
  a.release_kept();  // q kept for reuse until now
  EXPECT_EQ(a.stats().gpu_bytes, 0u);
  EXPECT_EQ(a.stats().frees, 2u);
}

TEST_F(VmmAllocatorTest, FreeAsyncWithoutAnEventSynchronizesTheStream) {
  VmmAllocator& a = make(8 * MiB, 0);
  const CUdeviceptr p = allocate(2 * MiB, AllocApi::cudaMallocAsync);
  const CUdeviceptr q = allocate(2 * MiB, AllocApi::cudaMallocAsync);
  g_sync->fail_create = true;
  EXPECT_EQ(a.free_async(p, kStream), CUDA_SUCCESS);
  g_sync->fail_create = false;
  g_sync->fail_record = true;
  EXPECT_EQ(a.free_async(q, kStream), CUDA_SUCCESS);
  EXPECT_EQ(g_sync->stream_syncs, (std::vector<CUstream>{kStream, kStream}));
  a.release_kept();  // kept for reuse until now
  EXPECT_FALSE(mapped(p));
  EXPECT_FALSE(mapped(q));
  EXPECT_EQ(g_sync->live_events(), 0u);  // the event that could not be recorded is gone too
  EXPECT_EQ(a.stats().frees_synchronized, 2u);
  EXPECT_EQ(a.stats().pending_frees, 0u);
}

TEST_F(VmmAllocatorTest, OutOfMemoryPastBothLimitsLeavesNothing) {
  VmmAllocator& a = make(4 * MiB, 2 * MiB);
  const CUdeviceptr gpu = allocate(4 * MiB);
  const CUdeviceptr host = allocate(2 * MiB);
  const size_t reservations = g_fake->live_reservations();
  const size_t handles = g_fake->live_handles();
  CUdeviceptr p = 0xdead;
  EXPECT_EQ(a.allocate(AllocApi::cuMemAlloc, 1, 1, false, &p), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(a.allocate(AllocApi::cuMemAlloc, 64 * MiB, 1, false, &p), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(p, 0xdeadu);
  EXPECT_EQ(g_fake->live_reservations(), reservations);
  EXPECT_EQ(g_fake->live_handles(), handles);
  EXPECT_EQ(registry_.size(), 2u);
  VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.out_of_memory, 2u);
  EXPECT_EQ(s.largest_refused, 64 * MiB);
  EXPECT_EQ(s.allocations[static_cast<int>(AllocApi::cuMemAlloc)], 0u);
  // Room again once the program frees.
  ASSERT_TRUE(a.free(host));
  p = 0;
  EXPECT_EQ(a.allocate(AllocApi::cuMemAlloc, 1, 1, false, &p), CUDA_SUCCESS);
  EXPECT_EQ(chunks_of(p, 2 * MiB), std::make_pair(uint64_t{0}, 2 * MiB));
  ASSERT_TRUE(a.free(gpu));
}

TEST_F(VmmAllocatorTest, OutOfMemoryWaitsForPendingFreesFirst) {
  VmmAllocator& a = make(4 * MiB, 0);
  const CUdeviceptr p = allocate(4 * MiB, AllocApi::cudaMallocAsync);
  ASSERT_TRUE(a.free_async(p, kStream));
  // The pool is full until the free completes: the allocation waits for it, then succeeds.
  const CUdeviceptr q = allocate(4 * MiB, AllocApi::cudaMallocAsync);
  EXPECT_NE(q, 0u);
  EXPECT_EQ(g_sync->event_syncs, 1);
  EXPECT_EQ(a.stats().out_of_memory, 0u);
  EXPECT_EQ(chunks_of(q, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
}

TEST_F(VmmAllocatorTest, DrainReleasesEveryPendingFree) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  std::vector<CUdeviceptr> ranges;
  for (int i = 0; i < 3; ++i) {
    ranges.push_back(allocate(4 * MiB, AllocApi::cuMemAllocAsync));
    ASSERT_TRUE(a.free_async(ranges.back(), kStream));
  }
  EXPECT_EQ(a.stats().pending_frees, 3u);
  EXPECT_EQ(a.drain(), 3u);
  EXPECT_EQ(g_sync->event_syncs, 3);
  EXPECT_EQ(g_sync->live_events(), 0u);
  a.release_kept();  // kept for reuse until now
  for (CUdeviceptr r : ranges) EXPECT_FALSE(mapped(r));
  const VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.pending_frees, 0u);
  EXPECT_EQ(s.frees_deferred, 3u);
  EXPECT_EQ(s.gpu_bytes + s.host_bytes, 0u);
  EXPECT_EQ(s.gpu_bytes_peak, 8 * MiB);
  EXPECT_EQ(s.host_bytes_peak, 4 * MiB);
}

TEST_F(VmmAllocatorTest, TheDestructorDrainsToo) {
  VmmAllocator& a = make(8 * MiB, 0);
  ASSERT_TRUE(a.free_async(allocate(2 * MiB), kStream));
  allocator_.reset();
  EXPECT_EQ(g_sync->event_syncs, 1);  // TearDown checks that nothing is left
}

TEST_F(VmmAllocatorTest, AFailedDeviceSynchronizeIsReportedAndTheRangeStillGoes) {
  VmmAllocator& a = make(8 * MiB, 0);
  const CUdeviceptr p = allocate(2 * MiB);
  g_sync->ctx_sync_result = CUDA_ERROR_LAUNCH_FAILED;
  EXPECT_EQ(a.free(p), CUDA_ERROR_LAUNCH_FAILED);
  a.release_kept();  // kept for reuse until now
  EXPECT_FALSE(mapped(p));
  EXPECT_FALSE(registry_.contains(p));
}

TEST_F(VmmAllocatorTest, MemGetInfoCountsTheChunksAgainstBothLimits) {
  VmmAllocator& a = make(8 * MiB, 4 * MiB);
  size_t free = 0, total = 0;
  ASSERT_EQ(a.mem_get_info(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 12 * MiB);
  EXPECT_EQ(free, 12 * MiB);
  allocate(MiB);
  allocate(8 * MiB);
  ASSERT_EQ(a.mem_get_info(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 12 * MiB);
  EXPECT_EQ(free, 2 * MiB);
}

// The program's own GPU memory (NCCL's buffers) counts against the budget: the pool shrinks by
// it in whole chunks, its free chunks past the new pool are released, the stats keep the budget
// and the peak of both together; a release gives the room back.
TEST_F(VmmAllocatorTest, TheProgramsOwnGpuMemoryShrinksThePool) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  const CUdeviceptr first = allocate(4 * MiB);
  ASSERT_TRUE(a.free(allocate(4 * MiB)));  // two free chunks
  ProgramMappings mappings;
  mappings.created(1, 3 * MiB, true);  // rounds up to two chunks
  a.set_program_gpu_bytes(mappings);
  VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.gpu_limit, 8 * MiB);  // the budget
  EXPECT_EQ(s.program_gpu_bytes, 3 * MiB);
  EXPECT_EQ(s.arena.gpu_chunks_made * kChunk, 4 * MiB);  // the free ones went
  const CUdeviceptr second = allocate(2 * MiB);
  EXPECT_EQ(chunks_of(second, 2 * MiB), std::make_pair(uint64_t{0}, 2 * MiB));  // pool full
  size_t free = 0, total = 0;
  ASSERT_EQ(a.mem_get_info(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 12 * MiB);  // 4 MiB of pool and 8 of host
  mappings.released(1);
  a.set_program_gpu_bytes(mappings);
  const CUdeviceptr third = allocate(4 * MiB);
  EXPECT_EQ(chunks_of(third, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  s = a.stats();
  EXPECT_EQ(s.program_gpu_bytes, 0u);
  EXPECT_EQ(s.program_gpu_bytes_peak, 3 * MiB);
  EXPECT_EQ(s.gpu_and_program_bytes_peak, 8 * MiB);  // 4 in use + 3 of the program's, or 8 in use
  for (CUdeviceptr p : {first, second, third}) EXPECT_TRUE(a.free(p));
}

TEST_F(VmmAllocatorTest, PitchedRowsAreAligned) {
  VmmAllocator& a = make(8 * MiB, 0);
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(a.allocate_pitch(AllocApi::cuMemAllocPitch, 100, 3, 512, 1, &p, &pitch), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 512u);
  EXPECT_EQ(registry_.find(p)->size, 1536u);
  EXPECT_EQ(a.allocate_pitch(AllocApi::cuMemAllocPitch, SIZE_MAX - 10, 2, 512, 1, &p, &pitch),
            CUDA_ERROR_OUT_OF_MEMORY);
}

// Allocations of at most 1 MiB share a slab: one 2 MiB chunk for several, each registered as
// the program asked, 512-byte aligned, data kept apart; the slab stays while it is the only empty
// one and goes when a second empties; a stream-ordered free of one waits for its event.
TEST_F(VmmAllocatorTest, SmallAllocationsShareASlab) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  const CUdeviceptr p = allocate(100 * 1024);
  const CUdeviceptr q = allocate(MiB);
  const CUdeviceptr r = allocate(4000, AllocApi::cudaMallocAsync);
  for (CUdeviceptr x : {p, q, r}) EXPECT_EQ(x % 512, 0u);
  EXPECT_EQ(a.stats().gpu_bytes, kChunk);  // one slab
  EXPECT_EQ(a.stats().slabs, 1u);
  EXPECT_EQ(a.stats().small_allocations, 3u);
  EXPECT_EQ(registry_.find(q)->base, q);
  EXPECT_EQ(registry_.find(q)->size, MiB);
  EXPECT_EQ(registry_.find(r)->size, 4000u);
  EXPECT_TRUE(g_fake->kernel_write(p, 100 * 1024, 1));
  EXPECT_TRUE(g_fake->kernel_write(q, MiB, 2));
  EXPECT_TRUE(g_fake->kernel_write(r, 4000, 3));
  EXPECT_EQ(g_fake->kernel_mismatches(p, 100 * 1024, 1), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(q, MiB, 2), 0u);
  // A stream-ordered free of r: its share waits for the event.
  ASSERT_TRUE(a.free_async(r, kStream));
  EXPECT_EQ(a.stats().pending_frees, 1u);
  g_sync->complete_all();
  EXPECT_EQ(a.poll(), 1u);
  // A second slab for what does not fit in the first (q's MiB and p's 100 KiB are in it).
  const CUdeviceptr big = allocate(MiB);
  EXPECT_EQ(a.stats().slabs, 2u);
  EXPECT_EQ(a.stats().gpu_bytes, 2 * kChunk);
  // Empty slabs: the first kept, the second given back.
  ASSERT_TRUE(a.free(p));
  ASSERT_TRUE(a.free(q));
  EXPECT_EQ(a.stats().slabs, 2u);
  ASSERT_TRUE(a.free(big));
  EXPECT_EQ(a.stats().slabs, 1u);
  a.release_kept();  // the second slab was kept for reuse until now
  EXPECT_EQ(a.stats().gpu_bytes, kChunk);
  EXPECT_EQ(a.stats().live_buffers, 0u);
  EXPECT_EQ(a.stats().requested_bytes, 0u);
}

// Past both limits a small allocation fails like any other and leaves nothing; a small
// allocation whose slab is on the host is brought in by the window of a step that reaches it (its
// address, inside the slab, stands for the slab's range), once for two of them in one step.
TEST_F(VmmAllocatorTest, ASmallAllocationsSlabMovesForTheStepThatReachesIt) {
  VmmAllocator& a = make(2 * MiB, 4 * MiB);
  const CUdeviceptr big = allocate(2 * MiB);  // the whole pool
  const CUdeviceptr first = allocate(1000);   // a slab on the host
  const CUdeviceptr s = allocate(3000);       // inside it
  ASSERT_EQ(s, first + 1024);
  EXPECT_EQ(chunks_of(first, 2 * MiB), std::make_pair(uint64_t{0}, 2 * MiB));
  CUdeviceptr none = 0;
  EXPECT_EQ(a.allocate(AllocApi::cudaMalloc, 4 * MiB, 1, false, &none), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(a.stats().slabs, 1u);
  EXPECT_TRUE(g_fake->kernel_write(s, 3000, 9));
  EXPECT_TRUE(g_fake->kernel_write(first, 1000, 7));
  EXPECT_TRUE(g_fake->kernel_write(big, 2 * MiB, 8));
  const std::vector<CUdeviceptr> before = {big}, step = {s, first};
  EXPECT_FALSE(a.residency().touch(1, before, false));  // on the GPU: no window
  ASSERT_TRUE(a.residency().touch(2, step, false));
  a.residency().make_resident(step, kStream);
  EXPECT_EQ(chunks_of(first, 2 * MiB), std::make_pair(2 * MiB, uint64_t{0}));
  EXPECT_EQ(chunks_of(big, 2 * MiB), std::make_pair(uint64_t{0}, 2 * MiB));
  EXPECT_EQ(a.residency().stats().ranges_restored, 1u);  // the slab once
  EXPECT_EQ(g_fake->kernel_mismatches(s, 3000, 9), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(first, 1000, 7), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(big, 2 * MiB, 8), 0u);
  // The slab back on the host: a step reaching s wants a window; freed, s stands for nothing.
  ASSERT_EQ(a.residency().touch(3, before, false), true);
  a.residency().make_resident(before, kStream);
  ASSERT_EQ(chunks_of(first, 2 * MiB), std::make_pair(uint64_t{0}, 2 * MiB));
  const std::vector<CUdeviceptr> only_s = {s};
  EXPECT_TRUE(a.residency().touch(4, only_s, false));
  ASSERT_TRUE(a.free(s));
  EXPECT_FALSE(a.residency().touch(5, only_s, false));
}

// The frees an out-of-memory answer waits for may make room in a slab: a small allocation takes
// it rather than fail. And the empty slab kept for small allocations gives its chunk to an
// allocation that needs it.
TEST_F(VmmAllocatorTest, SmallAllocationsAndTheKeptSlabGiveWayBeforeOutOfMemory) {
  VmmAllocator& a = make(2 * MiB, 0);
  const CUdeviceptr p = allocate(MiB, AllocApi::cudaMallocAsync);
  const CUdeviceptr q = allocate(MiB, AllocApi::cudaMallocAsync);
  EXPECT_EQ(q, p + MiB);  // one slab, full: the pool too
  ASSERT_TRUE(a.free_async(p, kStream));
  const CUdeviceptr r = allocate(MiB, AllocApi::cudaMallocAsync);
  EXPECT_EQ(r, p);  // p's share, once its free completed
  EXPECT_EQ(a.stats().out_of_memory, 0u);
  ASSERT_TRUE(a.free(q));
  ASSERT_TRUE(a.free(r));
  EXPECT_EQ(a.stats().slabs, 1u);  // empty, kept
  const CUdeviceptr whole = allocate(2 * MiB);
  EXPECT_NE(whole, 0u);
  EXPECT_EQ(a.stats().slabs, 0u);
  EXPECT_EQ(a.stats().out_of_memory, 0u);
  EXPECT_EQ(chunks_of(whole, 2 * MiB), std::make_pair(2 * MiB, uint64_t{0}));
}

// A training loop through the allocator itself: weights made once, each iteration's activations
// (one small, in a slab) allocated in the forward pass and freed in the backward one. The
// allocator reports every range to the residency, so once two iterations are alike a table of
// windows moves them, and every byte survives.
TEST_F(VmmAllocatorTest, ATrainingLoopThroughTheAllocatorGetsATable) {
  VmmAllocator& a = make(8 * MiB, 64 * MiB);
  constexpr int kLayers = 4;
  auto step = [&](std::vector<CUdeviceptr> bases, uint32_t key, bool begins) {
    if (a.residency().touch(key, bases, begins)) a.residency().make_resident(bases, kStream);
  };
  // Every write is a step's (a copy or a kernel), made after the step's window: a range no step
  // has reached yet moves with no copy.
  CUdeviceptr w[kLayers];
  for (int i = 0; i < kLayers; ++i) {
    w[i] = allocate(2 * MiB);
    step({w[i]}, static_cast<uint32_t>(100 + i), false);
    ASSERT_TRUE(g_fake->kernel_write(w[i], 2 * MiB, static_cast<uint8_t>(50 + i)));
  }
  for (int it = 0; it < 8; ++it) {
    CUdeviceptr act[kLayers];
    const CUdeviceptr small = allocate(256 * 1024, AllocApi::cudaMallocAsync);
    for (int i = 0; i < kLayers; ++i) {
      act[i] = allocate(2 * MiB, AllocApi::cudaMallocAsync);
      step({w[i], act[i], small}, static_cast<uint32_t>(1 + i), i == 0);
      ASSERT_TRUE(g_fake->kernel_write(act[i], 2 * MiB, static_cast<uint8_t>(60 + i)));
      if (i == 0) {
        ASSERT_TRUE(g_fake->kernel_write(small, 256 * 1024, 70));
      }
    }
    for (int i = kLayers - 1; i >= 0; --i) {
      step({w[i], act[i], small}, static_cast<uint32_t>(10 + i), false);
      EXPECT_EQ(g_fake->kernel_mismatches(act[i], 2 * MiB, static_cast<uint8_t>(60 + i)), 0u);
      ASSERT_TRUE(a.free(act[i]));
    }
    EXPECT_EQ(g_fake->kernel_mismatches(small, 256 * 1024, 70), 0u);
    ASSERT_TRUE(a.free(small));
    EXPECT_LE(a.stats().gpu_bytes, 8 * MiB);
  }
  const ResidencyStats r = a.residency().stats();
  EXPECT_EQ(r.plans, 1u);
  EXPECT_EQ(r.period, 2u * kLayers);
  EXPECT_GT(r.windows_from_plan, 0u);
  EXPECT_GT(r.ranges_unwritten, 0u);  // activations the full pool put on the host came in bare
  EXPECT_GT(a.stats().arena.bytes_not_copied, 0u);
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(w[i], 2 * MiB, static_cast<uint8_t>(50 + i)), 0u);
  }
}

// A freed range stays mapped for the next allocation of its reserved size: the same range comes
// back with no reservation or mapping made; one of another size that needs the GPU room gets it
// from the kept ranges, not from the host.
TEST_F(VmmAllocatorTest, AFreedRangeIsReusedAndGivesWayToOneOfAnotherSize) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  const CUdeviceptr p = allocate(3 * MiB, AllocApi::cudaMallocAsync);
  ASSERT_TRUE(a.free(p));
  const uint64_t reservations = g_fake->live_reservations();
  const CUdeviceptr q = allocate(4 * MiB, AllocApi::cudaMallocAsync);  // same 4 MiB reserved
  EXPECT_EQ(q, p);
  EXPECT_EQ(g_fake->live_reservations(), reservations);
  EXPECT_EQ(a.stats().ranges_reused, 1u);
  const std::optional<BufferRecord> r = registry_.find(q);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size, 4 * MiB);
  EXPECT_TRUE(g_fake->kernel_write(q, 4 * MiB, 3));
  EXPECT_EQ(g_fake->kernel_mismatches(q, 4 * MiB, 3), 0u);
  ASSERT_TRUE(a.free(q));
  // 8 MiB asked: the kept 4 MiB range gives its GPU chunks back, the new one is on the GPU.
  const CUdeviceptr big = allocate(8 * MiB, AllocApi::cudaMallocAsync);
  EXPECT_EQ(chunks_of(big, 8 * MiB), std::make_pair(8 * MiB, uint64_t{0}));
  EXPECT_EQ(a.stats().ranges_reused, 1u);
  ASSERT_TRUE(a.free(big));
}

// A kept range on the host is not taken while a new range of its size fits on the GPU: it would
// put the allocation where a fresh one does not go. A freed range is kept whatever room it holds
// (the oldest on the GPU goes first when room is wanted), but not while its pool is past a limit
// lowered under it.
TEST_F(VmmAllocatorTest, AKeptRangeOnTheHostWaitsWhileANewOneFitsOnTheGpu) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  const CUdeviceptr first = allocate(4 * MiB);
  const CUdeviceptr second = allocate(4 * MiB);
  const CUdeviceptr on_host = allocate(4 * MiB);
  ASSERT_EQ(chunks_of(on_host, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  ASSERT_TRUE(a.free(on_host));
  EXPECT_EQ(a.stats().ranges_kept, 1u);
  EXPECT_EQ(a.stats().kept_bytes, 4 * MiB);
  ASSERT_TRUE(a.free(second));  // 4 MiB of GPU chunks, all the room there is: kept
  EXPECT_TRUE(mapped(second));
  EXPECT_EQ(a.stats().ranges_kept, 2u);
  EXPECT_TRUE(a.release_oldest_kept_on_gpu());  // second, not the older one on the host
  EXPECT_FALSE(mapped(second));
  EXPECT_FALSE(a.release_oldest_kept_on_gpu());  // none kept on the GPU
  const CUdeviceptr fresh = allocate(4 * MiB);
  EXPECT_NE(fresh, on_host);
  EXPECT_EQ(chunks_of(fresh, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  EXPECT_EQ(a.stats().ranges_reused, 0u);
  // The pool is full now: the kept one on the host serves the next, as a new one would be there.
  const CUdeviceptr again = allocate(4 * MiB);
  EXPECT_EQ(again, on_host);
  EXPECT_EQ(a.stats().ranges_reused, 1u);
  EXPECT_EQ(a.stats().ranges_kept, 0u);
  EXPECT_TRUE(g_fake->kernel_write(again, 4 * MiB, 9));
  EXPECT_EQ(g_fake->kernel_mismatches(again, 4 * MiB, 9), 0u);
  // The program maps 4 MiB of GPU memory itself: the pool shrinks to 4 MiB under the 8 its
  // ranges hold, and a range freed now is released, not kept.
  ProgramMappings mappings;
  mappings.created(1, 4 * MiB, true);
  a.set_program_gpu_bytes(mappings);
  ASSERT_TRUE(a.free(first));
  EXPECT_FALSE(mapped(first));
  EXPECT_EQ(a.stats().ranges_kept, 0u);
  ASSERT_TRUE(a.free(fresh));
  ASSERT_TRUE(a.free(again));
}

// On the host a freed range is kept only within half the room live ranges leave there (nothing
// takes host room back from kept ranges, and evictions need it).
TEST_F(VmmAllocatorTest, OnTheHostAFreedRangeIsKeptWithinHalfTheRoom) {
  VmmAllocator& a = make(4 * MiB, 8 * MiB);
  const CUdeviceptr gpu = allocate(4 * MiB);
  const CUdeviceptr b = allocate(4 * MiB), c = allocate(4 * MiB);
  ASSERT_EQ(chunks_of(b, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  ASSERT_EQ(chunks_of(c, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  ASSERT_TRUE(a.free(b));  // 4 MiB of room left by c: released
  EXPECT_FALSE(mapped(b));
  EXPECT_EQ(a.stats().ranges_kept, 0u);
  ASSERT_TRUE(a.free(c));  // 8 MiB left: kept
  EXPECT_TRUE(mapped(c));
  EXPECT_EQ(a.stats().ranges_kept, 1u);
  ASSERT_TRUE(a.free(gpu));  // the GPU's whole room: kept
  EXPECT_EQ(a.stats().ranges_kept, 2u);
  a.release_kept();
}

// With 16 MiB blocks (a pool of 512 MiB) the allocator matches sizes as the arena reserves them:
// a freed 7 MiB range (four chunks, reserved as a whole block) serves a 12 MiB allocation, kept
// or pending on its stream.
TEST_F(VmmAllocatorTest, SizesMatchAsTheArenaReservesThem) {
  VmmAllocator& a = make(512 * MiB, 64 * MiB);
  const CUdeviceptr p = allocate(7 * MiB);
  ASSERT_TRUE(a.free(p));
  ASSERT_EQ(a.stats().ranges_kept, 1u);
  const CUdeviceptr q = allocate(12 * MiB);
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().ranges_reused, 1u);
  EXPECT_TRUE(g_fake->kernel_write(q, 12 * MiB, 5));
  EXPECT_EQ(g_fake->kernel_mismatches(q, 12 * MiB, 5), 0u);
  ASSERT_TRUE(a.free_async(q, kStream));
  const CUdeviceptr r = allocate_on(9 * MiB, kStream);  // q pending on kStream
  EXPECT_EQ(r, q);
  EXPECT_EQ(a.stats().reused_on_stream, 1u);
  const CUdeviceptr s = allocate(18 * MiB);  // a block and one chunk: another size
  EXPECT_NE(s, r);
  ASSERT_TRUE(a.free(r));
  ASSERT_TRUE(a.free(s));
  a.release_kept();
}

// A range whose stream-ordered free is still pending is not handed out again to an allocation
// of its size on another stream (the legacy one here); once kept, it is. An out-of-memory answer
// comes only after the kept ranges are released.
TEST_F(VmmAllocatorTest, KeptRangesAreNeitherPendingNorMovedAndGiveWayBeforeOutOfMemory) {
  VmmAllocator& a = make(16 * MiB, 0);
  const CUdeviceptr p = allocate(4 * MiB, AllocApi::cudaMallocAsync);
  ASSERT_TRUE(a.free_async(p, kStream));
  const CUdeviceptr q = allocate(4 * MiB, AllocApi::cudaMallocAsync);
  EXPECT_NE(q, p);  // p's stream may still use it
  g_sync->complete_all();
  EXPECT_EQ(a.poll(), 1u);
  EXPECT_EQ(a.stats().ranges_kept, 1u);  // 4 MiB kept of the 12 live ranges leave
  const CUdeviceptr r = allocate(4 * MiB, AllocApi::cudaMallocAsync);
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().ranges_reused, 1u);
  ASSERT_TRUE(a.free(r));
  EXPECT_EQ(a.stats().ranges_kept, 1u);
  // 12 MiB asked with 4 MiB live and 4 kept: no host memory, so the kept one goes first.
  CUdeviceptr big = 0;
  EXPECT_EQ(a.allocate(AllocApi::cudaMalloc, 12 * MiB, 0, false, &big), CUDA_SUCCESS);
  EXPECT_EQ(a.stats().ranges_kept, 0u);
  EXPECT_EQ(a.stats().out_of_memory, 0u);
  ASSERT_TRUE(a.free(big));
  ASSERT_TRUE(a.free(q));
}

// Stream order: a range whose free on a stream is pending serves the next stream-ordered
// allocation of its reserved size on that stream at once, with a fresh record; its event goes and
// its free is counted. No other stream, no plain allocation and no other size takes it.
TEST_F(VmmAllocatorTest, APendingFreeServesItsOwnStreamAtOnce) {
  VmmAllocator& a = make(32 * MiB, 0);
  const CUstream other = reinterpret_cast<CUstream>(uintptr_t{0x6b});
  const CUdeviceptr p = allocate_on(4 * MiB, kStream);
  const BufferId old_id = registry_.find(p)->id;
  ASSERT_TRUE(a.free_async(p, kStream));
  ASSERT_EQ(g_sync->live_events(), 1u);
  // Another stream, a plain allocation and another reserved size get ranges of their own.
  const CUdeviceptr elsewhere = allocate_on(4 * MiB, other);
  const CUdeviceptr plain = allocate(4 * MiB);
  const CUdeviceptr larger = allocate_on(5 * MiB, kStream);
  EXPECT_NE(elsewhere, p);
  EXPECT_NE(plain, p);
  EXPECT_NE(larger, p);
  EXPECT_EQ(a.stats().pending_frees, 1u);
  EXPECT_EQ(a.stats().frees, 0u);
  // The same stream and reserved size (3 MiB rounds up to 4): the pending range, event not done.
  const CUdeviceptr again = allocate_on(3 * MiB, kStream);
  EXPECT_EQ(again, p);
  const std::optional<BufferRecord> record = registry_.find(again);
  ASSERT_TRUE(record);
  EXPECT_NE(record->id, old_id);
  EXPECT_EQ(record->size, 3 * MiB);
  EXPECT_EQ(g_sync->live_events(), 0u);
  VmmAllocatorStats s = a.stats();
  EXPECT_EQ(s.reused_on_stream, 1u);
  EXPECT_EQ(s.pending_frees, 0u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.frees_deferred, 0u);
  EXPECT_EQ(s.live_buffers, 4u);
  EXPECT_EQ(s.requested_bytes, 4 * MiB + 4 * MiB + 5 * MiB + 3 * MiB);
  EXPECT_TRUE(g_fake->kernel_write(again, 3 * MiB, 5));
  EXPECT_EQ(g_fake->kernel_mismatches(again, 3 * MiB, 5), 0u);
  for (CUdeviceptr q : {again, elsewhere, plain, larger}) ASSERT_TRUE(a.free(q));
}

// The most recently freed range of the size goes first; a stream that ends makes its pending
// frees wait for their events (a new stream may get its handle); a small allocation's share of a
// slab is never handed out as a range.
TEST_F(VmmAllocatorTest, PendingFreesByStreamTakeTheLatestAndStopWhenTheStreamEnds) {
  VmmAllocator& a = make(32 * MiB, 0);
  const CUdeviceptr first = allocate_on(2 * MiB), second = allocate_on(2 * MiB);
  const CUdeviceptr small = allocate_on(4096);
  ASSERT_TRUE(a.free_async(first, kStream));
  ASSERT_TRUE(a.free_async(second, kStream));
  ASSERT_TRUE(a.free_async(small, kStream));
  EXPECT_EQ(allocate_on(2 * MiB), second);
  const CUdeviceptr tiny = allocate_on(4096);
  EXPECT_NE(tiny, small);  // the slab's share waits for its event
  a.stream_ends(kStream);
  const CUdeviceptr fresh = allocate_on(2 * MiB);
  EXPECT_NE(fresh, first);
  EXPECT_EQ(a.stats().reused_on_stream, 1u);
  EXPECT_EQ(a.stats().pending_frees, 2u);
  g_sync->complete_all();
  EXPECT_EQ(a.poll(), 2u);
  for (CUdeviceptr q : {second, tiny, fresh}) ASSERT_TRUE(a.free(q));
}

// A stream's events complete in the order they were recorded: poll() releases exactly the frees
// whose events have completed, stream by stream, asking a few events rather than every one.
TEST_F(VmmAllocatorTest, PollAsksAFewEventsOfEachStream) {
  VmmAllocator& a = make(128 * MiB, 0);
  const CUstream other = reinterpret_cast<CUstream>(uintptr_t{0x6b});
  std::vector<CUdeviceptr> ranges;
  for (int i = 0; i < 40; ++i) ranges.push_back(allocate(2 * MiB, AllocApi::cudaMallocAsync));
  std::vector<CUevent> mine, others;
  for (int i = 0; i < 40; ++i) {
    const CUstream stream = i % 4 == 3 ? other : kStream;  // 30 on kStream, 10 on the other
    ASSERT_TRUE(a.free_async(ranges[static_cast<size_t>(i)], stream));
    (stream == kStream ? mine : others).push_back(std::prev(g_sync->events.end())->first);
  }
  // kStream got as far as its 17th free, the other stream nowhere.
  for (size_t i = 0; i < 17; ++i) g_sync->events.at(mine[i]).complete = true;
  g_sync->queries = 0;
  EXPECT_EQ(a.poll(), 17u);
  EXPECT_LE(g_sync->queries, 2 + 5 + 2);  // newest and oldest of each, then halving 30
  EXPECT_EQ(a.stats().pending_frees, 23u);
  for (size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(g_sync->events.at(mine[i]).destroyed, i < 17) << i;
  }
  // Everything done: one query a stream.
  g_sync->complete_all();
  g_sync->queries = 0;
  EXPECT_EQ(a.poll(), 23u);
  EXPECT_EQ(g_sync->queries, 2);
  EXPECT_EQ(a.stats().pending_frees, 0u);
  EXPECT_EQ(a.stats().frees_deferred, 40u);
}

// Only a completed event speaks for the earlier ones of its stream: an error answer ends its own
// free's wait alone, and the stream's other events are asked one by one.
TEST_F(VmmAllocatorTest, AnEventsErrorReleasesItsOwnFreeAlone) {
  VmmAllocator& a = make(16 * MiB, 0);
  std::vector<CUdeviceptr> ranges;
  for (int i = 0; i < 4; ++i) ranges.push_back(allocate(2 * MiB, AllocApi::cudaMallocAsync));
  std::vector<CUevent> events;
  for (const CUdeviceptr p : ranges) {
    ASSERT_TRUE(a.free_async(p, kStream));
    events.push_back(std::prev(g_sync->events.end())->first);
  }
  g_sync->events.at(events[3]).failed = true;  // the newest
  EXPECT_EQ(a.poll(), 1u);
  EXPECT_EQ(a.stats().pending_frees, 3u);
  EXPECT_TRUE(g_sync->events.at(events[3]).destroyed);
  g_sync->events.at(events[1]).failed = true;  // one in the middle, the oldest complete
  g_sync->events.at(events[0]).complete = true;
  EXPECT_EQ(a.poll(), 2u);
  EXPECT_FALSE(g_sync->events.at(events[2]).destroyed);
  g_sync->complete_all();
  EXPECT_EQ(a.poll(), 1u);
  EXPECT_EQ(a.stats().frees_deferred, 4u);
}

// Threads allocating and freeing stream-ordered, each on a stream of its own, while the "GPU"
// completes each stream's events in order at its own pace: a range handed out while the event of
// its last free has not completed went to that free's stream, and every thread's data stays its
// own.
TEST_F(VmmAllocatorTest, ThreadsOnTheirOwnStreamsGetNoOtherStreamsPendingRange) {
  // At most 96 MiB live; pending frees and kept ranges beside them need room of their own.
  VmmAllocator& a = make(48 * MiB, 256 * MiB);
  constexpr int kThreads = 4, kRounds = 300;
  constexpr uint64_t kProbe = 4096;
  std::mutex frees_mutex;
  std::map<CUdeviceptr, std::pair<CUstream, CUevent>> last_free;  // a range's last free
  std::atomic<int> bad{0}, wrong_stream{0}, running{kThreads};
  auto stream_of = [](int t) { return reinterpret_cast<CUstream>(uintptr_t{0x100} + t); };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 11);
      std::vector<std::pair<CUdeviceptr, uint8_t>> live;
      for (int r = 0; r < kRounds; ++r) {
        const uint64_t bytes = (1 + rng() % 3) * 2 * MiB;
        CUdeviceptr p = 0;
        if (a.allocate(AllocApi::cudaMallocAsync, bytes, 0, true, &p, stream_of(t)) !=
            CUDA_SUCCESS) {
          bad.fetch_add(1);
          continue;
        }
        {
          std::lock_guard lock(frees_mutex);
          if (const auto it = last_free.find(p); it != last_free.end()) {
            std::lock_guard events(g_sync->events_mutex);
            if (!g_sync->events.at(it->second.second).complete &&
                it->second.first != stream_of(t)) {
              wrong_stream.fetch_add(1);
            }
          }
        }
        const auto seed = static_cast<uint8_t>(t * 64 + r % 64);
        if (!g_fake->kernel_write(p, kProbe, seed)) bad.fetch_add(1);
        live.emplace_back(p, seed);
        if (live.size() > 3 || (r == kRounds - 1 && !live.empty())) {
          while (!live.empty() && (live.size() > 3 || r == kRounds - 1)) {
            const auto [old, old_seed] = live.front();
            live.erase(live.begin());
            if (g_fake->kernel_mismatches(old, kProbe, old_seed) != 0) bad.fetch_add(1);
            if (a.free_async(old, stream_of(t)) != CUDA_SUCCESS) bad.fetch_add(1);
            std::lock_guard lock(frees_mutex);
            last_free[old] = {stream_of(t), t_last_recorded};
          }
        }
      }
      running.fetch_sub(1);
    });
  }
  // The GPU: now and then one stream gets as far as its oldest event not complete.
  std::mt19937 rng(7);
  while (running.load() > 0) {
    {
      std::lock_guard lock(g_sync->events_mutex);
      const CUstream stream = stream_of(static_cast<int>(rng() % kThreads));
      for (auto& [e, state] : g_sync->events) {
        if (state.stream == stream && state.recorded && !state.complete) {
          state.complete = true;
          break;
        }
      }
    }
    std::this_thread::yield();
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(wrong_stream.load(), 0);
  EXPECT_GT(a.stats().reused_on_stream, 0u);
  EXPECT_EQ(a.stats().driver_failures, 0u);
}

// After stream_ends(), frees recorded on a new stream with the same handle serve it; the ended
// stream's pending ones do not.
TEST_F(VmmAllocatorTest, ANewStreamWithAnEndedHandleGetsOnlyItsOwnFrees) {
  VmmAllocator& a = make(32 * MiB, 0);
  const CUdeviceptr old = allocate_on(2 * MiB), fresh = allocate_on(2 * MiB);
  ASSERT_TRUE(a.free_async(old, kStream));
  a.stream_ends(kStream);
  ASSERT_TRUE(a.free_async(fresh, kStream));  // the new stream that got the handle
  EXPECT_EQ(allocate_on(2 * MiB), fresh);
  const CUdeviceptr other = allocate_on(2 * MiB);
  EXPECT_NE(other, old);
  EXPECT_EQ(a.stats().reused_on_stream, 1u);
  g_sync->complete_all();
  for (CUdeviceptr q : {fresh, other}) ASSERT_TRUE(a.free(q));
}

// A pending range partly on the host does not serve its stream while a new range fits wholly on
// the GPU; once none would get GPU memory at all, it does.
TEST_F(VmmAllocatorTest, APendingRangeOnTheHostWaitsWhileANewOneFitsOnTheGpu) {
  VmmAllocator& a = make(8 * MiB, 8 * MiB);
  const CUdeviceptr first = allocate(4 * MiB);
  const CUdeviceptr second = allocate(4 * MiB);
  const CUdeviceptr on_host = allocate_on(4 * MiB);
  ASSERT_EQ(chunks_of(on_host, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  ASSERT_TRUE(a.free_async(on_host, kStream));
  ASSERT_TRUE(a.free(second));
  const CUdeviceptr fresh = allocate_on(4 * MiB);
  EXPECT_NE(fresh, on_host);
  EXPECT_EQ(chunks_of(fresh, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  const CUdeviceptr again = allocate_on(4 * MiB);  // the GPU pool is full now
  EXPECT_EQ(again, on_host);
  EXPECT_EQ(a.stats().reused_on_stream, 1u);
  for (CUdeviceptr q : {first, fresh, again}) ASSERT_TRUE(a.free(q));
}

// A step reaching a kept range's address (a stale pointer) gets no window for it: no window moves
// a range that is not live.
TEST_F(VmmAllocatorTest, AStepReachingAKeptRangeGetsNoWindow) {
  VmmAllocator& a = make(8 * MiB, 16 * MiB);
  const CUdeviceptr first = allocate(4 * MiB), second = allocate(4 * MiB);
  const CUdeviceptr on_host = allocate(4 * MiB);
  ASSERT_EQ(chunks_of(on_host, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  const std::vector<CUdeviceptr> step = {on_host};
  EXPECT_TRUE(a.residency().touch(1, step, false));  // live, on the host: a window
  ASSERT_TRUE(a.free(on_host));
  ASSERT_EQ(a.stats().ranges_kept, 1u);
  EXPECT_FALSE(a.residency().touch(2, step, false));
  EXPECT_EQ(chunks_of(on_host, 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));
  ASSERT_TRUE(a.free(first));
  ASSERT_TRUE(a.free(second));
}

// A window takes a kept range's GPU chunks before it evicts a live range: the step's range on the
// host comes in and the live ones stay.
TEST_F(VmmAllocatorTest, AWindowTakesKeptRangesBeforeLiveOnes) {
  VmmAllocator& a = make(16 * MiB, 16 * MiB);
  const CUdeviceptr live1 = allocate(4 * MiB), live2 = allocate(4 * MiB);
  const CUdeviceptr released = allocate(4 * MiB), dead = allocate(4 * MiB);
  const CUdeviceptr wanted = allocate(8 * MiB);
  ASSERT_EQ(chunks_of(wanted, 8 * MiB), std::make_pair(uint64_t{0}, 8 * MiB));
  EXPECT_TRUE(g_fake->kernel_write(live1, 4 * MiB, 1));
  EXPECT_TRUE(g_fake->kernel_write(live2, 4 * MiB, 2));
  EXPECT_TRUE(g_fake->kernel_write(wanted, 8 * MiB, 3));
  ASSERT_TRUE(a.free(released));  // both kept
  ASSERT_TRUE(a.free(dead));
  ASSERT_TRUE(mapped(released));
  ASSERT_TRUE(mapped(dead));
  EXPECT_EQ(a.stats().ranges_kept, 2u);
  size_t free = 0, total = 0;
  ASSERT_EQ(a.mem_get_info(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 16 * MiB);  // the kept range counts as free
  const std::vector<CUdeviceptr> first = {live1, live2};
  EXPECT_FALSE(a.residency().touch(1, first, false));
  const std::vector<CUdeviceptr> step = {wanted};
  ASSERT_TRUE(a.residency().touch(2, step, false));
  a.residency().make_resident(step, kStream);
  EXPECT_EQ(chunks_of(wanted, 8 * MiB), std::make_pair(8 * MiB, uint64_t{0}));
  EXPECT_EQ(chunks_of(live1, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  EXPECT_EQ(chunks_of(live2, 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  EXPECT_EQ(g_fake->kernel_mismatches(wanted, 8 * MiB, 3), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(live1, 4 * MiB, 1), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(live2, 4 * MiB, 2), 0u);
  EXPECT_EQ(a.residency().stats().ranges_evicted, 0u);
  EXPECT_EQ(a.stats().ranges_kept, 0u);  // their GPU chunks were the room the window took
  EXPECT_FALSE(mapped(released));
  EXPECT_FALSE(mapped(dead));
  for (CUdeviceptr p : {live1, live2, wanted}) ASSERT_TRUE(a.free(p));
}

// While most of the program's allocations are stream-ordered (every tensor a new range), a step's
// window leaves an eighth of the pool free for the allocations that follow; a program of plain
// allocations (a caching allocator's segments) gets no such room, one stream-ordered allocation
// among them or not. The parameter: how many of the five allocations are stream-ordered.
class VmmAllocatorRoomTest : public VmmAllocatorTest, public ::testing::WithParamInterface<int> {};

TEST_P(VmmAllocatorRoomTest, AWindowLeavesRoomOnlyForStreamOrderedAllocations) {
  const bool ordered = 2 * GetParam() > 5;
  VmmAllocator& a = make(16 * MiB, 16 * MiB);
  std::vector<CUdeviceptr> r;
  for (int i = 0; i < 5; ++i)
    r.push_back(i < GetParam() ? allocate_on(4 * MiB) : allocate(4 * MiB));
  ASSERT_EQ(chunks_of(r[4], 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));  // the pool full
  for (uint32_t i = 0; i < 4; ++i) {
    const std::vector<CUdeviceptr> step = {r[i]};
    EXPECT_FALSE(a.residency().touch(i + 1, step, false));
  }
  const std::vector<CUdeviceptr> step = {r[4]};
  ASSERT_TRUE(a.residency().touch(9, step, false));
  a.residency().make_resident(step, kStream);
  EXPECT_EQ(chunks_of(r[4], 4 * MiB), std::make_pair(4 * MiB, uint64_t{0}));
  EXPECT_EQ(chunks_of(r[0], 4 * MiB), std::make_pair(uint64_t{0}, 4 * MiB));  // for r[4]
  // r[1], the least recently used left: out for the room only where the allocations are ordered.
  EXPECT_EQ(chunks_of(r[1], 4 * MiB).first, ordered ? 0 : 4 * MiB);
  EXPECT_EQ(a.residency().stats().ranges_evicted_for_room, ordered ? 1u : 0u);
  EXPECT_EQ(a.residency().stats().ranges_evicted, ordered ? 2u : 1u);
  for (CUdeviceptr p : r) EXPECT_TRUE(a.free(p));
}

INSTANTIATE_TEST_SUITE_P(OrderedOrNot, VmmAllocatorRoomTest, ::testing::Values(0, 1, 5));

// Threads allocate, write, check and free ranges of a few sizes (kept ranges reused, given back)
// while another opens windows on whatever ranges it saw last, some freed meanwhile, as a program's
// threads and its launches would. No deadlock, every live range's data intact through the moves,
// the pool never exceeded, and the kept ranges' sums as their list says.
TEST_F(VmmAllocatorTest, ThreadsAllocatingAndFreeingBesideWindowsKeepTheirData) {
  // At most 4 live ranges of at most 6 MiB a thread: 96 MiB, in a pool and a host limit of 152.
  VmmAllocator& a = make(24 * MiB, 128 * MiB);
  constexpr int kThreads = 4, kRounds = 150;
  constexpr uint64_t kProbe = 4096;  // bytes written and checked at the start of each chunk
  std::shared_mutex kernels;         // a window holds the program: no "kernel" runs beside it
  std::mutex seen_mutex;
  std::vector<CUdeviceptr> seen;  // bases the window thread picks from (some freed since)
  std::atomic<int> bad{0}, running{kThreads};
  std::atomic<uint64_t> passes{0};  // the window thread's, so that workers let it in now and then
  auto write = [&](CUdeviceptr p, uint64_t bytes, uint8_t seed) {
    for (uint64_t at = 0; at < bytes; at += kChunk) {
      if (!g_fake->kernel_write(p + at, kProbe, seed)) bad.fetch_add(1);
    }
  };
  auto check = [&](CUdeviceptr p, uint64_t bytes, uint8_t seed) {
    for (uint64_t at = 0; at < bytes; at += kChunk) {
      if (g_fake->kernel_mismatches(p + at, kProbe, seed) != 0) bad.fetch_add(1);
    }
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      struct Live {
        CUdeviceptr p;
        uint64_t bytes;
        uint8_t seed;
      };
      std::vector<Live> live;
      for (int r = 0; r < kRounds; ++r) {
        if (r % 4 == 0) {
          const uint64_t seen_pass = passes.load();
          while (passes.load() == seen_pass) std::this_thread::yield();
        }
        const uint64_t bytes = (1 + rng() % 3) * 2 * MiB;
        CUdeviceptr p = 0;
        if (a.allocate(AllocApi::cudaMalloc, bytes, 0, false, &p) != CUDA_SUCCESS) {
          bad.fetch_add(1);
          continue;
        }
        const auto seed = static_cast<uint8_t>(t * 64 + r % 64);
        {
          // Written by work no step shows the residency: said so, as VmmObserver says it of a
          // graph launch, before any later window can take the range for unwritten.
          std::shared_lock lock(kernels);
          write(p, bytes, seed);
          a.residency().unseen_work();
        }
        live.push_back({p, bytes, seed});
        {
          std::lock_guard lock(seen_mutex);
          seen.push_back(p);
          if (seen.size() > 16) seen.erase(seen.begin());
        }
        if (live.size() > 3) {
          const Live old = live.front();
          live.erase(live.begin());
          {
            std::shared_lock lock(kernels);
            check(old.p, old.bytes, old.seed);
          }
          if (a.free(old.p) != CUDA_SUCCESS) bad.fetch_add(1);
        }
      }
      for (const Live& l : live) {
        {
          std::shared_lock lock(kernels);
          check(l.p, l.bytes, l.seed);
        }
        if (a.free(l.p) != CUDA_SUCCESS) bad.fetch_add(1);
      }
      running.fetch_sub(1);
    });
  }
  uint32_t key = 1;
  while (running.load() > 0) {
    std::vector<CUdeviceptr> bases;
    {
      std::lock_guard lock(seen_mutex);
      // Two at a time (at most 12 MiB, within the pool), rotating over what was seen.
      for (size_t i = 0; i < 2 && i < seen.size(); ++i) {
        const CUdeviceptr b = seen[(key * 5 + i * 7) % seen.size()];
        if (bases.empty() || bases[0] != b) bases.push_back(b);
      }
    }
    std::unique_lock lock(kernels);
    if (a.residency().touch(key++, bases, false)) a.residency().make_resident(bases, kStream);
    EXPECT_LE(a.stats().gpu_bytes, 24 * MiB);
    lock.unlock();
    passes.fetch_add(1);
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(bad.load(), 0);
  const VmmAllocatorStats s = a.stats();
  EXPECT_GT(s.ranges_reused, 0u);
  EXPECT_GT(s.residency.steps_held, 0u);  // windows ran
  EXPECT_GT(s.arena.bytes_to_gpu, 0u);
  EXPECT_EQ(s.live_buffers, 0u);
  EXPECT_EQ(s.gpu_bytes + s.host_bytes, s.kept_bytes);  // nothing live: what is held is kept
  EXPECT_LE(s.gpu_bytes_peak, 24 * MiB);
  EXPECT_EQ(s.driver_failures, 0u);
}

TEST_F(VmmAllocatorTest, StatsJsonHasTheSchemasFields) {
  VmmAllocator& a = make(4 * MiB, 4 * MiB);
  allocate(6 * MiB);
  const nlohmann::json j = to_json(a.stats());
  namespace v = stats_schema::vmm;
  const nlohmann::json root = {{stats_schema::kVmm.path, j}};
  for (const stats_schema::Field* f :
       {&v::kBudgetBytes, &v::kHostLimitBytes, &v::kGpuBytesPeak, &v::kHostBytesPeak, &v::kGpuBytes,
        &v::kHostBytes, &v::kRequestedBytesPeak, &v::kOutOfMemory, &v::kCopiesToHost,
        &v::kCopiesToGpu, &v::kRemaps, &v::kRangesEvictedForRoom}) {
    EXPECT_NE(stats_schema::find(root, *f), nullptr) << f->path;
  }
  EXPECT_EQ(*stats_schema::find(root, v::kGpuBytesPeak), 4 * MiB);
  EXPECT_EQ(*stats_schema::find(root, v::kHostBytesPeak), 2 * MiB);
  EXPECT_EQ(*stats_schema::find(root, v::kBudgetBytes), 4 * MiB);
  EXPECT_EQ(j["allocations_by_api"]["cudaMalloc"], 1);
}

TEST(VmmDefaults, GpuPoolLeavesAMarginAndHostLimitIsHalfTheAvailable) {
  constexpr uint64_t GiB = 1024 * MiB;
  // 5% of 140 GiB is 7 GiB; whole chunks.
  EXPECT_EQ(vmm_default_gpu_pool(100 * GiB, 140 * GiB), 93 * GiB);
  EXPECT_EQ(vmm_default_gpu_pool(100 * GiB + 3 * MiB, 140 * GiB), 93 * GiB + 2 * MiB);
  // At least 1 GiB.
  EXPECT_EQ(vmm_default_gpu_pool(3 * GiB, 16 * GiB), 2 * GiB);
  EXPECT_EQ(vmm_default_gpu_pool(GiB / 2, 16 * GiB), 0u);
  EXPECT_EQ(vmm_default_host_limit(10 * GiB), 5 * GiB);
  EXPECT_EQ(vmm_default_host_limit(5 * MiB), 2 * MiB);
  EXPECT_EQ(vmm_default_host_limit(0), 0u);
}

}  // namespace
}  // namespace umswap
