// VmmResidency: engine vmm's moves (issue 38). Every range is always mapped, so a kernel finds
// its data wherever it is; this part decides where it is. Moves happen only in windows: the
// program held (SubmissionHold) and the GPU drained, since a remap that races a kernel kills the
// context.
//
// Two kinds of window:
//   * From the plan. The caller says where iterations begin (an IterationDetector on the step
//     keys); an iteration as long as the detector's last also ends by itself (a boundary the
//     detector missed is not waited for). Each is recorded (vmm_plan.h: the ranges each step
//     reaches, the ranges allocated and released); once two in a row are alike (keys and
//     persistent ranges; allocations of the same sizes), the second becomes a table of windows
//     (plan_windows(): the planner over segments of steps): at the steps where a segment begins,
//     the ranges the plan moves out and in. From then on the table's length alone says where
//     iterations begin. While the keys keep matching, the table stays; an iteration in which more
//     than an eighth of them differ drops it, and the detector is followed again. A table is
//     there to take fewer windows: after its first iteration, one that takes more windows than
//     the latest four iterations without a table did on average drops it for good.
//   * For a step. A step that reaches a range with chunks on the host gets one: its ranges come
//     in. With a table in force the least recently used others go out. Without one, once the
//     steps repeat (the same kernels on the same ranges; the history of the last kHistory
//     steps, matched by key and ranges), the last period says when each range is used next: the
//     ranges used furthest ahead go out first (never one used before what it makes room for),
//     and the ranges the next eighth of the period uses come in, nearest first.
//     Then, with a table or without, while most of the program's allocations so far were
//     stream-ordered (set_mostly_ordered()): room for the allocations that follow. Ranges not used
//     within that eighth go out, in the same order (with a table or no period, least recently
//     used first), until an eighth of the pool, rounded down to whole blocks (none in a pool
//     under eight), is free, counting what set_spare() says as free. A new range that finds the
//     pool full is made on host chunks (a dear mapping) and needs a window of its own to come
//     in; a stream-ordered allocator (PyTorch's async backend) makes its tensors afresh every
//     iteration, most as new ranges. A caching allocator's segments (cudaMalloc) are made once and
//     hold many live tensors: with the room its rows moved 6-47% more bytes (the vmm matrix's
//     default-allocator rows at 50%, run 202 against run 198), so it gets none, whatever a
//     library allocates stream-ordered now and then.
// An access no plan foresaw is slower, never wrong: the range is reached over the link.
//
// A range allocated since the latest step entered (and since the latest work the tracer could
// not see into: unseen_work()) holds nothing anyone wrote: no step, and no other GPU work, has
// been submitted since it was made. The window of the step that enters next moves such ranges,
// its own or not, without a copy (ChunkArena's Contents::undefined): the freshly made outputs
// of a step that the full pool put on the host come in by remapping alone. No plan is trusted
// for it: any step's entry, whatever it reaches, ends it. What it does trust: every write to a
// range goes through a call the tracer sees after the range was made (kernels, copies, memsets,
// memory operations are steps; graph launches, host functions and the deprecated launches are
// opaque calls; VmmObserver calls unseen_work() at the first step it sees, for what came before
// the tracer). Not covered: a kernel already running or queued that takes pointers the CPU
// writes into host memory after it was launched (a persistent kernel fed through mapped memory):
// it would write a range the residency takes for unwritten.
//
// Contract:
//   * allocated(base, slab): the arena handed out a range (VmmAllocator::allocate_range, slabs
//     included; a kept range handed out again too); any thread; waits for a window in progress.
//     Only ranges announced so, and not forgotten since, are this part's: a range the allocator
//     keeps mapped after its free is the arena's still, and no window moves it. A `slab` (a range
//     for small allocations, vmm_small.h) is named by its address in the iteration's record, not
//     as one of its allocations: when a slab is made depends on which shares the frees gave back
//     by then, so counted as one it made two iterations' allocations differ (GPT-2 small under
//     PyTorch's async backend: 974 and 975 in turn, and no table was ever made, run 224).
//   * touch(key, bases, begins_iteration): at every step's entry, in launch order (the tracer
//     serializes steps), with the step's key (its kernel's name), the bases of the ranges it
//     reaches and whether the caller's detector says it begins an iteration: records the step; true
//     when a window is wanted: the table has one at this step, or one of those ranges has chunks on
//     the host and a window could bring them in (a step whose same ranges were left short by the
//     last window, with nothing freed since, gets no window for itself: the pool cannot hold them;
//     nor does a step whose ranges together are larger than the whole pool: it reaches them where
//     they are).
//   * make_resident(bases, stream): only inside a window (no program work running or submitted on
//     the device), right after the touch() of the same step that returned true: the table's
//     moves, then the step's own ranges if touch() wanted them. What does not fit stays on the host
//     (correct, reached over the link) and counts as bytes short. Copies go on `stream`; each move
//     waits for its copies.
//   * unseen_work(): GPU work was submitted that is no step (a graph launch, a host function):
//     no range allocated before it counts as unwritten. Any thread.
//   * forget(base): the range at `base` is about to be released (VmmAllocator::release_memory
//     calls it before the arena's release, so that no allocation at the same address comes
//     between); any thread.
//   * alias(address, range) / unalias(address): a small allocation at `address` lives in the
//     range at `range` (a slab of vmm_small.h); a step reaching it reaches that range, until
//     unalias() at its free. Any thread.
//   * set_reclaim(reclaim): before a window evicts a live range, or brings one in, for room on
//     the GPU, it calls `reclaim` while the range does not fit: each call gives GPU chunks back
//     from memory no range of the residency holds (VmmAllocator's kept ranges) and says whether it
//     did. Set once, before any other call; called under this part's lock.
//   * set_spare(spare): `spare` says how many GPU bytes memory no range of the residency holds
//     would give back (VmmAllocator's kept ranges), counted as free room. As set_reclaim().
//   * set_mostly_ordered(mostly): `mostly` says whether most of the program's allocations so far
//     were stream-ordered (VmmAllocator's counts by API); without it, no room. As set_reclaim().
//   * Bases that are neither announced ranges nor aliases are ignored. Never throws but
//     std::bad_alloc.
// Thread safety: every member may be called from any thread (one mutex, held across a window's
// moves; allocated() and forget() wait for it; alias() and unalias() do not).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "umswap/allocator/vmm_plan.h"
#include "umswap/vmm/chunk_arena.h"

