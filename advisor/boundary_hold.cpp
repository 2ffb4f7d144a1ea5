#include "umswap/advisor/boundary_hold.h"

#include <algorithm>

namespace umswap::advisor {

void BoundaryHold::arm(uint64_t launch) {
  {
    std::lock_guard lock(mutex_);
    armed_at_ = Clock::now();
    claimed_ = false;
    armed_.store(launch, std::memory_order_seq_cst);
  }
  released_.notify_all();  // a launch still held for an earlier arm goes on
}

bool BoundaryHold::hold(uint64_t index) {
  if (armed_.load(std::memory_order_seq_cst) != index) return false;
  std::unique_lock lock(mutex_);
  if (armed_.load(std::memory_order_relaxed) != index) return false;  // released meanwhile
  const Clock::time_point arrived = Clock::now();
  const Clock::time_point unclaimed_until =
      arrived + std::clamp(arrived - armed_at_, Clock::duration::zero(), most_);
  ++stats_.held;
  waiting_ = true;
  const auto released = [&] { return armed_.load(std::memory_order_relaxed) != index; };
  if (!released_.wait_until(lock, unclaimed_until, [&] { return released() || claimed_; })) {
    ++stats_.gave_up;  // not claimed in time: no plan can start here any more
  } else if (claimed_ && !released_.wait_until(lock, arrived + kClaimedMost, released)) {
    ++stats_.claim_timeouts;
  }
  waiting_ = false;
  if (armed_.load(std::memory_order_relaxed) == index)
    armed_.store(kNone, std::memory_order_relaxed);
  stats_.held_seconds += std::chrono::duration<double>(Clock::now() - arrived).count();
  return true;
}

bool BoundaryHold::claim(uint64_t launch) {
  std::lock_guard lock(mutex_);
  if (armed_.load(std::memory_order_relaxed) != launch) return false;
  if (!waiting_ && launched_.load(std::memory_order_seq_cst) > launch) {
    armed_.store(kNone, std::memory_order_relaxed);  // it went on (armed too late)
    return false;
  }
  claimed_ = true;
  ++stats_.claimed;
  return true;
}

void BoundaryHold::release() {
  {
    std::lock_guard lock(mutex_);
    // Release: a launch that reads it on hold()'s fast path sees the plan made before it.
    armed_.store(kNone, std::memory_order_release);
    claimed_ = false;
  }
  released_.notify_all();
}

BoundaryHold::Stats BoundaryHold::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

nlohmann::json BoundaryHold::stats_json() const {
  const Stats s = stats();
  return {{"held", s.held},
          {"claimed", s.claimed},
          {"gave_up", s.gave_up},
          {"claim_timeouts", s.claim_timeouts},
          {"held_seconds", s.held_seconds}};
}

}  // namespace umswap::advisor
