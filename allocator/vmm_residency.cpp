#include "umswap/allocator/vmm_residency.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace umswap {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
// Steps compared to accept a period, and how many of them must match. By key (the kernel): most,
// though an input batch's copy or a data-dependent step may differ. By key and ranges: a few,
// so that a run of identical layers (same kernels, other ranges) does not pass for the
// iteration, while ranges that shift between iterations (the caching allocator putting a tensor
// in another segment) do not hide it.
constexpr uint64_t kMatch = 64;
constexpr uint64_t kKeysNeeded = 56;
constexpr uint64_t kRangesNeeded = 16;
// A window brings in the ranges used within period / kHorizonDivisor steps ahead.
constexpr uint64_t kHorizonDivisor = 8;
// A candidate period is scored only where one of the last few steps matches at its lag.
constexpr uint64_t kProbe = 8;
// A step's window leaves this share of the pool free for the allocations that follow it.
constexpr uint64_t kHeadroomDivisor = 8;
// Iterations without a table whose windows a table is judged against (the latest ones).
constexpr size_t kJudgedAgainst = 4;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// An iteration in which more than this share of the steps' keys differ from the table's ends it;
// two recorded iterations that differ in more are not the same.
constexpr uint64_t kMismatchDivisor = 8;
// Two recorded iterations whose persistent ranges differ in more than this share are not the
// same (one layer of a stack of identical ones, where an input batch alternating between two
// ranges is).
constexpr uint64_t kRangesDivisor = 4;
// An iteration shorter than this is a warm-up's repeated kernel, not the training loop's.
constexpr uint64_t kShortestIteration = 8;

}  // namespace

VmmResidency::VmmResidency(vmm::ChunkArena& arena) : arena_(arena) {}

uint64_t VmmResidency::key_of(std::span<const CUdeviceptr> bases) {
  // A sum of mixed values: the same for any order (the caller passes each base once).
  uint64_t key = 0;
  for (CUdeviceptr b : bases) key += mix(b);
  return key == 0 ? 1 : key;
}

uint64_t VmmResidency::id_of(CUdeviceptr base) const {
  const auto it = made_.find(base);
  return mix(base + mix(it == made_.end() ? 0 : it->second));
}

void VmmResidency::alias(CUdeviceptr address, CUdeviceptr range) {
  std::lock_guard lock(alias_mutex_);
  alias_[address] = range;
}

void VmmResidency::unalias(CUdeviceptr address) {
  std::lock_guard lock(alias_mutex_);
  alias_.erase(address);
}

std::span<const CUdeviceptr> VmmResidency::canonical(std::span<const CUdeviceptr> given) {
  std::lock_guard lock(alias_mutex_);
  if (alias_.empty()) return given;
  canon_.clear();
  for (CUdeviceptr b : given) {
    const auto it = alias_.find(b);
    const CUdeviceptr base = it == alias_.end() ? b : it->second;
    if (std::find(canon_.begin(), canon_.end(), base) == canon_.end()) canon_.push_back(base);
  }
  return canon_;
}

void VmmResidency::allocated(CUdeviceptr base, bool slab) {
  std::lock_guard lock(mutex_);
  const std::optional<vmm::RangeInfo> info = arena_.range(base);
  if (info && info->base == base) {
    if (!slab) recorder_.allocated(base, info->reserved);
    fresh_.insert(base);
    made_[base] = ++ranges_made_;
  }
}

void VmmResidency::unseen_work() {
  std::lock_guard lock(mutex_);
  fresh_.clear();
  unwritten_.clear();
}

vmm::Moved VmmResidency::move_range(CUdeviceptr base, CUdeviceptr address, uint64_t length,
                                    bool to_gpu, CUstream stream) {
  const vmm::Contents what =
      unwritten_.count(base) ? vmm::Contents::undefined : vmm::Contents::keep;
  const vmm::Moved moved = to_gpu ? arena_.restore(address, length, stream, what)
                                  : arena_.evict(address, length, stream, what);
  count_failure(moved);
  if (what == vmm::Contents::undefined && moved.bytes > 0) ++stats_.ranges_unwritten;
  return moved;
}

