// Planner: see umswap/advisor/planner.h for the contract and the algorithm. The iteration as
// blocks is planner_trace.cpp's, simulate() planner_simulate.cpp's.
#include "umswap/advisor/planner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "planner_trace.h"

namespace umswap::advisor {

using namespace planner_detail;

namespace {

constexpr double kUnknownStepSeconds = 10e-6;
constexpr int kMinIterations = 8;       // MIN iterations from an empty GPU before giving up
constexpr size_t kCycleCandidates = 4;  // boundary states tried when MIN cycles
// Trials (one MIN iteration each) when MIN cycles: at least 4, else ~4M block-uses of work.
constexpr uint64_t kMinTrials = 4;
constexpr uint64_t kTrialWork = uint64_t{1} << 22;
// MIN's priority bit for a block entering a dead gap: evicted before every live one.
constexpr uint64_t kDeadKey = uint64_t{1} << 62;

// ---- Phase 1: which gaps stay resident (Belady's MIN on the repeating sequence) ---------------

// MIN over one iteration at a time. Priorities are 2 * (absolute time of next use), so that a
// block that must be resident at the end of a constrained iteration can be keyed just before it.
class Belady {
 public:
  Belady(const Trace& tr, uint64_t capacity)
      : tr_(tr),
        capacity_(capacity),
        resident_(tr.blocks(), 0),
        key_(tr.blocks(), 0),
        last_evict_(tr.blocks(), 0),
        in_end_(tr.blocks(), 0),
        missed_(tr.uses(), 0) {}

  // Starts from `start` (block ids); with `constrained`, the iteration must end with `start`
  // resident again (end_iteration() loads what is missing).
  void reset(const std::vector<uint32_t>& start, bool constrained) {
    std::fill(resident_.begin(), resident_.end(), 0);
    std::fill(last_evict_.begin(), last_evict_.end(), 0);
    std::fill(in_end_.begin(), in_end_.end(), 0);
    constrained_ = constrained;
    resident_bytes_ = 0;
    for (uint32_t b : start) {
      resident_[b] = 1;
      resident_bytes_ += tr_.block_bytes[b];
      key_[b] = 2 * uint64_t{tr_.first_use_step(b)};
      if (constrained) in_end_[b] = 1;
    }
    rebuild_heap();
  }

  // Runs the iteration that starts at absolute time `base` (a multiple of S).
  void run_iteration(uint64_t base) {
    base_ = base;
    const uint64_t S = tr_.steps;
    for (uint64_t t = 0; t < S; ++t) {
      const uint64_t now = base + t;
      const uint64_t lo = tr_.step_begin[t], hi = tr_.step_begin[t + 1];
      uint64_t need = 0;
      for (uint64_t j = lo; j < hi; ++j) {
        const uint32_t b = tr_.use_block[j];
        if (!resident_[b]) {
          need += tr_.block_bytes[b];
        } else if (key_[b] >= kDeadKey) {  // needed now: no longer a dead block to evict first
          key_[b] = 2 * now;
          heap_.push_back({key_[b], b});
          std::push_heap(heap_.begin(), heap_.end());
        }
      }
      // Also trims back to the budget after a step that did not fit.
      make_room(need, 2 * now, now);
      for (uint64_t j = lo; j < hi; ++j) {
        const uint32_t b = tr_.use_block[j];
        missed_[j] = !resident_[b];
        if (!resident_[b]) {
          resident_[b] = 1;
          resident_bytes_ += tr_.block_bytes[b];
        }
        const uint64_t next = now + tr_.next_dist[j];
        if (constrained_ && in_end_[b] && next >= base + S) {
          key_[b] = 2 * (base + S) - 1;
        } else {
          key_[b] = (tr_.dead_after(j) ? kDeadKey : 0) | (2 * next);
        }
        heap_.push_back({key_[b], b});
        std::push_heap(heap_.begin(), heap_.end());
      }
    }
    if (constrained_) {
      // The blocks the iteration started with must be back (loads at the boundary).
      uint64_t need = 0;
      for (uint32_t b = 0; b < tr_.blocks(); ++b) {
        if (in_end_[b] && !resident_[b]) need += tr_.block_bytes[b];
      }
      make_room(need, 2 * (base + S) - 1, base + S);
      for (uint32_t b = 0; b < tr_.blocks(); ++b) {
        if (in_end_[b] && !resident_[b]) {
          resident_[b] = 1;
          resident_bytes_ += tr_.block_bytes[b];
        }
      }
    }
    rebuild_heap();
  }

