// ManagedAllocator: device allocations become CUDA managed memory, registered and capped.
//
// Contract:
//   * Every successful allocation is registered in the Registry with a fresh BufferId; every
//     free of a registered base removes it. Pointers umswap did not allocate are not touched:
//     free()/free_async() return nullopt for them and the caller hands them to the real API.
//   * The managed limit (0 = none) is a hard cap on bytes allocated and not yet freed. An
//     allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY, changes nothing else, and is
//     counted; the program can free memory and try again.
//   * Stream-ordered allocations, with `slabs` on, come from managed slabs (slab_allocator.h):
//     the slabs are the registered buffers (marked `slab`), each allocation a block in one, and
//     the registry's BlockFinder says where a block begins and ends. (Allocations on a stream
//     being captured into a graph never reach the allocator: the hooks leave them to the driver.)
//     With `slabs` off they take the driver's managed memory pool
//     (cuMemGetDefaultMemPool(MANAGED)), so frees happen in stream order; if the pool is
//     unavailable, they fall back (once, with a warning) to plain managed memory, and a
//     stream-ordered free synchronizes its stream before freeing.
//   * With populate_on_allocation(), a device allocation (cudaMalloc, cuMemAlloc, pitched, a new
//     slab for stream-ordered ones; not the program's own managed memory) is on the GPU when it
//     is handed out, as device memory is: no kernel takes a GPU page fault on its first touch of
//     it. Some kernels compute differently when they fault (cuDNN's fused attention with
//     dropout: docs/RELIABILITY.md, "Kernels that a page fault changes"), so a fault umswap can
//     avoid is avoided.
//   * Errors come back as the CUresult a driver call would give; nothing throws.
// Thread safety: all member functions may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "umswap/allocator/driver_api.h"
#include "umswap/allocator/registry.h"
#include "umswap/allocator/slab_allocator.h"

namespace umswap {

struct AllocatorStats {
  uint64_t allocations[kAllocApiCount] = {};
  uint64_t frees = 0;
  uint64_t managed_bytes = 0;  // allocated and not yet freed
  uint64_t managed_bytes_peak = 0;
  uint64_t managed_limit = 0;  // 0 = none
  uint64_t cap_hits = 0;       // allocations refused by the limit
  uint64_t largest_refused = 0;
  uint64_t live_buffers = 0;
  uint64_t driver_failures = 0;  // allocations the driver itself refused
  uint64_t unmanaged_vmm = 0;    // cuMemCreate calls seen (left alone)
  uint64_t escaped = 0;          // runtime allocations that did not reach the driver hooks
  uint64_t captured = 0;         // stream-ordered allocations during graph capture (left alone)
  uint64_t populated = 0;        // allocations populated on the GPU when made
  uint64_t populated_bytes = 0;
  uint64_t populate_skipped = 0;   // not populated: past populate_on_allocation()'s bytes
  uint64_t populate_failures = 0;  // the prefetch or its stream failed: left to the first touch
  bool pool_fallback = false;      // stream-ordered allocations fell back to plain managed
  std::optional<SlabStats> slabs;  // when stream-ordered allocations come from slabs

  uint64_t total_allocations() const {
    uint64_t total = 0;
    for (uint64_t n : allocations) total += n;
    return total;
  }
};
nlohmann::json to_json(const AllocatorStats& stats);

// What stream-ordered allocations from slabs do beyond allocating (slab_allocator.h): the
// discard mode, and who hears of residency changes and block lifetimes, and decides which dead
// pages to discard (DiscardMode::planned). The functions may be empty; they are called under the
// slab allocator's mutex, so they must be cheap and must not call back into the allocator.
struct SlabHooks {
  DiscardMode discards = DiscardMode::off;
  std::function<void(uint64_t address, uint64_t bytes, bool on_gpu)> residency;
  std::function<void(uint64_t address, uint64_t bytes, bool freed)> lifetime;
  std::function<bool(uint64_t page)> discard_page;
  std::function<bool(uint64_t page)> populate_later;
  DropOrder* order = nullptr;  // SlabAllocator::set_discard_mode's
};

class ManagedAllocator {
 public:
  // `slabs`: serve stream-ordered allocations from slabs (needs the driver's event functions;
  // without them, a warning and the managed pool).
  ManagedAllocator(const DriverApi& driver, Registry& registry, uint64_t managed_limit,
                   bool slabs = false);
  ~ManagedAllocator();
  ManagedAllocator(const ManagedAllocator&) = delete;
  ManagedAllocator& operator=(const ManagedAllocator&) = delete;

  // A device allocation, served as cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL). bytes > 0.
  CUresult allocate(AllocApi api, size_t bytes, CallSiteId site, CUdeviceptr* out);
  // The program's own managed allocation, with its attach flags; tracked and capped too.
  CUresult allocate_managed(AllocApi api, size_t bytes, unsigned flags, CallSiteId site,
                            CUdeviceptr* out);
  // A pitched allocation: the pitch is the width rounded up to the alignment the real
  // cuMemAllocPitch uses on this device (probed once). width, height > 0.
  CUresult allocate_pitch(AllocApi api, size_t width, size_t height, CallSiteId site,
                          CUdeviceptr* out, size_t* pitch);
  // A stream-ordered allocation on `stream` (a real stream handle or CU_STREAM_PER_THREAD).
  // `site` is asked only when the allocation needs a new buffer (with slabs: a new slab), since
  // unwinding the stack costs more than a block from a slab.
  CUresult allocate_async(AllocApi api, size_t bytes, CUstream stream,
                          const std::function<CallSiteId()>& site, CUdeviceptr* out);
  CUresult allocate_async(AllocApi api, size_t bytes, CUstream stream, CallSiteId site,
                          CUdeviceptr* out) {
    return allocate_async(
        api, bytes, stream, [site] { return site; }, out);
  }

