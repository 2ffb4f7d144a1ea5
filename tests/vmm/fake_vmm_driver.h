// A fake CUDA driver for the vmm engine's tests that simulates physical memory: every cuMemCreate
// gives a handle owning the bytes of its block (whole 2 MiB chunks, GPU or host, by its
// properties), cuMemAddressReserve hands out virtual ranges, cuMemMap maps a handle whole and
// records which handle, at which offset, backs each 2 MiB slot (a mapping is undone only whole, as
// the driver requires), and a copy moves bytes between the handles mapped at its two addresses.
// Copies are queued on their stream and run at cuStreamSynchronize, resolving their addresses then,
// as a GPU would: an engine that remapped before waiting would copy the wrong chunk, and the tests
// would see it.
//
// kernel_write() and kernel_mismatches() touch memory through the mappings, as a kernel would.
// Any call can be made to fail (once, at its n-th next call, or always) with a chosen error.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "umswap/vmm/chunk.h"
#include "umswap/vmm/vmm_driver.h"

namespace umswap::vmm::fake {

enum Call : int {
  kReserve,
  kAddressFree,
  kCreateGpu,
  kCreateHost,
  kRelease,
  kMap,
  kUnmap,
  kSetAccess,
  kMemcpy,
  kSync,
  kCallKinds
};

inline uint8_t pattern(CUdeviceptr address, uint8_t seed) {
  return static_cast<uint8_t>((address * 0x9E3779B97F4A7C15ull + seed * 0x100000001B3ull) >> 56);
}

struct Fake {
  struct Phys {
    std::vector<uint8_t> bytes;  // empty with no_data
    uint64_t size = 0;
    bool host = false;
    bool released = false;  // released while mapped: freed at its last unmap, as the driver does
    int maps = 0;
  };
  struct Mapping {
    CUmemGenericAllocationHandle handle = 0;
    uint64_t offset = 0;  // of this slot in the handle's memory
    bool access = false;
    CUdeviceptr start = 0;  // the cuMemMap call's range this slot is part of
    uint64_t size = 0;
  };
  struct Copy {
    CUdeviceptr dst = 0;
    CUdeviceptr src = 0;
    size_t bytes = 0;
  };

  std::mutex mutex;
  CUdevice device = 3;  // the ordinal the engine must name in every property and access
  CUdeviceptr next_va = 0x7f0000000000;
  std::map<CUdeviceptr, uint64_t> reservations;  // base -> size
  std::map<CUmemGenericAllocationHandle, Phys> phys;
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<CUdeviceptr, Mapping> slots;  // 2 MiB slot -> what is mapped there
  std::map<CUstream, std::vector<Copy>> queued;
  uint64_t gpu_physical_limit = UINT64_MAX;  // cuMemCreate on the GPU fails past it
  uint64_t gpu_bytes = 0;
  uint64_t gpu_bytes_peak = 0;
  uint64_t host_bytes = 0;
  uint64_t copies_run = 0;
  uint64_t bad_streams = 0;  // copies or waits on a stream other than `stream`
  CUstream stream = nullptr;
  // No bytes kept (a simulation of moves: bench/vmm_residency_sim): every mapped byte reads and
  // writes one scratch chunk, copies are counted, not made.
  bool no_data = false;
  std::vector<uint8_t> scratch;
  // Addresses freed are handed out again, the most recent of the same size first (a driver reuses
  // its address space; a simulation's ranges then repeat from one iteration to the next).
  bool reuse_addresses = false;
  std::multimap<uint64_t, CUdeviceptr> freed_addresses;  // size -> base

  std::array<int, kCallKinds> calls{};
  std::array<int, kCallKinds> fail_in{};
  std::array<bool, kCallKinds> fail_always{};
  std::array<CUresult, kCallKinds> fail_with{};

