// Does every allocation API of an unmodified program end up in managed memory under umswap?
//
// Built twice from this file: with nvcc's default static cudart (the runtime reaches the driver
// only through cuGetProcAddress) and with the shared cudart (umswap's runtime exports interpose
// too). Each build runs natively, in passthrough mode and under `umswap run`; UMSWAP_TEST_EXPECT
// says which (`managed` or `native`). Checks real effects: the pointer's memory type, kernels
// reading and writing the memory, the error codes the caller sees.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

bool expect_managed() {
  const char* e = std::getenv("UMSWAP_TEST_EXPECT");
  return e && std::strcmp(e, "managed") == 0;
}
// The cap the managed runs are started with (bytes); 0 when none.
size_t expected_cap() {
  const char* e = std::getenv("UMSWAP_TEST_CAP_BYTES");
  return e ? std::strtoull(e, nullptr, 10) : 0;
}

bool is_managed(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) return false;
  return attributes.type == cudaMemoryTypeManaged;
}

__global__ void fill(unsigned* data, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = static_cast<unsigned>(i) * 2654435761u + seed;
  }
}

// Fills on the GPU, copies back, checks every element.
void check_usable(void* p, size_t bytes, cudaStream_t stream = nullptr) {
  const size_t n = bytes / sizeof(unsigned);
  if (n == 0) return;
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned*>(p), n, 7);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<unsigned> host(n);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(host[i], static_cast<unsigned>(i) * 2654435761u + 7) << "element " << i;
  }
}

class Interpose : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA GPU";
  }
};

