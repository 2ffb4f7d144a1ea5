// umswap's copy kernel (UMSWAP_EVICT_COPY_PATH=kernel): the copies out and back of
// UMSWAP_EVICT_COPY done by a few SMs instead of a copy engine.
//
// Why: on an H200 (tests/gpu/copy_path_probe.cu, 2026-11-26), cuMemcpyAsync between GPU-resident
// managed memory and pinned host memory ran at 52.6 GB/s to the host and 51.2 to the GPU, but
// both at once shared 51.7 GB/s (cudaMalloc memory: 98.6 both at once). The same copies done by
// a kernel ran at 52.6 and 50.9 GB/s with 16 blocks of 512 threads, and at 74.9 GB/s together
// with one such kernel each way. The kernel is PTX text, compiled by the driver when loaded
// (cuModuleLoadData), so the library needs no CUDA compiler to build.
//
// Pure: no CUDA calls here; the advisor loads and launches it.
#pragma once

#include <cstdint>
#include <string_view>

namespace umswap::advisor {

// The entry point: umswap_copy16(uint64 dst, uint64 src, uint64 units) copies `units` 16-byte
// units from src to dst (generic addresses: GPU memory, managed memory, pinned host memory).
inline constexpr const char* kCopyKernelName = "umswap_copy16";
// The launch shape measured above: a few blocks carry one direction of the link and leave the
// rest of the GPU to the program.
inline constexpr unsigned kCopyKernelBlocks = 16;
inline constexpr unsigned kCopyKernelThreads = 512;

// The kernel's PTX (ISA 7.0, sm_75 and newer), NUL-terminated.
std::string_view copy_kernel_ptx();

// Whether the kernel can copy [src, src + bytes) to dst: both addresses and the length are
// multiples of 16 and the length is not 0. Otherwise a copy engine does it.
constexpr bool copy_kernel_fits(uint64_t dst, uint64_t src, uint64_t bytes) {
  return bytes != 0 && ((dst | src | bytes) & 15) == 0;
}

}  // namespace umswap::advisor