  // The n-th next call of `call` fails (n = 1: the next one).
  void fail_nth(Call call, int n, CUresult error = CUDA_ERROR_UNKNOWN) {
    std::lock_guard lock(mutex);
    fail_in[call] = n;
    fail_with[call] = error;
  }
  void fail_every(Call call, bool on, CUresult error = CUDA_ERROR_UNKNOWN) {
    std::lock_guard lock(mutex);
    fail_always[call] = on;
    fail_with[call] = error;
  }
  // Under the mutex: counts the call, answers whether it must fail.
  bool injected(Call call) {
    ++calls[call];
    if (fail_always[call]) return true;
    return fail_in[call] > 0 && --fail_in[call] == 0;
  }
  bool inside_reservation(CUdeviceptr p, uint64_t n) const {
    auto it = reservations.upper_bound(p);
    if (it == reservations.begin()) return false;
    --it;
    return p >= it->first && p + n <= it->first + it->second;
  }
  // The byte behind `va` for a kernel: mapped with access, else null.
  uint8_t* byte_at(CUdeviceptr va) {
    const auto it = slots.find(va / kChunk * kChunk);
    if (it == slots.end() || !it->second.access) return nullptr;
    if (no_data) {
      if (scratch.empty()) scratch.assign(kChunk, 0);
      return &scratch[va % kChunk];
    }
    return &phys.at(it->second.handle).bytes[it->second.offset + va % kChunk];
  }
  // The handle mapped at the slot holding `va` (0: none).
  CUmemGenericAllocationHandle handle_at(CUdeviceptr va) {
    std::lock_guard lock(mutex);
    const auto it = slots.find(va / kChunk * kChunk);
    return it == slots.end() ? 0 : it->second.handle;
  }
  bool is_host_handle(CUmemGenericAllocationHandle h) {
    std::lock_guard lock(mutex);
    return phys.at(h).host;
  }
  size_t live_handles() {
    std::lock_guard lock(mutex);
    return phys.size();
  }
  size_t live_reservations() {
    std::lock_guard lock(mutex);
    return reservations.size();
  }
  size_t live_mappings() {
    std::lock_guard lock(mutex);
    return slots.size();
  }
  // cuMemMap calls whose mapping is still there.
  size_t live_map_calls() {
    std::lock_guard lock(mutex);
    size_t n = 0;
    for (const auto& [at, m] : slots) n += at == m.start ? 1 : 0;
    return n;
  }
  // The bytes of the cuMemMap call that mapped the slot holding `va` (0: none).
  uint64_t mapping_size_at(CUdeviceptr va) {
    std::lock_guard lock(mutex);
    const auto it = slots.find(va / kChunk * kChunk);
    return it == slots.end() ? 0 : it->second.size;
  }

  // As a kernel: false when a byte is not mapped with access.
  bool kernel_write(CUdeviceptr va, uint64_t n, uint8_t seed) {
    std::lock_guard lock(mutex);
    for (uint64_t i = 0; i < n;) {
      const uint64_t span = std::min<uint64_t>(n - i, kChunk - (va + i) % kChunk);
      uint8_t* b = byte_at(va + i);
      if (b == nullptr) return false;
      for (uint64_t k = 0; k < span; ++k) b[k] = pattern(va + i + k, seed);
      i += span;
    }
    return true;
  }
  // Bytes that differ from the pattern or cannot be read. One chunk's slot at a time under the
  // lock, so that a concurrent remap may happen between two chunks, as it may under a kernel.
  uint64_t kernel_mismatches(CUdeviceptr va, uint64_t n, uint8_t seed) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n;) {
      const uint64_t span = std::min<uint64_t>(n - i, kChunk - (va + i) % kChunk);
      std::lock_guard lock(mutex);
      const uint8_t* b = byte_at(va + i);
      if (b == nullptr) {
        bad += span;
      } else {
        for (uint64_t k = 0; k < span; ++k) bad += b[k] != pattern(va + i + k, seed) ? 1 : 0;
      }
      i += span;
    }
    return bad;
  }
};