  std::vector<uint32_t> resident_set() const {
    std::vector<uint32_t> out;
    for (uint32_t b = 0; b < tr_.blocks(); ++b) {
      if (resident_[b]) out.push_back(b);
    }
    return out;
  }

  // For the iteration just run: nonkept[j] = the gap that ends at use j was not resident
  // throughout (the block was evicted and loaded again). A gap across the iteration boundary is
  // not kept if its block was missing at its first use or evicted after its last use.
  void gaps_not_kept(std::vector<uint8_t>& nonkept) const {
    nonkept.assign(missed_.begin(), missed_.end());
    for (uint32_t b = 0; b < tr_.blocks(); ++b) {
      // last_evict_ holds time + 1 (0 = never).
      if (last_evict_[b] > base_ + tr_.last_use_step(b) + 1) {
        nonkept[tr_.block_uses[tr_.block_begin[b]]] = 1;
      }
    }
  }

 private:
  struct Entry {
    uint64_t key;
    uint32_t block;
    bool operator<(const Entry& o) const { return key != o.key ? key < o.key : block < o.block; }
  };

  // Evicts the resident blocks used furthest away (priority above `keep_at_or_below`) at time
  // `now` until `need` more bytes fit, or none is left.
  void make_room(uint64_t need, uint64_t keep_at_or_below, uint64_t now) {
    while (resident_bytes_ + need > capacity_ && !heap_.empty()) {
      const Entry top = heap_.front();
      if (!resident_[top.block] || key_[top.block] != top.key) {
        std::pop_heap(heap_.begin(), heap_.end());
        heap_.pop_back();
        continue;
      }
      if (top.key <= keep_at_or_below) break;
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
      resident_[top.block] = 0;
      resident_bytes_ -= tr_.block_bytes[top.block];
      last_evict_[top.block] = now + 1;
    }
  }

  void rebuild_heap() {
    heap_.clear();
    for (uint32_t b = 0; b < tr_.blocks(); ++b) {
      if (resident_[b]) heap_.push_back({key_[b], b});
    }
    std::make_heap(heap_.begin(), heap_.end());
  }

