// The placement's hand-off (docs/advisor.md, "Placement"): a placement of an iteration's large
// slab blocks, made from the block events the tracer logged (online) or from the trace's
// (replay), waits until the program reaches an iteration boundary, then goes to the allocator
// (AdvisorConfig::place), which expects the iteration's sequence of blocks from its start. When
// there is none, note() says why.
//
// Online, a placement is tried before the first plan: the iteration is placed, then learned
// again at its new addresses. A plan that ends on the period the placement came from (an inner
// loop taken for the iteration) lets the next one try again, at most kAttempts times in all.
//
// Threads: the advisor thread only; handed(), note() and stats_json() after it has joined.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "umswap/allocator/placement.h"
#include "umswap/core/trace.h"

namespace umswap::advisor {

class PlacementHandOff {
 public:
  static constexpr int kAttempts = 4;

  // `place` hands a placement to the allocator (false: it refused); it outlives this and may be
  // empty until the first call below.
  explicit PlacementHandOff(const std::function<bool(Placement)>& place) : place_(place) {}

  // Online: whether learning should try a placement of the iteration first.
  bool may_try() const { return !tried_; }
  // Online: a placement of the iteration [first, first + period) from `blocks` (the block events
  // of it and the iteration before), handed over at hand_at()'s launch. False when there is none
  // (the note says why); an attempt either way. `stop` ends the placement's local search early
  // (plan_placement()): online, before the program reaches the boundary it would be handed at.
  bool try_learned(std::span<const BlockEvent> blocks, uint64_t first, uint64_t period,
                   const std::function<bool()>& stop = {});
  // The launch at which an online placement's local search stops: a quarter of an iteration
  // before the boundary it would be handed at, the next one at or after `seen` (iterations of
  // `period` launches from `base`), or the one after when less than half an iteration is left.
  // A search longer than the program's iteration would otherwise cost a learning iteration (the
  // correctness matrix's EmbeddingBag: 2.4 s for 152 blocks, handed one iteration later, for
  // 0.6% of the page peak). It never hands later than a whole search would: it ends a search
  // still running a quarter of an iteration before the boundary (with fewer than 4 launches an
  // iteration, at the boundary). `seen` itself for a period of 0.
  static uint64_t search_deadline(uint64_t base, uint64_t period, uint64_t seen);
  // Replay: the placement the trace's process had in the iteration the plan comes from
  // (recorded_placement: its arena and each block's offset, as recorded, so that the plan's
  // addresses in the arena hold here too); handed over at hand_at()'s launch. Placement is not
  // tried online after it.
  void from_trace(const trace::Trace& t);
  // The launch at which the pending placement is handed: the first iteration boundary at or
  // after the launch it was made at (asked once it is made: making one can take a second).
  void hand_at(uint64_t at) { place_at_ = at; }
  // Placement is not tried again (a replay plan replaced: the arena came from the trace).
  void settle() { tried_ = true; }
  // A plan of `period` learned online ended: if the placement came from an iteration of that
  // period (an inner loop's blocks), the next plan learned places again.
  void plan_ended(uint64_t period);

  bool pending() const { return pending_.has_value(); }
  // At launch `n`: a pending placement goes to the allocator once n reaches its launch. True
  // when it was handed.
  bool tend(uint64_t n);
  // The launch to learn again from after the hand-off: the first placed iteration. The blocks
  // it allocated before the advisor thread handed the placement over, and those the iteration
  // before allocated and it frees (gradients), are in the old slabs, so its plan names their old
  // addresses: the relearning once planned (check_relearn) corrects them. Learning from the
  // iteration after it, as before, put the first plan in force one iteration later.
  uint64_t learn_again_from() const { return place_at_; }
  // The period of the iteration an online placement was handed for, until learned() (0 when
  // there is none): learning plans the first placed iteration with it
  // (OnlineLearning::placed_iteration()), since pointers no longer tell its loops apart.
  uint64_t placed_period() const { return learn_placed_ && !pending_ ? period_ : 0; }
  void learned() { learn_placed_ = false; }

  const std::optional<Placement>& handed() const { return handed_; }
  const std::string& note() const { return note_; }
  // The stats file's advisor.placement: the handed placement, or why there is none (null when
  // nothing was tried).
  nlohmann::json stats_json() const;

 private:
  std::optional<Placement> make(std::span<const BlockEvent> blocks, uint64_t start, uint64_t period,
                                const std::function<bool()>& stop);
  bool hand(Placement p);

  const std::function<bool(Placement)>& place_;
  bool tried_ = false;
  int attempts_ = 0;
  uint64_t period_ = 0;  // of the iteration the placement came from
  std::optional<Placement> handed_;
  std::string note_;
  std::optional<Placement> pending_;
  uint64_t place_at_ = 0;  // an iteration boundary
  // The placement pending or handed was learned online (not from a trace), and its iteration
  // has not been learned again since.
  bool learn_placed_ = false;
};

// The placement a trace's iteration ran under: its arena (the buffer of
// ManagedAllocator::kArenaSite its blocks were allocated in) and, for each block of more than
// `min_bytes` it allocates, in order, the block's offset in that arena (kUnplaced for one
// allocated elsewhere), with the arena's live and page peaks in the iteration. Read, not planned
// again: a placement planned anew from the same events could differ (its local search is
// bounded) and would take up to a second. Nullopt (why says so) when the iteration allocates
// nothing in an arena.
std::optional<Placement> recorded_placement(const trace::Trace& t, size_t iteration,
                                            uint64_t min_bytes, std::string* why);

}  // namespace umswap::advisor
