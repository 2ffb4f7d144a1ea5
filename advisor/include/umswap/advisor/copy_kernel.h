// umswap's copy kernel: the copies out and back of UMSWAP_EVICT_COPY done by a few SMs instead
// of a copy engine (which copies only when the kernel does not load).
//
// Why: on an H200 (bench/copy_path_probe.cu, 2026-11-26), cuMemcpyAsync between GPU-resident
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

// umswap_hash_pages(src, hashes): launched with one block of kPageHashThreads threads per 2 MiB
// page of [src, src + pages * 2 MiB), writes page b's hash (page_hash()) to hashes[b], copying
// nothing. umswap run --verify hashes each page it copies out as it leaves the GPU and again once
// it is back (round_trips.h).
inline constexpr const char* kPageHashKernelName = "umswap_hash_pages";
inline constexpr unsigned kPageHashThreads = 1024;
inline constexpr uint64_t kPageBytes = uint64_t{2} << 20;

// The hash thread `thread` of a grid of `threads` computes over the `units` 16-byte units at
// `src` (page_hash()'s first step): FNV-1a's constants on the two 8-byte words of each
// of its units (thread, thread + threads, ...), in rising order. Each step (xor a word, multiply
// by an odd number) is a bijection of the state, so one changed word always changes the hash;
// changes in several words cancel out only if they are chosen against the state.
uint64_t copy_thread_hash(const void* src, uint64_t units, uint64_t thread, uint64_t threads);

// The hash umswap_hash_pages writes for the 2 MiB page at `page`: each of kPageHashThreads
// threads hashes its units as copy_thread_hash() does (thread t: units t, t + 1024, ...); then,
// FNV-1a's way, each of 32 groups of 32 consecutive thread hashes is folded into one, and the 32
// group hashes into the page's. A change in one word always changes it.
uint64_t page_hash(const void* page);

// The kernels' PTX (ISA 7.0, sm_75 and newer), NUL-terminated.
std::string_view copy_kernel_ptx();

// Whether the kernel can copy [src, src + bytes) to dst: both addresses and the length are
// multiples of 16 and the length is not 0. Otherwise a copy engine does it.
constexpr bool copy_kernel_fits(uint64_t dst, uint64_t src, uint64_t bytes) {
  return bytes != 0 && ((dst | src | bytes) & 15) == 0;
}

}  // namespace umswap::advisor