TEST_F(Interpose, CudaMallocGivesManagedMemoryThatKernelsUse) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 8 << 20), cudaSuccess);
  EXPECT_EQ(is_managed(p), expect_managed());
  check_usable(p, 8 << 20);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Interpose, OddSizesAreSeparateUsableBuffers) {
  const size_t sizes[] = {1, 3, 4097, (1 << 21) + 5};
  std::vector<void*> ptrs;
  for (size_t s : sizes) {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, s), cudaSuccess) << s;
    EXPECT_EQ(is_managed(p), expect_managed()) << s;
    check_usable(p, s);
    ptrs.push_back(p);
  }
  for (size_t i = 0; i < ptrs.size(); ++i) {
    for (size_t j = 0; j < ptrs.size(); ++j) {
      if (i == j) continue;
      const auto a = reinterpret_cast<uintptr_t>(ptrs[i]);
      const auto b = reinterpret_cast<uintptr_t>(ptrs[j]);
      EXPECT_FALSE(a <= b && b < a + sizes[i]) << "buffers " << i << " and " << j << " overlap";
    }
  }
  for (void* p : ptrs) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Interpose, ZeroBytesBehavesAsTheRuntimeDoes) {
  // Documented runtime behaviour, identical natively and under umswap.
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(Interpose, FreeingAForeignPointerGivesTheRealError) {
  int host = 0;
  EXPECT_NE(cudaFree(&host), cudaSuccess);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
}

TEST_F(Interpose, CudaMallocPitchKeepsTheDevicePitchRule) {
  void* probe = nullptr;
  size_t alignment = 0;
  ASSERT_EQ(cudaMallocPitch(&probe, &alignment, 1, 1), cudaSuccess);
  ASSERT_GT(alignment, 0u);
  ASSERT_EQ(cudaFree(probe), cudaSuccess);
  void* p = nullptr;
  size_t pitch = 0;
  const size_t width = 1000, height = 37;
  ASSERT_EQ(cudaMallocPitch(&p, &pitch, width, height), cudaSuccess);
  EXPECT_EQ(pitch, (width + alignment - 1) / alignment * alignment);
  EXPECT_EQ(is_managed(p), expect_managed());
  ASSERT_EQ(cudaMemset2D(p, pitch, 0xab, width, height), cudaSuccess);
  std::vector<unsigned char> row(width);
  ASSERT_EQ(cudaMemcpy(row.data(), static_cast<char*>(p) + pitch * (height - 1), width,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (unsigned char c : row) ASSERT_EQ(c, 0xab);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Interpose, CudaMallocAsyncIsManagedAndFreedInStreamOrder) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    void* p = nullptr;
    ASSERT_EQ(cudaMallocAsync(&p, 4 << 20, stream), cudaSuccess);
    EXPECT_EQ(is_managed(p), expect_managed());
    check_usable(p, 4 << 20, stream);
    ASSERT_EQ(cudaFreeAsync(p, stream), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// A kernel that lets the next one on its stream start at once (programmatic dependent launch),
// then writes its flag about 10 ms later; and one that reads the flag before it waits for the
// kernel ahead, as the merge sort of CUDA 13.0's CUB reads its partitions (launch_in_order.h).
__global__ void write_late(unsigned* flag) {
#if __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
  const long long start = clock64();
  while (clock64() - start < 20'000'000) {
  }
  *flag = 1;
}

__global__ void read_early(const unsigned* flag, unsigned* seen) {
  *seen = *static_cast<const volatile unsigned*>(flag);
#if __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

// Under umswap the overlap asked for is not given: the early read sees the write. Natively it may
// not (the overlap is allowed, not promised): printed, not checked.
TEST_F(Interpose, LaunchesAskingToOverlapRunInStreamOrder) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "programmatic dependent launch needs compute capability 9.0";
  unsigned* flag = nullptr;
  unsigned* seen = nullptr;
  ASSERT_EQ(cudaMalloc(&flag, sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&seen, sizeof(unsigned)), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(cudaMemsetAsync(flag, 0, sizeof(unsigned), stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(seen, 0xff, sizeof(unsigned), stream), cudaSuccess);
    write_late<<<1, 1, 0, stream>>>(flag);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1);
    config.blockDim = dim3(1);
    config.stream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    ASSERT_EQ(cudaLaunchKernelEx(&config, read_early, static_cast<const unsigned*>(flag), seen),
              cudaSuccess);
    unsigned host = 0;
    ASSERT_EQ(cudaMemcpyAsync(&host, seen, sizeof(host), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    if (expect_managed()) {
      EXPECT_EQ(host, 1u) << "round " << round << ": the read ran before the kernel ahead ended";
    } else {
      std::printf("native: round %d, the early read saw %u\n", round, host);
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  ASSERT_EQ(cudaFree(flag), cudaSuccess);
  ASSERT_EQ(cudaFree(seen), cudaSuccess);
}

TEST_F(Interpose, CudaMallocManagedStaysManaged) {
  void* p = nullptr;
  ASSERT_EQ(cudaMallocManaged(&p, 1 << 20), cudaSuccess);
  EXPECT_TRUE(is_managed(p));
  static_cast<unsigned*>(p)[5] = 42;  // host access works
  check_usable(p, 1 << 20);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Interpose, DriverEntryPointFromTheRuntimeIsHooked) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &found),
            cudaSuccess);
  ASSERT_NE(fn, nullptr);
  CUdeviceptr d = 0;
  ASSERT_EQ(reinterpret_cast<PFN_cuMemAlloc_v3020>(fn)(&d, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(is_managed(reinterpret_cast<void*>(d)), expect_managed());
  check_usable(reinterpret_cast<void*>(d), 1 << 20);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(d)), cudaSuccess);
}

// A program (or library such as cuBLASLt) that resolves the driver itself with dlsym.
TEST_F(Interpose, DlsymOfLibcudaIsHooked) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // context current
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libcuda, nullptr);
  auto direct = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlsym(libcuda, "cuMemAlloc_v2"));
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(libcuda, "cuGetProcAddress_v2"));
  auto gpa1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(libcuda, "cuGetProcAddress"));
  ASSERT_TRUE(direct && gpa && gpa1);
  void* via_v2 = nullptr;
  void* via_v1 = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_EQ(gpa("cuMemAlloc", &via_v2, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS);
  ASSERT_EQ(gpa1("cuMemAlloc", &via_v1, 11030, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_SUCCESS);
  for (auto alloc : {direct, reinterpret_cast<PFN_cuMemAlloc_v3020>(via_v2),
                     reinterpret_cast<PFN_cuMemAlloc_v3020>(via_v1)}) {
    CUdeviceptr d = 0;
    ASSERT_EQ(alloc(&d, 1 << 20), CUDA_SUCCESS);
    EXPECT_EQ(is_managed(reinterpret_cast<void*>(d)), expect_managed());
    EXPECT_EQ(cudaFree(reinterpret_cast<void*>(d)), cudaSuccess);
  }
  // An old ABI asked for by version must not be answered with a hook of the new signature.
  void* old_abi = nullptr;
  if (gpa("cuMemAlloc", &old_abi, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS) {
    EXPECT_NE(old_abi, via_v2);
  }
}

TEST_F(Interpose, DriverAsyncAndPitchThroughEntryPoints) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  void *alloc_async = nullptr, *free_async = nullptr, *alloc_pitch = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &alloc_async, 12000,
                                             cudaEnablePerThreadDefaultStream, &found),
            cudaSuccess);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemFreeAsync", &free_async, 12000,
                                             cudaEnablePerThreadDefaultStream, &found),
            cudaSuccess);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAllocPitch", &alloc_pitch, 12000,
                                             cudaEnableDefault, &found),
            cudaSuccess);
  CUdeviceptr d = 0;
  ASSERT_EQ(reinterpret_cast<PFN_cuMemAllocAsync_v11020_ptsz>(alloc_async)(&d, 1 << 20, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(is_managed(reinterpret_cast<void*>(d)), expect_managed());
  check_usable(reinterpret_cast<void*>(d), 1 << 20, cudaStreamPerThread);
  ASSERT_EQ(reinterpret_cast<PFN_cuMemFreeAsync_v11020_ptsz>(free_async)(d, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  size_t pitch = 0;
  ASSERT_EQ(reinterpret_cast<PFN_cuMemAllocPitch_v3020>(alloc_pitch)(&d, &pitch, 100, 10, 4),
            CUDA_SUCCESS);
  EXPECT_GE(pitch, 100u);
  EXPECT_EQ(is_managed(reinterpret_cast<void*>(d)), expect_managed());
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(d)), cudaSuccess);
}

TEST_F(Interpose, ManyThreadsAllocateAndFree) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0}, unmanaged{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 4096 * (i + 1)) != cudaSuccess) {
          ++failures;
          continue;
        }
        if (is_managed(p) != expect_managed()) ++unmanaged;
        if (cudaFree(p) != cudaSuccess) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(unmanaged.load(), 0);
}

