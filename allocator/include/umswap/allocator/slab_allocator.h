// SlabAllocator: stream-ordered allocations (cudaMallocAsync) carved out of large managed slabs.
//
// Why: a program that allocates every tensor with cudaMallocAsync (PyTorch's
// `backend:cudaMallocAsync`) would otherwise give the registry one short-lived buffer per tensor,
// and a plan learned in one iteration would name buffers that are gone by the next. Served from
// slabs, the registry sees a few long-lived buffers (the slabs); best fit makes the same sequence
// of requests get the same addresses in every iteration; and live_block() tells the tracer where
// the block a pointer falls in begins and ends, so an access is exactly one tensor long. A caching
// allocator's segments (PyTorch's default) hide that: umswap sees only the segment.
//
// Contract:
//   * allocate(): a 512-byte aligned block of at least `bytes`, from the smallest free block
//     usable on `stream` (lowest address among equals), else from a new slab obtained through
//     `SlabSource::create` (managed memory, registered, capped by the caller). Requests up to
//     kSmallLimit share small slabs (kSmallSlab); larger ones come from large slabs of
//     max(kLargeSlab, the request rounded up to 2 MiB).
//   * Stream order: a block freed on stream s is reused at once by allocations on s. Another
//     stream takes it only once an event recorded on s after the free has completed; that event
//     is recorded lazily, the first time another stream finds no other room. A free on the
//     per-thread default stream records its event at once (no other thread can name that
//     stream). Adjacent free blocks merge when they belong to the same stream or one of them is
//     free for every stream.
//   * stream_ends(s), called before s is destroyed: the blocks s freed get an event recorded on
//     s now and no longer answer to s's handle (a new stream may get the same one).
//   * free_sync() (cudaFree of a block): waits for the context, then the block is free for all.
//   * When no slab can be created (the cap, or the driver), allocate() waits for every pending
//     event, gives wholly free slabs back through `SlabSource::destroy`, and tries again before it
//     returns the error.
//   * set_discard_mode(): `planned` (UMSWAP_LIFETIMES=1, the default when an advisor runs) drops
//     dead 2 MiB pages from the GPU without a transfer. At a stream-ordered free (free(), not
//     free_sync()) of [a, a + size), once the block is marked free and merged with its neighbours,
//     the candidates are the whole 2 MiB pages (aligned in absolute addresses) that lie inside the
//     merged free block, overlap [a, a + size) (none is discarded already: the block's allocation
//     populated them): a page shared by two blocks becomes one when the second is freed, and a
//     neighbour another stream freed, not yet safe to merge, keeps its pages out. `planned`
//     discards the candidates `SlabSource::discard_page` accepts (none without it). The chosen
//     pages go in one cuMemDiscardBatchAsync on the freeing stream (on the per-thread stream when
//     the program frees on the legacy stream, which that API refuses, and which the legacy stream
//     waits for), before any event recorded for the free, so the event covers the discard too.
//     Discarded pages are remembered while they stay free (a slab given back forgets its own).
//     An allocation on stream t populates the remembered pages it overlaps, edge pages included
//     (they hold no live data: nothing touched them since), with one
//     cuMemDiscardAndPrefetchBatchAsync to the current device on t (same stream rule), and
//     forgets them; in `planned` mode it leaves out those `SlabSource::populate_later` takes
//     (a block allocated well before its first use would otherwise hold GPU memory from its
//     allocation on: measured, VGG-16's 3 GiB activations came three launches early). Pages
//     never discarded are left to the driver.
//     A failing call turns the mode off with one warning. Turning the mode off (a call or a
//     failure) forgets every discarded page: none is populated after that, and a forgotten page
//     is populated by the driver on its first touch, as managed memory always is (only the
//     transfer-free population is lost; `residency` hears nothing of it).
//   * set_placement(): large allocations follow a Placement (placement.h) in a slab of their
//     own, the arena, made then through `SlabSource::create`. The arena's free space is never
//     found by size: a large request goes there only when it matches the placement's sequence
//     (the next entry of its size within kPlacementLookahead entries of where the last match
//     left off, wrapping round the iteration) and the planned range is one free block's part
//     usable on the request's stream (same rule as above); anything else (no match, no offset,
//     the range taken or not yet safe for this stream) goes where it would have without a
//     placement. The placement only chooses addresses: every block still comes from free space,
//     so a wrong or stale placement costs room, never data. The large slabs that exist when the
//     placement is set (a replaced arena among them: a later call replaces the placement, and
//     the old arena takes no new blocks) are given back by allocate() once wholly free and idle
//     (an event is recorded on each stream that freed a part of one, and it goes once they
//     completed); large slabs made later stay, as without a placement. A give-back is
//     `SlabSource::destroy`, cuMemFree of managed memory, which waits for all of the device's
//     work, not only the slab's (bench/free_order_probe.cu `busy`: 301 ms behind a 300 ms spin on
//     another stream, H200, 2026-11-30): the allocating thread stands still until the GPU is idle.
//   * Errors come back as CUresult; nothing throws except std::bad_alloc.
// Thread safety: every member may be called from any thread; one mutex guards everything.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "umswap/allocator/driver_api.h"
#include "umswap/allocator/drop_order.h"
#include "umswap/allocator/placement.h"
#include "umswap/allocator/registry.h"

