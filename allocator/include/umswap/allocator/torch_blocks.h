// TorchBlocks: the blocks PyTorch's caching allocator (its default) carves out of its segments,
// learned from the allocator's own per-block events, so that the tracer sees each tensor's extent
// as it does under backend:cudaMallocAsync, where every tensor is an allocation of umswap's.
//
// How: umswap sees only the segments (cudaMalloc). c10::cuda::CUDACachingAllocator calls every
// attached "trace tracker" for each block allocated and freed and each segment made or released,
// on the calling thread, under its per-device lock. The method that attaches one
// (NativeCachingAllocator::attachAllocatorTraceTracker) is not exported: its address comes from
// libc10_cuda.so's .symtab (elf_symbols.h), and the allocator object is checked to be that class
// (its vtable pointer) before the call. Attached at the first cudaMalloc libc10_cuda.so makes,
// which is the allocator's first segment: every block is seen from the start. A self-check
// follows: the first segment event must carry the pointer and size that very cudaMalloc
// returned, or every event is ignored. Only segments whose creation was seen (and checked) are
// marked `carved` in the registry; any other stays one allocation, as before.
// (Study and probe: docs/lab/2026-11-30-default-allocator-hooks.md; measured on PyTorch 2.11.)
//
// Dead blocks (set_drops(), with UMSWAP_LIFETIMES and an advisor, as the slab allocator's
// DiscardMode::planned): each block's allocation and free go to `lifetime` (the tracer, so that
// plans know when a tensor is dead); at a block's FREE_COMPLETED (PyTorch may reuse it from then,
// on its stream only; uses on other streams are over), the candidates are the whole 2 MiB pages
// (absolute alignment) inside the free space around it that overlap it: no live block and no block
// freed but not yet completed overlaps them, and none is discarded already. Those `discard_page`
// accepts go in one `discard` call on the block's stream (the entry's stream_; the legacy stream
// maps to the per-thread one, which it is ordered with), so they go after every use of the block
// there and before any reuse. The other bytes of such a page belonged to blocks freed before, of
// the same segment and so of the same stream (PyTorch's pools are per stream: a segment is made for
// one stream and its blocks keep it), whose last uses precede the discard in that order. Discarded
// pages are remembered until an allocation overlaps one (edge pages too: nothing touched them
// since): then it is forgotten, and populated on the GPU on the allocation's stream unless
// `populate_later` takes it (the advisor populates it before its first use). Nothing is discarded
// or populated on a stream being captured into a graph. A failed call turns the drops off and
// forgets every page (the driver populates a page on first touch).
//
// Thread safety: every member may be called from any thread. on_event() runs under PyTorch's
// lock and takes only this object's mutex and the registry's writer lock, never waiting on a
// PyTorch thread; the drop hooks are called under this object's mutex (cheap, and never back into
// it). live_block() takes the same mutex (the kernel-launch path). The object is never destroyed
// while the process runs (PyTorch may call it during exit).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "umswap/allocator/drop_order.h"
#include "umswap/allocator/registry.h"

namespace umswap {

class TorchBlocks final : public BlockFinder {
 public:
  // The trace entry's action_ values (c10's TraceEntry::Action; the same since PyTorch 2.1).
  enum Action : int32_t {
    kAlloc = 0,
    kFreeRequested = 1,
    kFreeCompleted = 2,
    kSegmentAlloc = 3,
    kSegmentFree = 4,
    kSegmentMap = 5,
    kSegmentUnmap = 6,
  };

  explicit TorchBlocks(Registry& registry) : registry_(registry) {}

  // What dead blocks do (the contract above). Every member may be empty; without `discard` and
  // `populate`, nothing is dropped (lifetimes are still told).
  struct Drops {
    std::function<void(uint64_t address, uint64_t bytes, bool freed)> lifetime;
    std::function<bool(uint64_t page)> discard_page;
    std::function<bool(uint64_t page)> populate_later;
    // A range left the GPU without a transfer (false) or was populated there (true).
    std::function<void(uint64_t address, uint64_t bytes, bool on_gpu)> residency;
    // The driver: one batch each (whole 2 MiB pages, discard_pages.h), on `stream` (the
    // entry's); false: the call failed. The batch is this object's scratch, handed as is.
    std::function<bool(std::vector<CUdeviceptr>&starts, std::vector<size_t>&sizes, uint64_t stream)>
        discard, populate;
    std::function<bool(uint64_t stream)> capturing;  // empty: never
    // The discards' order with the advisor's migrations (drop_order.h); null: none.
    DropOrder* order = nullptr;
  };
  // Before any event (at start-up); a second call replaces the first.
  void set_drops(Drops drops);

