// Engine vmm's windows from the plan (issue 38; docs/lab/2026-12-01-vmm-windows-from-the-plan.md,
// stages 1 and 3): one iteration of the program's steps, recorded with the ranges each reaches and
// the ranges allocated and released meanwhile, becomes a plan (plan_windows(): the planner's
// make_plan over segments of steps), and the plan a table of windows by position in the
// iteration (the phase): at each, the ranges to move out and in. VmmResidency runs the table.
//
// Range identity across iterations. A range allocated before the iteration began is itself (its
// address). One allocated during it is "the k-th allocation of an iteration" (its ordinal): in
// the next iteration the k-th allocation is taken for it, and before that allocation comes, the
// k-th of the iteration before (still live when the program keeps it across the boundary, an
// activation its backward pass frees). A stream-ordered allocator's training loop allocates the
// same sizes in the same order every iteration, so the ordinals hold; a mismatch only costs a
// move that finds no range (skipped, counted), never data: every move under engine vmm copies.
//
// Lifetimes for the planner: an ordinal allocated once and freed once in the iteration (its
// previous instance or itself) gets both events; any other stays live throughout (the plan then
// counts its room for the whole iteration: conservative).
//
// A step whose ranges together pass the budget is left out of the plan (no window brings them
// all in: it reaches them where they are), as VmmResidency does without a plan.
//
// IterationRecorder: no locking, one owner (VmmResidency, under its mutex). make_window_table()
// is pure; it throws what make_plan() throws (not for a recorder's own iteration).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace umswap {

// A range of a recorded iteration, as the table names it.
struct TableRange {
  uint64_t reserved = 0;
  bool local = false;       // allocated during the iteration: `ordinal` names it
  uint64_t ordinal = 0;     // the ordinal-th allocation of an iteration (local)
  CUdeviceptr address = 0;  // the range itself (not local)
};

struct PlannedMove {
  bool to_gpu = false;  // false: to the host
  uint32_t range = 0;   // into WindowTable::ranges
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct WindowTable {
  std::vector<uint32_t> keys;  // the step keys by phase (the iteration's length: keys.size())
  std::vector<TableRange> ranges;
  std::vector<uint32_t> window_phase;  // ascending: the phases whose window moves something
  std::vector<uint32_t> first_move;    // by window, into moves; one more at the end
  std::vector<PlannedMove> moves;      // by window: evictions first, then copies in, nearest first
  uint64_t bytes_in = 0;               // the plan's, an iteration
  uint64_t bytes_out = 0;
  uint32_t steps_left_out = 0;  // steps whose ranges pass the budget (not in the plan)
  // The phases at which each range is reached (those left out of the plan too), ascending:
  // use_phases[first_use[r], first_use[r + 1]).
  std::vector<uint32_t> first_use;
  std::vector<uint32_t> use_phases;
};

// Steps from `phase` (exclusive) to the next at which the table's range `r` is reached, counting
// on into the next iteration; 0 when no step reaches it.
uint32_t steps_to_next_use(const WindowTable& table, uint32_t r, uint32_t phase);

// One step of a recorded iteration: its key and the ranges it reaches (indices into ranges).
struct RecordedIteration {
  std::vector<uint32_t> keys;
  std::vector<uint32_t> first_range;  // by step, into step_ranges; one more at the end
  std::vector<uint32_t> step_ranges;
  std::vector<TableRange> ranges;
  struct Event {
    uint32_t phase = 0;  // before the step at this phase (keys.size(): after the last)
    bool freed = false;
    uint32_t range = 0;
  };
  std::vector<Event> lifetimes;       // in program order; only ranges with exactly one of each
  std::vector<uint64_t> allocations;  // the iteration's allocations' sizes, by ordinal
};

class IterationRecorder {
 public:
  // The next step begins an iteration. Returns the one that ended (from one begin() to this
  // one), when it has steps. Its ranges of the iteration before are named by their ordinals
  // there: the record means what it says only when that iteration allocated the same sizes
  // (RecordedIteration::allocations alike).
  std::optional<RecordedIteration> begin();
  void allocated(CUdeviceptr base, uint64_t reserved);
  void released(CUdeviceptr base);
  // `reserved`: each base's size, in the same order.
  void step(uint32_t key, std::span<const CUdeviceptr> bases, std::span<const uint64_t> reserved);

  // The range `r` of a table stands for now: the address, the current iteration's allocation of
  // its ordinal, else the previous iteration's while it is live; 0 when none is (or the size
  // differs).
  CUdeviceptr base_of(const TableRange& r) const;
  // Steps since the last begin(); the current step's phase is phase() - 1.
  uint64_t phase() const { return keys_.size(); }
  bool recording() const { return began_; }

 private:
  struct Instance {
    CUdeviceptr base = 0;  // 0: released
    uint64_t reserved = 0;
  };
  struct Where {
    bool current = false;  // the current iteration's allocation, else the previous one's
    uint64_t ordinal = 0;
  };
  uint32_t range_index(CUdeviceptr base, uint64_t reserved);
  std::optional<RecordedIteration> finish() const;

  bool began_ = false;
  std::vector<Instance> current_, previous_;     // by ordinal
  std::unordered_map<CUdeviceptr, Where> live_;  // local ranges of both iterations, live
  // The iteration being recorded.
  std::vector<uint32_t> keys_, first_range_, step_ranges_;
  std::vector<TableRange> ranges_;
  std::unordered_map<CUdeviceptr, uint32_t> persistent_index_;
  std::unordered_map<uint64_t, uint32_t> local_index_;  // by ordinal
  struct Event {
    uint32_t phase = 0;
    bool freed = false;
    uint64_t ordinal = 0;
  };
  std::vector<Event> events_;  // local ranges allocated and released, in program order
};

// The table for one recorded iteration under a pool of `budget` bytes whose moves go in pieces of
// `block` bytes (ChunkArena::block_bytes()), segments filled to `fill` of the budget.
WindowTable make_window_table(const RecordedIteration& it, uint64_t budget, uint64_t block,
                              double fill = 0.6);

}  // namespace umswap
