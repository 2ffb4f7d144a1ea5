#include "umswap/tracer/lifetimes.h"

#include <algorithm>

namespace umswap::tracer {

std::vector<trace::Lifetime> lifetimes_in(std::span<const LifetimeEvent> events,
                                          std::span<const std::pair<uint64_t, uint64_t>> buffers) {
  std::vector<std::pair<uint64_t, uint32_t>> by_base;  // (base, buffer index)
  by_base.reserve(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    by_base.emplace_back(buffers[b].first, static_cast<uint32_t>(b));
  }
  std::sort(by_base.begin(), by_base.end());
  std::vector<trace::Lifetime> out;
  for (const LifetimeEvent& e : events) {
    if (e.bytes == 0) continue;
    auto it = std::upper_bound(by_base.begin(), by_base.end(), std::pair{e.address, UINT32_MAX});
    if (it == by_base.begin()) continue;
    --it;
    const uint64_t size = buffers[it->second].second;
    const uint64_t offset = e.address - it->first;
    if (offset >= size || e.bytes > size - offset) continue;
    out.push_back({e.when, it->second, offset, e.bytes, e.freed});
  }
  return out;
}

}  // namespace umswap::tracer
