// The placement's hand-off to the allocator (placement_hand_off.h): when a placement is handed,
// what is said when there is none, and when learning may try again.
#include "umswap/advisor/placement_hand_off.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace umswap::advisor {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kPeriod = 10;

// Two iterations of [0, 10) and [10, 20), each allocating two large blocks and freeing both
// within the iteration (what a training iteration does); `second_size` changes the second
// iteration's second block (then the two iterations differ: no placement).
std::vector<BlockEvent> two_iterations(uint64_t second_size = 4 * kMiB, bool free_all = true) {
  std::vector<BlockEvent> e;
  for (uint64_t it = 0; it < 2; ++it) {
    const uint64_t t = it * kPeriod, base = (it + 1) * 1024 * kMiB;
    e.push_back({t + 1, base, 4 * kMiB, false});
    e.push_back({t + 3, base + 64 * kMiB, it == 1 ? second_size : 4 * kMiB, false});
    e.push_back({t + 5, base, 4 * kMiB, true});
    if (free_all) e.push_back({t + 7, base + 64 * kMiB, it == 1 ? second_size : 4 * kMiB, true});
  }
  return e;
}

class PlacementHandOffTest : public ::testing::Test {
 protected:
  std::vector<Placement> given;
  bool accept = true;
  std::function<bool(Placement)> place = [this](Placement p) {
    given.push_back(p);
    return accept;
  };
};

TEST_F(PlacementHandOffTest, HandsThePlacementAtItsLaunchNotBefore) {
  PlacementHandOff h(place);
  ASSERT_TRUE(h.may_try());
  ASSERT_TRUE(h.try_learned(two_iterations(), kPeriod, kPeriod)) << h.note();
  h.hand_at(40);
  EXPECT_TRUE(h.pending());
  EXPECT_FALSE(h.may_try());
  EXPECT_FALSE(h.tend(39));
  EXPECT_TRUE(given.empty());
  EXPECT_TRUE(h.tend(41));
  ASSERT_EQ(given.size(), 1u);
  EXPECT_FALSE(h.pending());
  ASSERT_TRUE(h.handed().has_value());
  EXPECT_EQ(h.handed()->sizes, given[0].sizes);
  EXPECT_EQ(h.handed()->placed, 2u);
  EXPECT_EQ(h.learn_again_from(), 40 + kPeriod);
  EXPECT_EQ(h.placed_period(), kPeriod) << "handed online: learned again with its period";
  h.learned();
  EXPECT_EQ(h.placed_period(), 0u);
  const nlohmann::json s = h.stats_json();
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["placed_blocks"], 2);
  EXPECT_EQ(s["arena_bytes"], h.handed()->arena_bytes);
  EXPECT_FALSE(h.tend(42)) << "handed once";
  EXPECT_EQ(given.size(), 1u);
}

TEST_F(PlacementHandOffTest, AnAllocatorThatRefusesLeavesANote) {
  accept = false;
  PlacementHandOff h(place);
  ASSERT_TRUE(h.try_learned(two_iterations(), kPeriod, kPeriod));
  h.hand_at(20);
  EXPECT_FALSE(h.tend(20));
  EXPECT_EQ(given.size(), 1u);
  EXPECT_FALSE(h.handed().has_value());
  EXPECT_FALSE(h.pending());
  EXPECT_EQ(h.placed_period(), 0u) << "nothing handed";
  EXPECT_NE(h.note().find("could not make the arena"), std::string::npos) << h.note();
  EXPECT_EQ(h.stats_json(), nlohmann::json(h.note()));
}

TEST_F(PlacementHandOffTest, IterationsThatDifferGiveNoneAndAreTriedAtMostFourTimes) {
  PlacementHandOff h(place);
  EXPECT_EQ(h.stats_json(), nlohmann::json(nullptr)) << "nothing tried: null";
  for (int i = 0; i < PlacementHandOff::kAttempts; ++i) {
    ASSERT_TRUE(h.may_try()) << "attempt " << i;
    EXPECT_FALSE(h.try_learned(two_iterations(6 * kMiB), kPeriod, kPeriod));
    EXPECT_FALSE(h.pending());
    EXPECT_FALSE(h.note().empty());
  }
  EXPECT_FALSE(h.may_try());
  EXPECT_TRUE(h.stats_json().is_string());
  EXPECT_TRUE(given.empty());
}

TEST_F(PlacementHandOffTest, BlocksKeptPastTheIterationAreAnInnerLoop) {
  PlacementHandOff h(place);
  EXPECT_FALSE(h.try_learned(two_iterations(4 * kMiB, false), kPeriod, kPeriod));
  EXPECT_NE(h.note().find("inner loop"), std::string::npos) << h.note();
}

TEST_F(PlacementHandOffTest, APlanEndingOnThePlacedPeriodLetsTheNextPlanPlaceAgain) {
  PlacementHandOff h(place);
  ASSERT_TRUE(h.try_learned(two_iterations(), kPeriod, kPeriod));
  h.hand_at(20);
  ASSERT_TRUE(h.tend(20));
  EXPECT_FALSE(h.may_try());
  EXPECT_EQ(h.placed_period(), kPeriod);
  h.plan_ended(kPeriod + 1);
  EXPECT_EQ(h.placed_period(), 0u)
      << "a plan ended: detected as usual";  // another period: the placement was not its
  EXPECT_FALSE(h.may_try());
  h.plan_ended(kPeriod);
  EXPECT_TRUE(h.may_try());
  h.settle();  // a replay plan was replaced: never again
  EXPECT_FALSE(h.may_try());
}

TEST_F(PlacementHandOffTest, ATraceWithoutAnArenaSaysSo) {
  PlacementHandOff h(place);
  trace::Trace t;
  h.from_trace(t);
  EXPECT_FALSE(h.pending());
  EXPECT_FALSE(h.may_try());
  EXPECT_EQ(h.note(), "the trace was recorded without a placement");
}

}  // namespace
}  // namespace umswap::advisor
