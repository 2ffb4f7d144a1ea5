// Parameter scanner: pointers found in kernelParams and in the packed `extra` buffer, at every
// 4-byte-aligned offset of a parameter, against a registry snapshot; and the layout cache.
#include "umswap/tracer/param_scanner.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace umswap::tracer {
namespace {

constexpr uint64_t kA = 0x7f0000010000;  // 4 KiB
constexpr uint64_t kB = 0x7f0000100000;  // 1 MiB
constexpr uint64_t kC = 0x7f0000300000;  // 64 bytes

class ParamScanner : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.insert({.base = kA, .size = 4096, .id = 1}));
    ASSERT_TRUE(registry_.insert({.base = kB, .size = 1 << 20, .id = 2}));
    ASSERT_TRUE(registry_.insert({.base = kC, .size = 64, .id = 3}));
    snapshot_ = registry_.snapshot();
  }

  // Scans `values` as parameters, one per entry, each of its own size (kernelParams form).
  std::vector<PointerHit> scan(const std::vector<std::vector<std::byte>>& values) {
    std::vector<ParamSlot> layout;
    std::vector<const void*> params;
    uint32_t offset = 0;
    for (const auto& v : values) {
      layout.push_back({offset, static_cast<uint32_t>(v.size())});
      params.push_back(v.data());
      offset += static_cast<uint32_t>(v.size());
    }
    std::vector<PointerHit> hits;
    scan_kernel_params(layout, params.data(), *snapshot_, hits);
    return hits;
  }

  Registry registry_;
  std::shared_ptr<const Registry::Snapshot> snapshot_;
};

template <class T>
std::vector<std::byte> bytes_of(const T& value) {
  std::vector<std::byte> b(sizeof(T));
  std::memcpy(b.data(), &value, sizeof(T));
  return b;
}

// A packed parameter of `size` bytes with `value` written at `offset`.
std::vector<std::byte> packed_with(size_t size, size_t offset, uint64_t value) {
  std::vector<std::byte> b(size, std::byte{0});
  std::memcpy(b.data() + offset, &value, sizeof value);
  return b;
}

PointerHit hit(BufferId id, uint64_t base, uint64_t size, uint64_t pointer) {
  return {.buffer = id, .base = base, .size = size, .pointer = pointer, .limit = 0};
}

TEST_F(ParamScanner, DirectPointerParameters) {
  const auto hits = scan({bytes_of(kA), bytes_of(kB + 16), bytes_of(int32_t{7}), bytes_of(kC)});
  EXPECT_EQ(hits, (std::vector<PointerHit>{hit(1, kA, 4096, kA), hit(2, kB, 1 << 20, kB + 16),
                                           hit(3, kC, 64, kC)}));
}

TEST_F(ParamScanner, PointerInsideAStructAtOffset8) {
  struct Args {
    int64_t n;
    uint64_t data;
    float alpha;
    int32_t pad;
  };
  const Args args{.n = 1000, .data = kB + 4096, .alpha = 0.5f, .pad = 0};
  EXPECT_EQ(scan({bytes_of(args)}), (std::vector<PointerHit>{hit(2, kB, 1 << 20, kB + 4096)}));
}

TEST_F(ParamScanner, PointerAtAnOddFourByteOffsetOfAPackedStruct) {
  EXPECT_EQ(scan({packed_with(16, 4, kA + 8)}),
            (std::vector<PointerHit>{hit(1, kA, 4096, kA + 8)}));
  EXPECT_EQ(scan({packed_with(20, 12, kC + 60)}),
            (std::vector<PointerHit>{hit(3, kC, 64, kC + 60)}));
  // Not at a 4-byte-aligned offset: not scanned.
  EXPECT_TRUE(scan({packed_with(24, 6, kA)}).empty());
}

