// TorchBlocks against a fake libc10_cuda.so (tests/allocator/fake_c10/): the attach through
// .symtab and the vtable check, the self-check on the first segment, the blocks it reports, and
// the registry's extents under it. The real library was probed on a GPU machine
// (bench/allocator_trace_probe.py; the GPU runs are in docs/lab).
#include "umswap/allocator/torch_blocks.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "umswap/core/elf_symbols.h"

namespace umswap {
namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;
constexpr uint64_t kSegment = uint64_t{1} << 40;
using Range = std::optional<std::pair<uint64_t, uint64_t>>;

class FakeC10 {
 public:
  FakeC10() {
    handle_ = dlopen(UMSWAP_TEST_FAKE_C10_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) return;
    set_backend = reinterpret_cast<void (*)(int)>(dlsym(handle_, "fake_c10_set_backend"));
    clear = reinterpret_cast<void (*)()>(dlsym(handle_, "fake_c10_clear_trackers"));
    trackers = reinterpret_cast<size_t (*)()>(dlsym(handle_, "fake_c10_trackers"));
    emit_ = reinterpret_cast<void (*)(int32_t, size_t, size_t, size_t)>(
        dlsym(handle_, "fake_c10_emit"));
  }
  bool ok() const { return handle_ && set_backend && clear && trackers && emit_; }
  void emit(int32_t action, size_t address, size_t bytes, size_t stream = 0) const {
    emit_(action, address, bytes, stream);
  }

  void (*set_backend)(int) = nullptr;
  void (*clear)() = nullptr;
  size_t (*trackers)() = nullptr;

 private:
  void* handle_ = nullptr;  // left loaded: trackers in it point into this test
  void (*emit_)(int32_t, size_t, size_t, size_t) = nullptr;
};

class TorchBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << dlerror();
    fake_.clear();
    fake_.set_backend(1);
    registry_.set_carved_block_finder(&blocks_);
    ASSERT_TRUE(registry_.insert({.base = kSegment, .size = 20 * MiB, .id = 1}));
  }
  void TearDown() override {
    fake_.clear();
    registry_.set_carved_block_finder(nullptr);
  }
  // The first segment as PyTorch makes it: cudaMalloc (attach, then its result), then the event.
  void first_segment(uint64_t event_base = kSegment) {
    blocks_.before_segment_malloc(UMSWAP_TEST_FAKE_C10_CUDA);
    blocks_.after_segment_malloc(true, kSegment, 20 * MiB);
    fake_.emit(TorchBlocks::kSegmentAlloc, event_base, 20 * MiB);
  }
  std::optional<uint64_t> end_at(uint64_t address) {
    const auto view = registry_.snapshot();
    const BufferRecord* r = view->find(address);
    return r ? view->allocation_end(*r, address) : std::nullopt;
  }

  FakeC10 fake_;
  Registry registry_;
  TorchBlocks blocks_{registry_};
};

