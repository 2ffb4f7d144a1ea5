#include "umswap/tracer/extents.h"

#include <algorithm>

namespace umswap::tracer {
namespace {

struct Seen {
  BufferId buffer = 0;
  uint64_t pointer = 0;
  friend auto operator<=>(const Seen&, const Seen&) = default;
};

void collect(std::span<const PointerHit> hits, std::vector<Seen>& seen) {
  for (const PointerHit& h : hits) seen.push_back({h.buffer, h.pointer});
}

void sort_unique(std::vector<Seen>& seen) {
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
}

// End of the extent starting at `hit`: the next larger pointer into its buffer, or the end of
// the allocation it lies in (the buffer's, or its block's in a slab).
uint64_t extent_end(const PointerHit& hit, const std::vector<Seen>& seen) {
  const uint64_t buffer_end = hit.base + hit.size;
  const uint64_t end = hit.limit > hit.pointer && hit.limit < buffer_end ? hit.limit : buffer_end;
  const auto it = std::upper_bound(seen.begin(), seen.end(), Seen{hit.buffer, hit.pointer});
  if (it != seen.end() && it->buffer == hit.buffer && it->pointer < end) return it->pointer;
  return end;
}

}  // namespace

void compute_extents(std::span<const std::span<const PointerHit>> steps,
                     const std::function<uint32_t(BufferId)>& buffer_index,
                     std::vector<trace::Access>& accesses, std::vector<uint64_t>& step_first,
                     ExtentScope scope) {
  accesses.clear();
  step_first.clear();
  step_first.reserve(steps.size() + 1);
  std::vector<Seen> seen;
  if (scope == ExtentScope::iteration) {
    for (const auto& hits : steps) collect(hits, seen);
    sort_unique(seen);
  }
  for (const auto& hits : steps) {
    step_first.push_back(accesses.size());
    if (scope == ExtentScope::step) {
      seen.clear();
      collect(hits, seen);
      sort_unique(seen);
    }
    for (const PointerHit& h : hits) {
      if (h.pointer < h.base || h.pointer - h.base >= h.size) continue;  // not a hit at all
      const uint64_t end = extent_end(h, seen);
      accesses.push_back(trace::Access{.buffer = buffer_index(h.buffer),
                                       .offset = h.pointer - h.base,
                                       .length = end - h.pointer});
    }
  }
  step_first.push_back(accesses.size());
}

}  // namespace umswap::tracer
