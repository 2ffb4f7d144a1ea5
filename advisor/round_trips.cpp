#include "umswap/advisor/round_trips.h"

namespace umswap::advisor {

RoundTrips::RoundTrips(uint64_t slots) : busy_(slots, 0) {}

std::optional<uint64_t> RoundTrips::take_slots(uint64_t n) {
  if (n == 0 || n > busy_.size()) return std::nullopt;
  if (head_ + n > busy_.size()) head_ = 0;  // a run never wraps
  for (uint64_t s = head_; s < head_ + n; ++s) {
    if (busy_[s]) return std::nullopt;
  }
  const uint64_t first = head_;
  for (uint64_t s = first; s < first + n; ++s) busy_[s] = 1;
  head_ += n;
  return first;
}

void RoundTrips::forget(uint64_t page) {
  const auto it = away_.find(page);
  if (it == away_.end()) return;
  const Trip& t = it->second;
  if (t.left_slot != kNoSlot) draining_.push_back({t.left_slot, t.left_ticket, true});
  if (t.left_slot != kNoSlot || t.left_hashed) ++counts_.unmatched;
  away_.erase(it);
}

std::optional<uint64_t> RoundTrips::leave(uint64_t address, uint64_t pages, uint64_t ticket,
                                          uint64_t launch) {
  const std::optional<uint64_t> first = take_slots(pages);
  if (!first) counts_.no_slot += pages;
  for (uint64_t i = 0; i < pages; ++i) {
    const uint64_t page = address + i * kPage;
    forget(page);
    Trip t;
    t.page = page;
    t.left_ticket = ticket;
    t.left_launch = launch;
    if (first) t.left_slot = *first + i;
    away_.emplace(page, t);
  }
  return first;
}

std::optional<uint64_t> RoundTrips::back(uint64_t address, uint64_t pages, uint64_t ticket,
                                         uint64_t launch) {
  const std::optional<uint64_t> first = take_slots(pages);
  for (uint64_t i = 0; i < pages; ++i) {
    const uint64_t page = address + i * kPage;
    const auto it = away_.find(page);
    const bool hashed_leave =
        it != away_.end() && (it->second.left_slot != kNoSlot || it->second.left_hashed);
    if (!first) {
      if (hashed_leave) ++counts_.no_slot;
      if (it != away_.end() && it->second.left_slot != kNoSlot) {
        draining_.push_back({it->second.left_slot, it->second.left_ticket, true});
      }
      if (it != away_.end()) away_.erase(it);
      continue;
    }
    if (!hashed_leave) {
      // It left unhashed (counted then), or was not seen leaving: not compared.
      if (it == away_.end()) ++counts_.unmatched;
      if (it != away_.end()) away_.erase(it);
      draining_.push_back({*first + i, ticket, false});
      continue;
    }
    Trip t = it->second;
    away_.erase(it);
    t.back_ticket = ticket;
    t.back_launch = launch;
    t.back_slot = *first + i;
    backs_.push_back(t);
  }
  return first;
}

void RoundTrips::read_left(Trip& t, uint64_t out_done,
                           const std::function<uint64_t(uint64_t)>& read) {
  if (t.left_hashed || t.left_slot == kNoSlot || t.left_ticket > out_done) return;
  t.left_hash = read(t.left_slot);
  t.left_hashed = true;
  free_slot(t.left_slot);
  t.left_slot = kNoSlot;
}

void RoundTrips::settle(uint64_t out_done, uint64_t in_done,
                        const std::function<uint64_t(uint64_t)>& read) {
  size_t kept = 0;
  for (const Draining& d : draining_) {
    if (d.ticket <= (d.out ? out_done : in_done)) {
      free_slot(d.slot);
    } else {
      draining_[kept++] = d;
    }
  }
  draining_.resize(kept);
  for (auto& [page, t] : away_) read_left(t, out_done, read);
  // A copy back is ordered after its copy out on the GPU, but the two may be seen done in either
  // order here: a return waits for its leave's hash.
  kept = 0;
  for (Trip& t : backs_) {
    read_left(t, out_done, read);
    if (t.back_ticket > in_done || !t.left_hashed) {
      backs_[kept++] = t;
      continue;
    }
    const uint64_t back_hash = read(t.back_slot);
    free_slot(t.back_slot);
    if (back_hash == t.left_hash) {
      ++counts_.checked;
    } else {
      ++counts_.mismatches;
      if (mismatches_.size() < kMismatchesKept) {
        mismatches_.push_back({t.page, t.left_launch, t.back_launch, t.left_hash, back_hash});
      }
    }
  }
  backs_.resize(kept);
}

}  // namespace umswap::advisor