namespace umswap {

// Which dead pages a free discards (contract above): none, those SlabSource::discard_page
// accepts, or every candidate.
enum class DiscardMode { off, planned };

// Where slabs come from and go back to, and who hears what happens in them.
struct SlabSource {
  // `context`: what allocate()'s context function gave (the caller's call site, for the slab's
  // identity), asked only when a slab is made.
  std::function<CUresult(uint64_t bytes, uint64_t context, CUdeviceptr* out)> create;
  std::function<void(CUdeviceptr base)> destroy;
  // With a discard mode: a range was discarded (false) or populated on the GPU (true).
  std::function<void(uint64_t address, uint64_t bytes, bool on_gpu)> residency;
  // Every block allocate() hands out (freed false) and free() or free_sync() takes back (freed
  // true): its start and its rounded size (what live_block() gives).
  std::function<void(uint64_t address, uint64_t bytes, bool freed)> lifetime;
  // DiscardMode::planned: whether to discard the candidate 2 MiB page at `page` (see the
  // contract above); asked at stream-ordered frees, after `lifetime` heard the free.
  std::function<bool(uint64_t page)> discard_page;
  // DiscardMode::planned: whether a discarded page an allocation overlaps is left for someone
  // else to populate (the advisor, just before the launch its plan says first touches it)
  // instead of being populated at the allocation. It is forgotten all the same.
  std::function<bool(uint64_t page)> populate_later;
  // `residency`, `lifetime`, `discard_page` and `populate_later` may be empty. They are called
  // under the allocator's mutex, on the thread that allocates or frees: they must be cheap and
  // must not call back into the allocator (it would deadlock).
};

struct SlabStats {
  uint64_t slabs = 0;       // live slabs
  uint64_t slab_bytes = 0;  // their total size
  uint64_t slab_bytes_peak = 0;
  uint64_t slabs_created = 0;
  uint64_t slabs_released = 0;  // given back under pressure
  uint64_t blocks_in_use = 0;
  uint64_t bytes_in_use = 0;  // rounded block sizes
  uint64_t bytes_in_use_peak = 0;
  uint64_t events_recorded = 0;          // cross-stream reuse and per-thread-stream frees
  uint64_t pressure_waits = 0;           // allocations that had to wait for events or release slabs
  uint64_t discarded_bytes = 0;          // discard mode: dead bytes dropped from the GPU at frees
  uint64_t populated_bytes = 0;          // discard mode: discarded bytes populated at allocations
  uint64_t discard_calls = 0;            // cuMemDiscardBatchAsync calls that succeeded
  uint64_t swept_bytes = 0;              // of discarded_bytes: by sweep_free_pages()
  uint64_t populate_calls = 0;           // cuMemDiscardAndPrefetchBatchAsync calls that succeeded
  uint64_t populate_deferred_bytes = 0;  // discarded bytes left to populate_later's taker
  double discard_call_seconds = 0;       // host time inside those discard calls
  double populate_call_seconds = 0;      // and inside those populate calls
  uint64_t arena_bytes = 0;              // set_placement(): the arena's size
  uint64_t placed = 0;                   // large allocations served at their planned offset
  uint64_t placement_taken = 0;      // matched, but the planned range was not free (or unplanned)
  uint64_t placement_unmatched = 0;  // large allocations the sequence did not expect
};
nlohmann::json to_json(const SlabStats& stats);

class SlabAllocator final : public BlockFinder {
 public:
  static constexpr uint64_t kAlignment = 512;
  static constexpr uint64_t kSmallLimit = uint64_t{1} << 20;
  static constexpr uint64_t kSmallSlab = uint64_t{2} << 20;
  static constexpr uint64_t kLargeSlab = uint64_t{64} << 20;
  static constexpr uint64_t kSlabGranule = uint64_t{2} << 20;
  static constexpr size_t kPlacementLookahead = 64;

