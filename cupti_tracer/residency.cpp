#include "umswap/tracer/residency.h"

#include <algorithm>
#include <iterator>

namespace umswap::tracer {

void ResidentSet::add(uint64_t lo, uint64_t hi) {
  if (lo >= hi) return;
  // Absorb every range that overlaps or touches [lo, hi).
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin() && std::prev(it)->second >= lo) --it;
  while (it != ranges_.end() && it->first <= hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    bytes_ -= it->second - it->first;
    it = ranges_.erase(it);
  }
  ranges_.emplace(lo, hi);
  bytes_ += hi - lo;
}

void ResidentSet::remove(uint64_t lo, uint64_t hi) {
  if (lo >= hi) return;
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin() && std::prev(it)->second > lo) --it;
  while (it != ranges_.end() && it->first < hi) {
    const uint64_t begin = it->first, end = it->second;
    bytes_ -= end - begin;
    it = ranges_.erase(it);
    if (begin < lo) {
      ranges_.emplace(begin, lo);
      bytes_ += lo - begin;
    }
    if (end > hi) {
      ranges_.emplace(hi, end);
      bytes_ += end - hi;
      break;
    }
  }
}

uint64_t ResidentSet::bytes_outside(const ResidentSet& other) const {
  uint64_t bytes = 0;
  auto o = other.ranges_.begin();
  for (const auto& [lo, hi] : ranges_) {
    uint64_t at = lo;
    while (o != other.ranges_.end() && o->second <= at) ++o;
    for (auto p = o; p != other.ranges_.end() && p->first < hi && at < hi; ++p) {
      if (p->first > at) bytes += p->first - at;
      at = std::max(at, p->second);
    }
    if (at < hi) bytes += hi - at;
  }
  return bytes;
}

uint64_t ResidentSet::bytes_within(uint64_t lo, uint64_t hi) const {
  uint64_t bytes = 0;
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first < hi; ++it) {
    const uint64_t a = std::max(lo, it->first), b = std::min(hi, it->second);
    if (a < b) bytes += b - a;
  }
  return bytes;
}

std::vector<std::pair<uint64_t, uint64_t>> ResidentSet::ranges_within(uint64_t lo, uint64_t hi,
                                                                      size_t most) const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first < hi && out.size() < most; ++it) {
    const uint64_t a = std::max(lo, it->first), b = std::min(hi, it->second);
    if (a < b) out.emplace_back(a, b);
  }
  return out;
}

ResidencyPeaks count_residency(std::vector<ResidencyEvent> events,
                               std::span<const std::pair<uint64_t, uint64_t>> windows,
                               const PeakVisitor& at_peak) {
  std::stable_sort(
      events.begin(), events.end(),
      [](const ResidencyEvent& a, const ResidencyEvent& b) { return a.when < b.when; });
  ResidencyPeaks peaks;
  peaks.by_window.assign(windows.size(), 0);
  peaks.free_by_window.assign(windows.size(), 0);
  peaks.when_by_window.assign(windows.size(), 0);
  // Pass 1: the peaks, and after how many events each window's was first reached.
  std::vector<size_t> peak_after(windows.size(), 0);
  auto raise = [&](size_t w, uint64_t bytes, size_t applied) {
    if (bytes > peaks.by_window[w]) {
      peaks.by_window[w] = bytes;
      peak_after[w] = applied;
      peaks.when_by_window[w] = applied > 0 ? events[applied - 1].when : 0;
    }
  };
  ResidentSet set;
  size_t w = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const ResidencyEvent& e = events[i];
    // Windows that ended before this event held what was resident when they ended.
    while (w < windows.size() && windows[w].second < e.when) raise(w++, set.bytes(), i);
    const bool inside = w < windows.size() && windows[w].first <= e.when;
    if (inside) raise(w, set.bytes(), i);
    if (e.block) continue;
    if (e.on_gpu) {
      set.add(e.lo, e.hi);
    } else {
      set.remove(e.lo, e.hi);
    }
    peaks.overall = std::max(peaks.overall, set.bytes());
    if (inside) raise(w, set.bytes(), i + 1);
  }
  for (; w < windows.size(); ++w) raise(w, set.bytes(), events.size());
  // Pass 2: what lay outside the live blocks at those moments.
  std::vector<std::pair<size_t, size_t>> moments;  // (events applied, window)
  for (size_t k = 0; k < windows.size(); ++k) {
    if (peaks.by_window[k] > 0) moments.emplace_back(peak_after[k], k);
  }
  std::sort(moments.begin(), moments.end());
  ResidentSet resident, live;
  size_t m = 0;
  for (size_t i = 0; i <= events.size() && m < moments.size(); ++i) {
    for (; m < moments.size() && moments[m].first == i; ++m) {
      peaks.free_by_window[moments[m].second] = resident.bytes_outside(live);
      if (at_peak) at_peak(moments[m].second, resident, live);
    }
    if (i == events.size()) break;
    const ResidencyEvent& e = events[i];
    ResidentSet& target = e.block ? live : resident;
    if (e.on_gpu) {
      target.add(e.lo, e.hi);
    } else {
      target.remove(e.lo, e.hi);
    }
  }
  return peaks;
}

uint64_t own_record_time(std::span<const StepTime> steps, uint64_t before, bool discard,
                         uint64_t noted) {
  const uint64_t after_previous =
      before > 0 && before <= steps.size() ? steps[before - 1].end_ns : 0;
  const uint64_t at_next = before < steps.size() ? steps[before].start_ns : 0;
  const uint64_t first = discard ? after_previous : at_next;
  const uint64_t second = discard ? at_next : after_previous;
  return first ? first : second ? second : noted;
}

uint64_t noted_before(NotedAt at, uint64_t logged) {
  if (logged == UINT64_MAX) return UINT64_MAX;
  return at == NotedAt::launching_step && logged > 0 ? logged - 1 : logged;
}

}  // namespace umswap::tracer
