// What it costs to give GPU memory from one virtual range to another, two ways:
//
//   managed  the way umswap does it: the range given up is discarded (cuMemDiscardBatchAsync) and
//            the range that takes its room is populated (a prefetch to the GPU of discarded
//            pages), both on one stream, then the stream is synchronized;
//   vmm      with the driver's virtual memory management: one physical allocation
//            (cuMemCreate) is unmapped from one reserved range and mapped at the other
//            (cuMemUnmap, cuMemMap, cuMemSetAccess), then a kernel on a stream reads it there.
//
// Each is timed on the host, kReps times per size; the median and the largest are printed, in
// microseconds. The vmm case also checks that the bytes written through the first range are read
// through the second (the physical memory keeps them), and is timed again while a kernel on
// another stream keeps the GPU busy for 50 ms, to see whether a remap waits for the GPU.
// docs/advisor.md ("What does not work yet") says why: GPT-2 at 29% moves 72.8 GB of room
// between ranges an iteration.
//
// usage: remap_probe   (at most 512 MiB of managed memory and 256 MiB through cuMemCreate)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr int kReps = 12;

__global__ void fill(uint32_t* p, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = seed ^ static_cast<uint32_t>(i);
  }
}

// Counts the words that are not seed ^ index into *bad.
__global__ void check(const uint32_t* p, size_t words, uint32_t seed, unsigned long long* bad) {
  unsigned long long n = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    n += p[i] != (seed ^ static_cast<uint32_t>(i));
  }
  if (n) atomicAdd(bad, n);
}

// Keeps one SM busy for `ns` nanoseconds of the GPU's clock.
__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

double since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

void print(const char* name, size_t bytes, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  std::printf("%-12s %4zu MiB  median %9.1f us  largest %9.1f us  (%.1f GB/s at the median)\n",
              name, bytes / kMiB, us[us.size() / 2], us.back(),
              static_cast<double>(bytes) / (us[us.size() / 2] * 1e3));
}

void managed_case(size_t bytes, cudaStream_t s) {
  char *a = nullptr, *b = nullptr;
  CHECK(cudaMallocManaged(&a, bytes));
  CHECK(cudaMallocManaged(&b, bytes));
  const cudaMemLocation gpu{cudaMemLocationTypeDevice, 0};
  CHECK(cudaMemPrefetchAsync(a, bytes, gpu, 0, s));
  CHECK(cudaMemPrefetchAsync(b, bytes, gpu, 0, s));
  CHECK(cudaStreamSynchronize(s));
  const auto cs = reinterpret_cast<CUstream>(s);
  auto discard = [&](char* p) {
    CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
    size_t n = bytes;
    CHECK_CU(cuMemDiscardBatchAsync(&d, &n, 1, 0, cs));
  };
  discard(b);  // b holds no pages: the room is a's
  CHECK(cudaStreamSynchronize(s));
  std::vector<double> us;
  for (int r = 0; r < kReps; ++r) {
    char* from = r % 2 ? b : a;
    char* to = r % 2 ? a : b;
    const auto t0 = std::chrono::steady_clock::now();
    discard(from);
    CHECK(cudaMemPrefetchAsync(to, bytes, gpu, 0, s));
    CHECK(cudaStreamSynchronize(s));
    us.push_back(since_us(t0));
  }
  print("managed", bytes, us);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
}

// Returns the number of words read wrong through the second range.
unsigned long long vmm_case(size_t bytes, cudaStream_t s, cudaStream_t busy) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t grain = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&grain, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  bytes = (bytes + grain - 1) / grain * grain;
  CUmemGenericAllocationHandle handle = 0;
  CHECK_CU(cuMemCreate(&handle, bytes, &prop, 0));
  CUdeviceptr range[2] = {0, 0};
  for (CUdeviceptr& r : range) CHECK_CU(cuMemAddressReserve(&r, bytes, grain, 0, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  unsigned long long* bad = nullptr;
  CHECK(cudaMalloc(&bad, sizeof(*bad)));
  CHECK(cudaMemset(bad, 0, sizeof(*bad)));
  const size_t words = bytes / sizeof(uint32_t);

  CHECK_CU(cuMemMap(range[0], bytes, 0, handle, 0));
  CHECK_CU(cuMemSetAccess(range[0], bytes, &access, 1));
  fill<<<264, 512, 0, s>>>(reinterpret_cast<uint32_t*>(range[0]), words, 0x5eed);
  CHECK(cudaStreamSynchronize(s));
  int at = 0;
  auto move = [&] {
    CHECK_CU(cuMemUnmap(range[at], bytes));
    at ^= 1;
    CHECK_CU(cuMemMap(range[at], bytes, 0, handle, 0));
    CHECK_CU(cuMemSetAccess(range[at], bytes, &access, 1));
  };
  for (int busy_gpu = 0; busy_gpu < 2; ++busy_gpu) {
    std::vector<double> us, call_us;
    for (int r = 0; r < kReps; ++r) {
      if (busy_gpu) spin<<<1, 1, 0, busy>>>(50'000'000ull);
      const auto t0 = std::chrono::steady_clock::now();
      move();
      call_us.push_back(since_us(t0));
      check<<<264, 512, 0, s>>>(reinterpret_cast<uint32_t*>(range[at]), words, 0x5eed, bad);
      CHECK(cudaStreamSynchronize(s));
      us.push_back(since_us(t0));
      CHECK(cudaStreamSynchronize(busy));
    }
    print(busy_gpu ? "vmm, busy" : "vmm", bytes, us);
    print(busy_gpu ? "  its calls" : "  its calls", bytes, call_us);
  }
  unsigned long long wrong = 0;
  CHECK(cudaMemcpy(&wrong, bad, sizeof(wrong), cudaMemcpyDeviceToHost));
  CHECK_CU(cuMemUnmap(range[at], bytes));
  for (CUdeviceptr r : range) CHECK_CU(cuMemAddressFree(r, bytes));
  CHECK_CU(cuMemRelease(handle));
  CHECK(cudaFree(bad));
  return wrong;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  cudaStream_t s = nullptr, busy = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
  // Loaded before any timing.
  spin<<<1, 1, 0, busy>>>(1000);
  CHECK(cudaStreamSynchronize(busy));
  unsigned long long wrong = 0;
  for (size_t mib : {2, 64, 256}) {
    managed_case(mib * kMiB, s);
    wrong += vmm_case(mib * kMiB, s, busy);
  }
  std::printf("vmm: %llu words read wrong through the second range\n", wrong);
  return wrong ? 1 : 0;
}
