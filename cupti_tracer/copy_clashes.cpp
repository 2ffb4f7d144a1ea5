#include "umswap/tracer/copy_clashes.h"

#include <algorithm>
#include <unordered_map>

namespace umswap::tracer {
namespace {

constexpr uint64_t kPage = 2 << 20;

struct Span {
  uint64_t start, end;
  CopyClashKind kind;
};

using CopiesByPage = std::unordered_map<uint64_t, std::vector<const OwnCopySpan*>>;

// Per 2 MiB page, the copies that cover it, in time order (spans without a proper end left
// out); *counted: how many copies were taken.
CopiesByPage copies_by_page(std::span<const OwnCopySpan> copies, uint64_t* counted) {
  CopiesByPage by_page;
  for (const OwnCopySpan& c : copies) {
    if (c.length == 0 || c.end_ns < c.start_ns) continue;
    ++*counted;
    for (uint64_t p = c.address / kPage * kPage; p < c.address + c.length; p += kPage) {
      by_page[p].push_back(&c);
    }
  }
  for (auto& [page, list] : by_page) {
    std::sort(list.begin(), list.end(),
              [](const OwnCopySpan* a, const OwnCopySpan* b) { return a->start_ns < b->start_ns; });
  }
  return by_page;
}

}  // namespace

const char* to_string(CopyClashKind kind) {
  switch (kind) {
    case CopyClashKind::during_copy_out:
      return "during_copy_out";
    case CopyClashKind::discarded:
      return "discarded";
    case CopyClashKind::during_copy_back:
      return "during_copy_back";
  }
  return "?";
}

CopyClashReport find_copy_clashes(std::span<const OwnCopySpan> copies,
                                  std::span<const StepAccessSpan> accesses, size_t keep) {
  CopyClashReport report;
  const CopiesByPage by_page = copies_by_page(copies, &report.copies);
  std::unordered_map<uint64_t, std::vector<Span>> spans;
  for (const auto& [page, list] : by_page) {
    std::vector<Span>& out = spans[page];
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i]->to_gpu) continue;
      size_t next = i + 1;
      while (next < list.size() && !list[next]->to_gpu) ++next;
      if (next == list.size()) break;  // no copy back seen: unchecked
      const OwnCopySpan& out_copy = *list[i];
      const OwnCopySpan& back = *list[next];
      ++report.pages_checked;
      out.push_back({out_copy.start_ns, out_copy.end_ns, CopyClashKind::during_copy_out});
      if (back.start_ns > out_copy.end_ns) {
        out.push_back({out_copy.end_ns, back.start_ns, CopyClashKind::discarded});
      }
      out.push_back({back.start_ns, back.end_ns, CopyClashKind::during_copy_back});
      i = next;
    }
    std::sort(out.begin(), out.end(),
              [](const Span& a, const Span& b) { return a.start < b.start; });
  }
  std::vector<CopyClash> harmful, other;
  for (const StepAccessSpan& a : accesses) {
    if (a.hi <= a.lo || a.start_ns == 0 || a.end_ns < a.start_ns) continue;
    for (uint64_t p = a.lo / kPage * kPage; p < a.hi; p += kPage) {
      const auto it = spans.find(p);
      if (it == spans.end()) continue;
      const std::vector<Span>& list = it->second;
      // Spans of one page do not overlap much: every one that starts before the step ends.
      const auto last = std::upper_bound(list.begin(), list.end(), a.end_ns,
                                         [](uint64_t t, const Span& s) { return t <= s.start; });
      for (auto s = list.begin(); s != last; ++s) {
        if (s->end <= a.start_ns) continue;
        ++report.clashes;
        const CopyClash c{a.step, p, s->kind, a.start_ns > s->start ? a.start_ns - s->start : 0};
        if (s->kind == CopyClashKind::during_copy_out) {
          other.push_back(c);
        } else {
          ++report.harmful;
          harmful.push_back(c);
        }
      }
    }
  }
  const auto by_step = [](const CopyClash& a, const CopyClash& b) {
    return a.step != b.step ? a.step < b.step : a.page < b.page;
  };
  std::sort(harmful.begin(), harmful.end(), by_step);
  std::sort(other.begin(), other.end(), by_step);
  for (const auto* list : {&harmful, &other}) {
    for (const CopyClash& c : *list) {
      if (report.first.size() >= keep) break;
      report.first.push_back(c);
    }
  }
  return report;
}

