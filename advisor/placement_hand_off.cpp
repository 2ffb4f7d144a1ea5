#include "umswap/advisor/placement_hand_off.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "umswap/advisor/replay.h"
#include "umswap/allocator/managed_allocator.h"
#include "umswap/allocator/slab_allocator.h"
#include "umswap/core/log.h"
#include "umswap/core/options.h"

namespace umswap::advisor {

bool PlacementHandOff::try_learned(std::span<const BlockEvent> blocks, uint64_t first,
                                   uint64_t period) {
  tried_ = ++attempts_ >= kAttempts;
  pending_ = make(blocks, first, period, 0);
  if (!pending_) return false;
  tried_ = true;
  period_ = period;
  learn_placed_ = true;
  return true;
}

void PlacementHandOff::from_trace(const trace::Trace& t) {
  tried_ = true;
  learn_placed_ = false;
  uint64_t arena = 0;
  for (const trace::Buffer& b : t.buffers) {
    if (b.call_site == ManagedAllocator::kArenaSite) arena = b.size;
  }
  const std::optional<size_t> i = replay_iteration(t);
  if (arena == 0 || !i) {
    note_ = "the trace was recorded without a placement";
    return;
  }
  std::vector<BlockEvent> blocks;
  for (const trace::Lifetime& l : t.lifetimes) {
    blocks.push_back({l.before_step, t.buffers[l.buffer].base + l.offset, l.length, l.freed});
  }
  pending_ = make(blocks, t.iterations[*i].first_step, t.iterations[*i].step_count, arena);
  period_ = t.iterations[*i].step_count;
}

void PlacementHandOff::plan_ended(uint64_t period) {
  learn_placed_ = false;
  if (handed_ && period == period_ && attempts_ < kAttempts) tried_ = false;
}

bool PlacementHandOff::tend(uint64_t n) {
  if (!pending_ || n < place_at_) return false;
  Placement handed = std::move(*pending_);
  pending_.reset();
  if (hand(std::move(handed))) return true;
  learn_placed_ = false;
  return false;
}

// A placement from two iterations' block events, or nullopt (note_ says why). With
// `arena_must_be` (replay), only a placement whose arena has that size: the trace's plan names
// addresses in the trace's arena, and another arena would make them wrong.
std::optional<Placement> PlacementHandOff::make(std::span<const BlockEvent> blocks, uint64_t start,
                                                uint64_t period, uint64_t arena_must_be) {
  std::string why;
  std::optional<Placement> p = plan_placement(blocks, start, period, SlabAllocator::kSmallLimit,
                                              SlabAllocator::kAlignment, &why);
  if (!p) {
    why += fmt::format(" ({} block events logged for launches {} to {})", blocks.size(),
                       start - std::min(start, period), start + period);
  } else {
    // A training iteration frees what it allocates (gradients early in the next one); an inner
    // loop taken for the iteration (one layer's forward) keeps its activations for the backward
    // pass, beyond its period. Its placement would be wrong for the real iteration.
    uint64_t all = 0, placed = 0;
    for (size_t i = 0; i < p->sizes.size(); ++i) {
      all += p->sizes[i];
      if (p->offsets[i] != Placement::kUnplaced) placed += p->sizes[i];
    }
    if (placed < all / 10 * 9) {
      why = fmt::format(
          "only {} of the {} of large blocks allocated in the iteration are freed within an "
          "iteration (an inner loop?)",
          format_bytes(placed), format_bytes(all));
      p.reset();
    }
  }
  if (p && arena_must_be != 0 &&
      (p->arena_bytes + SlabAllocator::kSlabGranule - 1) / SlabAllocator::kSlabGranule *
              SlabAllocator::kSlabGranule !=
          arena_must_be) {
    p.reset();
    why = "the trace's arena does not match the placement its iteration gives";
  }
  if (!p) {
    note_ = why;
    log_info("advisor: no placement: {}", why);
  }
  return p;
}

// Hands a placement to the allocator; false (note_ says why) when it refuses.
bool PlacementHandOff::hand(Placement p) {
  if (!place_ || !place_(p)) {
    note_ = "the allocator could not make the arena (UMSWAP_MANAGED_LIMIT?)";
    log_info("advisor: no placement: {}", note_);
    return false;
  }
  log_info(
      "advisor: placement: {} of {} large blocks of the iteration go to planned addresses in an "
      "arena of {} (their live peak {}, in whole 2 MiB pages {}; {})",
      p.placed, p.sizes.size(), format_bytes(p.arena_bytes), format_bytes(p.live_peak),
      format_bytes(p.page_peak), p.order);
  handed_ = std::move(p);
  return true;
}

nlohmann::json PlacementHandOff::stats_json() const {
  if (!handed_) return note_.empty() ? nlohmann::json(nullptr) : nlohmann::json(note_);
  nlohmann::json candidates = nlohmann::json::array();
  for (const PlacementCandidate& c : handed_->candidates) {
    candidates.push_back(
        {{"order", c.order}, {"arena_bytes", c.arena_bytes}, {"page_peak_bytes", c.page_peak}});
  }
  return {{"arena_bytes", handed_->arena_bytes},   {"live_peak_bytes", handed_->live_peak},
          {"page_peak_bytes", handed_->page_peak}, {"blocks", handed_->sizes.size()},
          {"placed_blocks", handed_->placed},      {"order", handed_->order},
          {"candidates", std::move(candidates)}};
}

}  // namespace umswap::advisor