  // `driver` must have has_slab_functions(); the table is copied.
  SlabAllocator(const DriverApi& driver, SlabSource source);
  ~SlabAllocator();
  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // bytes > 0. `stream` is a stream handle, 0, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD.
  // `context` is called (under the lock) only if a slab must be made; empty gives 0.
  using Context = std::function<uint64_t()>;
  CUresult allocate(uint64_t bytes, CUstream stream, CUdeviceptr* out, const Context& context = {});
  // nullopt when `ptr` is not the start of a block in use (not this allocator's).
  std::optional<CUresult> free(CUdeviceptr ptr, CUstream stream);
  std::optional<CUresult> free_sync(CUdeviceptr ptr);
  void stream_ends(CUstream stream);
  // A mode other than off needs mem_discard_batch_async, mem_discard_and_prefetch_batch_async
  // and ctx_get_device: false (and nothing changes) without them. Off forgets the discarded
  // pages. `order` (drop_order.h; null: none): a page SlabSource::discard_page accepts but it
  // refuses is not discarded, and it hears of every discard; it must outlive this allocator.
  bool set_discard_mode(DiscardMode mode, DropOrder* order = nullptr);
  // With a discard mode other than off: discards the whole 2 MiB pages of free blocks, not
  // discarded yet, that `discard` accepts, but only in blocks every stream may take (their frees
  // are behind the GPU); blocks still answering to the stream that freed them get an event on it,
  // so that a later sweep finds them free for all. The discards go in one cuMemDiscardBatchAsync
  // on `stream`, which is then synchronized: an allocation's populating prefetch, on any stream,
  // comes after it. Nothing on the GPU uses those blocks any more, so `stream` should be a
  // non-blocking stream that nothing else waits on: the per-thread stream would wait for the
  // legacy stream's work, which under UMSWAP_PREFETCH_WAIT may be waiting for the sweeping
  // advisor thread (a cycle the watchdog would have to break). For pages freed before a plan
  // knew which are dead (the advisor sweeps when a plan takes effect). Returns the bytes
  // discarded. `discard` is called under the lock (same rules as SlabSource's functions).
  uint64_t sweep_free_pages(const std::function<bool(uint64_t page)>& discard, CUstream stream);

  // Large allocations follow `placement` from now on (contract above). False, with nothing
  // changed, when the placement is empty or the arena cannot be made. `context` as for
  // allocate().
  bool set_placement(Placement placement, const Context& context = {});

  // The block in use that holds `address`: [first, second). nullopt for free space and for
  // addresses outside every slab.
  std::optional<std::pair<uint64_t, uint64_t>> live_block(uint64_t address) const override;
  bool owns(uint64_t address) const;  // inside some slab

  SlabStats stats() const;

 private:
  using EventRef = std::shared_ptr<CUevent_st>;
  struct Block {
    uint64_t size = 0;
    uint64_t slab = 0;  // base of the slab it lies in
    bool free = false;
    uint64_t stream = 0;  // free blocks: the stream that freed it, or kAnyStream
    uint64_t seq = 0;     // free blocks: order of the free (later frees cover earlier ones)
    EventRef event;       // free blocks of another stream: completes once reuse is safe
  };
  struct Slab {
    uint64_t size = 0;
    bool small = false;
    bool arena = false;  // set_placement()'s: its free space is never found by size
  };
  static constexpr uint64_t kAnyStream = UINT64_MAX;

