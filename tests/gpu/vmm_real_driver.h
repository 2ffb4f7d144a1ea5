// The vmm engine's driver table filled with libcuda's own functions, for GPU tests and bench/'s
// probes that link libcuda (the preload library resolves its table through the real driver
// instead, never through umswap's hooks).
#pragma once

#include <cuda.h>

#include "umswap/vmm/vmm_driver.h"

inline umswap::vmm::VmmDriver real_vmm_driver() {
  umswap::vmm::VmmDriver d;
  d.mem_address_reserve = cuMemAddressReserve;
  d.mem_address_free = cuMemAddressFree;
  d.mem_create = cuMemCreate;
  d.mem_release = cuMemRelease;
  d.mem_map = cuMemMap;
  d.mem_unmap = cuMemUnmap;
  d.mem_set_access = cuMemSetAccess;
  d.memcpy_dtod_async = cuMemcpyDtoDAsync;
  d.stream_synchronize = cuStreamSynchronize;
  return d;
}
