// Events recorded on the program's streams at chosen launches, which the advisor's streams wait
// for (a launch's end: an eviction after its last use; its start: a prefetch not before it).
//
// Threads: record() on the launching threads; wait() on the advisor thread; the watchdog's
// reports read index, placed_* and query the events (event queries only: no call that can wait).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "umswap/advisor/advisor.h"

namespace umswap::advisor {

inline constexpr size_t kEventRing = 4096;  // events, by launch index modulo this
// Launches that may be between on_step() and their submission at once (several launching
// threads): a launch this far behind the launch count is on its stream, and its events (if any)
// are recorded.
inline constexpr uint64_t kEventSlack = 8;

// Events recorded on the application's streams at chosen launches, which the advisor's stream
// waits for: slot = launch index modulo kEventRing; index[slot] says which launch it holds now.
// A slot's lock makes a wait's check of the launch and its cuStreamWaitEvent one step: without it,
// a launch kEventRing later could record the slot in between (a program that far ahead of the
// advisor), and the wait would be for that launch, not the one checked.
struct EventRing {
  EventRing() {
    for (auto& e : index) e.store(UINT64_MAX);
  }
  const char* name = "";  // what its events mark (the watchdog's report)
  // The last GPU-side waits placed for its events (written by the advisor thread, read by the
  // reports, the watchdog's among them): launch, stream.
  std::array<std::atomic<uint64_t>, 8> placed_launch{};
  std::array<std::atomic<CUstream>, 8> placed_on{};
  std::atomic<size_t> placed_count{0};
  std::array<CUevent, kEventRing> events{};
  std::array<std::atomic<uint64_t>, kEventRing> index{};
  std::array<std::atomic<bool>, kEventRing> busy{};  // the slots' locks (held for one call)
  void record(const AdvisorDriver& d, uint64_t launch, CUstream stream) {
    const size_t slot = launch % kEventRing;
    const SlotLock lock(busy[slot]);
    if (d.event_record(events[slot], stream) == CUDA_SUCCESS) {
      index[slot].store(launch, std::memory_order_release);
    }
  }
  // Makes `waiter` wait for launch j's event; false when it was already reused, or is not
  // recorded within 20 ms while launch j may still be on its way (`launched`, the launches the
  // launch path has seen, is at most kEventSlack past it; further past, an event not there was
  // never recorded, and waiting for it would only hold the advisor back).
  bool wait(const AdvisorDriver& d, uint64_t j, CUstream waiter, uint64_t launched) {
    const size_t slot = j % kEventRing;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(launched > j + kEventSlack ? 0 : 20);
    uint64_t seen = index[slot].load(std::memory_order_acquire);
    while ((seen < j || seen == UINT64_MAX) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
      seen = index[slot].load(std::memory_order_acquire);
    }
    if (seen != j) return false;
    const SlotLock lock(busy[slot]);
    if (index[slot].load(std::memory_order_acquire) != j) return false;  // reused meanwhile
    const size_t k = placed_count.load(std::memory_order_relaxed);
    placed_launch[k % placed_launch.size()].store(j, std::memory_order_relaxed);
    placed_on[k % placed_on.size()].store(waiter, std::memory_order_relaxed);
    placed_count.store(k + 1, std::memory_order_release);
    return d.stream_wait_event(waiter, events[slot], 0) == CUDA_SUCCESS;
  }
  // A slot's lock: spins (yielding) while the other side makes its one call.
  struct SlotLock {
    std::atomic<bool>& held;
    explicit SlotLock(std::atomic<bool>& h) : held(h) {
      while (held.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
    }
    ~SlotLock() { held.store(false, std::memory_order_release); }
    SlotLock(const SlotLock&) = delete;
    SlotLock& operator=(const SlotLock&) = delete;
  };
  // The latest launch whose event has run (0: none seen; the watchdog's report).
  uint64_t ran_through(const AdvisorDriver& d) const {
    uint64_t through = 0;
    for (size_t i = 0; i < kEventRing; ++i) {
      const uint64_t j = index[i].load(std::memory_order_acquire);
      if (j != UINT64_MAX && j > through && d.event_query(events[i]) == CUDA_SUCCESS) through = j;
    }
    return through;
  }
};

}  // namespace umswap::advisor