bool VmmResidency::similar(const RecordedIteration& a, const RecordedIteration& b) {
  if (a.keys.size() != b.keys.size() || a.keys.size() < kShortestIteration ||
      a.allocations != b.allocations) {
    return false;
  }
  uint64_t differ = 0;
  for (size_t i = 0; i < a.keys.size(); ++i) differ += a.keys[i] != b.keys[i] ? 1 : 0;
  if (differ * kMismatchDivisor > a.keys.size()) return false;
  // A layer of a stack of identical ones repeats its keys, not its weights.
  std::unordered_set<CUdeviceptr> mine;
  for (const TableRange& r : a.ranges) {
    if (!r.local) mine.insert(r.address);
  }
  uint64_t persistent = 0, missing = 0;
  for (const TableRange& r : b.ranges) {
    if (r.local) continue;
    ++persistent;
    missing += mine.count(r.address) ? 0 : 1;
  }
  return missing * kRangesDivisor <= persistent;
}

void VmmResidency::drop_table() {
  table_.reset();
  last_.reset();
}

void VmmResidency::count_failure(const vmm::Moved& moved) {
  // A full pool is not a failure: what did not fit stays where it is.
  if (moved.result != CUDA_SUCCESS && moved.result != CUDA_ERROR_OUT_OF_MEMORY) {
    ++stats_.move_failures;
  }
}

void VmmResidency::begin_iteration() {
  std::optional<RecordedIteration> done = recorder_.begin();
  const uint64_t mismatches = mismatches_;
  mismatches_ = 0;
  next_window_ = 0;
  const uint64_t windows = windows_now_;
  windows_now_ = 0;
  const bool first = !begun_;  // its windows are the program's start's, not an iteration's
  begun_ = true;
  if (table_) {
    if (mismatches * kMismatchDivisor > table_->keys.size()) {
      // Not the table's loop (another phase of the program, or boundaries that slipped): the
      // table goes, and the caller's detector says again where iterations begin.
      drop_table();
      return;
    }
    // A table is there to take fewer windows than the residency alone. After its first
    // iteration (moving into its layout), an iteration of its loop that takes more than the
    // latest iterations without it did on average ends it, and no table is made again.
    if (++planned_iterations_ > 1 && !unplanned_windows_.empty()) {
      uint64_t sum = 0;
      for (uint64_t w : unplanned_windows_) sum += w;
      if (windows * unplanned_windows_.size() > sum) {
        drop_table();
        tables_off_ = true;
        ++stats_.plans_dropped;
      }
    }
    return;
  }
  if (!first) {
    unplanned_windows_.push_back(windows);
    if (unplanned_windows_.size() > kJudgedAgainst) unplanned_windows_.pop_front();
  }
  // No table for a pool of nothing (the program's own mappings took the budget): the planner
  // needs room to plan in.
  const uint64_t pool = arena_.gpu_limit_bytes();
  if (!tables_off_ && done && last_ && pool > 0 && similar(*last_, *done)) {
    try {
      table_ = make_window_table(*done, pool, arena_.block_bytes());
    } catch (const std::exception&) {
      // The planner refused (it throws on what it cannot plan): no table; this runs in a launch
      // callback, where nothing may throw.
      table_.reset();
    }
    if (table_) {
      ++stats_.plans;
      planned_iterations_ = 0;
      last_.reset();
      return;
    }
  }
  last_ = std::move(done);
}

