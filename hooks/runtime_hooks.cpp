// Exported CUDA runtime shims (UMSWAP_RUNTIME_HOOKS). They interpose the shared libcudart's
// functions. The runtime implements each of them with driver calls that reach umswap's driver
// hooks (proc_address.cpp), so a shim only tags which runtime API is in flight, calls the real
// runtime (which keeps its own context set-up, argument checks and error state), and checks that
// the allocation did reach the driver hooks.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>

#include "hook_table.h"
#include "preload.h"
#include "umswap/core/log.h"

#define UMSWAP_EXPORT extern "C" __attribute__((visibility("default")))

namespace umswap {
namespace {

// The next definition after libumswap.so: libcudart's. Cached per function.
template <typename Fn>
Fn next_runtime(std::atomic<Fn>& cache, const char* name) {
  Fn f = cache.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<Fn>(real_dlsym()(RTLD_NEXT, name));
    cache.store(f, std::memory_order_release);
  }
  return f;
}

// A runtime allocation that succeeded without passing through the driver hooks would be device
// memory umswap knows nothing of: say so once and count it.
void check_reached_driver(cudaError_t status, const void* ptr, const char* api) {
  if (status != cudaSuccess || !ptr) return;
  Preload& p = preload();
  if (VmmAllocator* vmm = p.vmm()) {
    if (p.registry().contains(reinterpret_cast<uint64_t>(ptr))) return;
    vmm->note_escape();
  } else {
    if (!p.redirecting() || p.registry().contains(reinterpret_cast<uint64_t>(ptr))) return;
    p.allocator().note_escape();
  }
  static OnceFlag once;
  if (once.first()) {
    log_warning(
        "{} returned memory that did not pass through umswap's driver hooks; it stays "
        "ordinary device memory",
        api);
  }
}

constexpr cudaError_t kNoRuntime = cudaErrorSharedObjectInitFailed;

// The TorchBlocks to tell about a cudaMalloc from `caller`, while it still waits for PyTorch's
// first segment (after that, or when nothing is redirected, null at once).
TorchBlocks* torch_segment_call(const void* caller) {
  Preload& p = preload();
  if (!p.redirecting() || !p.torch_blocks().wants_segment_calls()) return nullptr;
  Dl_info info{};
  if (!dladdr(caller, &info) || !info.dli_fname) return nullptr;
  p.torch_blocks().before_segment_malloc(info.dli_fname);
  return &p.torch_blocks();
}

// An allocation shim: tag the runtime API for the driver hooks below, call the real runtime, and
// check the result reached them. `ptr` is the function's first argument (void**).
template <typename Fn, typename... Args>
cudaError_t tagged_allocation(Fn real, AllocApi api, const char* name, void** ptr, Args... args) {
  if (!real) return kNoRuntime;
  RuntimeApiScope scope(api);
  const cudaError_t status = real(ptr, args...);
  if (!scope.left_to_driver()) check_reached_driver(status, ptr ? *ptr : nullptr, name);
  return status;
}

#define UMSWAP_CACHE(name, type_of) std::atomic<decltype(&::type_of)> real_##name{nullptr};
UMSWAP_RUNTIME_HOOKS(UMSWAP_CACHE)
#undef UMSWAP_CACHE

#define UMSWAP_REAL(name) next_runtime(real_##name, #name)

}  // namespace
}  // namespace umswap

using umswap::AllocApi;
using umswap::RuntimeApiScope;
using namespace umswap;  // the real_* caches

UMSWAP_EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  // PyTorch's caching allocator makes its segments here: its blocks are followed from its first
  // one (torch_blocks.h).
  TorchBlocks* torch = torch_segment_call(__builtin_return_address(0));
  const cudaError_t status =
      tagged_allocation(UMSWAP_REAL(cudaMalloc), AllocApi::cudaMalloc, "cudaMalloc", ptr, size);
  if (torch) {
    torch->after_segment_malloc(status == cudaSuccess && ptr,
                                ptr ? reinterpret_cast<uint64_t>(*ptr) : 0, size);
  }
  return status;
}

UMSWAP_EXPORT cudaError_t cudaFree(void* ptr) {
  auto real = UMSWAP_REAL(cudaFree);
  return real ? real(ptr) : kNoRuntime;
}

UMSWAP_EXPORT cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  return tagged_allocation(UMSWAP_REAL(cudaMallocPitch), AllocApi::cudaMallocPitch,
                           "cudaMallocPitch", ptr, pitch, width, height);
}

UMSWAP_EXPORT cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned flags) {
  return tagged_allocation(UMSWAP_REAL(cudaMallocManaged), AllocApi::cudaMallocManaged,
                           "cudaMallocManaged", ptr, size, flags);
}

UMSWAP_EXPORT cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  return tagged_allocation(UMSWAP_REAL(cudaMallocAsync), AllocApi::cudaMallocAsync,
                           "cudaMallocAsync", ptr, size, stream);
}

UMSWAP_EXPORT cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream) {
  return tagged_allocation(UMSWAP_REAL(cudaMallocAsync_ptsz), AllocApi::cudaMallocAsync,
                           "cudaMallocAsync", ptr, size, stream);
}

UMSWAP_EXPORT cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  auto real = UMSWAP_REAL(cudaFreeAsync);
  return real ? real(ptr, stream) : kNoRuntime;
}

UMSWAP_EXPORT cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  auto real = UMSWAP_REAL(cudaFreeAsync_ptsz);
  return real ? real(ptr, stream) : kNoRuntime;
}

UMSWAP_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  auto real = UMSWAP_REAL(cudaMemGetInfo);
  return real ? real(free, total) : kNoRuntime;
}
