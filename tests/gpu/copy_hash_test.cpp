// umswap's hashing kernels (copy_kernel.h) on a GPU. UMSWAP_EVICT_COPY_AHEAD's: umswap_copy16_hash
// copies device memory to pinned host memory and leaves each thread's hash (equal to
// copy_thread_hash()'s); after the source changes, umswap_check16 copies again exactly the parts
// of the threads whose units changed, and counts them; with no change it copies and counts
// nothing. umswap run --verify's: umswap_hash_pages hashes each 2 MiB page as page_hash() does.
// Plain device memory (cuMemAlloc, 8 MiB), not managed: nothing here can oversubscribe a GPU.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "umswap/advisor/copy_kernel.h"

namespace umswap::advisor {
namespace {

class CopyHash : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      GTEST_SKIP() << "no CUDA GPU";
    }
    CUdevice device;
    ASSERT_EQ(cuDeviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context_, device), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleLoadData(&module_, copy_kernel_ptx().data()), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&copy_, module_, kCopyHashKernelName), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&check_, module_, kCheckKernelName), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (module_) cuModuleUnload(module_);
    if (context_) {
      CUdevice device;
      if (cuCtxGetDevice(&device) == CUDA_SUCCESS) cuDevicePrimaryCtxRelease(device);
    }
  }
  void launch(CUfunction f, std::vector<void*> args) {
    ASSERT_EQ(cuLaunchKernel(f, kCopyKernelBlocks, 1, 1, kCopyKernelThreads, 1, 1, 0, nullptr,
                             args.data(), nullptr),
              CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  }
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction copy_ = nullptr, check_ = nullptr;
};

TEST_F(CopyHash, CheckCopiesAgainExactlyTheChangedThreadsParts) {
  // Not a multiple of the grid: the last round has threads with one unit fewer.
  const uint64_t units = 8 * (1 << 20) / 16 - 37, bytes = units * 16;
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  CUdeviceptr src = 0;
  ASSERT_EQ(cuMemAlloc(&src, bytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(src, data.data(), bytes), CUDA_SUCCESS);
  void *host = nullptr, *hashes_host = nullptr, *changed_host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&hashes_host, kCopyKernelGrid * 8, CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&changed_host, 8, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  std::memset(host, 0, bytes);
  auto* changed = static_cast<volatile uint64_t*>(changed_host);
  *changed = 0;
  uint64_t dst = reinterpret_cast<uint64_t>(host), from = src, n = units,
           hashes = reinterpret_cast<uint64_t>(hashes_host),
           counter = reinterpret_cast<uint64_t>(changed_host);

  launch(copy_, {&dst, &from, &n, &hashes});
  EXPECT_EQ(std::memcmp(host, data.data(), bytes), 0);
  const auto* h = static_cast<const uint64_t*>(hashes_host);
  for (uint64_t t = 0; t < kCopyKernelGrid; t += 97) {
    EXPECT_EQ(h[t], copy_thread_hash(data.data(), units, t, kCopyKernelGrid)) << "thread " << t;
  }

  // Nothing changed: nothing counted, the host copy untouched (poisoned to see any write).
  std::memset(static_cast<uint8_t*>(host) + 4096, 0xab, 16);
  launch(check_, {&dst, &from, &n, &hashes, &counter});
  EXPECT_EQ(*changed, 0u);
  EXPECT_EQ(static_cast<uint8_t*>(host)[4096], 0xab);
  std::memcpy(static_cast<uint8_t*>(host) + 4096, data.data() + 4096, 16);

  // The last use writes one byte in three places and 64 KiB in a fourth.
  std::set<uint64_t> threads;
  for (const uint64_t at : {uint64_t{17}, uint64_t{3} << 20, bytes - 1}) {
    data[at] ^= 0x5a;
    ASSERT_EQ(cuMemcpyHtoD(src + at, data.data() + at, 1), CUDA_SUCCESS);
    threads.insert(at / 16 % kCopyKernelGrid);
  }
  const uint64_t block = uint64_t{5} << 20;
  for (uint64_t at = block; at < block + 65536; ++at) data[at] = static_cast<uint8_t>(~data[at]);
  ASSERT_EQ(cuMemcpyHtoD(src + block, data.data() + block, 65536), CUDA_SUCCESS);
  for (uint64_t u = block / 16; u < (block + 65536) / 16; ++u) threads.insert(u % kCopyKernelGrid);
  launch(check_, {&dst, &from, &n, &hashes, &counter});
  EXPECT_EQ(*changed, threads.size());
  EXPECT_EQ(std::memcmp(host, data.data(), bytes), 0);

  cuMemFreeHost(changed_host);
  cuMemFreeHost(hashes_host);
  cuMemFreeHost(host);
  cuMemFree(src);
}

// umswap run --verify's page hash (round_trips.h): umswap_hash_pages writes page_hash() of each
// 2 MiB page, reads only, and one changed byte changes its page's hash and no other.
TEST_F(CopyHash, PageHashKernelHashesEachPageAsTheCpuDoes) {
  CUfunction hash = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&hash, module_, kPageHashKernelName), CUDA_SUCCESS);
  constexpr uint64_t kPages = 3, bytes = kPages * kPageBytes;
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 40503u >> 7);
  CUdeviceptr src = 0;
  ASSERT_EQ(cuMemAlloc(&src, bytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(src, data.data(), bytes), CUDA_SUCCESS);
  void* hashes_host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&hashes_host, kPages * 8, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  uint64_t from = src, hashes = reinterpret_cast<uint64_t>(hashes_host);
  const auto* h = static_cast<const uint64_t*>(hashes_host);
  const auto run = [&] {
    void* args[] = {&from, &hashes};
    ASSERT_EQ(cuLaunchKernel(hash, kPages, 1, 1, kPageHashThreads, 1, 1, 0, nullptr, args, nullptr),
              CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  };
  run();
  std::vector<uint64_t> before(h, h + kPages);
  for (uint64_t p = 0; p < kPages; ++p) {
    EXPECT_EQ(before[p], page_hash(data.data() + p * kPageBytes)) << "page " << p;
  }
  const uint64_t at = kPageBytes + 12345;  // in page 1
  data[at] ^= 1;
  ASSERT_EQ(cuMemcpyHtoD(src + at, data.data() + at, 1), CUDA_SUCCESS);
  run();
  EXPECT_EQ(h[0], before[0]);
  EXPECT_NE(h[1], before[1]);
  EXPECT_EQ(h[1], page_hash(data.data() + kPageBytes));
  EXPECT_EQ(h[2], before[2]);
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), src, bytes), CUDA_SUCCESS);
  EXPECT_EQ(back, data);  // only read

  cuMemFreeHost(hashes_host);
  cuMemFree(src);
}

}  // namespace
}  // namespace umswap::advisor
