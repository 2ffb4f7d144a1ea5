// BoundaryHold: the first plan learned online in force from the boundary right after the first
// placed iteration, not a learning iteration later (issue 39: a plan in force by the fourth
// iteration). That iteration is known whole only once the launch after it is logged (its block
// events come before that launch), and the plan then takes 10-40 ms to make, by which time the
// program has passed the boundary: every model's first plan missed it by 2-4 launches and waited
// a whole learning iteration for the next one (run 127, H200, 2026-11-30). So the launch at that
// boundary waits in the launch path while the advisor plans: at most as long as the placed
// iteration took (from arm() to its arrival) and at most `most`; the plan applies from it when
// the advisor claimed it in time. It waits inside the tracer's CUPTI API-enter callback, under
// the tracer's launch mutex: other threads' launches, copies and NVTX marks wait with it, and the
// driver may hold a lock of its own there, so the advisor thread makes no driver call and takes
// no lock a launching thread holds between arm() and release() (it plans from the log, which its
// readers take without a lock).
//
// Contract:
//   * arm(launch): the advisor thread, when the placed iteration starts; `launch` is its end.
//   * hold(index): the launch path, every launch, in launch order, after `launched` (the counter
//     given at construction) says index + 1. Returns at once unless `index` is the launch armed.
//     Then it waits for release(), at most min(its arrival - arm(), most); once claimed, until
//     release() (at most kClaimedMost, a bound in case the advisor thread is stuck: counted).
//   * claim(launch): the advisor thread; true when `launch` is armed and is waiting, or has not
//     come yet (`launched` <= launch): it waits for release() then. False: it went on (or is
//     just about to wait: taken as gone); plan from a later boundary.
//   * release(): the advisor thread; ends the hold, whatever its state (also when the plan could
//     not be made, and at the advisor's end).
// Thread safety: every member from any thread (one mutex; hold()'s common case reads one atomic).
// arm()'s store and claim()'s read of `launched`, and the launch path's store of `launched` and
// hold()'s read, are sequentially consistent: a launch that claim() takes as not yet come sees
// the armed launch when it comes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <nlohmann/json.hpp>

namespace umswap::advisor {

class BoundaryHold {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kClaimedMost = std::chrono::seconds(10);
  static constexpr uint64_t kNone = UINT64_MAX;

  explicit BoundaryHold(const std::atomic<uint64_t>& launched,
                        Clock::duration most = std::chrono::seconds(1))
      : launched_(launched), most_(most) {}

  void arm(uint64_t launch);
  bool hold(uint64_t index);
  bool claim(uint64_t launch);
  void release();

  struct Stats {
    uint64_t held = 0;            // launches that waited
    uint64_t claimed = 0;         // launches claimed by a plan
    uint64_t gave_up = 0;         // waited their longest unclaimed (the plan came a boundary later)
    uint64_t claim_timeouts = 0;  // claimed, but went on after kClaimedMost without a release
    double held_seconds = 0;      // in all
  };
  Stats stats() const;
  nlohmann::json stats_json() const;

 private:
  const std::atomic<uint64_t>& launched_;
  const Clock::duration most_;
  std::atomic<uint64_t> armed_{kNone};
  mutable std::mutex mutex_;
  std::condition_variable released_;
  Clock::time_point armed_at_{};
  bool claimed_ = false;
  bool waiting_ = false;  // the launch armed is in hold()
  Stats stats_;
};

}  // namespace umswap::advisor
