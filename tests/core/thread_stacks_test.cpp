#include "umswap/core/thread_stacks.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace umswap {
namespace {

// A thread blocked on a condition variable (as a hung thread is, in a futex) writes its name and
// its frames; the caller does not write its own.
TEST(ThreadStacks, ABlockedThreadWritesItsNameAndFrames) {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<bool> waiting{false};
  std::thread sleeper([&] {
    pthread_setname_np(pthread_self(), "stacks-sleeper");
    std::unique_lock lock(m);
    waiting = true;
    cv.wait(lock, [&] { return go; });
  });
  while (!waiting) std::this_thread::yield();
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const int wrote = dump_thread_stacks(fileno(f));
  {
    std::lock_guard lock(m);
    go = true;
  }
  cv.notify_all();
  sleeper.join();
  std::string text;
  std::rewind(f);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  EXPECT_GE(wrote, 1);
  EXPECT_NE(text.find("(stacks-sleeper):\n"), std::string::npos) << text;
  // A frame line follows the header (an address in brackets, as backtrace_symbols_fd writes).
  const size_t header = text.find("(stacks-sleeper):\n");
  ASSERT_NE(header, std::string::npos);
  EXPECT_NE(text.find("[0x", header), std::string::npos) << text;
  EXPECT_EQ(text.find("umswap: thread " + std::to_string(gettid()) + " "), std::string::npos)
      << "the caller wrote its own stack";
}

}  // namespace
}  // namespace umswap
