// The launch path's side of the kernels that must find their memory on the GPU
// (resident_launches.h): such a launch gets everything its parameters point at prefetched to the
// GPU on its own stream first, and no migration of the advisor's runs beside it that could move
// its memory: the launch waits for those issued before it (make_resident), the advisor thread
// issues none while one is between the two (hold()), and those issued after it wait for it
// (close()): at once, or, for a launch the advisor's counter waits cover (defer()), before the
// advisor's first migration for a later launch (hold(g)).
//
// Why not at once: the advisor is often hundreds of launches behind the program. A migration it
// issues late for an earlier launch L is one the program's stream waits for before L (the
// counter, UMSWAP_PREFETCH_WAIT), and L comes before the resident launch R in that stream: had the
// advisor's stream waited for R first, neither stream could go on until the watchdog released
// the launches after 2 s and turned the waits off (23 of the correctness matrix's 24 decoder and
// masked-LM rows, H200, 2026-12-01). The same holds for R's own migrations (a prefetch at R's own
// step, which R waits for through the counter). Such a late migration for R or an earlier launch
// may run beside R. It does not move what R uses, as far as the plan knows it: an eviction of one
// of R's ranges before R is followed by a prefetch of it, and R waits for that through the counter.
// What R's parameters reach past the plan's ranges (make_resident() prefetches to the end of a
// block or an allocation) is not covered. Closes of launches the counter does not cover (before the
// waits start, without a plan, once the watchdog turned the waits off) order the advisor's stream
// at once, and the pending ones do at the advisor's next migration once the waits are off.
//
// Threads: set_up() and defer() on the advisor thread, once, before any of its migrations;
// needs(), make_resident() and close() on the launching threads (any of them); hold() on the
// advisor thread around each migration; stats_json() after join. The open count, the pending
// closes and the events under mutex_; the counters are atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "umswap/advisor/advisor.h"
#include "umswap/advisor/progress.h"
#include "umswap/tracer/tracer.h"
#include "umswap/tracer/tracer_ports.h"

namespace umswap::advisor {

class ResidentGate {
 public:
  // `steps` names a launch's kernel; `residency` counts what make_resident() populates (the
  // tracer's, tracer_ports.h).
  ResidentGate(const AdvisorDriver& d, const tracer::StepLogReader& steps,
               tracer::ResidencySink& residency)
      : d_(d), steps_(steps), residency_(residency) {}
  ResidentGate(const ResidentGate&) = delete;
  ResidentGate& operator=(const ResidentGate&) = delete;

  // The advisor's stream, whose migrations the gate orders against such launches; false if its
  // events cannot be made.
  bool set_up(CUstream advisor_stream);
  // Whether launches of the kernel with step key `key` must find their memory on the GPU.
  bool needs(uint32_t key) const;
  // Before such a launch on `s`: it waits for the advisor's migrations issued so far, and what
  // its parameters point at (`hits`; null: not scanned) goes to `device` on `s`. Pointers the
  // parameters do not show (a table in device memory) are not covered.
  void make_resident(const std::vector<tracer::PointerHit>* hits, CUstream s, CUdevice device);
  // After launch `index` is submitted on `s` (every launch: a no-op unless make_resident()
  // opened).
  void close(CUstream s, uint64_t index);
  // Closes of launches the counter's waits cover (index >= words->waits_from, the waits not
  // turned off) wait in a list for hold(): set by the advisor thread once its counter exists.
  void defer(const Progress* words) { words_.store(words, std::memory_order_release); }
  // Advisor thread, before a migration for launch `g`: the returned lock held, no such launch is
  // between make_resident() and close() (or 1 s has passed: counted, a launch whose close never
  // came), and the advisor's stream waits for the closed ones before g (all of them once no
  // launch waits on the counter).
  std::unique_lock<std::mutex> hold(uint64_t g);

  nlohmann::json stats_json() const;

 private:
  static constexpr uint32_t kKeys = 1 << 16;

  const AdvisorDriver& d_;
  const tracer::StepLogReader& steps_;
  tracer::ResidencySink& residency_;
  CUstream stream_ = nullptr;  // the advisor's
  // By step key: 0 not asked yet, 1 no, 2 yes (a key's answer never changes).
  mutable std::array<std::atomic<uint8_t>, kKeys> keys_{};
  std::mutex mutex_;
  int open_ = 0;  // launches between make_resident() and close(), under mutex_
  CUevent before_ = nullptr;
  std::atomic<const Progress*> words_{nullptr};       // set: closes may wait (defer())
  std::deque<std::pair<uint64_t, CUevent>> pending_;  // under mutex_: closed, launch order
  std::vector<CUevent> spare_;                        // under mutex_: events to record again
  std::atomic<bool> ready_{false};  // set_up() done: no migration was issued before
  std::atomic<uint64_t> launches_{0}, calls_{0}, bytes_{0}, failures_{0}, unscanned_{0},
      call_ns_{0};
  std::atomic<uint64_t> gate_failures_{0}, gate_timeouts_{0}, gate_waits_{0}, deferred_{0},
      most_pending_{0};
  // Whether the close of launch `index` may wait in the list (the contract above).
  bool deferring(uint64_t index) const;
  CUevent take_event();  // under mutex_; null: none could be made
  // Under mutex_: the advisor's stream waits for `e`, which goes back to spare_.
  void order_after(CUevent e);
};

}  // namespace umswap::advisor
