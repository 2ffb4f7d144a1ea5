// A probe (not a test): does cuMemFree of managed memory wait for moves of it still queued on a
// stream, and what does the program see when it does not? No umswap.
//
//   free_order_probe CASE        CASE: nonblocking | legacy | waiting | busy | none
//
// Why: umswap gives a wholly free slab back with cuMemFree (SlabAllocator::give_back_if_free)
// once the program's frees in it are behind an event, while prefetches umswap queued itself (the
// learning path's, on the launch's stream; the plan's, on the advisor's non-blocking stream) may
// still name its range. The driver documents that cuMemFree of memory not from a stream-ordered
// pool "may" synchronize. The correctness matrix's EmbeddingBag crashed twice with
// cudaErrorInvalidAddressSpace at a synchronize after bit-identical losses (2026-11-30).
//
// Each case: 64 MiB of managed memory X on the GPU; a kernel spins about 300 ms on a stream, and
// behind it (in that stream's order) X is prefetched to the host and back; the host frees X at
// once and times the free. Then 64 MiB Y is allocated (often at X's address), filled by a kernel
// on the legacy stream, and checked after a context synchronize. Cases: the moves on a
// non-blocking stream; on the legacy stream; on a non-blocking stream that first waits for an
// event recorded after a spin on another stream (as the advisor's prefetches wait for a launch);
// busy: the spin on a non-blocking stream with no move of X queued (does the free wait for X's
// moves, or for the whole context?); none: nothing queued. Prints one line: the case, whether the
// stream was busy before the free, the free's ms, whether it was busy after, X and Y's
// addresses, the synchronize's result, Y's check. Run each case in a process of its own: an
// error can stick to the context.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "cuda_check.h"

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void fill(unsigned* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] = v ^ static_cast<unsigned>(i);
  }
}

__global__ void count_bad(const unsigned* p, size_t n, unsigned v, unsigned long long* bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (p[i] != (v ^ static_cast<unsigned>(i))) atomicAdd(bad, 1ull);
  }
}

const char* name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: free_order_probe nonblocking|legacy|waiting|busy|none\n");
    return 2;
  }
  const char* which = argv[1];
  const bool nonblocking = !std::strcmp(which, "nonblocking");
  const bool legacy = !std::strcmp(which, "legacy");
  const bool waiting = !std::strcmp(which, "waiting");
  const bool busy_only = !std::strcmp(which, "busy");
  const bool none = !std::strcmp(which, "none");
  if (!nonblocking && !legacy && !waiting && !busy_only && !none) {
    std::fprintf(stderr, "free_order_probe: unknown case %s\n", which);
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "free_order_probe: no CUDA GPU\n");
    return 77;
  }
  int device = 0, khz = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  const long long cycles = static_cast<long long>(khz) * 300;  // about 300 ms
  const size_t bytes = size_t{64} << 20, n = bytes / sizeof(unsigned);
  CUdeviceptr x = 0, y = 0;
  CHECK_CU(cuMemAllocManaged(&x, bytes, CU_MEM_ATTACH_GLOBAL));
  unsigned long long* bad = nullptr;
  CHECK(cudaMallocManaged(&bad, sizeof *bad));
  fill<<<256, 256>>>(reinterpret_cast<unsigned*>(x), n, 1u);
  CHECK(cudaDeviceSynchronize());
  cudaStream_t s = nullptr, other = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaStream_t on = legacy ? cudaStreamLegacy : s;
  cudaMemLocation host{}, gpu{};
  host.type = cudaMemLocationTypeHost;
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = device;
  if (waiting) {
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    spin<<<1, 1, 0, other>>>(cycles);
    CHECK(cudaEventRecord(e, other));
    CHECK(cudaStreamWaitEvent(s, e, 0));
  } else if (!none) {
    spin<<<1, 1, 0, on>>>(cycles);
  }
  cudaError_t queued = cudaSuccess;
  if (!none && !busy_only) {
    queued = cudaMemPrefetchAsync(reinterpret_cast<void*>(x), bytes, host, 0, on);
    if (queued == cudaSuccess)
      queued = cudaMemPrefetchAsync(reinterpret_cast<void*>(x), bytes, gpu, 0, on);
  }
  const bool busy_before = cudaStreamQuery(on) == cudaErrorNotReady;
  const auto t0 = std::chrono::steady_clock::now();
  const CUresult freed = cuMemFree(x);
  const double free_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const bool busy_after = cudaStreamQuery(on) == cudaErrorNotReady;
  const CUresult got = cuMemAllocManaged(&y, bytes, CU_MEM_ATTACH_GLOBAL);
  if (got == CUDA_SUCCESS) fill<<<256, 256>>>(reinterpret_cast<unsigned*>(y), n, 7u);
  const CUresult sync = cuCtxSynchronize();
  unsigned long long wrong = ~0ull;
  if (got == CUDA_SUCCESS && sync == CUDA_SUCCESS) {
    *bad = 0;
    count_bad<<<256, 256>>>(reinterpret_cast<const unsigned*>(y), n, 7u, bad);
    if (cudaDeviceSynchronize() == cudaSuccess) wrong = *bad;
  }
  std::printf(
      "%s: queued %s, stream %s before the free, cuMemFree %s in %.1f ms, %s after it, "
      "X 0x%llx Y 0x%llx (%s), synchronize %s, Y wrong words %lld\n",
      which, cudaGetErrorName(queued), none ? "-" : (busy_before ? "busy" : "idle"), name(freed),
      free_ms, none ? "-" : (busy_after ? "busy" : "idle"), static_cast<unsigned long long>(x),
      static_cast<unsigned long long>(y), name(got), name(sync),
      wrong == ~0ull ? -1ll : static_cast<long long>(wrong));
  return sync == CUDA_SUCCESS && wrong == 0 ? 0 : 3;
}