  const Trace& tr_;
  uint64_t capacity_;
  std::vector<uint8_t> resident_;
  std::vector<uint64_t> key_;
  std::vector<uint64_t> last_evict_;
  std::vector<uint8_t> in_end_;
  std::vector<uint8_t> missed_;
  std::vector<Entry> heap_;
  uint64_t resident_bytes_ = 0;
  uint64_t base_ = 0;
  bool constrained_ = false;
};

uint64_t nonkept_bytes(const Trace& tr, const std::vector<uint8_t>& nonkept) {
  uint64_t bytes = 0;
  for (uint64_t j = 0; j < tr.uses(); ++j) {
    if (nonkept[j] && !tr.dead[j] && tr.prev_dist[j] >= 2) bytes += tr.block_bytes[tr.use_block[j]];
  }
  return bytes;
}

// nonkept[j] for the gap ending at each use j of a self-consistent one-iteration schedule.
std::vector<uint8_t> choose_gaps(const Trace& tr, uint64_t capacity) {
  std::vector<uint8_t> nonkept;
  if (tr.footprint <= capacity) {
    nonkept.assign(tr.uses(), 0);
    return nonkept;
  }
  Belady belady(tr, capacity);
  std::vector<std::vector<uint32_t>> states{{}};  // at iteration boundaries
  belady.reset(states.back(), false);
  size_t cycle_start = 0, cycle_end = 0;  // candidate states [cycle_start, cycle_end)
  for (int k = 0; k < kMinIterations; ++k) {
    belady.run_iteration(static_cast<uint64_t>(k) * tr.steps);
    std::vector<uint32_t> state = belady.resident_set();
    if (state == states.back()) {  // this iteration started and ended with the same contents
      belady.gaps_not_kept(nonkept);
      return nonkept;
    }
    const auto seen =
        static_cast<size_t>(std::find(states.begin(), states.end(), state) - states.begin());
    states.push_back(std::move(state));
    cycle_end = states.size() - (seen < states.size() - 1 ? 1 : 0);
    cycle_start = seen < states.size() - 1 ? seen : 0;
    if (seen < states.size() - 1) break;
  }
  cycle_start = std::max(cycle_start,
                         cycle_end > kCycleCandidates ? cycle_end - kCycleCandidates : size_t{0});
  // MIN cycles over several iterations (or did not settle). A one-iteration schedule needs one
  // state at the boundary: try each of the cycle's states as the state every iteration starts and
  // ends with (MIN is optimal for a fixed start and end), then mix them: swap a block that not all
  // of them hold for one that another holds while that makes the iteration cheaper. As many
  // trials (one MIN iteration each) as a work budget allows.
  const uint64_t max_trials =
      std::max<uint64_t>(kMinTrials, kTrialWork / std::max<uint64_t>(tr.uses(), 1));
  uint64_t trials = 0;
  uint64_t best = std::numeric_limits<uint64_t>::max();
  std::vector<uint32_t> current;
  std::vector<uint8_t> trial;
  auto try_state = [&](const std::vector<uint32_t>& start) {
    ++trials;
    belady.reset(start, true);
    belady.run_iteration(0);
    belady.gaps_not_kept(trial);
    const uint64_t bytes = nonkept_bytes(tr, trial);
    if (bytes >= best) return false;
    best = bytes;
    nonkept.swap(trial);
    current = start;
    return true;
  };
  std::vector<uint32_t> holders(tr.blocks(), 0);  // how many of the cycle's states hold a block
  for (size_t i = cycle_start; i < cycle_end; ++i) {
    for (uint32_t b : states[i]) ++holders[b];
    if (trials < max_trials) try_state(states[i]);
  }
  const auto cycle_states = static_cast<uint32_t>(cycle_end - cycle_start);
  std::vector<uint32_t> pool;  // blocks some state of the cycle holds
  for (uint32_t b = 0; b < tr.blocks(); ++b) {
    if (holders[b] > 0) pool.push_back(b);
  }
  uint64_t looked_at = 0;  // candidates, tried or not: bounded too
  for (bool improved = true; improved && trials < max_trials;) {
    improved = false;
    std::vector<uint8_t> held(tr.blocks(), 0);
    uint64_t bytes = 0;
    for (uint32_t b : current) {
      held[b] = 1;
      bytes += tr.block_bytes[b];
    }
    const uint64_t limit = std::max(capacity, bytes);
    const std::vector<uint32_t> from = current;
    for (size_t xi = 0; xi < from.size() && !improved && trials < max_trials; ++xi) {
      const uint32_t x = from[xi];
      if (holders[x] == cycle_states) continue;
      for (size_t yi = 0; yi < pool.size() && !improved && trials < max_trials; ++yi) {
        const uint32_t y = pool[yi];
        if (held[y]) continue;
        if (++looked_at > kTrialWork) return nonkept;
        if (bytes - tr.block_bytes[x] + tr.block_bytes[y] > limit) continue;
        std::vector<uint32_t> mixed = from;
        mixed[xi] = y;
        std::sort(mixed.begin(), mixed.end());
        improved = try_state(mixed);
      }
    }
  }
  return nonkept;
}

// ---- Phase 2: when data moves -----------------------------------------------------------------

// Two int64 values per point with range add, range min, and "rightmost point below".
class RoomTree {
 public:
  RoomTree(const std::vector<int64_t>& a, int64_t b) : n_(a.size()) {
    size_ = 1;
    while (size_ < n_) size_ *= 2;
    const int64_t inf = std::numeric_limits<int64_t>::max() / 4;
    min_a_.assign(2 * size_, inf);
    min_b_.assign(2 * size_, inf);
    add_a_.assign(2 * size_, 0);
    add_b_.assign(2 * size_, 0);
    for (size_t i = 0; i < n_; ++i) {
      min_a_[size_ + i] = a[i];
      min_b_[size_ + i] = b;
    }
    for (size_t i = size_ - 1; i >= 1; --i) pull(i);
  }

