#include "umswap/advisor/host_copies.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace umswap::advisor {

HostCopies::HostCopies(Alloc alloc, Free free, uint64_t limit)
    : alloc_(std::move(alloc)), free_(std::move(free)), limit_(limit) {}

HostCopies::~HostCopies() {
  // Blocks still referred to by pieces or in flight are freed too: the owner destroys this only
  // once its streams are idle (or at exit).
  std::vector<std::shared_ptr<Block>> all;
  for (auto& [address, piece] : pieces_) all.push_back(piece.block);
  for (auto& b : retiring_) all.push_back(b);
  for (auto& [bytes, b] : cached_) all.push_back(b);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (!frozen_) {
    for (const auto& b : all) free_fn(b);
  }
}

void HostCopies::free_fn(const std::shared_ptr<Block>& b) {
  if (free_ && b->host) free_(b->host, b->bytes);
}

std::shared_ptr<HostCopies::Block> HostCopies::block_for(uint64_t bytes) {
  if (frozen_) return nullptr;
  if (auto it = cached_.find(bytes); it != cached_.end()) {
    auto b = std::move(it->second);
    cached_.erase(it);
    return b;
  }
  while (host_bytes_ + bytes > limit_ && !cached_.empty()) {
    auto last = std::prev(cached_.end());  // the largest first
    host_bytes_ -= last->second->bytes;
    free_fn(last->second);
    cached_.erase(last);
  }
  if (host_bytes_ + bytes > limit_) return nullptr;
  const uint64_t host = alloc_ ? alloc_(bytes) : 0;
  if (host == 0) return nullptr;
  auto b = std::make_shared<Block>();
  b->host = host;
  b->bytes = bytes;
  host_bytes_ += bytes;
  ++blocks_allocated_;
  return b;
}

std::optional<std::vector<HostCopies::Segment>> HostCopies::take(uint64_t address, uint64_t length,
                                                                 uint64_t ticket, uint64_t due) {
  const uint64_t end = address + length;
  // The gaps no piece covers.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  uint64_t at = address;
  auto it = pieces_.upper_bound(address);
  if (it != pieces_.begin() && std::prev(it)->second.end > address) --it;
  for (; it != pieces_.end() && it->first < end; ++it) {
    if (it->first > at) gaps.emplace_back(at, it->first);
    at = std::max(at, it->second.end);
  }
  if (at < end) gaps.emplace_back(at, end);
  std::vector<Segment> out;
  if (gaps.empty()) return out;
  uint64_t bytes = 0;
  for (const auto& [lo, hi] : gaps) bytes += hi - lo;
  std::shared_ptr<Block> block = block_for(bytes);
  if (!block) return std::nullopt;
  block->out_ticket = ticket;
  uint64_t offset = 0;
  for (const auto& [lo, hi] : gaps) {
    pieces_[lo] = Piece{hi, block, offset, false, ticket, due};
    ++block->pieces;
    ++copying_;
    out.push_back({lo, hi - lo, block->host + offset});
    offset += hi - lo;
    held_bytes_ += hi - lo;
  }
  return out;
}

std::vector<HostCopies::Segment> HostCopies::copied(uint64_t out_done) {
  std::vector<Segment> out;
  if (copying_ == 0) return out;
  for (auto& [address, piece] : pieces_) {
    if (piece.discarded || piece.ticket > out_done) continue;
    piece.discarded = true;
    --copying_;
    out.push_back({address, piece.end - address, piece.block->host + piece.block_offset});
  }
  return out;
}

void HostCopies::split_at(uint64_t address) {
  auto it = pieces_.upper_bound(address);
  if (it == pieces_.begin()) return;
  --it;
  Piece& p = it->second;
  if (it->first >= address || p.end <= address) return;
  Piece tail = p;
  tail.block_offset += address - it->first;
  p.end = address;
  ++p.block->pieces;
  if (!tail.discarded) ++copying_;
  pieces_.emplace(address, std::move(tail));
}

void HostCopies::drop(Map::iterator it) {
  Piece& p = it->second;
  held_bytes_ -= p.end - it->first;
  if (!p.discarded) --copying_;
  if (--p.block->pieces == 0) retiring_.push_back(p.block);
  pieces_.erase(it);
}

