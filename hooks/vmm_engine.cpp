#include "vmm_engine.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "umswap/core/log.h"
#include "vmm_driver_timing.h"

namespace umswap {
namespace {

// The kernel's MemAvailable (what can be allocated without swapping), else the free pages.
uint64_t host_available_bytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof(line), f)) {
      found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    }
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kib) * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace

VmmAllocator* make_vmm_allocator(const RealDriver& d, Registry& registry, const Options& options) {
  vmm::VmmDriver arena;
  arena.mem_address_reserve = d.cuMemAddressReserve;
  arena.mem_address_free = d.cuMemAddressFree;
  arena.mem_create = d.cuMemCreate;
  arena.mem_release = d.cuMemRelease;
  arena.mem_map = d.cuMemMap;
  arena.mem_unmap = d.cuMemUnmap;
  arena.mem_set_access = d.cuMemSetAccess;
  arena.memcpy_dtod_async = d.cuMemcpyDtoDAsync_v2;
  arena.stream_synchronize = d.cuStreamSynchronize;
  VmmSyncDriver sync;
  sync.event_create = d.cuEventCreate;
  sync.event_record = d.cuEventRecord;
  sync.event_query = d.cuEventQuery;
  sync.event_synchronize = d.cuEventSynchronize;
  sync.event_destroy = d.cuEventDestroy_v2;
  sync.stream_synchronize = d.cuStreamSynchronize;
  sync.ctx_synchronize = d.cuCtxSynchronize;
  if (!arena.complete() || !sync.complete() || !d.cuDeviceTotalMem_v2 || !d.cuMemGetInfo_v2) {
    log_warning(
        "engine vmm: the CUDA driver lacks functions the engine needs (cuMemCreate, cuMemMap, "
        "events); allocations go to the driver unchanged");
    return nullptr;
  }
  time_vmm_driver(arena, sync);
  CUdevice device = 0;
  if (d.cuCtxGetDevice(&device) != CUDA_SUCCESS && d.cuDeviceGet(&device, 0) != CUDA_SUCCESS) {
    device = 0;
  }
  size_t total = 0;
  if (d.cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS) total = 0;
  uint64_t pool = 0;
  if (!options.budget.is_zero()) {
    pool = options.budget.resolve(total);
  } else {
    size_t free = 0, total_now = 0;
    if (d.cuMemGetInfo_v2(&free, &total_now) != CUDA_SUCCESS) free = total;
    pool = vmm_default_gpu_pool(free, total);
  }
  const uint64_t host = options.managed_limit.is_zero()
                            ? vmm_default_host_limit(host_available_bytes())
                            : options.managed_limit.resolve(total);
  auto* allocator = new VmmAllocator(arena, sync, registry, device, pool, host);
  log_notice(
      "engine vmm: allocations placed on the GPU up to the budget, on the host after it; a step "
      "that reaches host chunks brings them in first");
  if (options.verbose >= 1) {
    log_info("engine vmm on device {}: GPU pool {}{}, host chunks up to {}{}", device,
             format_bytes(allocator->stats().gpu_limit),
             options.budget.is_zero() ? " (free GPU memory less a margin)" : "",
             format_bytes(allocator->stats().host_limit),
             options.managed_limit.is_zero() ? " (half the host memory available)" : "");
  }
  return allocator;
}

size_t vmm_pitch_alignment(const RealDriver& d) {
  static std::atomic<size_t> cached{0};
  size_t alignment = cached.load(std::memory_order_relaxed);
  if (alignment != 0) return alignment;
  // A 1-byte-wide row gets a pitch of exactly the alignment (as ManagedAllocator asks).
  CUdeviceptr probe = 0;
  size_t pitch = 0;
  alignment = 512;  // what current GPUs use, if the driver cannot be asked
  if (d.cuMemAllocPitch_v2 && d.cuMemAllocPitch_v2(&probe, &pitch, 1, 1, 4) == CUDA_SUCCESS &&
      pitch > 0) {
    d.cuMemFree_v2(probe);
    alignment = pitch;
  }
  cached.store(alignment, std::memory_order_relaxed);
  return alignment;
}

}  // namespace umswap
