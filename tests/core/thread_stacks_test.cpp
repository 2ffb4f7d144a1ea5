#include "umswap/core/thread_stacks.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace umswap {
namespace {

std::string read_and_close(FILE* f) {
  std::string text;
  std::rewind(f);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

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
  const std::string text = read_and_close(f);
  EXPECT_GE(wrote, 1);
  EXPECT_NE(text.find("(stacks-sleeper):\n"), std::string::npos) << text;
  // A frame line follows the header (an address in brackets, as backtrace_symbols_fd writes).
  const size_t header = text.find("(stacks-sleeper):\n");
  ASSERT_NE(header, std::string::npos);
  EXPECT_NE(text.find("[0x", header), std::string::npos) << text;
  EXPECT_EQ(text.find("umswap: thread " + std::to_string(gettid()) + " "), std::string::npos)
      << "the caller wrote its own stack";
}

// A thread blocked on a mutex another thread holds: the futex line names the holder (a glibc
// mutex's owner TID, the fifth word written), which is how a hang's lock cycle is read.
TEST(ThreadStacks, ABlockedLockNamesItsOwner) {
  std::mutex m;
  std::unique_lock held(m);
  std::atomic<long> blocked_tid{0};
  std::thread blocked([&] {
    pthread_setname_np(pthread_self(), "stacks-blocked");
    blocked_tid = gettid();
    std::lock_guard lock(m);
  });
  while (blocked_tid == 0) std::this_thread::yield();
  // Until /proc shows it in the futex: the lock's fast path and a spin come first.
  const std::string syscall_path =
      "/proc/self/task/" + std::to_string(blocked_tid.load()) + "/syscall";
  for (int i = 0; i < 2000; ++i) {
    FILE* s = std::fopen(syscall_path.c_str(), "r");
    long number = -1;
    if (s) {
      if (std::fscanf(s, "%ld", &number) != 1) number = -1;
      std::fclose(s);
    }
    if (number == SYS_futex) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  dump_thread_stacks(fileno(f));
  held.unlock();
  blocked.join();
  const std::string text = read_and_close(f);
  const std::string head =
      "umswap: thread " + std::to_string(blocked_tid.load()) + " waits in futex 0x";
  const size_t at = text.find(head);
  ASSERT_NE(at, std::string::npos) << text;
  const size_t words = text.find(":", at + head.size());
  ASSERT_NE(words, std::string::npos) << text;
  long w[5] = {};
  ASSERT_EQ(std::sscanf(text.c_str() + words + 1, "%ld %ld %ld %ld %ld", &w[0], &w[1], &w[2], &w[3],
                        &w[4]),
            5)
      << text;
  EXPECT_EQ(w[2], 2) << text;                            // the futex word: locked, with a waiter
  EXPECT_EQ(w[4], static_cast<long>(gettid())) << text;  // the owner: this thread
}

}  // namespace
}  // namespace umswap
