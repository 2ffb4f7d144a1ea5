// The CUDA driver functions the allocator calls, as a table of pointers.
//
// In the preload library the table holds the real libcuda functions (resolved through the real
// cuGetProcAddress, never through umswap's own hooks). Tests fill it with fakes, which is how the
// allocator's logic (cap, accounting, pitch, stream-ordered frees) is tested without a GPU.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace umswap {

// The calling thread in the relaxed stream-capture mode while this lives, its own mode back after.
// In the global mode a call the driver deems unsafe, made while any program thread captures a
// CUDA graph in the global mode, invalidates that capture; in the relaxed mode it does not. For
// umswap's calls on a program's thread (a populate, a launch's prefetches). A null `exchange`, or
// one that fails, changes nothing.
class RelaxedCaptureScope {
 public:
  explicit RelaxedCaptureScope(PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange)
      : exchange_(exchange) {
    swapped_ = exchange_ && exchange_(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureScope() {
    if (swapped_) exchange_(&mode_);
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool swapped_ = false;
};

struct DriverApi {
  PFN_cuMemAllocManaged_v6000 mem_alloc_managed = nullptr;
  PFN_cuMemFree_v3020 mem_free = nullptr;
  PFN_cuMemAllocPitch_v3020 mem_alloc_pitch = nullptr;  // real, unmanaged: probes pitch alignment
  PFN_cuMemGetInfo_v3020 mem_get_info = nullptr;
  PFN_cuMemGetDefaultMemPool_v13000 mem_get_default_mem_pool = nullptr;
  PFN_cuMemAllocFromPoolAsync_v11020 mem_alloc_from_pool_async = nullptr;
  PFN_cuMemFreeAsync_v11020 mem_free_async = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  PFN_cuDeviceTotalMem_v3020 device_total_mem = nullptr;
  // Stream-ordered allocations from slabs (slab_allocator.h); optional: without them,
  // stream-ordered allocations use the managed pool.
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuEventSynchronize_v2000 event_synchronize = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize = nullptr;
  // The slabs' planned discards (DiscardMode::planned) only.
  PFN_cuMemDiscardBatchAsync_v13000 mem_discard_batch_async = nullptr;
  PFN_cuMemDiscardAndPrefetchBatchAsync_v13000 mem_discard_and_prefetch_batch_async = nullptr;
  // Populating plain device allocations when they are made (populate_on_allocation()); optional:
  // without them, a kernel's first touch populates the pages (a GPU page fault).
  PFN_cuMemPrefetchAsync_v12020 mem_prefetch_async = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  // Around that populate, the calling thread takes the relaxed capture mode (a program thread in
  // the middle of a global-mode graph capture must not have it invalidated by umswap's calls).
  PFN_cuThreadExchangeStreamCaptureMode_v10010 thread_exchange_capture_mode = nullptr;

  bool complete() const {
    return mem_alloc_managed && mem_free && mem_alloc_pitch && mem_get_info &&
           mem_get_default_mem_pool && mem_alloc_from_pool_async && mem_free_async &&
           stream_synchronize && ctx_get_device && device_total_mem;
  }
  // What SlabAllocator needs (its discards need the two after them and ctx_get_device).
  bool has_slab_functions() const {
    return event_create && event_record && event_query && event_synchronize && event_destroy &&
           ctx_synchronize;
  }
};

}  // namespace umswap
