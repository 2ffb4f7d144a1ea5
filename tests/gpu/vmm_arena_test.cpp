// The vmm engine's ChunkArena (vmm/include/umswap/vmm/chunk_arena.h) on the real driver: three
// ranges of 200 MiB under a 256 MiB GPU pool, each 2 MiB chunk written by the device with its
// own value; the pool's GPU bytes never pass the budget; a range evicted whole and another
// restored whole keep every word, read back by the device; the moves' rates are printed (not
// judged: benchmarks judge speed). No managed memory is involved (rule 2 does not apply), and
// the sizes are small. Runs only where libcuda.so.1 exists (run_if_gpu.sh); skips without a GPU.
// The second test does the same with 16 MiB blocks: large pieces mapped as whole blocks, small
// ranges and the rest in 2 MiB chunks, both kinds sharing the pool.
#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "umswap/vmm/chunk_arena.h"
#include "vmm_real_driver.h"

namespace umswap::vmm {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kRange = 200 * kMiB;  // 100 chunks
constexpr uint64_t kBudget = 256 * kMiB;

// Chunk c of range r holds this value in every 32-bit word.
uint32_t value_of(int r, uint64_t c) {
  return 0x5a000000u | static_cast<uint32_t>(r) << 16 | static_cast<uint32_t>(c);
}

class VmmArenaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      GTEST_SKIP() << "no CUDA GPU";
    }
    ASSERT_EQ(cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    int vmm = 0;
    cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_);
    if (!vmm) GTEST_SKIP() << "the GPU has no virtual memory management";
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context_, device_), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (stream_) cuStreamDestroy(stream_);
    if (context_) cuDevicePrimaryCtxRelease(device_);
  }

  // Every word of range r as written, read back through the range's own mapping.
  void expect_range(CUdeviceptr base, int r, uint64_t size = kRange) {
    std::vector<uint32_t> words(size / 4);
    ASSERT_EQ(cuMemcpyDtoH(words.data(), base, size), CUDA_SUCCESS);
    uint64_t wrong = 0, first_wrong = UINT64_MAX;
    for (uint64_t i = 0; i < words.size(); ++i) {
      if (words[i] != value_of(r, i * 4 / kChunk)) {
        ++wrong;
        if (first_wrong == UINT64_MAX) first_wrong = i * 4;
      }
    }
    EXPECT_EQ(wrong, 0u) << "range " << r << ": first wrong byte at offset " << first_wrong;
  }
  void write_range(CUdeviceptr base, int r, uint64_t size) {
    for (uint64_t c = 0; c < size / kChunk; ++c) {
      ASSERT_EQ(cuMemsetD32Async(base + c * kChunk, value_of(r, c), kChunk / 4, stream_),
                CUDA_SUCCESS);
    }
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

double gb_per_s(uint64_t bytes, std::chrono::steady_clock::duration took) {
  return static_cast<double>(bytes) / 1e9 / std::chrono::duration<double>(took).count();
}

void print_moves(const char* what, uint64_t out, std::chrono::steady_clock::duration out_took,
                 uint64_t in, std::chrono::steady_clock::duration in_took, uint64_t remaps) {
  std::printf(
      "%s: %lu MiB evicted in %.2f ms (%.1f GB/s with the remaps), %lu MiB restored in %.2f ms "
      "(%.1f GB/s); %lu remaps in all\n",
      what, static_cast<unsigned long>(out / kMiB),
      std::chrono::duration<double, std::milli>(out_took).count(), gb_per_s(out, out_took),
      static_cast<unsigned long>(in / kMiB),
      std::chrono::duration<double, std::milli>(in_took).count(), gb_per_s(in, in_took),
      static_cast<unsigned long>(remaps));
}

TEST_F(VmmArenaGpu, HoldsItsBudgetAndKeepsEveryWordThroughMoves) {
  ChunkArena arena(real_vmm_driver(), device_, kBudget, 1024 * kMiB);
  CUdeviceptr base[3] = {};
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(arena.allocate(kRange, &base[r]), CUDA_SUCCESS) << "range " << r;
    EXPECT_LE(arena.gpu_bytes_in_use(), kBudget);
    // The device writes each chunk, wherever it is (a host chunk over the link).
    for (uint64_t c = 0; c < kRange / kChunk; ++c) {
      ASSERT_EQ(cuMemsetD32Async(base[r] + c * kChunk, value_of(r, c), kChunk / 4, stream_),
                CUDA_SUCCESS);
    }
  }
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  // Range 0 wholly on the GPU, range 1 split (28 GPU chunks), range 2 on the host.
  EXPECT_EQ(arena.gpu_bytes_in_use(), kBudget);
  EXPECT_TRUE(arena.on_gpu(base[0]));
  ASSERT_TRUE(arena.range(base[1]).has_value());
  EXPECT_EQ(arena.range(base[1])->gpu_bytes, kBudget - kRange);
  EXPECT_EQ(arena.range(base[2])->gpu_bytes, 0u);
  for (int r = 0; r < 3; ++r) expect_range(base[r], r);

  auto t0 = std::chrono::steady_clock::now();
  const Moved out = arena.evict(base[0], kRange, stream_);
  const auto evict_took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(out.result, CUDA_SUCCESS);
  EXPECT_EQ(out.bytes, kRange);
  EXPECT_EQ(arena.gpu_bytes_in_use(), kBudget - kRange);

  t0 = std::chrono::steady_clock::now();
  const Moved in = arena.restore(base[2], kRange, stream_);
  const auto restore_took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(in.result, CUDA_SUCCESS);
  EXPECT_EQ(in.bytes, kRange);
  EXPECT_EQ(arena.gpu_bytes_in_use(), kBudget);
  EXPECT_TRUE(arena.on_gpu(base[2]));

  // The pool is full: a restore of range 0 moves nothing and says so.
  const Moved none = arena.restore(base[0], kRange, stream_);
  EXPECT_EQ(none.bytes, 0u);
  EXPECT_EQ(none.bytes_left, kRange);
  EXPECT_LE(arena.gpu_bytes_in_use(), kBudget);

  for (int r = 0; r < 3; ++r) expect_range(base[r], r);
  const ArenaStats s = arena.stats();
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.holes, 0u);
  print_moves("vmm arena", kRange, evict_took, kRange, restore_took, s.remaps);

  for (int r = 0; r < 3; ++r) EXPECT_EQ(arena.release(base[r]), CUDA_SUCCESS);
  EXPECT_EQ(arena.gpu_bytes_in_use(), 0u);
  EXPECT_GT(arena.trim(), 0u);
  EXPECT_EQ(arena.gpu_bytes_held(), 0u);
  EXPECT_EQ(arena.host_bytes_held(), 0u);
}