TEST(ElfSymbols, FindsHiddenSymbolsByNameAndPrefix) {
  std::string error;
  const auto found = read_symtab(
      UMSWAP_TEST_FAKE_C10_CUDA,
      {{"_ZN3c104cuda20CUDACachingAllocator9allocatorE"},
       {"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocator", true},
       {"no_such_symbol"}},
      &error);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(found.contains("_ZN3c104cuda20CUDACachingAllocator9allocatorE"));
  EXPECT_TRUE(found.contains(
      "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocator"));
  EXPECT_FALSE(found.contains("no_such_symbol"));
  // The hidden method is not in .dynsym: dlsym cannot find what .symtab does.
  void* h = dlopen(UMSWAP_TEST_FAKE_C10_CUDA, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(dlsym(h, "_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"),
            nullptr);
  dlclose(h);
}

TEST(ElfSymbols, BadFilesGiveAnErrorAndNothing) {
  std::string error;
  EXPECT_TRUE(read_symtab("/nonexistent/libc10_cuda.so", {{"x"}}, &error).empty());
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  EXPECT_TRUE(read_symtab("/proc/self/status", {{"x"}}, &error).empty());  // not ELF
  EXPECT_NE(error.find("not a 64-bit"), std::string::npos) << error;
}

TEST_F(TorchBlocksTest, FollowsBlocksOnceTheFirstSegmentChecksOut) {
  EXPECT_TRUE(blocks_.wants_segment_calls());
  first_segment();
  EXPECT_EQ(fake_.trackers(), 1u);
  EXPECT_FALSE(blocks_.wants_segment_calls());
  EXPECT_EQ(blocks_.stats().state, "checked");
  ASSERT_TRUE(registry_.find(kSegment)->carved);

  fake_.emit(TorchBlocks::kAlloc, kSegment, 1000);
  fake_.emit(TorchBlocks::kAlloc, kSegment + 1024, 4 * MiB);
  EXPECT_EQ(blocks_.live_block(kSegment + 999), Range({kSegment, kSegment + 1000}));
  EXPECT_EQ(blocks_.live_block(kSegment + 1000), std::nullopt);   // between the blocks
  EXPECT_EQ(end_at(kSegment + 2048), kSegment + 1024 + 4 * MiB);  // a block's end, not 20 MiB
  EXPECT_EQ(end_at(kSegment + 10 * MiB), std::nullopt);           // free space: no pointer

  fake_.emit(TorchBlocks::kFreeRequested, kSegment, 1000);
  EXPECT_EQ(blocks_.live_block(kSegment), std::nullopt);
  fake_.emit(TorchBlocks::kFreeCompleted, kSegment, 1000);  // changes nothing
  fake_.emit(TorchBlocks::kAlloc, kSegment, 512);           // the space reused
  EXPECT_EQ(end_at(kSegment + 100), kSegment + 512);

  const TorchBlocks::Stats s = blocks_.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.live_blocks, 2u);

  fake_.emit(TorchBlocks::kSegmentFree, kSegment, 20 * MiB);
  EXPECT_EQ(blocks_.stats().live_blocks, 0u);
}

TEST_F(TorchBlocksTest, BlocksOutsideSeenSegmentsAreIgnored) {
  first_segment();
  const uint64_t other = kSegment + 64 * MiB;  // a segment made before umswap followed it
  ASSERT_TRUE(registry_.insert({.base = other, .size = 2 * MiB, .id = 2}));
  fake_.emit(TorchBlocks::kAlloc, other, 4096);
  EXPECT_EQ(blocks_.stats().ignored, 1u);
  EXPECT_FALSE(registry_.find(other)->carved);
  EXPECT_EQ(end_at(other + 8192), other + 2 * MiB);  // the whole allocation, as before
}

TEST_F(TorchBlocksTest, AMismatchedFirstSegmentTurnsItOff) {
  first_segment(kSegment + 2 * MiB);  // not what umswap's cudaMalloc returned
  const TorchBlocks::Stats s = blocks_.stats();
  EXPECT_NE(s.state.find("did not match"), std::string::npos) << s.state;
  EXPECT_FALSE(registry_.find(kSegment)->carved);
  fake_.emit(TorchBlocks::kSegmentAlloc, kSegment, 20 * MiB);  // later events: ignored
  fake_.emit(TorchBlocks::kAlloc, kSegment, 1000);
  EXPECT_FALSE(registry_.find(kSegment)->carved);
  EXPECT_EQ(end_at(kSegment + 5000), kSegment + 20 * MiB);
  EXPECT_FALSE(blocks_.wants_segment_calls());
}

TEST_F(TorchBlocksTest, AnotherBackendIsLeftAlone) {
  fake_.set_backend(2);
  blocks_.before_segment_malloc(UMSWAP_TEST_FAKE_C10_CUDA);
  EXPECT_EQ(fake_.trackers(), 0u);
  EXPECT_NE(blocks_.stats().state.find("not the native caching allocator"), std::string::npos);
  EXPECT_FALSE(blocks_.wants_segment_calls());
}

TEST_F(TorchBlocksTest, NoAllocatorYetIsSaid) {
  fake_.set_backend(0);
  blocks_.before_segment_malloc(UMSWAP_TEST_FAKE_C10_CUDA);
  EXPECT_NE(blocks_.stats().state.find("not set up"), std::string::npos);
}

TEST_F(TorchBlocksTest, OtherLibrariesDoNotCount) {
  blocks_.before_segment_malloc("/usr/lib/x86_64-linux-gnu/libcudnn.so.9");
  blocks_.before_segment_malloc(nullptr);
  EXPECT_EQ(blocks_.stats().state, "not PyTorch");
  EXPECT_TRUE(blocks_.wants_segment_calls());
  EXPECT_EQ(fake_.trackers(), 0u);
}