TEST_F(ParamScanner, BufferEdges) {
  EXPECT_TRUE(scan({bytes_of(kA - 1)}).empty());     // one byte before
  EXPECT_TRUE(scan({bytes_of(kA + 4096)}).empty());  // exactly at the end
  EXPECT_TRUE(scan({bytes_of(kC + 64)}).empty());    // end of the last buffer
  EXPECT_EQ(scan({bytes_of(kA + 4095)}),             // the last byte
            (std::vector<PointerHit>{hit(1, kA, 4096, kA + 4095)}));
  EXPECT_EQ(scan({bytes_of(kA)}), (std::vector<PointerHit>{hit(1, kA, 4096, kA)}));
}

TEST_F(ParamScanner, FreedBufferAndItsRangeReused) {
  const auto old_snapshot = snapshot_;
  ASSERT_TRUE(registry_.remove(kA));
  snapshot_ = registry_.snapshot();
  EXPECT_TRUE(scan({bytes_of(kA + 100)}).empty());
  ASSERT_TRUE(registry_.insert({.base = kA, .size = 8192, .id = 4}));
  snapshot_ = registry_.snapshot();
  EXPECT_EQ(scan({bytes_of(kA + 5000)}), (std::vector<PointerHit>{hit(4, kA, 8192, kA + 5000)}));
  // A snapshot taken before still answers as it did.
  std::vector<PointerHit> hits;
  const auto value = bytes_of(kA + 100);
  const void* params[] = {value.data()};
  scan_kernel_params(std::vector<ParamSlot>{{0, 8}}, params, *old_snapshot, hits);
  EXPECT_EQ(hits, (std::vector<PointerHit>{hit(1, kA, 4096, kA + 100)}));
}

TEST_F(ParamScanner, ValuesThatAreNotPointers) {
  struct Scalars {
    float f[4];
    double d;
    uint64_t size;
    int64_t minus_one;
    uint64_t zero;
    uint32_t count;
    uint32_t flags;
  };
  const Scalars s{.f = {1.0f, 3.14f, -2.5f, 0.0f},
                  .d = 1.0,
                  .size = 4096,
                  .minus_one = -1,
                  .zero = 0,
                  .count = 0x7f00,  // the high half of an address, alone
                  .flags = 0x00010000};
  EXPECT_TRUE(scan({bytes_of(s), bytes_of(uint64_t{1} << 40), bytes_of(2.0), bytes_of(size_t{16})})
                  .empty());
}

TEST_F(ParamScanner, SmallAndMissingParametersAreSkipped) {
  // A 4-byte parameter cannot hold a pointer; a null parameter pointer is skipped.
  std::vector<ParamSlot> layout = {{0, 4}, {8, 8}, {16, 8}};
  const uint32_t small = 1;
  const auto value = bytes_of(kB);
  const void* params[] = {&small, nullptr, value.data()};
  std::vector<PointerHit> hits;
  scan_kernel_params(layout, params, *snapshot_, hits);
  EXPECT_EQ(hits, (std::vector<PointerHit>{hit(2, kB, 1 << 20, kB)}));
  scan_kernel_params(layout, nullptr, *snapshot_, hits);
  EXPECT_TRUE(hits.empty());
}

TEST_F(ParamScanner, PackedExtraBuffer) {
  // void* p0 at 0, int at 8, struct {int; void*; void*} packed at 12 (4-aligned), void* at 32.
  std::vector<std::byte> buffer(40, std::byte{0});
  const std::vector<ParamSlot> layout = {{0, 8}, {8, 4}, {12, 20}, {32, 8}};
  const auto put = [&](size_t at, uint64_t v) { std::memcpy(buffer.data() + at, &v, 8); };
  put(0, kA + 1);
  put(16, kB + 2);
  put(24, kC + 3);
  put(32, kB + 4);
  std::vector<PointerHit> hits;
  scan_param_buffer(layout, buffer, *snapshot_, hits);
  EXPECT_EQ(hits, (std::vector<PointerHit>{hit(1, kA, 4096, kA + 1), hit(2, kB, 1 << 20, kB + 2),
                                           hit(2, kB, 1 << 20, kB + 4), hit(3, kC, 64, kC + 3)}));
  // The same values through kernelParams give the same hits.
  const void* params[] = {buffer.data(), buffer.data() + 8, buffer.data() + 12, buffer.data() + 32};
  std::vector<PointerHit> direct;
  scan_kernel_params(layout, params, *snapshot_, direct);
  EXPECT_EQ(direct, hits);
  // A layout that runs past the buffer reads only what is there.
  scan_param_buffer(layout, std::span(buffer).first(28), *snapshot_, hits);
  EXPECT_EQ(hits, (std::vector<PointerHit>{hit(1, kA, 4096, kA + 1), hit(2, kB, 1 << 20, kB + 2)}));
}