namespace umswap {

struct ResidencyStats {
  uint64_t steps_held = 0;         // steps that got a window (make_resident calls)
  uint64_t steps_left_short = 0;   // steps touch() wanted no window for: their ranges could not fit
  uint64_t steps_too_large = 0;    // of them, steps whose ranges together pass the whole pool
  uint64_t plans = 0;              // tables of windows made (vmm_plan.h)
  uint64_t plans_dropped = 0;      // tables that took more windows than the residency alone
  uint64_t own_period = 0;         // the steps' own period, for windows without a table (0: none)
  uint64_t windows_predicted = 0;  // windows without a table that knew that period
  uint64_t period = 0;             // steps an iteration of the table in force (0: none)
  uint64_t windows_from_plan = 0;  // of the windows, those the table asked for
  uint64_t plan_moves_skipped = 0;  // the table's moves whose range was not live
  uint64_t ranges_restored = 0;     // restores made for the step itself (whole or partial)
  uint64_t ranges_prefetched = 0;   // restores ahead of use (the table's, or the period's)
  uint64_t ranges_evicted = 0;
  uint64_t ranges_evicted_for_room = 0;  // of them, for the allocations that follow a window
  uint64_t bytes_short = 0;       // bytes windows could not bring onto the GPU for their step
  uint64_t move_failures = 0;     // moves that failed for another reason than a full pool
  uint64_t ranges_unwritten = 0;  // ranges moved with no copy: nothing had written them
};

class VmmResidency {
 public:
  explicit VmmResidency(vmm::ChunkArena& arena);
  VmmResidency(const VmmResidency&) = delete;
  VmmResidency& operator=(const VmmResidency&) = delete;

  void allocated(CUdeviceptr base, bool slab = false);
  void alias(CUdeviceptr address, CUdeviceptr range);
  void unalias(CUdeviceptr address);
  bool touch(uint32_t key, std::span<const CUdeviceptr> bases, bool begins_iteration);
  void make_resident(std::span<const CUdeviceptr> bases, CUstream stream);
  void unseen_work();
  void forget(CUdeviceptr base);
  // Releases the free GPU chunks past the pool's limit (the pool shrank: ChunkArena::
  // set_gpu_limit_bytes). Under this lock, so no move is between its stage and its commit;
  // make_resident() does it too, at its end. Any thread.
  void trim_to_pool();
  void set_reclaim(std::function<bool()> reclaim) { reclaim_ = std::move(reclaim); }
  void set_spare(std::function<uint64_t()> spare) { spare_ = std::move(spare); }
  void set_mostly_ordered(std::function<bool()> mostly) { mostly_ordered_ = std::move(mostly); }
  ResidencyStats stats() const;

  // Steps remembered: periods up to half of it are found.
  static constexpr uint64_t kHistory = uint64_t{1} << 17;

