// The placement's hand-off to the allocator (placement_hand_off.h): when a placement is handed,
// what is said when there is none, and when learning may try again.
#include "umswap/advisor/placement_hand_off.h"

#include <gtest/gtest.h>

#include "umswap/allocator/managed_allocator.h"

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
  EXPECT_EQ(h.learn_again_from(), 40u) << "the first placed iteration";
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

TEST_F(PlacementHandOffTest, ATraceWithoutAnIterationSaysSo) {
  PlacementHandOff h(place);
  trace::Trace t;
  h.from_trace(t);
  EXPECT_FALSE(h.pending());
  EXPECT_FALSE(h.may_try());
  EXPECT_EQ(h.note(), "the trace holds no iteration of its period");
}

// A trace of two iterations of kPeriod steps from step 0. Buffer 0 is an arena of 64 MiB, buffer
// 1 a slab outside it. Each iteration allocates, in this order: 8 MiB at arena offset 16 MiB,
// 4 MiB in the slab (not placed), a small block of 512 KiB (left to the small slabs), 8 MiB at
// arena offset 0; it frees the arena blocks before its end. With `arena` false, buffer 0 is an
// ordinary allocation.
trace::Trace placed_trace(bool arena = true) {
  trace::Trace t;
  t.detection.period = kPeriod;
  t.iterations.push_back({0, kPeriod, 0, 0, {}});
  t.iterations.push_back({kPeriod, kPeriod, 0, 0, {}});
  t.buffers.push_back({1, 64 * kMiB, arena ? ManagedAllocator::kArenaSite : 7, 0, 0, false});
  t.buffers.push_back({2, 32 * kMiB, 9, 0, 0, false});
  for (uint64_t i = 0; i < 2; ++i) {
    const uint64_t s = i * kPeriod;
    t.lifetimes.push_back({s + 1, 0, 16 * kMiB, 8 * kMiB, false});
    t.lifetimes.push_back({s + 2, 1, 4 * kMiB * i, 4 * kMiB, false});
    t.lifetimes.push_back({s + 3, 0, 40 * kMiB, 512 * 1024, false});
    t.lifetimes.push_back({s + 4, 0, 0, 8 * kMiB, false});
    t.lifetimes.push_back({s + 6, 0, 16 * kMiB, 8 * kMiB, true});
    t.lifetimes.push_back({s + 7, 0, 40 * kMiB, 512 * 1024, true});
    t.lifetimes.push_back({s + 8, 0, 0, 8 * kMiB, true});
  }
  return t;
}

TEST(RecordedPlacement, TheIterationsBlocksAtTheirRecordedOffsets) {
  std::string why;
  const std::optional<Placement> p = recorded_placement(placed_trace(), 1, kMiB, &why);
  ASSERT_TRUE(p.has_value()) << why;
  EXPECT_EQ(p->arena_bytes, 64 * kMiB);
  EXPECT_EQ(p->sizes, (std::vector<uint64_t>{8 * kMiB, 4 * kMiB, 8 * kMiB}))
      << "blocks of more than min_bytes, in allocation order";
  EXPECT_EQ(p->offsets, (std::vector<uint64_t>{16 * kMiB, Placement::kUnplaced, 0}));
  EXPECT_EQ(p->placed, 2u);
  EXPECT_EQ(p->live_peak, 16 * kMiB + 512 * 1024) << "both 8 MiB blocks and the small one";
  EXPECT_EQ(p->page_peak, 9 * Placement::kPage) << "pages 0-3, 8-11 and 20";
  EXPECT_EQ(p->order, "as recorded in the trace");
}

TEST(RecordedPlacement, ATraceWithoutAnArenaHasNone) {
  std::string why;
  EXPECT_FALSE(recorded_placement(placed_trace(false), 1, kMiB, &why).has_value());
  EXPECT_EQ(why, "the trace was recorded without a placement");
}

TEST(RecordedPlacement, AnArenaTheIterationPlacesNothingInHasNone) {
  trace::Trace t = placed_trace();
  for (trace::Lifetime& l : t.lifetimes) {
    if (l.buffer == 0 && l.length > kMiB && l.before_step >= kPeriod) l.buffer = 1;
  }
  std::string why;
  EXPECT_FALSE(recorded_placement(t, 1, kMiB, &why).has_value());
  EXPECT_NE(why.find("no block in its arena"), std::string::npos) << why;
}

TEST_F(PlacementHandOffTest, FromATraceHandsTheRecordedPlacementAtItsLaunch) {
  PlacementHandOff h(place);
  h.from_trace(placed_trace());
  ASSERT_TRUE(h.pending()) << h.note();
  EXPECT_FALSE(h.may_try()) << "replay: never placed online after it";
  h.hand_at(30);
  EXPECT_FALSE(h.tend(29));
  ASSERT_TRUE(h.tend(30));
  ASSERT_EQ(given.size(), 1u);
  EXPECT_EQ(given[0].offsets, (std::vector<uint64_t>{16 * kMiB, Placement::kUnplaced, 0}));
  EXPECT_EQ(h.placed_period(), 0u) << "not learned online: not learned again for it";
}

TEST(PlacementSearchDeadlineTest, AQuarterIterationBeforeTheBoundaryItIsHandedAt) {
  // Iterations of 1000 launches from launch 500: boundaries 500, 1500, 2500...
  EXPECT_EQ(PlacementHandOff::search_deadline(500, 1000, 600), 1250u);   // 900 left: the next
  EXPECT_EQ(PlacementHandOff::search_deadline(500, 1000, 1000), 1250u);  // 500 left: still
  EXPECT_EQ(PlacementHandOff::search_deadline(500, 1000, 1001), 2250u);  // 499: the one after
  EXPECT_EQ(PlacementHandOff::search_deadline(500, 1000, 1500), 1250u + 1000u);  // on one
  EXPECT_EQ(PlacementHandOff::search_deadline(500, 1000, 100), 1250u);  // 400 left before 500
  // A search that stops at the deadline is handed at the boundary it was for.
  for (uint64_t seen : {600u, 1001u, 1499u, 1500u, 3210u}) {
    const uint64_t d = PlacementHandOff::search_deadline(500, 1000, seen);
    EXPECT_GE(d, seen + 1000 / 4) << seen;  // a quarter of an iteration to search, at least
    EXPECT_EQ((d + 250 - 500) % 1000, 0u) << seen;
  }
}

}  // namespace
}  // namespace umswap::advisor