TEST_F(ParamScanner, HitsAreDeduplicatedPerLaunch) {
  struct Pair {
    uint64_t in;
    uint64_t out;
  };
  const auto hits = scan({bytes_of(kB + 64), bytes_of(Pair{kB + 64, kB}), bytes_of(kB + 64),
                          bytes_of(kA), bytes_of(kA)});
  EXPECT_EQ(hits, (std::vector<PointerHit>{hit(1, kA, 4096, kA), hit(2, kB, 1 << 20, kB),
                                           hit(2, kB, 1 << 20, kB + 64)}));
}

TEST_F(ParamScanner, ManyParametersReuseTheOutput) {
  std::vector<std::vector<std::byte>> values;
  for (uint64_t k = 0; k < 300; ++k) {
    values.push_back(k % 3 == 2 ? bytes_of(static_cast<double>(k)) : bytes_of(kB + 1000 * k));
  }
  std::vector<ParamSlot> layout;
  std::vector<const void*> params;
  for (size_t k = 0; k < values.size(); ++k) {
    layout.push_back({static_cast<uint32_t>(8 * k), 8});
    params.push_back(values[k].data());
  }
  std::vector<PointerHit> hits;
  scan_kernel_params(layout, params.data(), *snapshot_, hits);
  ASSERT_EQ(hits.size(), 200u);
  for (size_t h = 1; h < hits.size(); ++h) EXPECT_LT(hits[h - 1].pointer, hits[h].pointer);
  const PointerHit* storage = hits.data();
  const size_t capacity = hits.capacity();
  scan_kernel_params(layout, params.data(), *snapshot_, hits);
  EXPECT_EQ(hits.size(), 200u);
  EXPECT_EQ(hits.data(), storage);  // no reallocation in steady state
  EXPECT_EQ(hits.capacity(), capacity);
}

TEST(ParamLayoutCache, FindInsertAndReplace) {
  ParamLayoutCache cache(16);
  EXPECT_EQ(cache.find(0x1234), nullptr);
  const std::vector<ParamSlot> layout = {{0, 8}, {8, 4}};
  const FunctionLayout* stored = cache.insert(0x1234, layout, 7);
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(cache.find(0x1234), stored);
  EXPECT_EQ(*stored, (FunctionLayout{.params = {{0, 8}, {8, 4}}, .key = 7}));
  EXPECT_EQ(cache.size(), 1u);
  // A new layout for the same handle (module reloaded): later finds see it; the old stays valid.
  const FunctionLayout* replaced = cache.insert(0x1234, std::vector<ParamSlot>{{0, 16}}, 9);
  ASSERT_NE(replaced, nullptr);
  EXPECT_EQ(cache.find(0x1234), replaced);
  EXPECT_EQ(replaced->key, 9u);
  EXPECT_EQ(stored->params.size(), 2u);
  EXPECT_EQ(stored->key, 7u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.insert(0, layout, 1), nullptr);  // not a function
  EXPECT_EQ(cache.find(0), nullptr);
}

