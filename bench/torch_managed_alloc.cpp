// A PyTorch CUDAPluggableAllocator for attention_managed_probe.py and sparse_fault_probe.py:
// every tensor its own allocation, with no umswap involved. TORCH_MANAGED_ALLOC picks the
// memory: "device" (cuMemAlloc), "managed" (cuMemAllocManaged: the first touch of each page is a
// GPU page fault), "populated" (managed, prefetched to the GPU and waited for before it is handed
// out: no fault), "host" (managed, prefetched to the host on the allocating stream: every GPU
// access migrates its page back by a fault, as a block reused after its eviction).
#include <cuda.h>
#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

enum class Memory { device, managed, populated, host };

Memory memory() {
  static const Memory m = [] {
    const char* v = std::getenv("TORCH_MANAGED_ALLOC");
    if (v && !std::strcmp(v, "device")) return Memory::device;
    if (v && !std::strcmp(v, "populated")) return Memory::populated;
    if (v && !std::strcmp(v, "host")) return Memory::host;
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
  return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
}

extern "C" void torch_managed_free(void* ptr, ssize_t, int, void*) {
  cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
}
