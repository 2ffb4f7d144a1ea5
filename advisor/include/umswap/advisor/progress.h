// Where the launch path and the advisor thread are, and the words launches wait on: each field is
// written by one thread and read by the others (the watchdog's reports among them), so all are
// atomics, except the counter's address, set once by the advisor thread's set-up before the
// launch path or the watchdog reads it.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace umswap::advisor {

struct Progress {
  std::atomic<bool> stop{false};      // the program ends (on_finish); every thread
  std::atomic<uint64_t> launched{0};  // launch path: launches seen (the next launch's index)
  // Advisor thread: every launch below it is applied (its actions issued, its words queued): for
  // before_blocking, and the launch the advisor thread is at in the watchdog's report.
  std::atomic<uint64_t> applied_through{0};
  // Advisor thread: what it last began, and the migrations it has issued (for the watchdog: a
  // long migration queued ahead keeps the counter still while calls go on being issued).
  std::atomic<const char*> doing{"starting"};
  std::atomic<uint64_t> issued_calls{0};
  // The prefetch-wait counter (mapped pinned memory): the last launch whose prefetches are done;
  // null/0 without UMSWAP_PREFETCH_WAIT or UMSWAP_EVICT_WAIT.
  volatile uint64_t* progress_host = nullptr;
  CUdeviceptr progress_device = 0;
  std::atomic<uint64_t> waits_from{UINT64_MAX};  // launch-path waits target launches >= this
  std::atomic<bool> waits_off{false};            // the watchdog turned the waits off for good
  std::atomic<uint64_t> highest_wait{0};  // largest counter value a launch waits for, plus one
  // UMSWAP_EVICT_COPY: the largest restored value a launch waits for, with its word's epoch in
  // the top 16 bits (the watchdog reports a word that stays below it).
  std::atomic<uint64_t> highest_restore_wait{0};
  // The program's threads held in before_blocking (and let go after 5 s); the blocking call held
  // now (steady_clock ns; 0: none), and when one was last let go.
  std::atomic<uint64_t> blocking_waits{0}, blocking_timeouts{0};
  std::atomic<int64_t> blocking_since{0}, blocking_let_go_at{0};
};

}  // namespace umswap::advisor
