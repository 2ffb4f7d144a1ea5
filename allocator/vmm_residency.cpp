#include "umswap/allocator/vmm_residency.h"

#include <algorithm>
#include <unordered_set>

namespace umswap {
namespace {

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

void VmmResidency::allocated(CUdeviceptr base) {
  std::lock_guard lock(mutex_);
  const std::optional<vmm::RangeInfo> info = arena_.range(base);
  if (info && info->base == base) recorder_.allocated(base, info->reserved);
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

void VmmResidency::begin_iteration() {
  std::optional<RecordedIteration> done = recorder_.begin();
  const uint64_t mismatches = mismatches_;
  mismatches_ = 0;
  next_window_ = 0;
  if (table_) {
    if (mismatches * kMismatchDivisor <= table_->keys.size()) return;  // still the iteration
    table_.reset();
    stats_.period = 0;
    last_.reset();  // the caller's detector says again where iterations begin
    return;
  }
  if (done && last_ && similar(*last_, *done)) {
    table_ = make_window_table(*done, arena_.gpu_limit_bytes(), arena_.block_bytes());
    ++stats_.plans;
    stats_.period = table_->keys.size();
    last_.reset();
    return;
  }
  last_ = std::move(done);
}

bool VmmResidency::touch(uint32_t key, std::span<const CUdeviceptr> bases, bool begins_iteration) {
  std::lock_guard lock(mutex_);
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
  }
  const uint64_t now = steps_++;
  bool wanted = false;
  uint64_t reserved = 0;
  reserved_.clear();
  for (CUdeviceptr base : bases) {
    auto it = entries_.find(base);
    if (it == entries_.end()) {
      const std::optional<vmm::RangeInfo> info = arena_.range(base);
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
  return wanted || planned_.has_value();
}

void VmmResidency::note(CUdeviceptr base) {
  const std::optional<vmm::RangeInfo> info = arena_.range(base);
  const auto it = entries_.find(base);
  if (it == entries_.end()) return;
  it->second.whole_on_gpu = info && info->base == base && info->gpu_bytes == info->reserved;
}

void VmmResidency::run_planned_window(CUstream stream) {
  ++stats_.windows_from_plan;
  const WindowTable& t = *table_;
  const size_t w = *planned_;
  for (uint32_t m = t.first_move[w]; m < t.first_move[w + 1]; ++m) {
    const PlannedMove& move = t.moves[m];
    const CUdeviceptr base = recorder_.base_of(t.ranges[move.range]);
    const std::optional<vmm::RangeInfo> info = base ? arena_.range(base) : std::nullopt;
    if (!info || info->base != base || move.offset >= info->reserved) {
      ++stats_.plan_moves_skipped;
      continue;
    }
    const uint64_t length = std::min(move.length, info->reserved - move.offset);
    const vmm::Moved moved = move.to_gpu ? arena_.restore(base + move.offset, length, stream)
                                         : arena_.evict(base + move.offset, length, stream);
    if (moved.result != CUDA_SUCCESS && moved.result != CUDA_ERROR_OUT_OF_MEMORY) {
      ++stats_.move_failures;
    }
    ++(move.to_gpu ? stats_.ranges_prefetched : stats_.ranges_evicted);
    note(base);
  }
}

void VmmResidency::restore(const vmm::RangeInfo& info, CUstream stream, uint64_t* short_bytes) {
  Entry& entry = entries_[info.base];
  entry.reserved = info.reserved;
  // A hole (a failed rollback's unmapped slot) is mapped again by a restore too.
  if (info.host_bytes == 0 && info.unmapped_bytes == 0) {
    entry.whole_on_gpu = true;
    return;
  }
  const vmm::Moved moved = arena_.restore(info.base, info.reserved, stream);
  if (moved.result != CUDA_SUCCESS && moved.result != CUDA_ERROR_OUT_OF_MEMORY) {
    ++stats_.move_failures;
  }
  ++stats_.ranges_restored;
  const std::optional<vmm::RangeInfo> after = arena_.range(info.base);
  entry.whole_on_gpu = after && after->gpu_bytes == after->reserved;
  if (after) *short_bytes += after->host_bytes + after->unmapped_bytes;
}

void VmmResidency::make_resident(std::span<const CUdeviceptr> bases, CUstream stream) {
  std::lock_guard lock(mutex_);
  if (steps_ == 0) return;
  ++stats_.steps_held;
  if (planned_ && table_) run_planned_window(stream);
  planned_.reset();
  // The step's own ranges; the least recently used others go out to make room.
  victims_.clear();
  for (const auto& [base, entry] : entries_) {
    if (std::find(bases.begin(), bases.end(), base) == bases.end()) victims_.push_back(base);
  }
  std::sort(victims_.begin(), victims_.end(), [this](CUdeviceptr a, CUdeviceptr b) {
    return entries_[a].last_use < entries_[b].last_use;
  });
  size_t v = 0;
  uint64_t short_bytes = 0;
  for (CUdeviceptr base : bases) {
    const std::optional<vmm::RangeInfo> info = arena_.range(base);
    if (!info || info->base != base) continue;
    if (info->host_bytes == 0 && info->unmapped_bytes == 0) {
      if (const auto it = entries_.find(base); it != entries_.end()) it->second.whole_on_gpu = true;
      continue;
    }
    while (!arena_.fits_on_gpu(base) && v < victims_.size()) {
      const CUdeviceptr victim = victims_[v++];
      const std::optional<vmm::RangeInfo> out = arena_.range(victim);
      if (!out || out->base != victim) {
        entries_.erase(victim);
        continue;
      }
      // A victim erased meanwhile (a restore found it released) and a new range made at its
      // address: entered again, as a first look would.
      Entry& entry = entries_[victim];
      entry.whole_on_gpu = false;
      entry.reserved = out->reserved;
      if (out->gpu_bytes == 0) continue;
      const vmm::Moved moved = arena_.evict(victim, out->reserved, stream);
      ++stats_.ranges_evicted;
      if (moved.result != CUDA_SUCCESS && moved.result != CUDA_ERROR_OUT_OF_MEMORY) {
        ++stats_.move_failures;
      }
    }
    restore(*info, stream, &short_bytes);
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
  recorder_.released(base);
  short_key_ = 0;  // room may have come free
}

ResidencyStats VmmResidency::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace umswap
