// BoundaryHold (boundary_hold.h): which launch waits, for how long, and who decides.
#include "umswap/advisor/boundary_hold.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace umswap::advisor {
namespace {

using namespace std::chrono_literals;
using Clock = BoundaryHold::Clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(BoundaryHold, OnlyTheArmedLaunchWaits) {
  BoundaryHold h;
  EXPECT_FALSE(h.hold(0));  // nothing armed
  h.arm(10);
  EXPECT_FALSE(h.hold(9));
  EXPECT_FALSE(h.hold(11));
  h.release();
  EXPECT_FALSE(h.hold(10));  // released before it came
  EXPECT_FALSE(h.claim(10));
  EXPECT_EQ(h.stats().held, 0u);
}

// Not claimed: it waits as long as the iteration before it took (arm() to its arrival), not
// longer, and a claim after that fails (the plan goes to a later boundary).
TEST(BoundaryHold, UnclaimedItWaitsAsLongAsTheIterationTook) {
  BoundaryHold h(5s);
  h.arm(7);
  std::this_thread::sleep_for(50ms);  // the iteration
  const auto t0 = Clock::now();
  EXPECT_TRUE(h.hold(7));
  const double waited = seconds_since(t0);
  EXPECT_GE(waited, 0.045);
  EXPECT_LT(waited, 2.0);
  EXPECT_FALSE(h.claim(7));
  EXPECT_FALSE(h.hold(7));  // once only
  EXPECT_EQ(h.stats().gave_up, 1u);
  EXPECT_EQ(h.stats().held, 1u);
}

TEST(BoundaryHold, UnclaimedItWaitsAtMostItsLimit) {
  BoundaryHold h(20ms);
  h.arm(3);
  std::this_thread::sleep_for(300ms);  // a long iteration
  const auto t0 = Clock::now();
  EXPECT_TRUE(h.hold(3));
  EXPECT_LT(seconds_since(t0), 0.25);
  EXPECT_EQ(h.stats().gave_up, 1u);
}

// Claimed while it waits: it waits on, past its own limit, until the plan is in force.
TEST(BoundaryHold, AClaimKeepsItUntilRelease) {
  BoundaryHold h(30ms);
  h.arm(5);
  std::this_thread::sleep_for(30ms);
  std::atomic<bool> done{false};
  std::thread launch([&] {
    h.hold(5);
    done = true;
  });
  while (h.stats().held == 0) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(h.claim(5));
  std::this_thread::sleep_for(150ms);  // well past 30 ms
  EXPECT_FALSE(done.load());
  h.release();
  launch.join();
  EXPECT_TRUE(done.load());
  const BoundaryHold::Stats s = h.stats();
  EXPECT_EQ(s.claimed, 1u);
  EXPECT_EQ(s.gave_up, 0u);
  EXPECT_GE(s.held_seconds, 0.1);
}

// Claimed before the launch arrives: it waits for the release when it comes.
TEST(BoundaryHold, AClaimBeforeTheLaunchHoldsItOnArrival) {
  BoundaryHold h(10ms);
  h.arm(2);
  EXPECT_TRUE(h.claim(2));
  std::thread advisor([&] {
    std::this_thread::sleep_for(100ms);
    h.release();
  });
  const auto t0 = Clock::now();
  EXPECT_TRUE(h.hold(2));
  EXPECT_GE(seconds_since(t0), 0.05);
  advisor.join();
  EXPECT_FALSE(h.claim(2));
}

// A release (no plan after all) lets the waiting launch go at once.
TEST(BoundaryHold, AReleaseWithoutAClaimEndsTheWait) {
  BoundaryHold h(5s);
  h.arm(4);
  std::this_thread::sleep_for(800ms);  // it could wait 0.8 s unclaimed
  std::thread advisor([&] {
    while (h.stats().held == 0) std::this_thread::sleep_for(1ms);
    h.release();
  });
  const auto t0 = Clock::now();
  EXPECT_TRUE(h.hold(4));
  EXPECT_LT(seconds_since(t0), 0.7);
  advisor.join();
  EXPECT_EQ(h.stats().gave_up, 0u);  // released, not given up
  EXPECT_EQ(h.stats_json()["held"], 1);
}

}  // namespace
}  // namespace umswap::advisor
