// LearningTimeline (advisor/include/umswap/advisor/learning_timeline.h): the events in order,
// their times from the start, and the cap.
#include "umswap/advisor/learning_timeline.h"

#include <gtest/gtest.h>

#include <chrono>

namespace umswap::advisor {
namespace {

using namespace std::chrono_literals;

TEST(LearningTimeline, EventsInOrderWithTheirTimesFromTheStart) {
  LearningTimeline t;
  const auto t0 = LearningTimeline::Clock::now();
  t.start(t0);
  t.note("iteration found", 2716, 0, std::nullopt, t0 + 1500ms);
  t.note("placement made", 3300, 0.25, 4208, t0 + 2s);
  t.note("plan learned", 5000, 0.5, 5700, t0 + 4s);
  const nlohmann::json j = t.to_json();
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["what"], "iteration found");
  EXPECT_EQ(j[0]["launch"], 2716);
  EXPECT_DOUBLE_EQ(j[0]["at_s"].get<double>(), 1.5);
  EXPECT_TRUE(j[0]["from_launch"].is_null());
  EXPECT_EQ(j[1]["from_launch"], 4208);
  EXPECT_DOUBLE_EQ(j[1]["took_s"].get<double>(), 0.25);
  EXPECT_EQ(j[2]["what"], "plan learned");
  EXPECT_DOUBLE_EQ(j[2]["at_s"].get<double>(), 4.0);
}

// A program that keeps dropping and relearning plans: the first events kept, the rest counted.
TEST(LearningTimeline, KeepsTheFirstEventsAndCountsTheRest) {
  LearningTimeline t;
  for (uint64_t i = 0; i < LearningTimeline::kMostEvents + 5; ++i) t.note("plan dropped", i);
  EXPECT_EQ(t.events().size(), LearningTimeline::kMostEvents);
  EXPECT_EQ(t.left_out(), 5u);
  const nlohmann::json j = t.to_json();
  EXPECT_EQ(j.size(), LearningTimeline::kMostEvents + 1);
  EXPECT_EQ(j.back()["count"], 5);
  EXPECT_EQ(j[LearningTimeline::kMostEvents - 1]["launch"], LearningTimeline::kMostEvents - 1);
}

}  // namespace
}  // namespace umswap::advisor
