// Logging: levels, the one-line format, truncation of long messages, errno, OnceFlag.
#include "umswap/core/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <latch>
#include <string>
#include <thread>
#include <vector>

namespace umswap {
namespace {

// Sends fd 2 to a temporary file while alive; text() returns what was written to it.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = dup(STDERR_FILENO);
    if (file_ && saved_ >= 0) dup2(fileno(file_), STDERR_FILENO);
  }
  ~StderrCapture() { restore(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string text() {
    restore();
    std::string out;
    if (!file_) return out;
    std::rewind(file_);
    char buffer[4096];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0) out.append(buffer, n);
    return out;
  }

 private:
  void restore() {
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
      saved_ = -1;
    }
  }
  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

// Restores the verbosity every test may change.
class LogTest : public testing::Test {
 protected:
  void TearDown() override { set_log_verbosity(0); }
};

TEST_F(LogTest, LevelsEnabledByVerbosity) {
  set_log_verbosity(kQuietVerbosity);
  EXPECT_TRUE(log_enabled(LogLevel::error));
  EXPECT_TRUE(log_enabled(LogLevel::warning));
  EXPECT_FALSE(log_enabled(LogLevel::notice));
  EXPECT_FALSE(log_enabled(LogLevel::info));
  set_log_verbosity(0);
  EXPECT_TRUE(log_enabled(LogLevel::error));
  EXPECT_TRUE(log_enabled(LogLevel::warning));
  EXPECT_TRUE(log_enabled(LogLevel::notice));
  EXPECT_FALSE(log_enabled(LogLevel::info));
  EXPECT_FALSE(log_enabled(LogLevel::debug));
  set_log_verbosity(1);
  EXPECT_TRUE(log_enabled(LogLevel::warning));
  EXPECT_TRUE(log_enabled(LogLevel::info));
  EXPECT_FALSE(log_enabled(LogLevel::debug));
  set_log_verbosity(2);
  EXPECT_TRUE(log_enabled(LogLevel::error));
  EXPECT_TRUE(log_enabled(LogLevel::info));
  EXPECT_TRUE(log_enabled(LogLevel::debug));
}

TEST_F(LogTest, WriteFormatsOneLinePerLevel) {
  StderrCapture capture;
  log_write(LogLevel::error, "e");
  log_write(LogLevel::warning, "w");
  log_write(LogLevel::notice, "n");
  log_write(LogLevel::info, "i");
  log_write(LogLevel::debug, "d");
  EXPECT_EQ(capture.text(),
            "umswap: error: e\numswap: warning: w\numswap: n\numswap: i\numswap: d\n");
}

TEST_F(LogTest, LogFormatsArgumentsAndHonoursTheLevel) {
  set_log_verbosity(0);
  StderrCapture capture;
  log_warning("{} of {}", 3, "x");
  log_info("hidden {}", 1);
  log_debug("hidden {}", 2);
  EXPECT_EQ(capture.text(), "umswap: warning: 3 of x\n");
}

TEST_F(LogTest, NoticesAppearByDefaultAndNotWhenQuiet) {
  set_log_verbosity(0);
  {
    StderrCapture capture;
    log_notice("plan {}", 1);
    EXPECT_EQ(capture.text(), "umswap: plan 1\n");
  }
  set_log_verbosity(kQuietVerbosity);
  StderrCapture capture;
  log_notice("plan {}", 2);
  log_warning("still {}", 3);
  EXPECT_EQ(capture.text(), "umswap: warning: still 3\n");
}

TEST_F(LogTest, InfoAndDebugAppearWhenVerbose) {
  set_log_verbosity(2);
  StderrCapture capture;
  log_info("i{}", 1);
  log_debug("d{}", 2);
  EXPECT_EQ(capture.text(), "umswap: i1\numswap: d2\n");
}

TEST_F(LogTest, LongMessageIsCutAndEndsInDots) {
  const std::string long_text(5000, 'x');
  StderrCapture capture;
  log_warning("{}", long_text);
  const std::string out = capture.text();
  const std::string prefix = "umswap: warning: ";
  // The message buffer is 1024 bytes: 1021 of the message, then `...`, then the newline.
  EXPECT_EQ(out, prefix + std::string(1021, 'x') + "...\n");
}

TEST_F(LogTest, MessageThatJustFitsIsNotCut) {
  StderrCapture capture;
  log_warning("{}", std::string(1024, 'y'));
  log_warning("{}", std::string(1025, 'z'));
  const std::string out = capture.text();
  const std::string prefix = "umswap: warning: ";
  EXPECT_EQ(out,
            prefix + std::string(1024, 'y') + "\n" + prefix + std::string(1021, 'z') + "...\n");
}

// log_write() itself bounds what it writes: one line, never more than its own buffer.
TEST_F(LogTest, WriteOfAnOversizedMessageStaysOneBoundedLine) {
  StderrCapture capture;
  log_write(LogLevel::info, std::string(5000, 'q'));
  const std::string out = capture.text();
  ASSERT_FALSE(out.empty());
  EXPECT_LT(out.size(), 1200u + 1);
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1);
  EXPECT_EQ(out.rfind("umswap: qqq", 0), 0u);
}

TEST_F(LogTest, ErrnoIsPreservedWhenTheWriteSucceeds) {
  StderrCapture capture;
  errno = ERANGE;
  log_write(LogLevel::warning, "hello");
  EXPECT_EQ(errno, ERANGE);
  errno = EAGAIN;
  log_warning("hello {}", 2);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(capture.text(), "umswap: warning: hello\numswap: warning: hello 2\n");
}

// The write fails (fd 2 is read-only, so write(2) sets EBADF): the caller's errno still survives.
TEST_F(LogTest, ErrnoIsPreservedWhenTheWriteFails) {
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  const int read_only = open("/dev/null", O_RDONLY);
  ASSERT_GE(read_only, 0);
  dup2(read_only, STDERR_FILENO);
  errno = ENOENT;
  log_write(LogLevel::error, "lost");
  const int after = errno;
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(read_only);
  EXPECT_EQ(after, ENOENT);
}

TEST(OnceFlag, TrueOnceThenFalse) {
  OnceFlag flag;
  EXPECT_TRUE(flag.first());
  EXPECT_FALSE(flag.first());
  EXPECT_FALSE(flag.first());
  OnceFlag other;  // independent of the first
  EXPECT_TRUE(other.first());
}

TEST(OnceFlag, ExactlyOneWinnerAmongRacingThreads) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 200; ++round) {
    OnceFlag flag;
    std::latch start(kThreads);
    std::atomic<int> winners{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        start.arrive_and_wait();
        for (int i = 0; i < 3; ++i) {
          if (flag.first()) winners.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(winners.load(), 1) << "round " << round;
  }
}

}  // namespace
}  // namespace umswap
