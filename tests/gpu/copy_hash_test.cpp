// umswap run --verify's page hash (copy_kernel.h) on a GPU: umswap_hash_pages writes for each
// 2 MiB page what page_hash() computes on the CPU.
// Plain device memory (cuMemAlloc, 6 MiB), not managed: nothing here can oversubscribe a GPU.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
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
  }
  void TearDown() override {
    if (module_) cuModuleUnload(module_);
    if (context_) {
      CUdevice device;
      if (cuCtxGetDevice(&device) == CUDA_SUCCESS) cuDevicePrimaryCtxRelease(device);
    }
  }
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
};

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