  void add(size_t l, size_t r, int64_t da, int64_t db) { add(1, 0, size_ - 1, l, r, da, db); }
  int64_t min_a(size_t l, size_t r) const { return min_a(1, 0, size_ - 1, l, r); }
  int64_t min_a_all() const { return min_a_[1]; }
  // The largest i in [l, r] with a[i] < xa or b[i] < xb, or npos.
  size_t rightmost_below(size_t l, size_t r, int64_t xa, int64_t xb) const {
    return rightmost(1, 0, size_ - 1, l, r, xa, xb);
  }
  static constexpr size_t npos = std::numeric_limits<size_t>::max();

 private:
  void pull(size_t i) {
    min_a_[i] = std::min(min_a_[2 * i], min_a_[2 * i + 1]) + add_a_[i];
    min_b_[i] = std::min(min_b_[2 * i], min_b_[2 * i + 1]) + add_b_[i];
  }
  void add(size_t i, size_t nl, size_t nr, size_t l, size_t r, int64_t da, int64_t db) {
    if (r < nl || nr < l) return;
    if (l <= nl && nr <= r) {
      min_a_[i] += da;
      min_b_[i] += db;
      add_a_[i] += da;
      add_b_[i] += db;
      return;
    }
    const size_t mid = (nl + nr) / 2;
    add(2 * i, nl, mid, l, r, da, db);
    add(2 * i + 1, mid + 1, nr, l, r, da, db);
    pull(i);
  }
  int64_t min_a(size_t i, size_t nl, size_t nr, size_t l, size_t r) const {
    if (r < nl || nr < l) return std::numeric_limits<int64_t>::max() / 2;
    if (l <= nl && nr <= r) return min_a_[i];
    const size_t mid = (nl + nr) / 2;
    return std::min(min_a(2 * i, nl, mid, l, r), min_a(2 * i + 1, mid + 1, nr, l, r)) + add_a_[i];
  }
  // xa, xb are relative to the adds above node i.
  size_t rightmost(size_t i, size_t nl, size_t nr, size_t l, size_t r, int64_t xa,
                   int64_t xb) const {
    if (r < nl || nr < l || (min_a_[i] >= xa && min_b_[i] >= xb)) return npos;
    if (nl == nr) return nl;
    const size_t mid = (nl + nr) / 2;
    const size_t right = rightmost(2 * i + 1, mid + 1, nr, l, r, xa - add_a_[i], xb - add_b_[i]);
    if (right != npos) return right;
    return rightmost(2 * i, nl, mid, l, r, xa - add_a_[i], xb - add_b_[i]);
  }

  size_t n_, size_;
  std::vector<int64_t> min_a_, min_b_, add_a_, add_b_;
};

// The room tree on the circle of S steps, addressed with unrolled step numbers >= 0; a range is
// shorter than S.
class CyclicRoom {
 public:
  CyclicRoom(const std::vector<int64_t>& free, int64_t inflight_room)
      : s_(free.size()), tree_(free, inflight_room) {}

  void add(uint64_t l, uint64_t r, int64_t da, int64_t db) {
    const size_t a = l % s_, b = r % s_;
    if (a <= b) {
      tree_.add(a, b, da, db);
    } else {
      tree_.add(a, s_ - 1, da, db);
      tree_.add(0, b, da, db);
    }
  }
  int64_t min_free(uint64_t l, uint64_t r) const {
    const size_t a = l % s_, b = r % s_;
    if (a <= b) return tree_.min_a(a, b);
    return std::min(tree_.min_a(a, s_ - 1), tree_.min_a(0, b));
  }
  int64_t min_free_all() const { return tree_.min_a_all(); }
  // The last unrolled step in [l, r] where `bytes` do not fit, or l - 1 if none; in_flight:
  // within the room for bytes in flight too (a prefetch), not only the budget's.
  uint64_t last_unfit(uint64_t l, uint64_t r, int64_t bytes, bool in_flight = true) const {
    // Far below any room: never the reason a step is unfit (and no overflow when the tree
    // subtracts its pending adds).
    const int64_t xb = in_flight ? bytes : -(int64_t{1} << 62);
    const size_t a = l % s_, b = r % s_;
    if (a <= b) {
      const size_t i = tree_.rightmost_below(a, b, bytes, xb);
      return i == RoomTree::npos ? l - 1 : l + (i - a);
    }
    size_t i = tree_.rightmost_below(0, b, bytes, xb);
    if (i != RoomTree::npos) return r - (b - i);
    i = tree_.rightmost_below(a, s_ - 1, bytes, xb);
    return i == RoomTree::npos ? l - 1 : l + (i - a);
  }

