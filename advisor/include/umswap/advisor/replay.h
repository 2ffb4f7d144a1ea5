// Replay: planning from a recorded trace in a new process.
//
// Addresses differ between runs; identities do not. A trace buffer is matched to the live
// allocation with the same call site and size, and the same rank among allocations with that
// call site and size (allocation order). Launches are matched by position: launch g of this
// process is expected to run the kernel the trace's step g ran (past the end of the trace, the
// step at the same phase of the trace's period).
//
// Known imprecision: an allocation the trace does not list (never touched by a kernel in the
// recording) shifts the rank of later ones with the same call site and size; so does a freed
// allocation in this process. Such buffers stay unresolved (their actions are skipped and
// counted) or, rarely, resolve to a buffer of the same size and call site. The slabs umswap
// sub-allocates stream-ordered memory from are the common case: which slabs a run makes, and
// which blocks land in each, depends on when its placement began, so a recording that learned
// online and a replay that placed from the start differ (GPT-2 medium: 260 of 531 buffers found).
// When a replayed iteration skips a noticeable share of its bytes (replay_should_relearn), the
// advisor learns this process's own iteration while the replay plan runs and switches to that
// plan at an iteration boundary (advisor.h).
//
// Small slabs (is_small_slab) are found but never match: what each holds depends on the run's
// history. So replay leaves them out of the plan and resident (plan_input_from_trace).
//
// Thread safety: one ReplayMatcher is used by one thread (the advisor's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "umswap/advisor/planner.h"
#include "umswap/allocator/registry.h"
#include "umswap/core/trace.h"
#include "umswap/core/trace_iterations.h"

namespace umswap::advisor {

class ReplayMatcher {
 public:
  explicit ReplayMatcher(trace::Trace trace);

  const trace::Trace& trace() const { return trace_; }
  size_t buffer_count() const { return trace_.buffers.size(); }

  // The base address, in this process, of trace buffer `buffer`; 0 if no live allocation matches.
  uint64_t live_address(uint32_t buffer, const Registry& registry);
  // The same against an explicit list of live records (any order): pure, for tests.
  uint64_t live_address(uint32_t buffer, std::span<const BufferRecord> live);
  // Whether `address`, found for trace buffer `buffer` earlier, still holds a live allocation of
  // that identity starting there (not freed, nor replaced by another allocation at or around the
  // same address, which would take a range of the plan past its end).
  bool still_there(uint32_t buffer, uint64_t address, const Registry& registry) const;

  // Whether launch `index` of this process, with step key `key`, runs the kernel the trace
  // expects there. `name_of` gives the kernel name of a key of this process.
  bool matches(uint64_t index, uint32_t key, const std::function<std::string(uint32_t)>& name_of);

 private:
  using Identity = std::pair<uint64_t, uint64_t>;  // (call site, size)
  struct IdentityHash {
    size_t operator()(const Identity& i) const { return i.first * 31 + i.second; }
  };
  void index_live(std::span<const BufferRecord> live);

  trace::Trace trace_;
  std::vector<uint64_t> rank_;  // by trace buffer: rank among trace buffers of its identity
  const void* live_snapshot_ = nullptr;
  std::unordered_map<Identity, std::vector<uint64_t>, IdentityHash> live_;  // bases by rank
  std::unordered_map<uint32_t, uint32_t> key_to_name_;  // this process's key -> trace name index
};

// Whether a replayed iteration whose actions skipped `skipped_bytes` (buffers not found in this
// process) should be learned again from this process: 1% or more of the bytes the plan moves per
// iteration (prefetched plus evicted), and at least one byte. A plan that moves nothing relearns
// on any skipped byte.
bool replay_should_relearn(uint64_t skipped_bytes, const Plan& plan);

// Reads the trace; null with an error naming the file and the problem when it cannot be used
// (unreadable, no iterations found in it).
std::unique_ptr<ReplayMatcher> load_replay(const std::string& path, std::string* error);

// The iteration replay plans from: trace::replay_iteration (core/trace_iterations.h).
using trace::replay_iteration;

// Plans from the trace's last complete iteration (replay_iteration). `base` = the trace's first
// iteration's first step (phase 0), `period` its steps per iteration. False with `why` when the
// trace has no usable iteration or planning fails.
bool make_replay_plan(const ReplayMatcher& matcher, uint64_t budget, double prefetch_bytes_per_s,
                      double evict_bytes_per_s, Plan* plan, uint64_t* base, uint64_t* period,
                      std::string* why, bool lifetimes = true);

// Appends to in.lifetimes, at iteration-relative positions, the lifetimes (program order) logged
// after launch `first_step` up to the iteration's last launch (first_step + step_count - 1).
void append_lifetimes(std::span<const trace::Lifetime> lifetimes, uint64_t first_step,
                      uint64_t step_count, PlanInput& in);

// Whether a trace buffer is one of the slab allocator's small slabs (stream-ordered,
// SlabAllocator::kSmallSlab bytes): blocks of 1 MiB or less, given out first come first fit, so
// which small slab holds which block differs between a recording that learned online and a
// replay that placed from its start. A replayed plan's actions on them move the wrong data (a
// decoder LM's replay: about 1,000 faults an iteration, all in small slabs; H200, 2026-11-30).
bool is_small_slab(const trace::Buffer& b);

// The planner's input for iteration `iteration` of a trace (accesses as recorded; with
// `lifetimes`, the trace's slab lifetimes logged after the iteration's first launch up to its
// last). The small slabs the iteration touches are left out (their accesses and lifetimes) and
// their bytes taken from the budget, unless they add up to more than half of it; `resident`, if
// given, receives each one left out, whole: it stays on the GPU (Plan::resident_at_start).
PlanInput plan_input_from_trace(const trace::Trace& trace, size_t iteration, uint64_t budget,
                                bool lifetimes = true, std::vector<PlanRange>* resident = nullptr);

}  // namespace umswap::advisor