bool VmmResidency::touch(uint32_t key, std::span<const CUdeviceptr> given, bool begins_iteration) {
  std::lock_guard lock(mutex_);
  // What was allocated since the last step is unwritten until this step's launch goes out (most
  // steps follow no allocation: nothing to clear).
  if (!fresh_.empty() || !unwritten_.empty()) {
    unwritten_.swap(fresh_);
    fresh_.clear();
  }
  const std::span<const CUdeviceptr> bases = canonical(given);
  // Iterations begin where the caller's detector says, and where one as long as the detector's
  // last (or the table's) ends: a boundary the detector missed is not waited for. With a table,
  // its length alone.
  if (begins_iteration) {
    detected_length_ = detected_ ? steps_ - detected_at_ : 0;
    detected_ = true;
    detected_at_ = steps_;
  }
  const uint64_t length = table_ ? table_->keys.size() : detected_length_;
  if (begins_iteration && !table_) {
    begin_iteration();
  } else if (length >= kShortestIteration && recorder_.phase() >= length) {
    begin_iteration();
  } else if (recorder_.phase() >= kHistory) {
    begin_iteration();  // no iteration this long is planned: the record stays bounded
  }
  if (history_.empty()) history_.resize(kHistory);
  Step& step = history_[steps_ % kHistory];
  step.key = mix(key);
  step.bases.assign(bases.begin(), bases.end());
  step.ids.clear();
  uint64_t ids = 0;
  for (CUdeviceptr b : bases) {
    step.ids.push_back(id_of(b));
    ids += step.ids.back();
  }
  step.symbol = step.key ^ (ids == 0 ? 1 : ids);
  const uint64_t now = steps_++;
  bool wanted = false;
  uint64_t reserved = 0;
  reserved_.clear();
  for (CUdeviceptr base : bases) {
    auto it = entries_.find(base);
    if (it == entries_.end()) {
      // Only live ranges: one released meanwhile may still be the arena's, kept for reuse.
      const std::optional<vmm::RangeInfo> info =
          made_.count(base) ? arena_.range(base) : std::nullopt;
      if (!info || info->base != base) {
        reserved_.push_back(0);
        continue;  // not a range of the arena
      }
      it = entries_.emplace(base, Entry{now, info->reserved, info->gpu_bytes == info->reserved})
               .first;
    }
    it->second.last_use = now;
    reserved += it->second.reserved;
    reserved_.push_back(it->second.reserved);
    wanted = wanted || !it->second.whole_on_gpu;
  }
  recorder_.step(key, bases, reserved_);
  planned_.reset();
  if (table_ && recorder_.recording()) {
    const uint64_t phase = recorder_.phase() - 1;
    if (phase >= table_->keys.size() || table_->keys[phase] != key) ++mismatches_;
    if (next_window_ < table_->window_phase.size() && table_->window_phase[next_window_] == phase) {
      planned_ = next_window_++;
    }
  }
  if (wanted && reserved > arena_.gpu_limit_bytes()) {
    ++stats_.steps_left_short;
    ++stats_.steps_too_large;
    wanted = false;
  } else if (wanted && short_key_ != 0 && key_of(bases) == short_key_) {
    ++stats_.steps_left_short;
    wanted = false;
  }
  own_wanted_ = wanted;
  return wanted || planned_.has_value();
}

void VmmResidency::note(CUdeviceptr base) {
  const std::optional<vmm::RangeInfo> info = arena_.range(base);
  const auto it = entries_.find(base);
  if (it == entries_.end()) return;
  it->second.whole_on_gpu = info && info->base == base && info->gpu_bytes == info->reserved;
}

bool VmmResidency::room_for(CUdeviceptr base) {
  while (!arena_.fits_on_gpu(base)) {
    if (!reclaim_ || !reclaim_()) return false;
  }
  return true;
}

void VmmResidency::run_planned_window(CUstream stream) {
  ++stats_.windows_from_plan;
  const WindowTable& t = *table_;
  const size_t w = *planned_;
  for (uint32_t m = t.first_move[w]; m < t.first_move[w + 1]; ++m) {
    const PlannedMove& move = t.moves[m];
    const CUdeviceptr base = recorder_.base_of(t.ranges[move.range]);
    const std::optional<vmm::RangeInfo> info =
        base && made_.count(base) ? arena_.range(base) : std::nullopt;
    if (!info || info->base != base || move.offset >= info->reserved) {
      ++stats_.plan_moves_skipped;
      continue;
    }
    const uint64_t length = std::min(move.length, info->reserved - move.offset);
    if (move.to_gpu) room_for(base);
    const vmm::Moved moved = move_range(base, base + move.offset, length, move.to_gpu, stream);
    if (moved.bytes > 0) ++(move.to_gpu ? stats_.ranges_prefetched : stats_.ranges_evicted);
    note(base);
  }
}

bool VmmResidency::period_holds(uint64_t period) const {
  if (period == 0 || steps_ < period + kMatch) return false;
  const uint64_t last = steps_ - 1;
  uint64_t keys = 0, ranges = 0;
  for (uint64_t k = 0; k < kMatch; ++k) {
    const Step& now = step_at(last - k);
    const Step& then = step_at(last - k - period);
    keys += now.key == then.key ? 1 : 0;
    ranges += now.symbol == then.symbol ? 1 : 0;
    if (keys + (kMatch - 1 - k) < kKeysNeeded) return false;  // cannot reach it any more
  }
  return ranges >= kRangesNeeded;
}

void VmmResidency::find_period() {
  if (period_holds(period_)) return;
  period_ = 0;
  const uint64_t most = std::min(kHistory / 2, steps_ > kMatch ? (steps_ - kMatch) : 0);
  const uint64_t last = steps_ - 1;
  for (uint64_t p = 1; p <= most; ++p) {
    bool probe = false;
    for (uint64_t k = 0; k < kProbe && !probe; ++k) {
      probe = step_at(last - k).key == step_at(last - k - p).key;
    }
    if (probe && period_holds(p)) {
      period_ = p;
      return;
    }
  }
}

