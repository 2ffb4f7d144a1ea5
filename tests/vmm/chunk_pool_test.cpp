// ChunkPool (vmm/include/umswap/vmm/detail/chunk_pool.h) under random sequences of takes, gives,
// limit changes, trims and keep_free() over the fake driver: the memory made never grows past the
// limit and what is in use never passes it, nothing is released while keep_free(), the counts
// match what is held, can_take() / can_take_block() /
// can_place() say exactly whether the takes succeed, everything held is a handle of its own size
// mapped at its window slot, and nothing is left once all is given back and the pool destroyed.
#include "umswap/vmm/detail/chunk_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "fake_vmm_driver.h"

namespace umswap::vmm::detail {
namespace {

using fake::g_fake;

CUmemLocation gpu_location() {
  CUmemLocation l{};
  l.type = CU_MEM_LOCATION_TYPE_DEVICE;
  l.id = 3;  // the fake's device
  return l;
}

struct Held {
  uint32_t index = 0;
  bool whole = false;
};

class ChunkPoolProperty : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ChunkPoolProperty, RandomTakesAndGivesKeepTheLimitAndTheCounts) {
  const uint32_t per = GetParam();
  constexpr uint64_t kCapacity = 6;  // blocks
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    g_fake = std::make_unique<fake::Fake>();
    const VmmDriver driver = fake::fake_driver();
    auto pool =
        std::make_unique<ChunkPool>(&driver, gpu_location(), g_fake->device, kCapacity, per);
    std::mt19937 rng(seed);
    std::vector<Held> held;
    uint64_t chunks_held = 0;
    bool keep = false;  // keep_free()
    for (int op = 0; op < 400; ++op) {
      const int what = static_cast<int>(rng() % 10);
      // A take makes memory only under the limit (after the limit was lowered, what was made
      // before may stay past it until it is free and trimmed).
      const uint64_t made_before = pool->made();
      const int releases_before = g_fake->calls[fake::kRelease];
      // What is in use never passes the limit; while keep_free(), nothing is released.
      auto made_within = [&] {
        return pool->made() <= std::max(made_before, pool->limit() * per) &&
               pool->in_use() <= pool->limit() * per &&
               (!keep || g_fake->calls[fake::kRelease] == releases_before);
      };
      if (what < 3) {
        const bool can = pool->can_take();
        uint32_t index = 0;
        const CUresult r = pool->take(&index);
        ASSERT_EQ(r == CUDA_SUCCESS, can) << "seed " << seed << " op " << op;
        if (r == CUDA_SUCCESS) {
          held.push_back({index, false});
          ++chunks_held;
          EXPECT_TRUE(made_within()) << "seed " << seed << " op " << op;
        }
      } else if (what < 5) {
        const bool can = pool->can_take_block();
        uint32_t index = 0;
        const CUresult r = pool->take_block(&index);
        ASSERT_EQ(r == CUDA_SUCCESS, can) << "seed " << seed << " op " << op;
        if (r == CUDA_SUCCESS) {
          EXPECT_EQ(index % per, 0u);
          held.push_back({index, true});
          chunks_held += per;
          EXPECT_TRUE(made_within()) << "seed " << seed << " op " << op;
        }
      } else if (what < 8 && !held.empty()) {
        const size_t k = rng() % held.size();
        if (held[k].whole) {
          pool->give_block(held[k].index);
          chunks_held -= per;
        } else {
          pool->give(held[k].index);
          --chunks_held;
        }
        held[k] = held.back();
        held.pop_back();
      } else if (what == 8) {
        if (rng() % 2) {
          pool->set_limit(1 + rng() % kCapacity);
          if (!keep) pool->trim_to_limit();
        } else {
          keep = !keep;
          pool->keep_free(keep);
        }
      } else {
        // can_place() says whether a block and then some chunks can all be taken now.
        const uint64_t n = rng() % (per + 1);
        if (pool->can_place(1, n)) {
          uint32_t index = 0;
          ASSERT_EQ(pool->take_block(&index), CUDA_SUCCESS) << "seed " << seed << " op " << op;
          EXPECT_TRUE(made_within()) << "seed " << seed << " op " << op;
          held.push_back({index, true});
          chunks_held += per;
          for (uint64_t i = 0; i < n; ++i) {
            ASSERT_EQ(pool->take(&index), CUDA_SUCCESS) << "seed " << seed << " op " << op;
            held.push_back({index, false});
            ++chunks_held;
          }
        } else {
          EXPECT_FALSE(pool->can_place(1, n + 1));
        }
      }
      ASSERT_EQ(pool->in_use(), chunks_held) << "seed " << seed << " op " << op;
      ASSERT_EQ(g_fake->gpu_bytes, pool->made() * kChunk) << "seed " << seed << " op " << op;
      EXPECT_LE(pool->made(), kCapacity * per);
      // Every item held is its own handle, of its own size, mapped at its window slot.
      std::set<CUmemGenericAllocationHandle> handles;
      for (const Held& h : held) {
        const CUmemGenericAllocationHandle handle = pool->handle(h.index);
        ASSERT_NE(handle, 0u);
        ASSERT_TRUE(handles.insert(handle).second) << "a handle held twice, seed " << seed;
        EXPECT_EQ(g_fake->handle_at(pool->window_address(h.index)), handle);
        EXPECT_EQ(g_fake->mapping_size_at(pool->window_address(h.index)),
                  (h.whole ? per : 1) * kChunk);
      }
    }
    for (const Held& h : held) {
      if (h.whole) {
        pool->give_block(h.index);
      } else {
        pool->give(h.index);
      }
    }
    EXPECT_EQ(pool->in_use(), 0u);
    pool->keep_free(false);
    pool->trim();
    EXPECT_EQ(pool->made(), 0u);
    EXPECT_EQ(pool->destroy(), CUDA_SUCCESS);
    EXPECT_EQ(g_fake->live_handles(), 0u);
    EXPECT_EQ(g_fake->live_mappings(), 0u);
    EXPECT_EQ(g_fake->live_reservations(), 0u);
    pool.reset();
    g_fake.reset();
  }
}

INSTANTIATE_TEST_SUITE_P(ChunksPerBlock, ChunkPoolProperty, ::testing::Values(1u, 2u, 4u, 8u));

}  // namespace
}  // namespace umswap::vmm::detail