 private:
  size_t s_;
  RoomTree tree_;
};

struct RawAction {
  uint32_t at_step;
  ActionKind kind;
  uint32_t aux;  // wait_back or use_ahead
  uint32_t block;
};

}  // namespace

Plan make_plan(const PlanInput& input) {
  const Trace tr = build_trace(input, "make_plan");
  const uint64_t S = tr.steps;
  // Budgets beyond 2^61 bytes plan like 2^61 (room is counted in int64).
  const uint64_t C = std::min<uint64_t>(input.budget_bytes, uint64_t{1} << 61);
  Plan plan;
  plan.footprint_bytes = tr.footprint;
  for (uint64_t t = 0; t < S; ++t) {
    if (tr.step_bytes[t] > C) plan.unfit_steps.push_back(static_cast<uint32_t>(t));
    plan.largest_step_bytes = std::max(plan.largest_step_bytes, tr.step_bytes[t]);
  }

  std::vector<uint8_t> nonkept = choose_gaps(tr, C);

  // Room on the circle of steps once kept gaps and every step's own blocks are resident.
  std::vector<int64_t> room(S + 1, 0);                         // difference array of occupancy
  auto occupy = [&](uint64_t l, uint64_t r, uint64_t bytes) {  // unrolled, r - l < S
    const uint64_t a = l % S, b = r % S;
    const auto v = static_cast<int64_t>(bytes);
    room[a] += v;
    room[b + 1] -= v;
    if (a > b) {
      room[0] += v;
      room[S] -= v;
    }
  };
  for (uint64_t t = 0; t < S; ++t) occupy(t, t, tr.step_bytes[t]);
  // The gap ending at use j spans the unrolled steps [u2 - prev_dist + 1, u2 - 1], u2 = step + S.
  for (uint64_t j = 0; j < tr.uses(); ++j) {
    if (!nonkept[j] && tr.prev_dist[j] >= 2) {
      const uint64_t u2 = tr.use_step[j] + S;
      occupy(u2 - tr.prev_dist[j] + 1, u2 - 1, tr.block_bytes[tr.use_block[j]]);
    }
  }
  std::vector<int64_t> free_room(S);
  int64_t occupied = 0;
  for (uint64_t t = 0; t < S; ++t) {
    occupied += room[t];
    free_room[t] = static_cast<int64_t>(C) - occupied;
  }
  const uint64_t lookahead = input.lookahead_bytes ? input.lookahead_bytes : C;
  CyclicRoom tree(free_room, static_cast<int64_t>(std::min(lookahead, C)));

  // Gaps that still fit: keep them too, live ones first (a dead gap costs no transfer), shortest
  // first (without lifetimes, only unequal block sizes leave any).
  std::vector<uint64_t> moved;  // uses whose gap is not kept
  for (uint64_t j = 0; j < tr.uses(); ++j) {
    if (nonkept[j] && tr.prev_dist[j] >= 2) moved.push_back(j);
    if (tr.dead[j] && tr.prev_dist[j] >= 2) plan.dead_gap_bytes += tr.block_bytes[tr.use_block[j]];
  }
  std::stable_sort(moved.begin(), moved.end(), [&](uint64_t x, uint64_t y) {
    if (tr.dead[x] != tr.dead[y]) return tr.dead[x] < tr.dead[y];
    return tr.prev_dist[x] < tr.prev_dist[y];
  });
  std::erase_if(moved, [&](uint64_t j) {
    const uint64_t u2 = tr.use_step[j] + S;
    const auto bytes = static_cast<int64_t>(tr.block_bytes[tr.use_block[j]]);
    const uint64_t l = u2 - tr.prev_dist[j] + 1;
    if (tree.min_free(l, u2 - 1) < bytes) return false;
    tree.add(l, u2 - 1, -bytes, 0);
    nonkept[j] = 0;
    return true;
  });

  // How many steps before a use of step s a prefetch may be issued (lookahead_seconds).
  std::vector<uint32_t> max_ahead(S, static_cast<uint32_t>(S));
  if (input.lookahead_seconds > 0) {
    std::vector<double> seconds(2 * S);
    for (uint64_t i = 0; i < 2 * S; ++i) {
      const double s = input.steps[i % S].seconds;
      seconds[i] = s > 0 ? s : kUnknownStepSeconds;
    }
    // Two pointers over the doubled sequence: [p, u) is the longest window ending at u.
    std::vector<double> before(2 * S + 1, 0.0);  // seconds of steps [0, i)
    for (uint64_t i = 0; i < 2 * S; ++i) before[i + 1] = before[i] + seconds[i];
    const double limit = input.lookahead_seconds * (1 + 1e-9);
    uint64_t p = 0;
    for (uint64_t u = S; u < 2 * S; ++u) {
      while (before[u] - before[p] > limit) ++p;
      max_ahead[u - S] = static_cast<uint32_t>(u - p);
    }
  }

  // Placement order: by use, starting after the step with the least room; then buffer, offset.
  uint64_t tightest = 0;
  for (uint64_t t = 0; t < S; ++t) {
    if (free_room[t] < free_room[tightest]) tightest = t;
  }
  auto order_key = [&](uint64_t j) { return (tr.use_step[j] + S - tightest - 1) % S; };
  std::sort(moved.begin(), moved.end(), [&](uint64_t x, uint64_t y) {
    const uint64_t kx = order_key(x), ky = order_key(y);
    if (kx != ky) return kx < ky;
    const uint32_t bx = tr.use_block[x], by = tr.use_block[y];
    if (tr.block_buffer[bx] != tr.block_buffer[by])
      return tr.block_buffer[bx] < tr.block_buffer[by];
    return tr.block_index[bx] < tr.block_index[by];
  });

  std::vector<uint8_t> unfit(S, 0);
  for (uint32_t t : plan.unfit_steps) unfit[t] = 1;
  std::vector<RawAction> raw;
  raw.reserve(2 * moved.size());
  struct RawDrop {
    uint32_t block, last_use, next_use, room_at;
  };
  std::vector<RawDrop> dropped;
  std::vector<uint8_t> resident_at_start(tr.blocks(), 0);
  for (uint64_t j = tr.step_begin[S - 1]; j < tr.step_begin[S]; ++j) {
    resident_at_start[tr.use_block[j]] = 1;
  }
  for (uint64_t j = 0; j < tr.uses(); ++j) {  // kept gaps across the iteration boundary
    if (!nonkept[j] && tr.prev_dist[j] >= 2 && tr.use_step[j] + 1 < tr.prev_dist[j]) {
      resident_at_start[tr.use_block[j]] = 1;
    }
  }
  for (const uint64_t j : moved) {
    const uint32_t b = tr.use_block[j];
    const auto bytes = static_cast<int64_t>(tr.block_bytes[b]);
    const uint64_t u2 = tr.use_step[j] + S;  // unrolled use, in [S, 2S)
    const uint64_t u1 = u2 - tr.prev_dist[j];
    if (tr.dead[j]) {  // discarded at a free, populated when handed out again
      const uint64_t room_at = u1 + tr.dead_hold[j];
      dropped.push_back({b, static_cast<uint32_t>(u1 % S), static_cast<uint32_t>(u2 % S),
                         static_cast<uint32_t>(room_at % S)});
      continue;
    }
    // Evicted at the launch after the last use; back at p in [u1 + 2, u2].
    raw.push_back({static_cast<uint32_t>((u1 + 1) % S), ActionKind::evict, 1, b});
    const uint64_t ahead = std::min<uint64_t>(tr.prev_dist[j] - 2, max_ahead[tr.use_step[j]]);
    uint64_t p = u2;
    if (ahead > 0) {
      p = tree.last_unfit(u2 - ahead, u2 - 1, bytes) + 1;
      if (p < u2) tree.add(p, u2 - 1, -bytes, -bytes);
    }
    if (p == u2 && unfit[tr.use_step[j]]) continue;  // no room before it: it faults in
    raw.push_back(
        {static_cast<uint32_t>(p % S), ActionKind::prefetch, static_cast<uint32_t>(u2 - p), b});
    if (p < S) resident_at_start[b] = 1;  // in flight across the boundary
  }
  plan.peak_resident_bytes = static_cast<uint64_t>(static_cast<int64_t>(C) - tree.min_free_all());

  // Coalesce: bucket by step, sort each bucket by kind, buffer, offset, merge neighbours.
  std::vector<uint64_t> bucket(S + 1, 0);
  for (const RawAction& a : raw) ++bucket[a.at_step + 1];
  for (uint64_t t = 0; t < S; ++t) bucket[t + 1] += bucket[t];
  std::vector<RawAction> sorted(raw.size());
  {
    std::vector<uint64_t> fill(bucket.begin(), bucket.end() - 1);
    for (const RawAction& a : raw) sorted[fill[a.at_step]++] = a;
  }
  auto by_block = [&](const RawAction& x, const RawAction& y) {
    if (x.kind != y.kind) return x.kind < y.kind;
    if (tr.block_buffer[x.block] != tr.block_buffer[y.block])
      return tr.block_buffer[x.block] < tr.block_buffer[y.block];
    return tr.block_index[x.block] < tr.block_index[y.block];
  };
  auto by_urgency = [](const Action& x, const Action& y) {
    if (x.kind != y.kind) return x.kind < y.kind;
    if (x.use_ahead != y.use_ahead) return x.use_ahead < y.use_ahead;
    if (x.range.buffer != y.range.buffer) return x.range.buffer < y.range.buffer;
    return x.range.offset < y.range.offset;
  };
  const uint64_t g = tr.granularity;
  for (uint64_t t = 0; t < S; ++t) {
    const auto first = sorted.begin() + static_cast<ptrdiff_t>(bucket[t]);
    const auto last = sorted.begin() + static_cast<ptrdiff_t>(bucket[t + 1]);
    std::sort(first, last, by_block);
    const size_t step_first = plan.actions.size();
    for (auto it = first; it != last; ++it) {
      const uint32_t buffer = tr.block_buffer[it->block];
      const uint64_t k = tr.block_index[it->block];
      const uint64_t bytes = tr.block_bytes[it->block];
      if (plan.actions.size() > step_first) {
        Action& prev = plan.actions.back();
        if (prev.kind == it->kind && prev.range.buffer == buffer &&
            prev.range.offset + prev.range.length == k * g) {
          prev.range.length += bytes;
          if (it->kind == ActionKind::evict) {
            prev.wait_back = std::min(prev.wait_back, it->aux);
          } else {
            prev.use_ahead = std::min(prev.use_ahead, it->aux);
          }
          continue;
        }
      }
      Action a;
      a.at_step = static_cast<uint32_t>(t);
      a.kind = it->kind;
      a.wait_back = it->kind == ActionKind::evict ? it->aux : 0;
      a.use_ahead = it->kind == ActionKind::prefetch ? it->aux : 0;
      a.range = {buffer, k * g, bytes};
      plan.actions.push_back(a);
    }
    std::sort(plan.actions.begin() + static_cast<ptrdiff_t>(step_first), plan.actions.end(),
              by_urgency);
  }
  for (const Action& a : plan.actions) {
    if (a.kind == ActionKind::evict) {
      plan.bytes_evicted_per_iteration += a.range.length;
      ++plan.evict_calls;
    } else {
      plan.bytes_prefetched_per_iteration += a.range.length;
      ++plan.prefetch_calls;
    }
  }

  // Drops, coalesced: adjacent blocks of one buffer with the same window.
  std::sort(dropped.begin(), dropped.end(), [&](const RawDrop& x, const RawDrop& y) {
    if (tr.block_buffer[x.block] != tr.block_buffer[y.block])
      return tr.block_buffer[x.block] < tr.block_buffer[y.block];
    if (x.last_use != y.last_use) return x.last_use < y.last_use;
    if (x.next_use != y.next_use) return x.next_use < y.next_use;
    if (x.room_at != y.room_at) return x.room_at < y.room_at;
    return tr.block_index[x.block] < tr.block_index[y.block];
  });
  for (const RawDrop& d : dropped) {
    const uint32_t buffer = tr.block_buffer[d.block];
    const uint64_t offset = tr.block_index[d.block] * g;
    plan.bytes_dropped_per_iteration += tr.block_bytes[d.block];
    if (!plan.drops.empty()) {
      Drop& prev = plan.drops.back();
      if (prev.range.buffer == buffer && prev.last_use == d.last_use &&
          prev.next_use == d.next_use && prev.room_at == d.room_at &&
          prev.range.offset + prev.range.length == offset) {
        prev.range.length += tr.block_bytes[d.block];
        continue;
      }
    }
    plan.drops.push_back(
        {{buffer, offset, tr.block_bytes[d.block]}, d.last_use, d.next_use, d.room_at});
  }
  std::sort(plan.drops.begin(), plan.drops.end(), [](const Drop& x, const Drop& y) {
    if (x.range.buffer != y.range.buffer) return x.range.buffer < y.range.buffer;
    return x.range.offset < y.range.offset;
  });

  // Resident at the start, coalesced by buffer and offset.
  std::vector<uint32_t> start;
  for (uint32_t b = 0; b < tr.blocks(); ++b) {
    if (resident_at_start[b]) start.push_back(b);
  }
  std::sort(start.begin(), start.end(), [&](uint32_t x, uint32_t y) {
    if (tr.block_buffer[x] != tr.block_buffer[y]) return tr.block_buffer[x] < tr.block_buffer[y];
    return tr.block_index[x] < tr.block_index[y];
  });
  for (uint32_t b : start) {
    const uint64_t offset = tr.block_index[b] * g;
    if (!plan.resident_at_start.empty()) {
      PlanRange& prev = plan.resident_at_start.back();
      if (prev.buffer == tr.block_buffer[b] && prev.offset + prev.length == offset) {
        prev.length += tr.block_bytes[b];
        continue;
      }
    }
    plan.resident_at_start.push_back({tr.block_buffer[b], offset, tr.block_bytes[b]});
  }
  // Room waits: how far back a launch must find the advisor's evictions done so that the GPU
  // holds no more than the budget while it runs. The advisor's stream runs each launch's
  // evictions, then its prefetches, in launch order; where it is behind, what it has not done
  // yet changes what the GPU holds by the evictions' bytes (still there) less the prefetches'
  // (not arrived). Whatever point the stream has reached, that excess must fit in the room the
  // plan leaves at the launch: scanning the actions back from the launch, the first eviction
  // whose suffix of pending actions does not fit must be done.
  {
    std::vector<int64_t> out_at(S, 0), in_at(S, 0);
    for (const Action& a : plan.actions) {
      (a.kind == ActionKind::evict ? out_at : in_at)[a.at_step] +=
          static_cast<int64_t>(a.range.length);
    }
    // Over the unrolled steps u in [0, 2S): before[u] = the bytes evicted less the bytes
    // prefetched at steps before u. What is pending from the eviction at step k through step t
    // is before[t + 1] - before[k]; the eviction to wait for at t is the last k in (t - S, t]
    // whose before[k] is below before[t + 1] - room.
    std::vector<int64_t> before(2 * S + 1, 0);
    for (uint64_t u = 0; u < 2 * S; ++u) before[u + 1] = before[u] + out_at[u % S] - in_at[u % S];
    std::vector<int64_t> key(2 * S, std::numeric_limits<int64_t>::max() / 4);  // no eviction
    for (uint64_t u = 0; u < 2 * S; ++u) {
      if (out_at[u % S] > 0) key[u] = before[u];
    }
    const RoomTree find(key, 0);  // only its first values: the rightmost key below a bound
    // The room left at each step as the plan's simulation counts it with each drop where the
    // allocator can make it, at the free (none at a step over the budget: an unfit one); the same
    // simulation gives peak_resident_at_frees_bytes.
    const Simulation sim = simulate_on(tr, input, plan, 2, true);
    plan.peak_resident_at_frees_bytes = std::max(plan.peak_resident_bytes, sim.peak_resident_bytes);
    const std::vector<uint64_t>& held = sim.resident_by_step;
    const auto room_cap = static_cast<int64_t>(C);
    plan.room_wait_back.assign(S, Plan::kNoRoomWait);
    for (uint64_t t = S; t < 2 * S; ++t) {
      const int64_t left = std::max<int64_t>(0, room_cap - static_cast<int64_t>(held[t - S]));
      const size_t k = find.rightmost_below(t - S + 1, t, before[t + 1] - left,
                                            std::numeric_limits<int64_t>::min());
      if (k != RoomTree::npos) plan.room_wait_back[t - S] = static_cast<uint32_t>(t - k);
    }
  }
  return plan;
}

}  // namespace umswap::advisor