TEST_F(TorchBlocksTest, ALibraryWithoutTheSymbolsIsSaid) {
  // The test program itself is not PyTorch: named libc10_cuda.so it would lack the symbols.
  EXPECT_NE(blocks_.attach("/proc/self/exe").find("lacks"), std::string::npos);
}

// What set_drops() is told and asked, recorded; the driver calls succeed unless told otherwise.
struct DropLog {
  std::vector<std::tuple<uint64_t, uint64_t, bool>> lifetimes, residency;
  // (first page, bytes, stream) of each range of each call
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> discards, populates;
  std::set<uint64_t> refused, later;  // pages discard_page refuses, pages populate_later takes
  std::set<uint64_t> capturing;       // streams being captured
  bool fail_discard = false;

  TorchBlocks::Drops drops() {
    TorchBlocks::Drops d;
    d.lifetime = [this](uint64_t a, uint64_t n, bool freed) {
      lifetimes.emplace_back(a, n, freed);
    };
    d.discard_page = [this](uint64_t page) { return !refused.contains(page); };
    d.populate_later = [this](uint64_t page) { return later.contains(page); };
    d.residency = [this](uint64_t a, uint64_t n, bool on) { residency.emplace_back(a, n, on); };
    d.discard = [this](std::vector<CUdeviceptr>& starts, std::vector<size_t>& sizes,
                       uint64_t stream) {
      if (fail_discard) return false;
      for (size_t i = 0; i < starts.size(); ++i) discards.emplace_back(starts[i], sizes[i], stream);
      return true;
    };
    d.populate = [this](std::vector<CUdeviceptr>& starts, std::vector<size_t>& sizes,
                        uint64_t stream) {
      for (size_t i = 0; i < starts.size(); ++i)
        populates.emplace_back(starts[i], sizes[i], stream);
      return true;
    };
    d.capturing = [this](uint64_t stream) { return capturing.contains(stream); };
    return d;
  }
};
using Call = std::tuple<uint64_t, uint64_t, uint64_t>;
using Calls = std::vector<Call>;