  // At a cudaMalloc from the library at `library_path` (the caller's file, dladdr), before the
  // real call. The first time that is a libc10_cuda.so, attach (log_info says how it went).
  // Called holding no umswap lock: attaching takes PyTorch's per-device locks.
  void before_segment_malloc(const char* library_path);
  // Whether cudaMalloc calls still matter: not yet attached, or attached and not yet checked.
  bool wants_segment_calls() const {
    const State s = state_.load(std::memory_order_acquire);
    return s == State::idle || s == State::attached;
  }
  // The same cudaMalloc's result: the first segment event is checked against it.
  void after_segment_malloc(bool succeeded, uint64_t pointer, uint64_t bytes);

  // Attaches `tracker`-style: what before_segment_malloc does once the file is recognised.
  // Returns an empty string on success, else why not. Public for tests (a fake libc10_cuda.so).
  std::string attach(const std::string& library_path);

  // One event from PyTorch, its fields read out of the TraceEntry (the tracker's body). Public
  // for tests. Never throws.
  void on_event(int32_t action, uint64_t address, uint64_t bytes, uint64_t stream = 0) noexcept;

  std::optional<std::pair<uint64_t, uint64_t>> live_block(uint64_t address) const override;

  struct Stats {
    std::string state;  // "not PyTorch", "attached", "checked", or why not (see state_text())
    uint64_t events = 0;
    uint64_t segments = 0;                 // segments marked carved
    uint64_t blocks = 0;                   // blocks allocated in them
    uint64_t live_blocks = 0;              // now
    uint64_t ignored = 0;                  // events in segments whose creation was not seen
    uint64_t discarded_bytes = 0;          // dead pages dropped at frees
    uint64_t populated_bytes = 0;          // of them, populated again at an allocation
    uint64_t populate_deferred_bytes = 0;  // left for the advisor to populate
    std::string drops;                     // "on", "off", or why they stopped
  };
  Stats stats() const;

 private:
  enum class State : int { idle, attaching, attached, checked, failed };
  void fail(std::string why);
  // Under mutex_: the drops (the contract above).
  void discard_free_pages(uint64_t address, uint64_t bytes, uint64_t stream);
  void populate_discarded(uint64_t address, uint64_t bytes, uint64_t stream);
  void stop_drops(const char* call);
  // Under mutex_: the segment holding [address, address + 1), or end.
  std::map<uint64_t, uint64_t>::const_iterator segment_of(uint64_t address) const;

  Registry& registry_;
  std::atomic<State> state_{State::idle};
  std::atomic<bool> expect_set_{false};
  std::atomic<uint64_t> expect_pointer_{0}, expect_bytes_{0};
  mutable std::mutex mutex_;
  std::string why_;                        // under mutex_: why it failed
  std::map<uint64_t, uint64_t> segments_;  // under mutex_: base -> size, carved
  std::map<uint64_t, uint64_t> blocks_;    // under mutex_: address -> requested size, live
  std::map<uint64_t, uint64_t> pending_;   // under mutex_: freed, not yet completed
  std::set<uint64_t> discarded_;           // under mutex_: 2 MiB pages dropped, still free
  Drops drops_;                            // under mutex_
  bool drops_on_ = false;                  // under mutex_: discard and populate are set
  std::string drops_stopped_;              // under mutex_: why they stopped
  uint64_t events_ = 0, segments_made_ = 0, blocks_made_ = 0, ignored_ = 0;  // under mutex_
  uint64_t discarded_bytes_ = 0, populated_bytes_ = 0, deferred_bytes_ = 0;  // under mutex_
  std::vector<CUdeviceptr> starts_;  // under mutex_: the batch being made (its capacity kept)
  std::vector<size_t> sizes_;
};

}  // namespace umswap