inline std::unique_ptr<Fake> g_fake;

inline CUresult CUDAAPI fake_reserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kReserve)) return g_fake->fail_with[kReserve];
  if (size == 0 || size % kChunk != 0 || alignment % kChunk != 0 || addr != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (g_fake->reuse_addresses) {
    if (const auto [first, end] = g_fake->freed_addresses.equal_range(size); first != end) {
      const auto it = std::prev(end);  // the most recent of that size
      *ptr = it->second;
      g_fake->freed_addresses.erase(it);
      g_fake->reservations[*ptr] = size;
      return CUDA_SUCCESS;
    }
  }
  *ptr = g_fake->next_va;
  g_fake->reservations[*ptr] = size;
  g_fake->next_va += size + kChunk;  // a gap: an overrun of a range finds nothing mapped
  return CUDA_SUCCESS;
}

inline CUresult CUDAAPI fake_address_free(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kAddressFree)) return g_fake->fail_with[kAddressFree];
  const auto it = g_fake->reservations.find(ptr);
  if (it == g_fake->reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  const auto mapped = g_fake->slots.lower_bound(ptr);
  if (mapped != g_fake->slots.end() && mapped->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  g_fake->reservations.erase(it);
  if (g_fake->reuse_addresses) g_fake->freed_addresses.emplace(size, ptr);
  return CUDA_SUCCESS;
}

inline CUresult CUDAAPI fake_create(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags) {
  std::lock_guard lock(g_fake->mutex);
  const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  const Call call = host ? kCreateHost : kCreateGpu;
  if (g_fake->injected(call)) return g_fake->fail_with[call];
  const bool gpu =
      prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id == g_fake->device;
  if (size == 0 || size % kChunk != 0 || flags != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !(gpu || (host && prop->location.id == 0))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (gpu && g_fake->gpu_bytes + size > g_fake->gpu_physical_limit) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Fake::Phys p;
  if (!g_fake->no_data) p.bytes.assign(size, 0);
  p.size = size;
  p.host = host;
  (host ? g_fake->host_bytes : g_fake->gpu_bytes) += size;
  g_fake->gpu_bytes_peak = std::max(g_fake->gpu_bytes_peak, g_fake->gpu_bytes);
  *handle = g_fake->next_handle++;
  g_fake->phys.emplace(*handle, std::move(p));
  return CUDA_SUCCESS;
}

// Under the mutex: frees a handle's memory.
inline void fake_free_phys(CUmemGenericAllocationHandle handle) {
  const auto it = g_fake->phys.find(handle);
  (it->second.host ? g_fake->host_bytes : g_fake->gpu_bytes) -= it->second.size;
  g_fake->phys.erase(it);
}

inline CUresult CUDAAPI fake_release(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kRelease)) return g_fake->fail_with[kRelease];
  const auto it = g_fake->phys.find(handle);
  if (it == g_fake->phys.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.maps > 0) {
    it->second.released = true;
  } else {
    fake_free_phys(handle);
  }
  return CUDA_SUCCESS;
}