// DropOrder's events for TorchDropsTest: never complete; the streams they were recorded on.
std::vector<CUstream> g_order_records;
CUresult CUDAAPI order_event_create(CUevent* e, unsigned) {
  static uintptr_t next = 1;
  *e = reinterpret_cast<CUevent>(next++);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI order_event_record(CUevent, CUstream s) {
  g_order_records.push_back(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI order_event_query(CUevent) {
  return CUDA_ERROR_NOT_READY;
}
std::vector<std::pair<CUstream, CUevent>> g_order_waits;
CUresult CUDAAPI order_stream_wait_event(CUstream s, CUevent e, unsigned) {
  g_order_waits.emplace_back(s, e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI order_stream_is_capturing(CUstream, CUstreamCaptureStatus* status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
DropOrder::Driver order_driver() {
  return {.event_create = &order_event_create,
          .event_record = &order_event_record,
          .event_query = &order_event_query,
          .stream_wait_event = &order_stream_wait_event,
          .stream_is_capturing = &order_stream_is_capturing};
}

class TorchDropsTest : public TorchBlocksTest {
 protected:
  void SetUp() override {
    TorchBlocksTest::SetUp();
    first_segment();  // 20 MiB at kSegment, which is 2 MiB aligned
    blocks_.set_drops(log_.drops());
  }
  // The drops ordered with migrations by `order` (drop_order.h), as the advisor hands them.
  void order_drops(DropOrder& order) {
    TorchBlocks::Drops drops = log_.drops();
    drops.order = &order;
    blocks_.set_drops(std::move(drops));
  }
  void alloc(uint64_t offset, uint64_t bytes, uint64_t stream = 7) {
    fake_.emit(TorchBlocks::kAlloc, kSegment + offset, bytes, stream);
  }
  void free(uint64_t offset, uint64_t bytes, uint64_t stream = 7, bool complete = true) {
    fake_.emit(TorchBlocks::kFreeRequested, kSegment + offset, bytes, stream);
    if (complete) fake_.emit(TorchBlocks::kFreeCompleted, kSegment + offset, bytes, stream);
  }
  DropLog log_;
};

// Only whole 2 MiB pages of the free space around the block, on the block's stream: the page it
// shares with a live neighbour stays.
TEST_F(TorchDropsTest, AFreedBlockDropsTheWholeFreePagesItOverlaps) {
  alloc(0, 5 * MiB);
  alloc(5 * MiB, MiB);
  free(0, 5 * MiB, 11);
  EXPECT_EQ(log_.discards, Calls({{kSegment, 4 * MiB, 11}}));
  EXPECT_EQ(log_.residency.size(), 1u);
  using L = std::tuple<uint64_t, uint64_t, bool>;
  EXPECT_EQ(log_.lifetimes, std::vector<L>({{kSegment, 5 * MiB, false},
                                            {kSegment + 5 * MiB, MiB, false},
                                            {kSegment, 5 * MiB, true}}));
  // The neighbour goes too: its free space now reaches the segment's end, and the shared page
  // [4, 6) MiB is whole; the pages already dropped are not asked again.
  free(5 * MiB, MiB);
  EXPECT_EQ(log_.discards, Calls({{kSegment, 4 * MiB, 11}, {kSegment + 4 * MiB, 2 * MiB, 7}}));
  EXPECT_EQ(blocks_.stats().discarded_bytes, 6 * MiB);
  EXPECT_EQ(blocks_.stats().drops, "on");
}

// A block freed but not completed (another stream may still use it) is not free space.
TEST_F(TorchDropsTest, ABlockNotYetCompletedKeepsItsPages) {
  alloc(0, 5 * MiB);
  alloc(5 * MiB, 3 * MiB);
  free(5 * MiB, 3 * MiB, 7, false);  // requested only: page [4, 6) MiB is not free yet
  free(0, 5 * MiB);
  EXPECT_EQ(log_.discards, Calls({{kSegment, 4 * MiB, 7}}));
  fake_.emit(TorchBlocks::kFreeCompleted, kSegment + 5 * MiB, 3 * MiB, 7);
  EXPECT_EQ(log_.discards, Calls({{kSegment, 4 * MiB, 7}, {kSegment + 4 * MiB, 4 * MiB, 7}}));
}

TEST_F(TorchDropsTest, OnlyThePagesThePlanDropsAreDiscarded) {
  log_.refused = {kSegment, kSegment + 4 * MiB};
  alloc(0, 8 * MiB);
  free(0, 8 * MiB);
  EXPECT_EQ(log_.discards,
            Calls({{kSegment + 2 * MiB, 2 * MiB, 7}, {kSegment + 6 * MiB, 2 * MiB, 7}}));
}

// With a DropOrder: a page an unfinished migration covers stays, and the discard is told to it
// (an event after it on the discard's stream, the per-thread one for the legacy stream).
TEST_F(TorchDropsTest, ThePagesOfUnfinishedMigrationsAreNotDiscarded) {
  DropOrder order(order_driver());
  g_order_records.clear();
  order_drops(order);
  std::vector<DropOrder::Range> parts;
  order.end_migration(order.begin_migration(kSegment + 2 * MiB, MiB, false, &parts), nullptr);
  alloc(0, 8 * MiB, 0);
  free(0, 8 * MiB, 0);
  EXPECT_EQ(log_.discards, Calls({{kSegment, 2 * MiB, 0}, {kSegment + 4 * MiB, 4 * MiB, 0}}));
  EXPECT_EQ(order.stats().pages_kept, 1u);
  ASSERT_EQ(g_order_records.size(), 2u);
  EXPECT_EQ(g_order_records[1], CU_STREAM_PER_THREAD);
  EXPECT_EQ(order.stats().discards_pending, 1u);
}

// A page only a prefetch covers is discarded after the discard's stream (the per-thread one for
// the legacy stream) waits for the prefetch's event.
TEST_F(TorchDropsTest, ThePagesOfPrefetchesAreDiscardedAfterAWait) {
  DropOrder order(order_driver());
  g_order_waits.clear();
  order.allow_waits([] { return true; });  // as the advisor does while launches wait
  order_drops(order);
  std::vector<DropOrder::Range> parts;
  order.end_migration(order.begin_migration(kSegment + 2 * MiB, MiB, true, &parts), nullptr);
  alloc(0, 8 * MiB, 0);
  free(0, 8 * MiB, 0);
  EXPECT_EQ(log_.discards, Calls({{kSegment, 8 * MiB, 0}}));
  ASSERT_EQ(g_order_waits.size(), 1u);
  EXPECT_EQ(g_order_waits[0].first, CU_STREAM_PER_THREAD);
  EXPECT_EQ(order.stats().pages_kept, 0u);
  EXPECT_EQ(order.stats().pages_after_waits, 1u);
}

// An allocation over dropped pages populates them on its stream (edge pages too) and forgets
// them, except those the advisor populates itself later.
TEST_F(TorchDropsTest, AnAllocationPopulatesTheDroppedPagesItOverlaps) {
  alloc(0, 6 * MiB);
  free(0, 6 * MiB);
  ASSERT_EQ(log_.discards, Calls({{kSegment, 6 * MiB, 7}}));
  log_.later = {kSegment + 2 * MiB};
  alloc(MiB, 2 * MiB, 9);  // [1, 3) MiB: pages [0, 2) and [2, 4)
  EXPECT_EQ(log_.populates, Calls({{kSegment, 2 * MiB, 9}}));
  EXPECT_EQ(blocks_.stats().populate_deferred_bytes, 2 * MiB);
  alloc(3 * MiB, MiB, 9);  // [3, 4) MiB: page [2, 4) was forgotten, nothing to populate
  EXPECT_EQ(log_.populates.size(), 1u);
  alloc(4 * MiB, MiB, 9);  // page [4, 6) still dropped
  EXPECT_EQ(log_.populates, Calls({{kSegment, 2 * MiB, 9}, {kSegment + 4 * MiB, 2 * MiB, 9}}));
}

// Nothing is dropped or populated on a stream being captured; a page an allocation there
// overlaps is forgotten all the same (the driver populates it at its first touch).
TEST_F(TorchDropsTest, NothingOnAStreamBeingCaptured) {
  log_.capturing = {5};
  alloc(0, 4 * MiB, 5);
  free(0, 4 * MiB, 5);
  EXPECT_TRUE(log_.discards.empty());
  free(0, 0, 5, false);  // nothing of ours: no effect
  alloc(0, 4 * MiB, 7);
  free(0, 4 * MiB, 7);
  ASSERT_EQ(log_.discards, Calls({{kSegment, 4 * MiB, 7}}));
  alloc(0, MiB, 5);
  EXPECT_TRUE(log_.populates.empty());
  alloc(MiB, MiB, 7);  // page [0, 2) was forgotten
  alloc(2 * MiB, MiB, 7);
  EXPECT_EQ(log_.populates, Calls({{kSegment + 2 * MiB, 2 * MiB, 7}}));
}

TEST_F(TorchDropsTest, AFailedDiscardStopsTheDrops) {
  log_.fail_discard = true;
  alloc(0, 4 * MiB);
  free(0, 4 * MiB);
  EXPECT_EQ(blocks_.stats().drops, "cuMemDiscardBatchAsync failed");
  log_.fail_discard = false;
  alloc(0, 4 * MiB);
  free(0, 4 * MiB);
  EXPECT_TRUE(log_.discards.empty());
  EXPECT_EQ(log_.lifetimes.size(), 4u);  // lifetimes are still told
}

TEST_F(TorchDropsTest, ASegmentGivenBackForgetsItsPages) {
  alloc(0, 4 * MiB);
  free(0, 4 * MiB);
  ASSERT_EQ(log_.discards.size(), 1u);
  fake_.emit(TorchBlocks::kSegmentFree, kSegment, 20 * MiB);
  fake_.emit(TorchBlocks::kSegmentAlloc, kSegment, 20 * MiB);
  alloc(0, 4 * MiB);
  EXPECT_TRUE(log_.populates.empty());
}

// Drops set up in a program whose allocator is not followed (another backend): said to be off.
TEST_F(TorchBlocksTest, NoDropsWhereNoBlockIsFollowed) {
  DropLog log;
  blocks_.set_drops(log.drops());
  EXPECT_EQ(blocks_.stats().drops, "off");
  fake_.set_backend(2);
  blocks_.before_segment_malloc(UMSWAP_TEST_FAKE_C10_CUDA);
  EXPECT_EQ(blocks_.stats().drops, "off");
  blocks_.set_drops({});  // before `log` goes
}

// Without the driver calls (no planned discards): lifetimes only.
TEST_F(TorchDropsTest, WithoutDriverCallsOnlyLifetimes) {
  TorchBlocks::Drops d = log_.drops();
  d.discard = nullptr;
  d.populate = nullptr;
  blocks_.set_drops(d);
  alloc(0, 4 * MiB);
  free(0, 4 * MiB);
  EXPECT_TRUE(log_.discards.empty());
  EXPECT_EQ(log_.lifetimes.size(), 2u);
  EXPECT_EQ(blocks_.stats().drops, "off");
}

}  // namespace
}  // namespace umswap