TEST_F(VmmArenaGpu, BlocksAndChunksOfSplitBlocksKeepEveryWordThroughMoves) {
  constexpr uint64_t kSmall = 6 * kMiB;
  ChunkArena arena(real_vmm_driver(), device_, kBudget, 1024 * kMiB, 8);
  ASSERT_EQ(arena.block_bytes(), 16 * kMiB);
  CUdeviceptr big0 = 0, small = 0, big1 = 0;
  // 12 blocks and 4 chunks; 3 chunks; 3 blocks and 1 chunk on the GPU (the pool's 128 chunks), the
  // rest on the host.
  ASSERT_EQ(arena.allocate(kRange, &big0), CUDA_SUCCESS);
  ASSERT_EQ(arena.allocate(kSmall, &small), CUDA_SUCCESS);
  ASSERT_EQ(arena.allocate(kRange, &big1), CUDA_SUCCESS);
  EXPECT_EQ(arena.range(small)->gpu_bytes, kSmall);
  EXPECT_EQ(arena.range(big1)->gpu_bytes, 3 * 16 * kMiB + kChunk);
  EXPECT_LE(arena.gpu_bytes_held(), kBudget);
  write_range(big0, 0, kRange);
  write_range(small, 1, kSmall);
  write_range(big1, 2, kRange);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  expect_range(big0, 0);
  expect_range(small, 1, kSmall);
  expect_range(big1, 2);

  auto t0 = std::chrono::steady_clock::now();
  const Moved out = arena.evict(big0, kRange, stream_);
  const auto evict_took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(out.result, CUDA_SUCCESS);
  EXPECT_EQ(out.bytes, kRange);
  t0 = std::chrono::steady_clock::now();
  const Moved in = arena.restore(big1, kRange, stream_);
  const auto restore_took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(in.result, CUDA_SUCCESS);
  EXPECT_EQ(in.bytes, kRange - 3 * 16 * kMiB - kChunk);
  EXPECT_TRUE(arena.on_gpu(big1));
  EXPECT_EQ(arena.evict(small, kSmall, stream_).bytes, kSmall);
  EXPECT_EQ(arena.restore(small, kSmall, stream_).bytes, kSmall);
  EXPECT_LE(arena.gpu_bytes_held(), kBudget);
  expect_range(big0, 0);
  expect_range(small, 1, kSmall);
  expect_range(big1, 2);
  const ArenaStats s = arena.stats();
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.holes, 0u);
  print_moves("vmm arena, 16 MiB blocks", kRange, evict_took, in.bytes, restore_took, s.remaps);
  for (CUdeviceptr b : {big0, small, big1}) EXPECT_EQ(arena.release(b), CUDA_SUCCESS);
  EXPECT_GT(arena.trim(), 0u);
  EXPECT_EQ(arena.gpu_bytes_held(), 0u);
  EXPECT_EQ(arena.host_bytes_held(), 0u);
}

}  // namespace
}  // namespace umswap::vmm