inline CUresult CUDAAPI fake_map(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kMap)) return g_fake->fail_with[kMap];
  const auto it = g_fake->phys.find(handle);
  if (it == g_fake->phys.end() || it->second.released || flags != 0 || ptr % kChunk != 0 ||
      !g_fake->inside_reservation(ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Part of a handle, or at an offset in it: not supported (an H200, driver 580, 2026-12-01).
  if (size != it->second.size || offset != 0) return CUDA_ERROR_NOT_SUPPORTED;
  for (CUdeviceptr at = ptr; at < ptr + size; at += kChunk) {
    if (g_fake->slots.contains(at)) return CUDA_ERROR_INVALID_VALUE;
  }
  for (uint64_t i = 0; i < size; i += kChunk) {
    g_fake->slots[ptr + i] = Fake::Mapping{handle, offset + i, false, ptr, size};
  }
  ++it->second.maps;
  return CUDA_SUCCESS;
}

inline CUresult CUDAAPI fake_unmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kUnmap)) return g_fake->fail_with[kUnmap];
  if (ptr % kChunk != 0 || size % kChunk != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  // Whole mappings only: the driver cannot unmap part of one.
  for (CUdeviceptr at = ptr; at < ptr + size; at += kChunk) {
    const auto it = g_fake->slots.find(at);
    if (it == g_fake->slots.end() || it->second.start < ptr ||
        it->second.start + it->second.size > ptr + size) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (CUdeviceptr at = ptr; at < ptr + size; at += kChunk) {
    const Fake::Mapping m = g_fake->slots.at(at);
    g_fake->slots.erase(at);
    if (at != m.start) continue;  // the mapping is counted once, at its first slot
    Fake::Phys& p = g_fake->phys.at(m.handle);
    if (--p.maps == 0 && p.released) fake_free_phys(m.handle);
  }
  return CUDA_SUCCESS;
}

inline CUresult CUDAAPI fake_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                        size_t count) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kSetAccess)) return g_fake->fail_with[kSetAccess];
  if (count != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      desc->location.id != g_fake->device || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
      ptr % kChunk != 0 || size % kChunk != 0 || size == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (CUdeviceptr at = ptr; at < ptr + size; at += kChunk) {
    if (!g_fake->slots.contains(at)) return CUDA_ERROR_INVALID_VALUE;
  }
  for (CUdeviceptr at = ptr; at < ptr + size; at += kChunk) g_fake->slots.at(at).access = true;
  return CUDA_SUCCESS;
}

inline CUresult CUDAAPI fake_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                    CUstream stream) {
  std::lock_guard lock(g_fake->mutex);
  if (g_fake->injected(kMemcpy)) return g_fake->fail_with[kMemcpy];
  if (stream != g_fake->stream) ++g_fake->bad_streams;
  for (size_t i = 0; i < bytes; i += kChunk) {
    if (!g_fake->byte_at(dst + i) || !g_fake->byte_at(src + i)) return CUDA_ERROR_INVALID_VALUE;
  }
  g_fake->queued[stream].push_back({dst, src, bytes});
  return CUDA_SUCCESS;
}

// Runs the stream's queued copies, resolving their addresses now.
inline CUresult CUDAAPI fake_sync(CUstream stream) {
  std::lock_guard lock(g_fake->mutex);
  std::vector<Fake::Copy> copies = std::move(g_fake->queued[stream]);
  g_fake->queued.erase(stream);
  // A failed wait: the copies are lost (the context is broken).
  if (g_fake->injected(kSync)) return g_fake->fail_with[kSync];
  if (stream != g_fake->stream) ++g_fake->bad_streams;
  for (const Fake::Copy& c : copies) {
    for (size_t i = 0; i < c.bytes;) {
      const uint64_t span = std::min<uint64_t>(
          {c.bytes - i, kChunk - (c.dst + i) % kChunk, kChunk - (c.src + i) % kChunk});
      uint8_t* d = g_fake->byte_at(c.dst + i);
      const uint8_t* s = g_fake->byte_at(c.src + i);
      if (!d || !s) return CUDA_ERROR_ILLEGAL_ADDRESS;
      if (!g_fake->no_data) std::memmove(d, s, span);
      i += span;
    }
    ++g_fake->copies_run;
  }
  return CUDA_SUCCESS;
}

inline VmmDriver fake_driver() {
  VmmDriver d;
  d.mem_address_reserve = fake_reserve;
  d.mem_address_free = fake_address_free;
  d.mem_create = fake_create;
  d.mem_release = fake_release;
  d.mem_map = fake_map;
  d.mem_unmap = fake_unmap;
  d.mem_set_access = fake_set_access;
  d.memcpy_dtod_async = fake_memcpy;
  d.stream_synchronize = fake_sync;
  return d;
}

}  // namespace umswap::vmm::fake