// With UMSWAP_MANAGED_LIMIT set (the managed runs use UMSWAP_TEST_CAP_BYTES), the cap behaves as
// out-of-memory: the caller's error code, state intact, and cudaMemGetInfo agrees with the cap.
TEST_F(Interpose, CapTurnsIntoOutOfMemoryAndStateStaysIntact) {
  const size_t cap = expected_cap();
  if (cap == 0) GTEST_SKIP() << "run without a managed limit";
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  EXPECT_EQ(total, cap);
  EXPECT_LE(free_before, cap);

  void* held = nullptr;
  ASSERT_EQ(cudaMallocManaged(&held, cap / 2), cudaSuccess);  // the program's own managed memory
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before - free_after, cap / 2);

  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, cap / 2 + (64 << 20)), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);  // the runtime's error state, too
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CUdeviceptr d = 0;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &found),
            cudaSuccess);
  EXPECT_EQ(reinterpret_cast<PFN_cuMemAlloc_v3020>(fn)(&d, cap), CUDA_ERROR_OUT_OF_MEMORY);

  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);  // smaller requests still work
  check_usable(p, 1 << 20);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(held), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, cap / 2 + (64 << 20)), cudaSuccess);  // fits again once freed
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// After fork() the child must not write the parent's files: with UMSWAP_STATS=...%p, a child that
// exits through exit() (running exit handlers and library destructors) leaves no file under its
// own pid.
TEST_F(Interpose, ForkedChildWritesNoStatsFile) {
  const char* stats = std::getenv("UMSWAP_STATS");
  if (!stats || !std::strstr(stats, "%p")) GTEST_SKIP() << "run without UMSWAP_STATS=...%p";
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);  // this process has used CUDA through umswap
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) std::exit(0);  // normal exit: atexit handlers and library destructors run
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // The child's exit status is not asserted: the CUDA runtime's own exit handlers run in the
  // forked child too, and CUDA is unusable after fork (on an H200 the child did not exit 0).
  RecordProperty("child_status", status);
  std::string path = stats;
  path.replace(path.find("%p"), 2, std::to_string(child));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " was written by a forked child";
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

}  // namespace
