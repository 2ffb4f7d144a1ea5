// VmmAllocator: the device allocations of engine vmm (UMSWAP_ENGINE=vmm; issue 38, wiring step
// 1), served from one ChunkArena (vmm/include/umswap/vmm/chunk_arena.h) and registered in the
// Registry, as ManagedAllocator does for engine um, so the tracer sees the same buffers.
//
// Contract:
//   * allocate(): one arena range per allocation, its size rounded as ChunkArena::reserved_for()
//     (whole 2 MiB chunks, a tail of half a 16 MiB block or more a whole block), except that an
//     allocation of at most 1 MiB shares a slab (a range of one chunk) with others (vmm_small.h).
//     Chunks come from the GPU pool while it has room (the budget), then from the host (the host
//     limit); later moves are residency()'s. Past both limits: CUDA_ERROR_OUT_OF_MEMORY, counted,
//     with nothing left behind; before giving that answer, the stream-ordered frees still pending
//     are waited for and the allocation is tried once more (then once more without the empty slab
//     kept for small ones). The record goes into the Registry with a fresh BufferId (the same
//     numbering as engine um). A small allocation is not the base of a range: the driver's
//     cuMemGetAddressRange and pointer range attributes answer its slab.
//   * free(): for a base this allocator handed out and that is not freed yet: the device is
//     synchronized first (cuCtxSynchronize, as cudaFree/cuMemFree synchronize: no kernel still
//     uses the range), then the range is released (a small allocation's share of its slab; the
//     slab once empty, but for one kept). Anything else: nullopt, and the caller hands the pointer
//     to the real driver.
//   * free_async(): likewise, but the range is not released while `stream` may still use it: an
//     event is recorded on the stream and the range released once the event has completed (seen
//     by poll(), which every allocate(), free(), free_async() and mem_get_info() runs first, and
//     by drain(); a stream's events complete in the order they were recorded, so poll() asks the
//     newest of each stream, then the oldest, then halves: a few queries a stream; an error
//     answer, which speaks for its own event only, makes it ask each of that stream's events). If
//     the event cannot be made or recorded, the stream is synchronized and the range released at
//     once. The record leaves the Registry at the call.
//   * Stream order (as the driver's own pools): a range of its own (not a small allocation's
//     share of a slab) whose stream-ordered free is still pending serves a stream-ordered
//     allocation of the same reserved size on the same stream (stream_tag.h) at once, with no
//     wait: the stream runs the new owner's work after the old one's. The most recently freed
//     one wholly on the GPU first, then a kept range (below), then one not wholly on the GPU,
//     only where a new range would get no GPU memory at all. Its event is dropped, its free
//     counted then.
//     stream_ends(s), called before s is destroyed, makes the pending frees of s wait for their
//     events (a new stream may get the same handle).
//   * drain(): waits for every pending free's event and releases its range (at exit).
//   * A released range (one of its own, or an empty slab's) is kept mapped as it is, out of the
//     Registry and forgotten by the residency (no window moves it), for a later allocation of the
//     same reserved size: mapping a new range per tensor cost 0.4-0.8 s an iteration under
//     PyTorch's async backend (H200, 2026-12-01). On the GPU it is kept whatever room it holds
//     (room wanted later is taken back from it, below, at the cost its release has now; keeping
//     within half the room live ranges leave reserved 1.1-2.1x the ranges and took 1.0-1.4x the
//     time at 50%, run 218), but not while the pool is past its limit (lowered under it); on the
//     host only while the kept ranges' host chunks stay within half the room live ranges leave
//     there (nothing takes host room back from them, and evictions need it). An allocation
//     takes the most recently kept range of its size that is wholly on the GPU; failing that,
//     kept ranges give their GPU chunks back, oldest first, until a new range fits wholly on the
//     GPU; a kept one of its size elsewhere serves it only where a new one would get no GPU
//     memory at all. Windows likewise take kept ranges' GPU chunks before evicting a live range
//     (VmmResidency::set_reclaim). An out-of-memory answer, a pool shrunk by the program's own
//     mappings and the destructor release them all; at most kMostKept are kept (the oldest
//     released past it). release_kept() releases them all. The arena's stats count kept ranges
//     with the live ones (they hold its chunks).
//   * residency(): the moves that keep the ranges a step reaches on the GPU (vmm_residency.h);
//     a released range is forgotten there.
//   * mem_get_info(): total = budget + host limit, free = total minus the bytes of the arena's
//     chunks in use by live ranges (kept ones count as free).
//   * Errors come back as the CUresult a driver call would give; nothing throws except
//     std::bad_alloc.
// Thread safety: every member may be called from any thread.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "umswap/allocator/program_mappings.h"
#include "umswap/allocator/registry.h"
#include "umswap/allocator/vmm_residency.h"
#include "umswap/allocator/vmm_small.h"
#include "umswap/vmm/chunk_arena.h"

