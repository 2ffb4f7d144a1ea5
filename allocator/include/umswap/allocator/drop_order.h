// DropOrder: keeps the plain discards of dead 2 MiB pages (a free's and a sweep's
// cuMemDiscardBatchAsync, slab_allocator.h and torch_blocks.h) and the advisor's migrations
// (cuMemPrefetchAsync on its own stream) from running at the same time on the same page.
//
// Why: the driver leaves a discard that runs beside a prefetch of the same range undefined, and
// the advisor's stream is not ordered with the program's frees. bench/discard_race_probe.cu
// measured what happens (H200, 2026-12-01): data written after a discard was lost in 23 to 102 of
// 100-200 rounds while other streams migrated the same pages, none without them, and mostly when
// a migration ran beside the discard itself (docs/lab/2026-12-01-discards-racing-migrations.md).
//
// On the host the two sides share one lock, held across a discard call or the choice of a
// migration's pages. A page that an eviction (to the host) not yet seen finished covers, or a
// migration whose calls are still being made, is not discarded: it keeps its dead data (a copy
// the eviction makes: time, not correctness). A page that only prefetches (to the GPU) not yet
// seen finished cover is discarded, while the advisor allows waits (allow_waits(): while launches
// wait for its prefetches through its counter), after the discard's stream waits for the latest
// of their events (wait_for(); the migrations run in the order issued, on the advisor's one
// stream, so one wait covers them all, and one wait serves a whole discard): a free of a block
// follows its uses, whose launches already waited for those prefetches, so the wait is met when
// the stream gets there. Without it the page stayed resident past its free: the cnn's budget at
// 25% was held at 2.7-2.9x (H200, 2026-12-01). The program's stream never waits for an
// eviction, which the advisor's stream may reach much later, nor for anything once the waits are
// off (a wait on an event cannot be released by the watchdog), nor on a stream being captured.
// A migration leaves out the pages of discards not yet seen finished (dead pages: nothing to
// move; a block allocated there since is populated by its allocation or its launch, on its
// stream). "Seen finished": an event recorded after the call, on its stream, has completed.
//
// Not covered: a migration beside the first writes to a page whose discard has finished and
// which nothing populated (the probe lost data so once in 200 rounds): where a plan that does not
// match the program leaves the populate to a launch that never comes, for a PyTorch block
// allocated during a graph capture, after discarding stopped on a failed call.
// Not ordered: an allocation's populate (cuMemDiscardAndPrefetchBatchAsync to the GPU; the probe's
// populate mode lost nothing with migrations racing), the migrations the launch path issues on the
// program's own streams (ordered with the frees on those streams), UMSWAP_EVICT_COPY's discards.
//
// Threads: any. The discard side asks may_discard() for each candidate page (the first call takes
// this object's lock into the caller's `held`: a free with no candidate takes no lock), calls
// wait_for() with the Wait it filled, queues its discard and calls discarded(), all under
// that lock (taken inside its allocator's mutex: the lock order is allocator, then this). The
// migration side calls begin_migration() and, after its calls, end_migration(). Nothing here
// calls out but the driver functions below and allow_waits()'s function (under the lock).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace umswap {

class DropOrder {
 public:
  struct Driver {
    PFN_cuEventCreate_v2000 event_create = nullptr;
    PFN_cuEventRecord_v2000 event_record = nullptr;
    PFN_cuEventQuery_v2000 event_query = nullptr;
    PFN_cuStreamWaitEvent_v3020 stream_wait_event = nullptr;
    PFN_cuStreamIsCapturing_v10000 stream_is_capturing = nullptr;
    bool complete() const {
      return event_create && event_record && event_query && stream_wait_event &&
             stream_is_capturing;
    }
  };
  struct Stats {
    uint64_t pages_kept = 0;  // discards left out: a migration not seen finished covered them
    uint64_t kept_by_evictions = 0;  // of them, an eviction covered
    // Of those, the latest migration over the page an ended prefetch (the eviction before it on
    // the same stream: done once the prefetch is), or else an eviction or a call still made.
    uint64_t kept_prefetched_after = 0;
    uint64_t kept_eviction_last = 0;
    uint64_t pages_after_waits = 0;  // discarded after the stream waited for a prefetch
    uint64_t stream_waits = 0;       // the waits (cuStreamWaitEvent), one a discard at most
    uint64_t kept_capturing = 0;     // of pages_kept, on a stream being captured
    uint64_t migrations_cut = 0;     // migrations that left pages out
    uint64_t pages_left_out = 0;     // the pages they left out (a page counted once a migration)
    uint64_t event_failures = 0;     // events that could not be made or recorded
    bool stopped = false;            // after the first: no more discards
    uint64_t discards_pending = 0;   // now: discard calls not yet seen finished
    uint64_t migrations_pending = 0;
    uint64_t most_migrations_pending = 0;  // the most at once (a front never seen finished grows)
  };
  using Range = std::pair<uint64_t, uint64_t>;  // [first, second)