void VmmResidency::predict(std::span<const CUdeviceptr> bases) {
  next_.clear();
  for (CUdeviceptr b : bases) next_[b] = 0;
  if (period_ == 0) return;
  // Step last + k of this iteration is step last + k - period of the last one.
  const uint64_t last = steps_ - 1;
  for (uint64_t k = 1; k < period_; ++k) {
    // A range made again at the same address since (a kept range reused) is another range.
    const Step& then = step_at(last + k - period_);
    for (size_t i = 0; i < then.bases.size(); ++i) {
      if (id_of(then.bases[i]) == then.ids[i]) next_.try_emplace(then.bases[i], k);
    }
  }
}

void VmmResidency::predict_from_table(std::span<const CUdeviceptr> bases) {
  next_.clear();
  for (CUdeviceptr b : bases) next_[b] = 0;
  const WindowTable& t = *table_;
  const uint64_t phase = recorder_.phase() - 1;
  if (phase >= t.keys.size()) return;
  for (uint32_t r = 0; r < t.ranges.size(); ++r) {
    const CUdeviceptr b = recorder_.base_of(t.ranges[r]);
    if (b == 0 || !entries_.count(b)) continue;
    const uint32_t k = steps_to_next_use(t, r, static_cast<uint32_t>(phase));
    if (k == 0) continue;
    const auto [it, added] = next_.try_emplace(b, k);
    if (!added && k < it->second) it->second = k;
  }
}

bool VmmResidency::restore(const vmm::RangeInfo& info, CUstream stream, bool partial_ok,
                           uint64_t* short_bytes) {
  Entry& entry = entries_[info.base];
  entry.reserved = info.reserved;
  // A hole (a failed rollback's unmapped slot) is mapped again by a restore too.
  if (info.host_bytes == 0 && info.unmapped_bytes == 0) {
    entry.whole_on_gpu = true;
    return false;
  }
  if (!room_for(info.base) && !partial_ok) return false;
  move_range(info.base, info.base, info.reserved, true, stream);
  const std::optional<vmm::RangeInfo> after = arena_.range(info.base);
  entry.whole_on_gpu = after && after->gpu_bytes == after->reserved;
  if (after && short_bytes) *short_bytes += after->host_bytes + after->unmapped_bytes;
  return true;
}

