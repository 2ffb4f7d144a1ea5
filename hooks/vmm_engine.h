// Engine vmm's set-up in the preload library (UMSWAP_ENGINE=vmm): the VmmAllocator over the real
// libcuda functions, for the device the first allocation is made on.
//
// One arena per process, on one device: the device of the calling thread's context when the
// engine starts (device 0 without one). The hooks leave allocations made on another device to
// the driver. GPU pool: UMSWAP_BUDGET (a percentage of that GPU's memory), else the GPU's free
// memory less a margin (vmm_default_gpu_pool). Host limit: UMSWAP_MANAGED_LIMIT, else half the
// host memory available (vmm_default_host_limit). Nothing here throws.
#pragma once

#include "real_driver.h"
#include "umswap/allocator/registry.h"
#include "umswap/allocator/vmm_allocator.h"
#include "umswap/core/options.h"

namespace umswap {

// The allocator, never freed (hooks may run during exit); nullptr, with a warning, when the
// driver lacks the functions the engine needs.
VmmAllocator* make_vmm_allocator(const RealDriver& driver, Registry& registry,
                                 const Options& options);

// The row alignment of the real cuMemAllocPitch on the current device, asked of it once.
size_t vmm_pitch_alignment(const RealDriver& driver);

}  // namespace umswap
