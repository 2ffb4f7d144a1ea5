#include "umswap/advisor/op_log.h"

#include <gtest/gtest.h>

#include <string>

namespace umswap::advisor {
namespace {

void* stream(uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

// Calls are numbered per stream, each stream has its own word, and the report names the call the
// GPU is held at on a stream that has not done them all. Streams not named are not followed.
TEST(OpLog, NumbersCallsPerStreamAndNamesWhereTheGpuIsHeld) {
  volatile uint64_t words[OpLog::kStreams] = {};
  OpLog log(words);
  ASSERT_TRUE(log.name(stream(0x10), "main"));
  ASSERT_TRUE(log.name(stream(0x20), "restore"));
  uint64_t n = 0;
  size_t w = 0;
  ASSERT_TRUE(log.note(stream(0x10), "prefetch to host", 0x1000, 4096, &n, &w));
  EXPECT_EQ(n, 1u);
  const size_t main_word = w;
  ASSERT_TRUE(log.note(stream(0x20), "wait restored>=", 0x2000, 7, &n, &w));
  EXPECT_EQ(n, 1u);
  EXPECT_NE(w, main_word);
  const size_t program_word = w;
  ASSERT_TRUE(log.note(stream(0x10), "discard", 0x3000, 8192, &n, &w));
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(w, main_word);
  // The GPU did the main stream's first call; the program stream's wait is done.
  words[main_word] = 1;
  words[program_word] = 1;
  const std::string text = log.describe();
  EXPECT_NE(text.find("stream main (0x10): 2 calls, the GPU done through 1, held at:"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[#2 discard 0x3000 8192]"), std::string::npos) << text;
  EXPECT_NE(text.find("stream restore (0x20): 1 calls, the GPU done through 1 (all)"),
            std::string::npos)
      << text;
  EXPECT_FALSE(log.note(stream(0x30), "event record", 0, 0, &n, &w));  // a program's stream
  EXPECT_EQ(log.describe().find("(0x30)"), std::string::npos);
}

// Only kStreams streams are followed; calls on the next one are not numbered.
TEST(OpLog, FollowsAtMostItsStreams) {
  volatile uint64_t words[OpLog::kStreams] = {};
  OpLog log(words);
  uint64_t n = 0;
  size_t w = 0;
  for (uintptr_t i = 1; i <= OpLog::kStreams; ++i) {
    ASSERT_TRUE(log.name(stream(i), "side"));
    ASSERT_TRUE(log.note(stream(i), "record", 0, 0, &n, &w));
    EXPECT_EQ(w, i - 1);
  }
  EXPECT_FALSE(log.name(stream(OpLog::kStreams + 1), "one too many"));
  EXPECT_FALSE(log.note(stream(OpLog::kStreams + 1), "record", 0, 0, &n, &w));
}

// A stream far behind: calls no longer kept are left out, not misreported.
TEST(OpLog, LeavesOutCallsNoLongerKept) {
  volatile uint64_t words[OpLog::kStreams] = {};
  OpLog log(words);
  uint64_t n = 0;
  size_t w = 0;
  ASSERT_TRUE(log.name(stream(1), "main"));
  for (int i = 0; i < 100; ++i) log.note(stream(1), "prefetch to gpu", i, 0, &n, &w);
  words[w] = 3;
  const std::string text = log.describe();
  EXPECT_NE(text.find("100 calls, the GPU done through 3, held at:"), std::string::npos) << text;
  EXPECT_EQ(text.find("[#4 "), std::string::npos) << text;  // overwritten by #36
}

// Without op-log (the writes between waits and managed calls): a managed call is told whether an
// event wait came before it on its stream since the last managed call there; other streams and
// unfollowed ones are apart.
TEST(OpLog, TellsAManagedCallWhetherAWaitCameBeforeIt) {
  volatile uint64_t words[OpLog::kStreams] = {};
  OpLog log(words);
  ASSERT_TRUE(log.name(stream(1), "populate"));
  ASSERT_TRUE(log.name(stream(2), "main"));
  EXPECT_FALSE(log.take_wait(stream(1)));
  log.mark_wait(stream(1));
  log.mark_wait(stream(1));
  EXPECT_FALSE(log.take_wait(stream(2)));
  EXPECT_TRUE(log.take_wait(stream(1)));
  EXPECT_FALSE(log.take_wait(stream(1)));  // taken
  log.mark_wait(stream(9));                // not followed
  EXPECT_FALSE(log.take_wait(stream(9)));
}

}  // namespace
}  // namespace umswap::advisor