HostCopies::Returned HostCopies::give_back(uint64_t address, uint64_t length, uint64_t ticket,
                                           uint64_t back_by) {
  Returned r;
  const uint64_t end = address + length;
  split_at(address);
  split_at(end);
  auto it = pieces_.lower_bound(address);
  while (it != pieces_.end() && it->first < end) {
    Piece& p = it->second;
    if (p.discarded) {
      r.copy_in.push_back({it->first, p.end - it->first, p.block->host + p.block_offset});
      p.block->in_ticket = std::max(p.block->in_ticket, ticket);
      // Kept until seen done: for copy_back_pending() always, for the guard when tracked.
      if (ticket != 0 || back_by != kUntracked) {
        returning_.emplace(it->first, Returning{p.end, ticket, back_by});
        returning_order_.emplace_back(ticket, it->first);
        returning_longest_ = std::max(returning_longest_, p.end - it->first);
      }
    } else {
      r.forgotten_bytes += p.end - it->first;
    }
    drop(it++);
  }
  return r;
}

HostCopies::Returned HostCopies::give_back_all(uint64_t ticket) {
  if (pieces_.empty()) return {};
  const uint64_t lo = pieces_.begin()->first;
  uint64_t hi = 0;
  for (const auto& [address, piece] : pieces_) hi = std::max(hi, piece.end);
  return give_back(lo, hi - lo, ticket);
}

bool HostCopies::holds(uint64_t address, uint64_t end) const {
  auto it = pieces_.upper_bound(address);
  if (it != pieces_.begin() && std::prev(it)->second.end > address) return true;
  return it != pieces_.end() && it->first < end;
}

bool HostCopies::returning(uint64_t address, uint64_t end) const {
  return returning_after(address, end, UINT64_MAX);
}

uint64_t HostCopies::returning_count() const {
  return static_cast<uint64_t>(
      std::count_if(returning_.begin(), returning_.end(),
                    [](const auto& r) { return r.second.back_by != kUntracked; }));
}

template <typename F>
void HostCopies::for_returning(uint64_t address, uint64_t end, F&& f) const {
  // Returning ranges may overlap one another (given back, taken and given back again before the
  // first copy back was seen done): every one starting within the longest length before.
  auto r = returning_.lower_bound(address > returning_longest_ ? address - returning_longest_ : 0);
  for (; r != returning_.end() && r->first < end; ++r) {
    if (r->second.end > address && f(r->second)) return;
  }
}

uint64_t HostCopies::copy_back_pending(uint64_t address, uint64_t end) const {
  uint64_t newest = 0;
  for_returning(address, end, [&](const Returning& r) {
    newest = std::max(newest, r.ticket);
    return false;
  });
  return newest;
}

bool HostCopies::returning_after(uint64_t address, uint64_t end, uint64_t covered) const {
  bool found = false;
  for_returning(address, end, [&](const Returning& r) {
    found = r.back_by != kUntracked && (covered == UINT64_MAX || r.back_by > covered);
    return found;
  });
  return found;
}

bool HostCopies::reaches(uint64_t address, uint64_t end, uint64_t covered) const {
  auto it = pieces_.upper_bound(address);
  if (it != pieces_.begin() && std::prev(it)->second.end > address) --it;
  for (; it != pieces_.end() && it->first < end; ++it) {
    const Piece& p = it->second;
    if (covered == UINT64_MAX || p.due > covered) return true;
  }
  return returning_after(address, end, covered);
}

std::string HostCopies::describe(uint64_t address, uint64_t end) const {
  std::string out;
  auto it = pieces_.upper_bound(address);
  if (it != pieces_.begin() && std::prev(it)->second.end > address) --it;
  for (; it != pieces_.end() && it->first < end; ++it) {
    // Appended piece by piece: `"[" + std::to_string(...)` trips GCC 12's -Wrestrict at -O3
    // (a false positive) in a Release build.
    out += '[';
    out += std::to_string(it->first);
    out += " +";
    out += std::to_string(it->second.end - it->first);
    out += " due ";
    out += std::to_string(it->second.due);
    out += "] ";
  }
  return out;
}

void HostCopies::retire(uint64_t out_done, uint64_t in_done) {
  while (!returning_order_.empty() && returning_order_.front().first <= in_done) {
    const auto [ticket, address] = returning_order_.front();
    returning_order_.pop_front();
    auto [lo, hi] = returning_.equal_range(address);
    for (auto it = lo; it != hi; ++it) {
      if (it->second.ticket == ticket) {
        returning_.erase(it);
        break;
      }
    }
  }
  if (frozen_) return;
  for (size_t i = 0; i < retiring_.size();) {
    const auto& b = retiring_[i];
    if (b->out_ticket <= out_done && b->in_ticket <= in_done) {
      cached_.emplace(b->bytes, b);
      retiring_[i] = std::move(retiring_.back());
      retiring_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace umswap::advisor