TEST(ParamLayoutCache, BoundedSize) {
  ParamLayoutCache cache(16);
  EXPECT_EQ(cache.capacity(), 16u);
  const std::vector<ParamSlot> layout = {{0, 8}};
  for (uint64_t f = 1; f <= 16; ++f) ASSERT_NE(cache.insert(f * 0x1000, layout, 0), nullptr) << f;
  EXPECT_EQ(cache.insert(17 * 0x1000, layout, 0), nullptr);  // full: the caller uses its own copy
  EXPECT_EQ(cache.find(17 * 0x1000), nullptr);
  for (uint64_t f = 1; f <= 16; ++f) EXPECT_NE(cache.find(f * 0x1000), nullptr) << f;
  EXPECT_EQ(cache.size(), 16u);
}

TEST(ParamLayoutCache, ReadersRaceAWriter) {
  ParamLayoutCache cache(4096);
  constexpr uint64_t kFunctions = 3000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> wrong{0};
  std::atomic<uint64_t> found{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      for (bool last = false; !last;) {
        last = done.load();  // one more full pass after the writer is done
        for (uint64_t f = 1; f <= kFunctions; ++f) {
          if (const FunctionLayout* l = cache.find(f << 4)) {
            found.fetch_add(1, std::memory_order_relaxed);
            if (l->params.size() != f % 7 + 1 || l->params[0].offset != f || l->key != f) {
              wrong.fetch_add(1);
            }
          }
        }
      }
    });
  }
  for (uint64_t f = 1; f <= kFunctions; ++f) {
    std::vector<ParamSlot> layout(f % 7 + 1, ParamSlot{static_cast<uint32_t>(f), 8});
    ASSERT_NE(cache.insert(f << 4, layout, static_cast<uint32_t>(f)), nullptr);
  }
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(found.load(), 0u);
  for (uint64_t f = 1; f <= kFunctions; ++f) ASSERT_NE(cache.find(f << 4), nullptr);
}

}  // namespace
}  // namespace umswap::tracer

namespace umswap::tracer {
namespace {

// A slab (a registered buffer marked `slab`) holding blocks [kS, kS + 1024) and
// [kS + 4096, kS + 4096 + 512); the rest is free space.
constexpr uint64_t kSlab = 0x7f0000400000;

class TwoBlocks final : public BlockFinder {
 public:
  std::optional<std::pair<uint64_t, uint64_t>> live_block(uint64_t address) const override {
    for (auto [first, second] :
         {std::pair{kSlab, kSlab + 1024}, std::pair{kSlab + 4096, kSlab + 4096 + 512}}) {
      if (address >= first && address < second) return std::pair{first, second};
    }
    return std::nullopt;
  }
};

TEST(ParamScannerSlab, AHitInABlockEndsAtTheBlockAndFreeSpaceIsNoPointer) {
  Registry registry;
  TwoBlocks blocks;
  ASSERT_TRUE(registry.insert({.base = kSlab, .size = 2 << 20, .id = 9, .slab = true}));
  registry.set_block_finder(&blocks);
  const uint64_t values[4] = {kSlab + 8, kSlab + 2048, kSlab + 4096, kSlab + (1 << 20)};
  const std::vector<ParamSlot> layout = {{0, sizeof values}};
  std::vector<PointerHit> hits;
  scan_param_buffer(layout, std::as_bytes(std::span(values)), *registry.snapshot(), hits);
  EXPECT_EQ(hits, (std::vector<PointerHit>{{.buffer = 9,
                                            .base = kSlab,
                                            .size = 2 << 20,
                                            .pointer = kSlab + 8,
                                            .limit = kSlab + 1024},
                                           {.buffer = 9,
                                            .base = kSlab,
                                            .size = 2 << 20,
                                            .pointer = kSlab + 4096,
                                            .limit = kSlab + 4096 + 512}}));
  registry.set_block_finder(nullptr);
  // Without a finder a slab is one buffer, as any other.
  scan_param_buffer(layout, std::as_bytes(std::span(values)), *registry.snapshot(), hits);
  EXPECT_EQ(hits.size(), 4u);
  EXPECT_EQ(hits[1].limit, kSlab + (2 << 20));
}

}  // namespace
}  // namespace umswap::tracer