  explicit DropOrder(Driver d) : d_(d) {}
  // Events are left to the process's end (the context may be gone by then).
  DropOrder(const DropOrder&) = delete;
  DropOrder& operator=(const DropOrder&) = delete;

  // What one discard waits for before it is made: the latest prefetch event its pages asked for.
  struct Wait {
    CUstream stream = nullptr;  // the discard's
    CUevent event = nullptr;    // none: no wait
    uint64_t ticket = 0;
    int capturing = -1;  // the stream, asked once: -1 not yet, 0 no, 1 yes (or the query failed)
  };
  // The discard side. Whether the 2 MiB page at `page` may be discarded now; takes the lock into
  // `held` unless it holds it already. With `wait` (a free's discard), a page that only
  // prefetches not seen finished cover, their calls ended, may be discarded once the discard's
  // stream waits for `wait->event` (set to the latest such prefetch's), if waits are allowed and
  // the stream is not being captured.
  bool may_discard(uint64_t page, std::unique_lock<std::mutex>& held, Wait* wait = nullptr);
  // Under that lock, before the discard call: its stream waits for the event asked for, if any.
  // False: the wait failed, which stops the discards as an event failure does; discard nothing.
  bool wait_for(const Wait& wait);
  // Whether discards may wait for prefetches now (called under the lock; empty: never, the
  // default). The advisor sets it while launches wait on its counter, and clears it at its end.
  void allow_waits(std::function<bool()> allowed);
  // Under that lock: a discard of these ranges (whole pages) was just queued on `stream`. If no
  // event can be recorded after it, its pages stay out of every migration from then on
  // (event_failures). After any event failure, on either side, may_discard() refuses every page
  // (stopped): what is kept stays bounded, and discards are only ever a saving.
  void discarded(const std::vector<CUdeviceptr>& starts, const std::vector<size_t>& sizes,
                 CUstream stream);

  // The migration side. Fills `parts` with what of [address, address + length) may be migrated
  // now (whole pages left out) and returns a ticket: until end_migration(ticket, stream) and
  // the event it records, no page of the range is discarded.
  // `to_gpu`: a prefetch (a discard may wait for it), else an eviction.
  uint64_t begin_migration(uint64_t address, uint64_t length, bool to_gpu,
                           std::vector<Range>* parts);
  // If no event can be recorded, the migration is never seen finished (and the discards stop).
  // Once stopped, the ticket is 0: nothing to end.
  void end_migration(uint64_t ticket, CUstream stream);

  Stats stats() const;

 private:
  struct Discard {
    std::vector<Range> pages;  // whole pages, as the discard call had them
    CUevent done = nullptr;
  };
  struct Migration {
    Range pages;  // page-aligned, the whole range
    uint64_t ticket = 0;
    CUevent done = nullptr;  // none while its calls are being made
    bool ended = false;
    bool to_gpu = false;
  };

  CUevent take_event();
  void give_back(CUevent e) { spare_.push_back(e); }
  bool finished(CUevent e) const { return d_.event_query(e) == CUDA_SUCCESS; }
  void prune_migrations();
  void prune_discards();

  Driver d_;
  mutable std::mutex mutex_;
  std::deque<Migration> migrations_;  // in the order issued: one stream finishes them in order
  std::vector<Discard> discards_;     // from any stream: any order
  std::vector<CUevent> spare_;
  uint64_t next_ticket_ = 1;
  bool stopped_ = false;
  std::function<bool()> waits_allowed_;
  Stats stats_;
};

}  // namespace umswap
