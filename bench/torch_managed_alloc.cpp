// A PyTorch CUDAPluggableAllocator for attention_managed_probe.py and sparse_fault_probe.py:
// every tensor its own allocation, with no umswap involved. TORCH_MANAGED_ALLOC picks the
// memory: "device" (cuMemAlloc), "managed" (cuMemAllocManaged: the first touch of each page is a
// GPU page fault), "populated" (managed, prefetched to the GPU and waited for before it is handed
// out: no fault), "host" (managed, prefetched to the host on the allocating stream: every GPU
// access migrates its page back by a fault, as a block reused after its eviction), "churn"
// (managed, and a thread of this library moves random 2-32 MiB pieces of the live allocations to
// the host and back on a stream of its own, all the time, racing the program's kernels as
// umswap's evictions do when a plan is wrong; the counts go to stderr at exit).
#include <cuda.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace {

enum class Memory { device, managed, populated, host, churn };

Memory memory() {
  static const Memory m = [] {
    const char* v = std::getenv("TORCH_MANAGED_ALLOC");
    if (v && !std::strcmp(v, "device")) return Memory::device;
    if (v && !std::strcmp(v, "populated")) return Memory::populated;
    if (v && !std::strcmp(v, "host")) return Memory::host;
    if (v && !std::strcmp(v, "churn")) return Memory::churn;
    return Memory::managed;
  }();
  return m;
}

// PyTorch may call before its context is current on this thread.
bool make_current(int device) {
  CUcontext ctx = nullptr;
  if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) return true;
  CUdevice dev = 0;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
         cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

// The churn: live allocations (address -> bytes), under mu. A piece's prefetch is queued under mu,
// so before its allocation's cuMemFree (also under mu), which waits for the device's work:
// never a prefetch of freed memory. Holding mu across those calls also holds PyTorch's mallocs
// and frees meanwhile (part of the timing probed). The map is never destroyed: libtorch frees
// tensors from its own exit handlers, after this library's static destructors would have run.
// One GPU: the context and device are the first allocation's.
std::mutex mu;
std::map<CUdeviceptr, size_t>& live = *new std::map<CUdeviceptr, size_t>;
std::atomic<bool> stopping{false};
std::atomic<uint64_t> moves_to_host{0}, moves_to_gpu{0}, failed_moves{0};
std::thread churner;

void churn(CUcontext ctx, int device) {
  cuCtxSetCurrent(ctx);
  CUstream s = nullptr;
  if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return;
  std::mt19937_64 rng(1);
  constexpr size_t kPiece = 2u << 20;
  for (uint64_t i = 0; !stopping.load(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        const size_t pieces = (it->second + kPiece - 1) / kPiece;
        const size_t first = rng() % pieces;
        const size_t count = std::min<size_t>(pieces - first, 1 + rng() % 16);
        const size_t bytes = std::min(count * kPiece, it->second - first * kPiece);
        CUmemLocation to{};
        to.type = i % 2 ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
        to.id = i % 2 ? device : 0;
        if (cuMemPrefetchAsync(it->first + first * kPiece, bytes, to, 0, s) == CUDA_SUCCESS)
          ++(i % 2 ? moves_to_gpu : moves_to_host);
        else
          ++failed_moves;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  cuStreamSynchronize(s);
  cuStreamDestroy(s);
}

void stop_churn() {
  stopping = true;
  if (churner.joinable()) churner.join();
  std::fprintf(stderr, "churn: %llu pieces to the host, %llu to the GPU, %llu refused\n",
               static_cast<unsigned long long>(moves_to_host.load()),
               static_cast<unsigned long long>(moves_to_gpu.load()),
               static_cast<unsigned long long>(failed_moves.load()));
}

void start_churn(int device) {
  static std::once_flag once;
  std::call_once(once, [device] {
    CUcontext ctx = nullptr;
    cuCtxGetCurrent(&ctx);
    churner = std::thread(churn, ctx, device);
    std::atexit(stop_churn);
  });
}

}  // namespace

extern "C" void* torch_managed_malloc(ssize_t size, int device, void* stream) {
  const size_t n = size > 0 ? static_cast<size_t>(size) : 1;
  CUdeviceptr p = 0;
  if (!make_current(device)) return nullptr;
  const CUresult r = memory() == Memory::device ? cuMemAlloc(&p, n)
                                                : cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL);
  if (r != CUDA_SUCCESS) return nullptr;
  if (memory() == Memory::populated) {
    CUmemLocation gpu{};
    gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
    gpu.id = device;
    auto* s = static_cast<CUstream>(stream);
    if (cuMemPrefetchAsync(p, n, gpu, 0, s) != CUDA_SUCCESS ||
        cuStreamSynchronize(s) != CUDA_SUCCESS) {
      cuMemFree(p);
      return nullptr;
    }
  }
  if (memory() == Memory::host) {
    CUmemLocation host{};
    host.type = CU_MEM_LOCATION_TYPE_HOST;
    if (cuMemPrefetchAsync(p, n, host, 0, static_cast<CUstream>(stream)) != CUDA_SUCCESS) {
      cuMemFree(p);
      return nullptr;
    }
  }
  if (memory() == Memory::churn) {
    start_churn(device);
    std::lock_guard<std::mutex> lock(mu);
    live[p] = n;
  }
  return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
}

extern "C" void torch_managed_free(void* ptr, ssize_t, int, void*) {
  const auto p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  std::lock_guard<std::mutex> lock(mu);
  live.erase(p);
  cuMemFree(p);
}