  std::optional<CUresult> release(CUdeviceptr ptr, uint64_t tag, CUstream stream, bool record_now);
  // The candidate pages of a free of [address, address + size) inside the free block `merged`.
  void discard_dead_pages(uint64_t address, uint64_t size,
                          std::map<uint64_t, Block>::iterator merged, CUstream stream);
  void populate_discarded(uint64_t address, uint64_t size, CUstream stream);
  // Discards the ranges gathered in range_starts_/range_sizes_ on `stream` (then synchronized, if
  // asked), remembers their pages and tells `residency`; returns the bytes (0 on failure, which
  // turns discarding off).
  // `order` is order_'s lock (or none), held since the pages were chosen: let go once the
  // discard is queued and told, before any synchronizing.
  uint64_t discard_ranges(CUstream stream, bool synchronize, std::unique_lock<std::mutex> order);
  bool may_discard(uint64_t page, std::unique_lock<std::mutex>& order,
                   DropOrder::Wait* wait = nullptr) {
    return !order_ || order_->may_discard(page, order, wait);
  }
  void stop_discarding(const char* call, CUresult status);
  std::map<uint64_t, Block>::iterator find_fit(uint64_t size, bool small, uint64_t tag);
  // The free arena block that starts at the planned offset of this request, split off its free
  // block; blocks_.end() when the placement does not give one.
  std::map<uint64_t, Block>::iterator placed_fit(uint64_t size, uint64_t tag);
  CUresult new_slab(uint64_t size, bool small, const Context& context);
  // A slab the source made: one free block, free for every stream.
  void add_slab(uint64_t base, Slab slab);
  void place(std::map<uint64_t, Block>::iterator it, uint64_t size);
  // Returns the free block `it` ended up in.
  std::map<uint64_t, Block>::iterator mark_free(std::map<uint64_t, Block>::iterator it);
  std::map<uint64_t, Block>::iterator coalesce(std::map<uint64_t, Block>::iterator it);
  // Merges `right` (the block after `left`) into `left` when both are free, in one slab, and
  // merge_into allows it.
  bool absorb(std::map<uint64_t, Block>::iterator left, std::map<uint64_t, Block>::iterator right);
  bool merge_into(Block& into, const Block& other) const;
  void settle_events();
  void record_events_for_other_streams(uint64_t tag);
  void wait_for_all_events();
  void release_free_slabs();
  bool give_back_if_free(std::map<uint64_t, Slab>::iterator s);
  // With a placement: the large slabs that existed when it was set go once wholly free.
  void retire_replaced_slabs();
  EventRef record_event(CUstream stream);
  void index_free(uint64_t address, const Block& b);
  void unindex_free(uint64_t address, const Block& b);

  const DriverApi driver_;
  const SlabSource source_;
  mutable std::mutex mutex_;
  std::vector<CUevent> spare_events_;  // declared before the blocks: outlives every EventRef
  std::map<uint64_t, Slab> slabs_;     // by base
  std::map<uint64_t, Block> blocks_;   // by address, every slab's blocks
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_[2];  // (size, address); [small]
  uint64_t seq_ = 0;
  DiscardMode discard_mode_ = DiscardMode::off;
  DropOrder* order_ = nullptr;
  std::set<uint64_t> discarded_;           // discarded pages (2 MiB aligned) not handed out since
  std::vector<CUdeviceptr> range_starts_;  // scratch for the batched driver calls
  std::vector<size_t> range_sizes_;
  std::set<uint64_t> pending_;  // addresses of the free blocks that carry an event
  Placement placement_;
  uint64_t arena_ = 0;           // the arena's base; 0 without a placement
  size_t next_entry_ = 0;        // where the placement's sequence is expected to go on
  std::set<uint64_t> retiring_;  // bases of the large slabs the arena replaces, until given back
  SlabStats stats_;
};

}  // namespace umswap
