#include "umswap/tracer/launch_log.h"

#include <algorithm>
#include <memory>

namespace umswap::tracer {

LaunchLog::LaunchLog(const Limits& limits)
    : steps_(std::clamp<uint32_t>(limits.chunk_log2, 4, 24), limits.max_steps),
      hits_(std::clamp<uint32_t>(limits.chunk_log2, 4, 24), limits.max_hits),
      max_steps_(limits.max_steps),
      max_hits_(limits.max_hits) {}

bool LaunchLog::append(const LoggedStep& step, std::span<const PointerHit> hits) {
  const uint64_t n = published_.load(std::memory_order_relaxed);  // only this writer changes it
  if (n >= max_steps_ || !steps_.ensure(n)) return false;
  uint64_t first = hit_end_;
  if (!hits.empty()) {
    if (hits.size() > hits_.chunk_size()) return false;
    // Keep the step's hits in one chunk: start a new chunk if they would cross the boundary.
    const uint64_t room = hits_.chunk_size() - (first & (hits_.chunk_size() - 1));
    if (hits.size() > room) first += room;
    if (first + hits.size() > max_hits_ || !hits_.ensure(first)) return false;
    std::uninitialized_copy(hits.begin(), hits.end(), hits_.at(first));
  }
  LoggedStep* slot = std::construct_at(steps_.at(n), step);
  slot->first_hit = first;
  slot->hit_count = static_cast<uint32_t>(hits.size());
  hit_end_ = first + hits.size();
  // Publish: a reader that sees n + 1 sees the step and its hits (see the header).
  published_.store(n + 1, std::memory_order_release);
  return true;
}

std::vector<uint32_t> LaunchLog::copy_keys(uint64_t first, uint64_t max) const {
  const uint64_t end = size();
  if (first >= end) return {};
  const uint64_t count = std::min(end - first, max);
  std::vector<uint32_t> keys(count);
  for (uint64_t i = 0; i < count; ++i) keys[i] = step(first + i).key;
  return keys;
}

bool LaunchLog::copy_steps(uint64_t first, uint64_t count, StepLog* out) const {
  if (first + count > size() || first + count < first) return false;
  out->keys.clear();
  out->streams.clear();
  out->hits.clear();
  out->first_hit.clear();
  out->keys.reserve(count);
  out->streams.reserve(count);
  out->first_hit.reserve(count + 1);
  for (uint64_t i = first; i < first + count; ++i) {
    const LoggedStep& s = step(i);
    out->keys.push_back(s.key);
    out->streams.push_back(s.stream);
    out->first_hit.push_back(out->hits.size());
    const auto h = hits(s);
    out->hits.insert(out->hits.end(), h.begin(), h.end());
  }
  out->first_hit.push_back(out->hits.size());
  return true;
}

}  // namespace umswap::tracer