namespace umswap {

// The driver functions the allocator calls beyond the arena's (vmm::VmmDriver): the events of
// stream-ordered frees and the synchronizations of plain ones. In the preload library: the real
// libcuda functions; in tests, fakes (event_query is the injectable "has the stream got there?").
struct VmmSyncDriver {
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuEventSynchronize_v2000 event_synchronize = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize = nullptr;

  bool complete() const {
    return event_create && event_record && event_query && event_synchronize && event_destroy &&
           stream_synchronize && ctx_synchronize;
  }
};

struct VmmAllocatorStats {
  uint64_t allocations[kAllocApiCount] = {};
  uint64_t frees = 0;  // ranges released (plain and stream-ordered) or reused on their stream
  uint64_t frees_deferred = 0;    // stream-ordered frees released after their event
  uint64_t ranges_reused = 0;     // allocations served by a released range kept mapped
  uint64_t reused_on_stream = 0;  // by a range whose free on the same stream was pending
  uint64_t ranges_kept = 0;       // released ranges kept mapped now, and their bytes
  uint64_t kept_bytes = 0;
  double allocate_ms = 0;  // the program's threads in allocate() (pending frees released included)
  double free_ms = 0;      // and in free() / free_async()
  uint64_t frees_synchronized = 0;  // stream-ordered frees whose event failed: stream synchronized
  uint64_t pending_frees = 0;       // stream-ordered frees not released yet
  uint64_t out_of_memory = 0;       // allocations refused: past both limits
  uint64_t largest_refused = 0;
  uint64_t driver_failures = 0;  // allocations the driver failed otherwise
  uint64_t program_mapped = 0;   // the program's own cuMemCreate calls (ProgramMappings)
  uint64_t program_mapped_bytes = 0;
  uint64_t live_buffers = 0;
  uint64_t small_allocations = 0;  // allocations served from slabs (vmm_small.h)
  uint64_t slabs = 0;              // slabs live now
  uint64_t requested_bytes = 0;  // asked for by the program, live (the rest of the chunks is waste)
  uint64_t requested_bytes_peak = 0;
  uint64_t gpu_limit = 0;  // the GPU pool: the budget, whole chunks
  uint64_t host_limit = 0;
  uint64_t gpu_bytes = 0;  // chunks backing live ranges, now
  uint64_t gpu_bytes_peak = 0;
  // The program's own GPU memory (set_program_gpu_bytes), now and at most; and the most of it
  // plus GPU chunks in use at once, sampled at allocations, windows and the program's mappings.
  uint64_t program_gpu_bytes = 0;
  uint64_t program_gpu_bytes_peak = 0;
  uint64_t gpu_and_program_bytes_peak = 0;
  uint64_t host_bytes = 0;
  uint64_t host_bytes_peak = 0;
  vmm::ArenaStats arena;
  ResidencyStats residency;

  uint64_t total_allocations() const {
    uint64_t total = 0;
    for (uint64_t n : allocations) total += n;
    return total;
  }
};
// The stats file's `vmm` section (core/include/umswap/core/stats_schema.h, docs/stats.md).
nlohmann::json to_json(const VmmAllocatorStats& stats);

// The GPU pool when no budget is given: the GPU's free memory when the engine starts, less a
// margin for what does not come from umswap (the context, libraries' own memory, allocations
// left to the driver): max(1 GiB, 5% of the GPU's memory). Whole chunks; 0 when nothing is left.
uint64_t vmm_default_gpu_pool(uint64_t gpu_free, uint64_t gpu_total);
// The host limit when UMSWAP_MANAGED_LIMIT is not set: half the host memory available (the
// kernel's MemAvailable) when the engine starts. Whole chunks.
uint64_t vmm_default_host_limit(uint64_t host_available);

class VmmAllocator {
 public:
  // The arena is made here with no driver call (its pools' windows are reserved on first use),
  // in blocks of `chunks_per_block` chunks (0: ChunkArena::chunks_per_block_for the pool).
  VmmAllocator(const vmm::VmmDriver& arena_driver, const VmmSyncDriver& sync, Registry& registry,
               CUdevice device, uint64_t gpu_limit_bytes, uint64_t host_limit_bytes,
               uint32_t chunks_per_block = 0);
  // Drains the pending frees; the arena then releases what is left.
  ~VmmAllocator();
  VmmAllocator(const VmmAllocator&) = delete;
  VmmAllocator& operator=(const VmmAllocator&) = delete;