 private:
  struct Entry {
    uint64_t last_use = 0;
    uint64_t reserved = 0;
    bool whole_on_gpu = false;  // as of the last look (only this part moves a live range)
  };
  struct Step {
    uint64_t key = 0;     // the kernel (or copy) alone
    uint64_t symbol = 0;  // the key and the ranges, mixed: equal steps of two iterations match
    std::vector<CUdeviceptr> bases;
    std::vector<uint64_t> ids;  // id_of() each base when the step entered
  };
  static uint64_t key_of(std::span<const CUdeviceptr> bases);
  // A range's identity in the history: its base and which allocation made it (a range released
  // and made again at the same address, as VmmAllocator's kept ranges are, is another range).
  uint64_t id_of(CUdeviceptr base) const;
  // The bases with each alias replaced by its range, each once (canon_, or `given` itself).
  std::span<const CUdeviceptr> canonical(std::span<const CUdeviceptr> given);
  // Two recorded iterations are the same loop's: keys and persistent ranges alike.
  static bool similar(const RecordedIteration& a, const RecordedIteration& b);
  void begin_iteration();
  void drop_table();  // the table and the iteration recorded before it go
  void count_failure(const vmm::Moved& moved);
  void run_planned_window(CUstream stream);
  const Step& step_at(uint64_t n) const { return history_[n % kHistory]; }
  bool period_holds(uint64_t period) const;
  void find_period();
  // Next uses from the last iteration: distance in steps from the current one, for every range
  // the coming period's steps reach (the current step's own: 0).
  void predict(std::span<const CUdeviceptr> bases);
  // With a table in force: the next use of every live range the table names, from its record of
  // the iteration (the current step's own: 0).
  void predict_from_table(std::span<const CUdeviceptr> bases);
  // Brings the range `info` describes (looked at just before) onto the GPU; false when nothing
  // was tried (already there, or ahead with no room).
  bool restore(const vmm::RangeInfo& info, CUstream stream, bool partial_ok, uint64_t* short_bytes);
  // Moves [address, address + length) of the range at `base`, with no copy when the range is
  // unwritten (counted when bytes moved so); counts a failure.
  vmm::Moved move_range(CUdeviceptr base, CUdeviceptr address, uint64_t length, bool to_gpu,
                        CUstream stream);
  void note(CUdeviceptr base);  // its entry's whole_on_gpu as the arena says now
  // Whether the range at `base` fits on the GPU, after reclaim_ has given back what it can.
  bool room_for(CUdeviceptr base);

  vmm::ChunkArena& arena_;
  std::function<bool()> reclaim_;
  std::function<uint64_t()> spare_;
  std::function<bool()> mostly_ordered_;
  mutable std::mutex mutex_;
  std::unordered_map<CUdeviceptr, Entry> entries_;
  std::unordered_map<CUdeviceptr, uint64_t> made_;  // live range -> its allocation's number
  uint64_t ranges_made_ = 0;
  // Small allocation -> its slab's range. Under alias_mutex_ alone (taken after mutex_ when
  // both are), so that allocations and frees never wait for a window.
  std::mutex alias_mutex_;
  std::unordered_map<CUdeviceptr, CUdeviceptr> alias_;
  std::vector<CUdeviceptr> canon_;  // canonical()'s answer, under mutex_
  std::vector<Step> history_;
  uint64_t period_ = 0;     // the steps' own period (0: none found), for windows without a table
  uint64_t steps_ = 0;      // steps recorded; the current one is steps_ - 1
  uint64_t short_key_ = 0;  // the bases of the last window that left bytes short; 0: none
  IterationRecorder recorder_;
  std::optional<RecordedIteration> last_;  // the iteration recorded before, while no table
  bool detected_ = false;                  // the caller's detector said an iteration began
  uint64_t detected_at_ = 0;               // at this step
  uint64_t detected_length_ = 0;           // steps from the one it said before (0: none)
  std::optional<WindowTable> table_;
  size_t next_window_ = 0;                  // the table's next window, by phase
  std::optional<size_t> planned_;           // the table's window at the current step
  uint64_t mismatches_ = 0;                 // steps of this iteration whose key is not the table's
  uint64_t windows_now_ = 0;                // windows of the iteration in progress
  bool begun_ = false;                      // an iteration has begun
  uint64_t planned_iterations_ = 0;         // iterations ended with the table in force
  std::deque<uint64_t> unplanned_windows_;  // windows of the latest iterations without a table
  bool tables_off_ = false;                 // a table was dropped for its windows: none again
  bool own_wanted_ = false;                 // touch() wanted a window for the step's own ranges
  // Ranges allocated since the latest step entry or unseen work; and those the current step's
  // window found so (unwritten: moved with no copy).
  std::unordered_set<CUdeviceptr> fresh_;
  std::unordered_set<CUdeviceptr> unwritten_;
  // Scratch of touch() and make_resident(), keeping its capacity.
  std::vector<uint64_t> reserved_;
  std::unordered_map<CUdeviceptr, uint64_t> next_;
  std::vector<CUdeviceptr> victims_;
  std::vector<std::pair<uint64_t, CUdeviceptr>> wanted_;
  ResidencyStats stats_;
};

}  // namespace umswap