  // Frees a registered buffer given by its base; nullopt when it is not umswap's.
  std::optional<CUresult> free(CUdeviceptr ptr);
  // Told of a registered buffer that is not a slab about to be freed (its base and size), before
  // the driver frees it: the advisor drops what it holds of it on the host. Set before the first
  // allocation; null: nobody.
  using BeforeFree = void (*)(uint64_t base, uint64_t size);
  void set_before_free(BeforeFree hook) { before_free_ = hook; }
  std::optional<CUresult> free_async(CUdeviceptr ptr, CUstream stream);

  // Slabs only, before the first allocation (the hooks are not guarded against allocations
  // running meanwhile). False (and nothing changes) when there are no slabs, or when the driver
  // lacks the discard functions for a mode other than off.
  bool configure_slabs(SlabHooks hooks);

  // Large stream-ordered allocations follow `placement` from now on, in an arena slab whose
  // call site is kArenaSite (so that a trace's arena matches the replaying process's). False
  // without slabs or when the slab allocator refuses (SlabAllocator::set_placement). Any thread.
  static constexpr CallSiteId kArenaSite = 0x756d737761702d61;  // "umswap-a"
  bool place(Placement placement);
  // SlabAllocator::sweep_free_pages; 0 without slabs.
  uint64_t sweep_free_pages(const std::function<bool(uint64_t page)>& discard, CUstream stream) {
    return slabs_ ? slabs_->sweep_free_pages(discard, stream) : 0;
  }

  // Device allocations and new slabs are populated on the GPU before they are handed out (a
  // prefetch on the allocator's own stream, waited for), while the managed bytes in use, this
  // allocation's included, stay within `up_to`; past it (the budget) the advisor's evictions come
  // first and the first touch populates. 0: off (plain managed memory, moved by page faults only).
  // `populated` hears of each range put on the GPU (may be empty). Call before the first
  // allocation; without the driver's prefetch and stream functions nothing is populated.
  void populate_on_allocation(uint64_t up_to,
                              std::function<void(uint64_t address, uint64_t bytes)> populated) {
    populate_up_to_ = up_to;
    populated_hook_ = std::move(populated);
  }

  // The program destroys `stream` (before the real call).
  void stream_ends(CUstream stream) {
    if (slabs_) slabs_->stream_ends(stream);
  }

  // cuMemGetInfo as the program should see it: with a limit, total = limit and free = limit
  // minus managed bytes in use; without one, the driver's figures.
  CUresult mem_get_info(size_t* free, size_t* total);

  void note_unmanaged_vmm() { unmanaged_vmm_.fetch_add(1, std::memory_order_relaxed); }
  void note_escape() { escaped_.fetch_add(1, std::memory_order_relaxed); }
  void note_captured() { captured_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }
  AllocatorStats stats() const;

 private:
  bool reserve(size_t bytes);
  void release(size_t bytes);
  CUresult finish(CUresult status, AllocApi api, size_t bytes, CallSiteId site, CUdeviceptr ptr,
                  bool from_pool, bool app_managed, CUdeviceptr* out, bool slab = false);
  // cuMemAllocManaged under the limit, registered (as a slab when `slab`).
  CUresult managed(AllocApi api, size_t bytes, unsigned flags, CallSiteId site, CUdeviceptr* out,
                   bool slab);
  CUresult create_slab(uint64_t bytes, CallSiteId site, CUdeviceptr* out);
  void destroy_slab(CUdeviceptr base);
  // populate_on_allocation()'s work for one new buffer; any thread.
  void populate(CUdeviceptr ptr, size_t bytes);
  size_t pitch_alignment();
  CUmemoryPool managed_pool();  // nullptr when unavailable

  const DriverApi driver_;
  Registry& registry_;
  const uint64_t limit_;
  BeforeFree before_free_ = nullptr;

  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> allocations_[kAllocApiCount] = {};
  std::atomic<uint64_t> frees_{0};
  std::atomic<uint64_t> managed_bytes_{0};
  std::atomic<uint64_t> managed_bytes_peak_{0};
  std::atomic<uint64_t> cap_hits_{0};
  std::atomic<uint64_t> largest_refused_{0};
  std::atomic<uint64_t> driver_failures_{0};
  std::atomic<uint64_t> unmanaged_vmm_{0};
  std::atomic<uint64_t> escaped_{0};
  std::atomic<uint64_t> captured_{0};
  std::atomic<size_t> pitch_alignment_{0};
  uint64_t populate_up_to_ = 0;
  std::function<void(uint64_t, uint64_t)> populated_hook_;
  std::once_flag populate_stream_once_;
  CUstream populate_stream_ = nullptr;  // null when it could not be made
  std::atomic<uint64_t> populated_{0};
  std::atomic<uint64_t> populated_bytes_{0};
  std::atomic<uint64_t> populate_skipped_{0};
  std::atomic<uint64_t> populate_failures_{0};

  std::unique_ptr<SlabAllocator> slabs_;
  SlabHooks hooks_;  // what the SlabSource made in the constructor forwards to
  std::once_flag pool_once_;
  std::atomic<CUmemoryPool> pool_{nullptr};
};

}  // namespace umswap
