// SubmissionHold (engine vmm's hold on the program's work): a window opens only once the calls
// in flight have left, no call enters while it is open, a call that never leaves makes open()
// give up after its wait instead of hanging, and unmatched leaves are ignored.
#include "umswap/allocator/submission_hold.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace umswap {
namespace {

using namespace std::chrono_literals;

TEST(SubmissionHoldTest, OpensAtOnceWithNothingInFlight) {
  SubmissionHold hold;
  ASSERT_TRUE(hold.open(1s));
  hold.close();
  EXPECT_EQ(hold.windows(), 1u);
  EXPECT_EQ(hold.windows_abandoned(), 0u);
}

TEST(SubmissionHoldTest, AWindowWaitsForTheCallsInFlight) {
  SubmissionHold hold;
  hold.enter();
  std::atomic<bool> opened{false};
  std::thread window([&] {
    if (hold.open(10s)) {
      opened = true;
      hold.close();
    }
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(opened.load());  // the call is still in flight
  hold.leave();
  window.join();
  EXPECT_TRUE(opened.load());
  EXPECT_EQ(hold.in_flight(), 0u);
}

TEST(SubmissionHoldTest, NoCallEntersWhileAWindowIsOpen) {
  SubmissionHold hold;
  ASSERT_TRUE(hold.open(1s));
  std::atomic<bool> entered{false};
  std::thread call([&] {
    hold.enter();
    entered = true;
    hold.leave();
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(entered.load());
  EXPECT_EQ(hold.in_flight(), 0u);
  hold.close();
  call.join();
  EXPECT_TRUE(entered.load());
}

TEST(SubmissionHoldTest, ACallThatNeverLeavesMakesTheWindowGiveUpNotHang) {
  SubmissionHold hold;
  hold.enter();  // never left
  const auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(hold.open(100ms));
  EXPECT_GE(std::chrono::steady_clock::now() - started, 100ms);
  EXPECT_EQ(hold.windows_abandoned(), 1u);
  EXPECT_EQ(hold.windows(), 0u);
  // Nothing is held afterwards: another call enters at once.
  std::thread call([&] {
    hold.enter();
    hold.leave();
  });
  call.join();
  EXPECT_EQ(hold.in_flight(), 1u);
}

TEST(SubmissionHoldTest, AnUnmatchedLeaveIsIgnored) {
  SubmissionHold hold;
  hold.leave();
  EXPECT_EQ(hold.in_flight(), 0u);
  hold.enter();
  EXPECT_EQ(hold.in_flight(), 1u);
}

TEST(SubmissionHoldTest, ManyCallsAndWindowsNeverOverlap) {
  SubmissionHold hold;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::atomic<bool> stop{false};
  std::vector<std::thread> calls;
  for (int t = 0; t < 4; ++t) {
    calls.emplace_back([&] {
      while (!stop) {
        hold.enter();
        if (inside.load() < 0) overlap = true;
        hold.leave();
      }
    });
  }
  for (int w = 0; w < 200; ++w) {
    ASSERT_TRUE(hold.open(10s));
    inside = -1;  // a call that entered now would see it
    std::this_thread::sleep_for(20us);
    inside = 0;
    hold.close();
  }
  stop = true;
  for (std::thread& t : calls) t.join();
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(hold.windows(), 200u);
}

}  // namespace
}  // namespace umswap