  // bytes > 0. `from_pool`: a stream-ordered allocation (freed with free_async) on `stream`.
  CUresult allocate(AllocApi api, size_t bytes, CallSiteId site, bool from_pool, CUdeviceptr* out,
                    CUstream stream = nullptr);
  // A pitched allocation: rows of `width` bytes rounded up to `alignment` (what the real
  // cuMemAllocPitch uses on this device, found by the caller). width, height, alignment > 0.
  CUresult allocate_pitch(AllocApi api, size_t width, size_t height, size_t alignment,
                          CallSiteId site, CUdeviceptr* out, size_t* pitch);
  std::optional<CUresult> free(CUdeviceptr ptr);
  std::optional<CUresult> free_async(CUdeviceptr ptr, CUstream stream);
  // The program's cuMemMap of a whole handle the engine virtualized (virtual_handles.h): a range
  // at the program's own addresses [ptr, +bytes) (whole chunks, reserved by the program),
  // registered as a cuMemMap allocation and moved like any other, never kept for reuse (the
  // addresses are the program's). CUDA_ERROR_OUT_OF_MEMORY past both limits (after the pending
  // frees and the kept ranges are given back); nothing is left behind on failure.
  CUresult map_program(CUdeviceptr ptr, size_t bytes, CallSiteId site);
  // Its cuMemUnmap: waits for the device (as a free does; PyTorch synchronizes before it anyway),
  // releases the range, leaves the addresses reserved. nullopt when no mapping of the program's
  // starts at `ptr`. free() and free_async() answer nullopt for these (not a cudaMalloc's).
  std::optional<CUresult> unmap_program(CUdeviceptr ptr);
  // What the arena could still back, and the ranges kept for reuse that would be given back for
  // it (a program's cuMemCreate asks before it is given a virtual handle).
  uint64_t bytes_available();
  // An allocation of the program's refused out of memory outside allocate() (a cuMemCreate the
  // engine has no room for): counted as allocate()'s are.
  void note_refused(uint64_t bytes) { count_refused(CUDA_ERROR_OUT_OF_MEMORY, bytes); }
  // The stream is about to be destroyed: its pending frees serve no allocation by stream order.
  void stream_ends(CUstream stream);
  // Releases the ranges whose stream-ordered free has completed; returns how many.
  size_t poll();
  // Waits for every pending stream-ordered free and releases its range; returns how many.
  size_t drain();
  CUresult mem_get_info(size_t* free, size_t* total);
  // Releases every range kept for reuse (see above). Any thread.
  void release_kept();
  // Releases the oldest kept range that holds GPU chunks; false when none does. Any thread (the
  // residency's windows call it under their lock).
  bool release_oldest_kept_on_gpu();
  static constexpr size_t kMostKept = 4096;

  CUdevice device() const { return device_; }
  // Where the ranges are kept (engine vmm's moves, hooks/vmm_observer.h); lives as long as this.
  VmmResidency& residency() { return residency_; }
  void note_escape() { escaped_.fetch_add(1, std::memory_order_relaxed); }
  void note_captured() { captured_.fetch_add(1, std::memory_order_relaxed); }
  // The program's own memory on this GPU (`mappings`: NCCL's buffers, JAX) stays on the GPU, so
  // it counts against the budget: the pool becomes the budget less it, in whole chunks (none
  // when it is past the budget). Free chunks past the new pool are released at once, chunks in
  // use past it as a window moves their ranges out (VmmResidency). Reads mappings.gpu_bytes()
  // under a lock of its own, so that of two threads calling it the last one applies the latest
  // figure; the stats' program_* figures are `mappings`' as of the last call. Any thread.
  void set_program_gpu_bytes(const ProgramMappings& mappings);
  // Samples the peaks (gpu_bytes_peak, gpu_and_program_bytes_peak); after a window's moves too.
  void note_peaks();
  uint64_t escaped() const { return escaped_.load(std::memory_order_relaxed); }
  uint64_t captured() const { return captured_.load(std::memory_order_relaxed); }
  VmmAllocatorStats stats() const;
  // Bytes moved to the GPU and to the host so far (the arena's; cheaper than stats()).
  std::pair<uint64_t, uint64_t> bytes_moved() const;