UnforeseenReport find_unforeseen_faults(std::span<const OwnCopySpan> copies,
                                        std::span<const FaultAt> faults, size_t keep) {
  UnforeseenReport report;
  uint64_t counted = 0;
  const CopiesByPage by_page = copies_by_page(copies, &counted);
  // Per page, its discarded windows [copy out's end, copy back's start), in time order.
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> windows;
  for (const auto& [page, list] : by_page) {
    for (size_t i = 0; i + 1 < list.size(); ++i) {
      if (list[i]->to_gpu && !list[i + 1]->to_gpu && list[i + 1]->start_ns < list[i]->end_ns) {
        ++report.outs_before_back;
        if (report.outs_before_back_pages.size() < keep)
          report.outs_before_back_pages.push_back(page);
      }
      if (list[i]->to_gpu || !list[i + 1]->to_gpu) continue;
      if (list[i + 1]->start_ns <= list[i]->end_ns) continue;
      windows[page].emplace_back(list[i]->end_ns, list[i + 1]->start_ns);
      ++report.windows;
    }
  }
  std::vector<UnforeseenAccess> found;
  for (const FaultAt& f : faults) {
    const uint64_t page = f.address / kPage * kPage;
    const auto it = windows.find(page);
    if (it == windows.end()) continue;
    const auto& list = it->second;
    // The last window that starts at or before the fault.
    auto w = std::upper_bound(list.begin(), list.end(), f.time_ns,
                              [](uint64_t t, const auto& x) { return t < x.first; });
    if (w == list.begin()) continue;
    --w;
    if (f.time_ns >= w->second) continue;
    ++report.faults;
    found.push_back({f.address, page, f.time_ns, f.access, f.buffer, f.time_ns - w->first});
  }
  std::sort(found.begin(), found.end(), [](const UnforeseenAccess& a, const UnforeseenAccess& b) {
    return a.time_ns < b.time_ns;
  });
  if (found.size() > keep) found.resize(keep);
  report.first = std::move(found);
  return report;
}

namespace {

using Intervals = std::vector<std::pair<uint64_t, uint64_t>>;  // sorted, disjoint [start, end)

Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& [s, e] : v) {
    if (e <= s) continue;
    if (!out.empty() && s <= out.back().second) {
      out.back().second = std::max(out.back().second, e);
    } else {
      out.emplace_back(s, e);
    }
  }
  return out;
}

Intervals intersected(const Intervals& a, const Intervals& b) {
  Intervals out;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const uint64_t s = std::max(a[i].first, b[j].first), e = std::min(a[i].second, b[j].second);
    if (s < e) out.emplace_back(s, e);
    (a[i].second < b[j].second ? i : j)++;
  }
  return out;
}

// The length of `v` inside [lo, hi); `from` is where the previous (earlier) window's scan ended.
uint64_t covered(const Intervals& v, uint64_t lo, uint64_t hi, size_t* from) {
  size_t i = *from;
  while (i < v.size() && v[i].second <= lo) ++i;
  *from = i;
  uint64_t sum = 0;
  for (; i < v.size() && v[i].first < hi; ++i) {
    sum += std::min(v[i].second, hi) - std::max(v[i].first, lo);
  }
  return sum;
}

}  // namespace

std::vector<CopyBusy> copy_busy(std::span<const OwnCopySpan> copies,
                                std::span<const std::pair<uint64_t, uint64_t>> windows) {
  Intervals out, in;
  for (const OwnCopySpan& c : copies) (c.to_gpu ? in : out).emplace_back(c.start_ns, c.end_ns);
  out = merged(std::move(out));
  in = merged(std::move(in));
  const Intervals both = intersected(out, in);
  // Windows in order of start let each scan resume where the last one ended.
  std::vector<size_t> order(windows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return windows[a].first < windows[b].first; });
  std::vector<CopyBusy> result(windows.size());
  size_t o = 0, n = 0, b = 0;
  for (size_t w : order) {
    const auto [lo, hi] = windows[w];
    if (hi <= lo) continue;
    result[w] = {covered(out, lo, hi, &o), covered(in, lo, hi, &n), covered(both, lo, hi, &b)};
  }
  return result;
}

std::vector<CopyIdleGap> copy_idle_gaps(std::span<const OwnCopySpan> copies,
                                        std::span<const std::pair<uint64_t, uint64_t>> steps,
                                        uint64_t lo, uint64_t hi, size_t keep) {
  std::vector<CopyIdleGap> gaps;
  if (hi <= lo) return gaps;
  Intervals busy;
  for (const OwnCopySpan& c : copies) {
    if (c.end_ns > lo && c.start_ns < hi) busy.emplace_back(c.start_ns, c.end_ns);
  }
  busy = merged(std::move(busy));
  uint64_t at = lo;
  for (const auto& [s, e] : busy) {
    if (s > at) gaps.push_back({at, std::min(s, hi) - at, 0});
    at = std::max(at, e);
    if (at >= hi) break;
  }
  if (at < hi) gaps.push_back({at, hi - at, 0});
  std::stable_sort(gaps.begin(), gaps.end(), [](const CopyIdleGap& a, const CopyIdleGap& b) {
    return a.length_ns > b.length_ns;
  });
  if (gaps.size() > keep) gaps.resize(keep);
  const Intervals step_spans = merged(Intervals(steps.begin(), steps.end()));
  for (CopyIdleGap& g : gaps) {
    size_t from = 0;
    g.step_busy_ns = covered(step_spans, g.start_ns, g.start_ns + g.length_ns, &from);
  }
  return gaps;
}

}  // namespace umswap::tracer
