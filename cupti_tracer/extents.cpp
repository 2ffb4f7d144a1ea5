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

// End of the extent starting at `hit`: the next larger pointer into its buffer in `seen`, or the
// end of the allocation it lies in (the buffer's, or its block's in a slab).
uint64_t extent_end(const PointerHit& hit, const std::vector<Seen>& seen) {
  const uint64_t buffer_end = hit.base + hit.size;
  const uint64_t end = hit.limit > hit.pointer && hit.limit < buffer_end ? hit.limit : buffer_end;
  const auto it = std::upper_bound(seen.begin(), seen.end(), Seen{hit.buffer, hit.pointer});
  if (it != seen.end() && it->buffer == hit.buffer && it->pointer < end) return it->pointer;
  return end;
}

// Buffers with two distinct pointers closer than kTensorSpacing: not a caching allocator's segment
// of packed tensors (PyTorch rounds its blocks to 512 bytes) but one allocation with structure
// inside, such as cuDNN's workspace, where a kernel given its base reaches far past other
// kernels' pointers into it (H200, 2026-11-26: pointers at 0, 8, 32, 72, 144 and 288 of a 215 MB
// workspace, ~185 GPU faults an iteration in pages no extent covered). Sorted.
constexpr uint64_t kTensorSpacing = 512;
std::vector<BufferId> structured_buffers(const std::vector<Seen>& seen) {
  std::vector<BufferId> out;
  for (size_t i = 1; i < seen.size(); ++i) {
    if (seen[i].buffer == seen[i - 1].buffer &&
        seen[i].pointer - seen[i - 1].pointer < kTensorSpacing &&
        (out.empty() || out.back() != seen[i].buffer)) {
      out.push_back(seen[i].buffer);
    }
  }
  return out;
}

}  // namespace

void compute_extents(std::span<const std::span<const PointerHit>> steps,
                     const std::function<uint32_t(BufferId)>& buffer_index,
                     std::vector<trace::Access>& accesses, std::vector<uint64_t>& step_first,
                     ExtentScope scope) {
  accesses.clear();
  step_first.clear();
  step_first.reserve(steps.size() + 1);
  std::vector<Seen> in_iteration, in_step;
  std::vector<BufferId> structured;
  if (scope == ExtentScope::iteration) {
    for (const auto& hits : steps) collect(hits, in_iteration);
    sort_unique(in_iteration);
    structured = structured_buffers(in_iteration);
  }
  for (const auto& hits : steps) {
    step_first.push_back(accesses.size());
    in_step.clear();
    collect(hits, in_step);
    sort_unique(in_step);
    for (const PointerHit& h : hits) {
      if (h.pointer < h.base || h.pointer - h.base >= h.size) continue;  // not a hit at all
      // A slab block's own end is known; other steps' pointers into the slab are other tensors'
      // (its space holds different tensors at different times): only this step's may end it.
      // The same in a buffer with structure inside (structured_buffers()).
      const bool own_step = scope == ExtentScope::step || h.limit != 0 ||
                            std::binary_search(structured.begin(), structured.end(), h.buffer);
      const uint64_t end = extent_end(h, own_step ? in_step : in_iteration);
      accesses.push_back(trace::Access{.buffer = buffer_index(h.buffer),
                                       .offset = h.pointer - h.base,
                                       .length = end - h.pointer});
    }
  }
  step_first.push_back(accesses.size());
}

void compute_extents_by_chunk(std::span<const std::span<const PointerHit>> steps,
                              std::span<const uint64_t> boundaries,
                              const std::function<uint32_t(BufferId)>& buffer_index,
                              std::vector<trace::Access>& accesses,
                              std::vector<uint64_t>& step_first) {
  accesses.clear();
  step_first.clear();
  step_first.reserve(steps.size() + 1);
  std::vector<trace::Access> chunk_accesses;
  std::vector<uint64_t> chunk_first;
  uint64_t begin = 0;
  for (size_t k = 0; k <= boundaries.size(); ++k) {
    const uint64_t end = k < boundaries.size() ? boundaries[k] : steps.size();
    if (end <= begin || end > steps.size()) continue;  // not increasing or out of range: skipped
    compute_extents(steps.subspan(begin, end - begin), buffer_index, chunk_accesses, chunk_first);
    for (uint64_t i = 0; i + 1 < chunk_first.size(); ++i) {
      step_first.push_back(accesses.size() + chunk_first[i]);
    }
    accesses.insert(accesses.end(), chunk_accesses.begin(), chunk_accesses.end());
    begin = end;
  }
  step_first.push_back(accesses.size());
}

}  // namespace umswap::tracer
