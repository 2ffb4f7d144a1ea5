// A program linked with -lcuda calls the driver's exported symbols directly: umswap's exports of
// the same names must take those calls. Runs only where libcuda.so.1 exists (run_if_gpu.sh).
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace {

bool expect_managed() {
  const char* e = std::getenv("UMSWAP_TEST_EXPECT");
  return e && std::strcmp(e, "managed") == 0;
}

class DriverLink : public ::testing::Test {
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
  }
  CUcontext context_ = nullptr;
};

bool is_managed(CUdeviceptr p) {
  unsigned managed = 0;
  return cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS &&
         managed != 0;
}

TEST_F(DriverLink, ExportedAllocationFunctionsGiveManagedMemory) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(is_managed(d), expect_managed());
  ASSERT_EQ(cuMemsetD32(d, 0x01020304u, (1 << 20) / 4), CUDA_SUCCESS);
  unsigned value = 0;
  ASSERT_EQ(cuMemcpyDtoH(&value, d + 4096, sizeof(value)), CUDA_SUCCESS);
  EXPECT_EQ(value, 0x01020304u);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);

  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch(&d, &pitch, 300, 7, 8), CUDA_SUCCESS);
  EXPECT_GE(pitch, 300u);
  EXPECT_EQ(is_managed(d), expect_managed());
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);

  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&d, 1 << 20, stream), CUDA_SUCCESS);
  EXPECT_EQ(is_managed(d), expect_managed());
  ASSERT_EQ(cuMemFreeAsync(d, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);

  EXPECT_EQ(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);  // as the real driver answers
}

TEST_F(DriverLink, ExportedGetProcAddressAnswersWithHooks) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_EQ(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found),
            CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(fn)(&d, 4096), CUDA_SUCCESS);
  EXPECT_EQ(is_managed(d), expect_managed());
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

}  // namespace