 private:
  struct PendingFree {
    CUdeviceptr base = 0;
    uint64_t size = 0;  // as the program asked
    CUevent event = nullptr;
    uint64_t stream = 0;    // stream_tag() of the free's stream
    uint64_t reserved = 0;  // a range of its own: its reserved bytes; a slab's share: 0
  };
  struct KeptRange {
    CUdeviceptr base = 0;
    uint64_t reserved = 0;
    uint64_t gpu_bytes = 0;  // as kept (nothing moves a kept range)
  };
  // Keeps the range at `base` (forgotten by the residency) for reuse, or releases it.
  void keep(CUdeviceptr base);
  // Takes kept_[i] out of the list and its sums; the caller holds kept_mutex_.
  KeptRange take_kept_at(size_t i);
  // The most recently kept range of `reserved` bytes (wholly on the GPU if `on_gpu`), taken out.
  std::optional<KeptRange> take_kept(uint64_t reserved, bool on_gpu);
  // A kept range for an allocation of `bytes`, or 0 (see the contract).
  CUdeviceptr reuse(uint64_t bytes);
  // A range whose free on the stream tagged `stream` is pending, for an allocation of `reserved`
  // bytes on that stream, taken out of the pending frees with its free counted; or 0.
  // `on_gpu_only`: only one wholly on the GPU; otherwise one elsewhere where a new range would
  // get no GPU memory at all.
  CUdeviceptr take_pending(uint64_t reserved, uint64_t stream, bool on_gpu_only);
  // Counts a free whose range was released or handed out again.
  void count_free(uint64_t size);
  // Releases a range whose record already left the Registry.
  void release(CUdeviceptr base, uint64_t size);
  // The arena's release of the range at `base`; a failure counted in driver_failures_.
  void release_to_arena(CUdeviceptr base);
  // An arena range of its own (a pending free waited for before giving up), or a slab's share.
  // `stream`: the allocation's stream_tag(), for a stream-ordered one.
  // `slab`: a range for small allocations (told to the residency as such).
  CUresult allocate_range(uint64_t bytes, CUdeviceptr* out,
                          std::optional<uint64_t> stream = std::nullopt, bool slab = false);
  CUresult allocate_small(uint64_t bytes, CUdeviceptr* out);
  // Gives back the memory at `ptr`: its share of a slab (the slab released once empty and not
  // kept), or its range; a range, or an empty slab, kept for reuse if `may_keep` and keep() takes
  // it.
  void release_memory(CUdeviceptr ptr, bool may_keep = true);

  const VmmSyncDriver sync_;
  Registry& registry_;
  const CUdevice device_;
  vmm::ChunkArena arena_;
  VmmResidency residency_{arena_};
  mutable std::mutex kept_mutex_;  // kept_ and its sums (never held across another lock's call)
  std::vector<KeptRange> kept_;    // oldest first
  uint64_t kept_bytes_ = 0;
  uint64_t kept_gpu_bytes_ = 0;
  std::atomic<uint64_t> ranges_reused_{0};
  std::atomic<uint64_t> reused_on_stream_{0};
  mutable std::mutex small_mutex_;  // small_ (before the residency's)
  SmallSlabs small_;
  std::atomic<uint64_t> small_allocations_{0};

  mutable std::mutex pending_mutex_;
  std::vector<PendingFree> pending_;  // in the order their events were recorded
  // poll()'s scratch, under pending_mutex_: the streams, one stream's frees, which are done.
  std::vector<uint64_t> poll_streams_;
  std::vector<size_t> poll_order_;
  std::vector<char> poll_done_;

  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> allocations_[kAllocApiCount] = {};
  std::atomic<uint64_t> frees_{0};
  std::atomic<uint64_t> frees_deferred_{0};
  std::atomic<uint64_t> frees_synchronized_{0};
  std::atomic<uint64_t> allocate_ns_{0};
  std::atomic<uint64_t> free_ns_{0};
  std::atomic<uint64_t> out_of_memory_{0};
  std::atomic<uint64_t> largest_refused_{0};
  std::atomic<uint64_t> driver_failures_{0};
  std::atomic<uint64_t> live_buffers_{0};
  std::atomic<uint64_t> escaped_{0};
  std::atomic<uint64_t> captured_{0};
  mutable std::mutex peaks_mutex_;
  uint64_t requested_bytes_ = 0;
  uint64_t requested_bytes_peak_ = 0;
  uint64_t gpu_bytes_peak_ = 0;
  uint64_t host_bytes_peak_ = 0;
  // An allocation refused (out of memory, or the driver's failure), and one made: the counts.
  void count_refused(CUresult status, uint64_t bytes);
  void count_allocated(AllocApi api, uint64_t bytes);
  std::mutex program_mutex_;  // set_program_gpu_bytes(), one at a time (before peaks_mutex_)
  // ProgramMappings' figures as of the last set_program_gpu_bytes() (under peaks_mutex_).
  uint64_t program_gpu_bytes_ = 0;
  uint64_t program_gpu_bytes_peak_ = 0;
  uint64_t program_mapped_ = 0;
  uint64_t program_mapped_bytes_ = 0;
  uint64_t gpu_and_program_bytes_peak_ = 0;
};

}  // namespace umswap