void VmmResidency::make_resident(std::span<const CUdeviceptr> given, CUstream stream) {
  std::lock_guard lock(mutex_);
  const std::span<const CUdeviceptr> bases = canonical(given);
  if (steps_ == 0) return;
  ++stats_.steps_held;
  ++windows_now_;
  if (planned_ && table_) run_planned_window(stream);
  planned_.reset();
  if (!own_wanted_) {
    // The table's window only: touch() sent the step itself none (its ranges are on the GPU,
    // pass the whole pool, or were left short with nothing freed since).
    arena_.trim_to_limit();
    return;
  }
  // With a table in force its windows bring ranges in ahead: this window brings the step's own,
  // and what goes out is what the table's iteration uses furthest ahead (evicting the least
  // recently used instead took out the ranges the coming steps reach, each brought back by a
  // window of its own: GPT-2 small's logits at 50%, 35 such windows an iteration in
  // vmm_residency_sim). Without one, the steps' own period, where found, says what comes next.
  if (table_) {
    period_ = 0;
    predict_from_table(bases);
  } else {
    find_period();
    if (period_ != 0) ++stats_.windows_predicted;
    predict(bases);
  }
  auto next_use = [this](CUdeviceptr b) {
    const auto it = next_.find(b);
    return it == next_.end() ? kNever : it->second;
  };
  // What to bring in, nearest use first: the step's own ranges (0), then the coming steps'.
  wanted_.clear();
  for (const auto& [base, k] : next_) {
    const auto it = entries_.find(base);
    if (it != entries_.end() && (k == 0 || !it->second.whole_on_gpu)) wanted_.push_back({k, base});
  }
  std::sort(wanted_.begin(), wanted_.end());
  // What may go out, furthest use first (never used in the coming period: the least recently
  // used first).
  victims_.clear();
  for (const auto& [base, entry] : entries_) {
    if (next_use(base) != 0) victims_.push_back(base);
  }
  auto last_use = [this](CUdeviceptr b) {
    const auto it = entries_.find(b);
    return it == entries_.end() ? 0 : it->second.last_use;
  };
  std::sort(victims_.begin(), victims_.end(), [&](CUdeviceptr a, CUdeviceptr b) {
    const uint64_t na = next_use(a), nb = next_use(b);
    if (na != nb) return na > nb;
    if (last_use(a) != last_use(b)) return last_use(a) < last_use(b);
    return a < b;
  });
  // How far ahead a window brings ranges in: an eighth of the period.
  const uint64_t horizon = std::max<uint64_t>(1, period_ / kHorizonDivisor);
  size_t v = 0;
  // Evicts the next victim (false when none is left).
  auto evict_next = [&] {
    if (v >= victims_.size()) return false;
    const CUdeviceptr victim = victims_[v++];
    const std::optional<vmm::RangeInfo> out = arena_.range(victim);
    if (!out || out->base != victim) {
      entries_.erase(victim);
      return true;
    }
    // A victim erased meanwhile (a restore found it released) and a new range made at its
    // address: entered again, as a first look would.
    Entry& entry = entries_[victim];
    entry.whole_on_gpu = false;
    entry.reserved = out->reserved;
    if (out->gpu_bytes == 0) return true;
    move_range(victim, victim, out->reserved, false, stream);
    ++stats_.ranges_evicted;
    return true;
  };
  uint64_t short_bytes = 0;
  for (const auto& [k, base] : wanted_) {
    // Ahead only within the horizon, and only by evicting what is used after it: a range
    // brought in ahead by evicting one used before the horizon would soon go out again.
    if (k > horizon) break;
    // Unchanged by the evictions below: those take only ranges used after the horizon.
    const std::optional<vmm::RangeInfo> info = arena_.range(base);
    if (!info || info->base != base) continue;
    const uint64_t after = k == 0 ? 0 : horizon;
    while (!room_for(base) && v < victims_.size() && next_use(victims_[v]) > after) {
      evict_next();
    }
    if (k == 0) {
      if (restore(*info, stream, true, &short_bytes)) ++stats_.ranges_restored;
    } else if (restore(*info, stream, false, nullptr)) {
      ++stats_.ranges_prefetched;
    }
  }
  // Room for what the program allocates next: a new range that finds the pool full is made on
  // host chunks (a dear mapping) and needs a window of its own to come in. The window evicts
  // ranges used after the horizon, in the victims' order, until a share of the pool is free
  // (kept ranges' GPU chunks count as free: an allocation takes them). Only for a program whose
  // allocations are mostly stream-ordered (the header says why). Measured at 50% on four models of
  // PyTorch's async backend (runs 201-203, docs/lab/2026-12-02-vmm-headroom.md): 57-98% fewer
  // bytes allocated on host chunks; 0.92x the time over ten pairs (0.74-1.08), within the runs'
  // own spread.
  const uint64_t block = arena_.block_bytes();
  const uint64_t headroom = arena_.gpu_limit_bytes() / kHeadroomDivisor / block * block;
  auto free_gpu = [this] {
    const uint64_t limit = arena_.gpu_limit_bytes(), used = arena_.gpu_bytes_in_use();
    return (limit > used ? limit - used : 0) + (spare_ ? spare_() : 0);
  };
  // Not with a table in force: its plan counts the iteration's allocations, and room made beyond
  // it takes out ranges the plan keeps for the coming steps.
  const bool room = !table_ && mostly_ordered_ && mostly_ordered_();
  while (room && free_gpu() < headroom && v < victims_.size() && next_use(victims_[v]) > horizon) {
    const uint64_t before = stats_.ranges_evicted;
    evict_next();
    stats_.ranges_evicted_for_room += stats_.ranges_evicted - before;
  }
  stats_.bytes_short += short_bytes;
  short_key_ = short_bytes > 0 ? key_of(bases) : 0;
  // Every move above has committed (its copies waited for): chunks past a shrunk pool can go.
  arena_.trim_to_limit();
}

void VmmResidency::trim_to_pool() {
  std::lock_guard lock(mutex_);
  arena_.trim_to_limit();
}

void VmmResidency::forget(CUdeviceptr base) {
  std::lock_guard lock(mutex_);
  entries_.erase(base);
  made_.erase(base);
  fresh_.erase(base);
  unwritten_.erase(base);
  recorder_.released(base);
  short_key_ = 0;  // room may have come free
}

ResidencyStats VmmResidency::stats() const {
  std::lock_guard lock(mutex_);
  ResidencyStats s = stats_;
  s.period = table_ ? table_->keys.size() : 0;
  s.own_period = period_;
  return s;
}

}  // namespace umswap
