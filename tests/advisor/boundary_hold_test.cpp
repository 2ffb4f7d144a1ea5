// BoundaryHold (boundary_hold.h): which launch waits, for how long, and who decides. `launched`
// plays the launch path's counter: it says index + 1 before hold(index), as on_step does.
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

// The launch path's side: launch `index` counted, then held.
bool launch(std::atomic<uint64_t>& launched, BoundaryHold& h, uint64_t index) {
  launched.store(index + 1);
  return h.hold(index);
}

// Launch `index`, which must be held: the seconds it waited.
double held_launch(std::atomic<uint64_t>& launched, BoundaryHold& h, uint64_t index) {
  const auto t0 = Clock::now();
  EXPECT_TRUE(launch(launched, h, index));
  return seconds_since(t0);
}

// Waits until `count` launches are held (at most 10 s: then the test fails, not hangs).
void wait_until_held(const BoundaryHold& h, uint64_t count) {
  const auto until = Clock::now() + 10s;
  while (h.stats().held < count && Clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_GE(h.stats().held, count) << "no launch held";
}

TEST(BoundaryHold, OnlyTheArmedLaunchWaits) {
  std::atomic<uint64_t> launched{0};
  BoundaryHold h(launched);
  EXPECT_FALSE(launch(launched, h, 0));  // nothing armed
  h.arm(10);
  EXPECT_FALSE(launch(launched, h, 9));
  h.release();
  EXPECT_FALSE(launch(launched, h, 10));  // released before it came
  EXPECT_FALSE(h.claim(10));
  EXPECT_EQ(h.stats().held, 0u);
}

// Armed too late: the launch went on before it was armed, and a claim must not take it (the plan
// would start from a launch already run).
TEST(BoundaryHold, ALaunchThatWentOnCannotBeClaimed) {
  std::atomic<uint64_t> launched{0};
  BoundaryHold h(launched);
  EXPECT_FALSE(launch(launched, h, 10));
  h.arm(10);
  EXPECT_FALSE(h.claim(10));
  EXPECT_FALSE(launch(launched, h, 11));
  const BoundaryHold::Stats s = h.stats();
  EXPECT_EQ(s.claimed, 0u);
  EXPECT_EQ(s.held, 0u);
  // Counted but not yet in hold() when the claim comes: refused, and disarmed, so that the
  // launch does not then wait for a plan that will not come.
  h.arm(20);
  launched.store(21);
  EXPECT_FALSE(h.claim(20));
  EXPECT_FALSE(h.hold(20));
  EXPECT_EQ(h.stats().held, 0u);
}

// Not claimed: it waits as long as the iteration before it took (arm() to its arrival), not
// longer, and a claim after that fails (the plan goes to a later boundary).
TEST(BoundaryHold, UnclaimedItWaitsAsLongAsTheIterationTook) {
  std::atomic<uint64_t> launched{0};
  BoundaryHold h(launched, 5s);
  h.arm(7);
  std::this_thread::sleep_for(50ms);  // the iteration
  const double waited = held_launch(launched, h, 7);
  EXPECT_GE(waited, 0.045);
  EXPECT_LT(waited, 2.0);
  EXPECT_FALSE(h.claim(7));
  EXPECT_FALSE(h.hold(7));  // once only
  EXPECT_EQ(h.stats().gave_up, 1u);
  EXPECT_EQ(h.stats().held, 1u);
}

TEST(BoundaryHold, UnclaimedItWaitsAtMostItsLimit) {
  std::atomic<uint64_t> launched{0};
  BoundaryHold h(launched, 20ms);
  h.arm(3);
  std::this_thread::sleep_for(300ms);  // a long iteration
  EXPECT_LT(held_launch(launched, h, 3), 0.25);
  EXPECT_EQ(h.stats().gave_up, 1u);
}

// Claimed while it waits: it waits on, past its own limit, until the plan is in force.
TEST(BoundaryHold, AClaimKeepsItUntilRelease) {
  std::atomic<uint64_t> launched{0};
  BoundaryHold h(launched, 1s);
  h.arm(5);
  std::this_thread::sleep_for(1s);  // it may wait 1 s unclaimed: time enough to claim it
  std::atomic<bool> done{false};
  std::thread program([&] {
    launch(launched, h, 5);
    done = true;
  });
  wait_until_held(h, 1);
  const auto held = Clock::now();  // it waits since before now
  EXPECT_TRUE(h.claim(5));
  while (seconds_since(held) < 1.5) std::this_thread::sleep_for(10ms);  // past its own 1 s
  EXPECT_FALSE(done.load());
  h.release();
  program.join();
  EXPECT_TRUE(done.load());
  const BoundaryHold::Stats s = h.stats();
  EXPECT_EQ(s.claimed, 1u);
  EXPECT_EQ(s.gave_up, 0u);
  EXPECT_EQ(s.claim_timeouts, 0u);
  EXPECT_GE(s.held_seconds, 1.4);
}

// Claimed before the launch arrives: it waits for the release when it comes.
TEST(BoundaryHold, AClaimBeforeTheLaunchHoldsItOnArrival) {
  std::atomic<uint64_t> launched{2};  // launches 0 and 1 seen: 2 is yet to come
  BoundaryHold h(launched, 10ms);
  h.arm(2);
  EXPECT_TRUE(h.claim(2));
  std::thread advisor([&] {
    wait_until_held(h, 1);
    std::this_thread::sleep_for(100ms);
    h.release();
  });
  EXPECT_GE(held_launch(launched, h, 2), 0.09);
  advisor.join();
  EXPECT_FALSE(h.claim(2));
  EXPECT_EQ(h.stats().gave_up, 0u);
}

// A release (no plan after all) lets the waiting launch go at once.
TEST(BoundaryHold, AReleaseWithoutAClaimEndsTheWait) {
  std::atomic<uint64_t> launched{0};
  BoundaryHold h(launched, 5s);
  h.arm(4);
  std::this_thread::sleep_for(1s);  // it could wait 1 s unclaimed
  std::thread advisor([&] {
    wait_until_held(h, 1);
    h.release();
  });
  EXPECT_LT(held_launch(launched, h, 4), 0.9);
  advisor.join();
  EXPECT_EQ(h.stats().gave_up, 0u);  // released, not given up
  EXPECT_EQ(h.stats_json()["held"], 1);
}

}  // namespace
}  // namespace umswap::advisor
