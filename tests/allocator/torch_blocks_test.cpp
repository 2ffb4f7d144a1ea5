// TorchBlocks against a fake libc10_cuda.so (tests/allocator/fake_c10/): the attach through
// .symtab and the vtable check, the self-check on the first segment, the blocks it reports, and
// the registry's extents under it. The real library was probed on a GPU machine
// (bench/allocator_trace_probe.py; the GPU runs are in docs/lab).
#include "umswap/allocator/torch_blocks.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <utility>

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
    emit = reinterpret_cast<void (*)(int32_t, size_t, size_t)>(dlsym(handle_, "fake_c10_emit"));
  }
  bool ok() const { return handle_ && set_backend && clear && trackers && emit; }

  void (*set_backend)(int) = nullptr;
  void (*clear)() = nullptr;
  size_t (*trackers)() = nullptr;
  void (*emit)(int32_t, size_t, size_t) = nullptr;

 private:
  void* handle_ = nullptr;  // left loaded: trackers in it point into this test
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

}  // namespace
}  // namespace umswap
