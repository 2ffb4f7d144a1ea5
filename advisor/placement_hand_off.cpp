#include "umswap/advisor/placement_hand_off.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/replay.h"
#include "umswap/allocator/managed_allocator.h"
#include "umswap/allocator/slab_allocator.h"
#include "umswap/core/log.h"
#include "umswap/core/options.h"

namespace umswap::advisor {

bool PlacementHandOff::try_learned(std::span<const BlockEvent> blocks, uint64_t first,
                                   uint64_t period, const std::function<bool()>& stop) {
  tried_ = ++attempts_ >= kAttempts;
  pending_ = make(blocks, first, period, stop);
  if (!pending_) return false;
  tried_ = true;
  period_ = period;
  learn_placed_ = true;
  return true;
}

uint64_t PlacementHandOff::search_deadline(uint64_t base, uint64_t period, uint64_t seen) {
  if (period == 0) return seen;
  const uint64_t next = boundary_at_or_after(base, period, seen);
  const uint64_t target = next - seen >= period / 2 ? next : next + period;
  return target - period / 4;
}

void PlacementHandOff::from_trace(const trace::Trace& t) {
  tried_ = true;
  learn_placed_ = false;
  const std::optional<size_t> i = replay_iteration(t);
  if (!i) {
    note_ = "the trace holds no iteration of its period";
    return;
  }
  std::string why;
  pending_ = recorded_placement(t, *i, SlabAllocator::kSmallLimit, &why);
  if (!pending_) {
    note_ = why;
    log_info("advisor: no placement: {}", why);
    return;
  }
  period_ = t.iterations[*i].step_count;
}

std::optional<Placement> recorded_placement(const trace::Trace& t, size_t iteration,
                                            uint64_t min_bytes, std::string* why) {
  const trace::Iteration& it = t.iterations.at(iteration);
  const uint64_t first = it.first_step, end = it.first_step + it.step_count;
  const auto in_iteration = [&](const trace::Lifetime& l) {
    return l.before_step >= first && l.before_step < end;
  };
  // The arena the iteration's blocks went to: the last buffer of kArenaSite it allocates in
  // (a process that placed twice has two).
  uint32_t arena = UINT32_MAX;
  for (const trace::Lifetime& l : t.lifetimes) {
    if (!l.freed && in_iteration(l) &&
        t.buffers.at(l.buffer).call_site == ManagedAllocator::kArenaSite) {
      arena = l.buffer;
    }
  }
  if (arena == UINT32_MAX) {
    *why = "the trace was recorded without a placement";
    return std::nullopt;
  }
  Placement p;
  p.arena_bytes = t.buffers[arena].size;
  p.order = "as recorded in the trace";
  // Live bytes and 2 MiB pages of the arena, followed from the trace's start; their peaks within
  // the iteration.
  std::vector<uint32_t> page_users(
      static_cast<size_t>((p.arena_bytes + Placement::kPage - 1) / Placement::kPage), 0);
  uint64_t live = 0, pages = 0;
  for (const trace::Lifetime& l : t.lifetimes) {
    if (l.before_step >= end) break;
    const bool on_arena = l.buffer == arena;
    if (in_iteration(l) && !l.freed && l.length > min_bytes) {
      p.sizes.push_back(l.length);
      p.offsets.push_back(on_arena ? l.offset : Placement::kUnplaced);
      if (on_arena) ++p.placed;
    }
    if (!on_arena) continue;
    live = l.freed ? live - std::min(live, l.length) : live + l.length;
    for (uint64_t g = l.offset / Placement::kPage;
         g <= (l.offset + l.length - 1) / Placement::kPage && g < page_users.size(); ++g) {
      if (l.freed) {
        if (page_users[g] > 0 && --page_users[g] == 0) --pages;
      } else if (page_users[g]++ == 0) {
        ++pages;
      }
    }
    if (in_iteration(l)) {
      p.live_peak = std::max(p.live_peak, live);
      p.page_peak = std::max(p.page_peak, pages * Placement::kPage);
    }
  }
  if (p.placed == 0) {
    *why = "the trace's iteration allocates no block in its arena";
    return std::nullopt;
  }
  return p;
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

// A placement from two iterations' block events, or nullopt (note_ says why).
std::optional<Placement> PlacementHandOff::make(std::span<const BlockEvent> blocks, uint64_t start,
                                                uint64_t period,
                                                const std::function<bool()>& stop) {
  std::string why;
  std::optional<Placement> p = plan_placement(blocks, start, period, SlabAllocator::kSmallLimit,
                                              SlabAllocator::kAlignment, &why, stop);
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
