// The CUDA driver functions the vmm engine calls, as a table of pointers.
//
// In the preload library the table will hold the real libcuda functions (resolved through the real
// cuGetProcAddress, never through umswap's own hooks), as allocator/driver_api.h does for the
// managed engine. Tests fill it with a fake driver that simulates physical memory, which is how the
// engine's logic (the pool, remaps, rollbacks) is tested without a GPU.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace umswap::vmm {

struct VmmDriver {
  // Virtual address ranges: the program's ranges and the windows where every physical chunk is
  // also mapped (the copies' other end; chunk_pool.h).
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  // Physical chunks, on the GPU or on the host (HOST_NUMA).
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  // A chunk's copy between two mapped addresses (55 GB/s each way between a GPU chunk and a host
  // chunk on an H200), and the wait for it.
  PFN_cuMemcpyDtoDAsync_v3020 memcpy_dtod_async = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;

  bool complete() const {
    return mem_address_reserve && mem_address_free && mem_create && mem_release && mem_map &&
           mem_unmap && mem_set_access && memcpy_dtod_async && stream_synchronize;
  }
};

}  // namespace umswap::vmm
