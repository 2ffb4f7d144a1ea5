// The launch path's side of the kernels that must find their memory on the GPU
// (resident_launches.h): such a launch gets everything its parameters point at prefetched to the
// GPU on its own stream first, and no migration of the advisor's runs beside it that could move
// its memory: the launch waits for those issued before it (make_resident), the advisor thread
// issues none while one is between the two (hold()), and those issued after it wait for it
// (close()): at once, or, while launches wait on the advisor's counter (defer()), before the
// advisor's first migration for a launch past B (hold(g), g > B), where B is the highest launch
// whose actions the launch's stream has waited for through the counter, up to and including the
// launch itself (note_counter_wait()).
//
// Why not at once: the advisor is often hundreds of launches behind the program. A migration it
// issues late for an earlier launch L is one the program's stream waits for before L (the
// counter, UMSWAP_PREFETCH_WAIT), and L comes before the resident launch R in that stream: had the
// advisor's stream waited for R first, neither stream could go on until the watchdog released
// the launches after 2 s and turned the waits off (23 of the correctness matrix's 24 decoder and
// masked-LM rows, H200, 2026-12-01). Keyed by B, nothing rests on the plan: the advisor's
// migrations for launches up to B finish before R runs (R's stream waited for them), and those
// for later launches wait for R; R's close depends on counter values up to B's, which the
// advisor's stream writes before any migration for a later launch, so no cycle forms. A stream
// that waited for nothing orders at once. Once no launch waits on the counter (the watchdog
// turned the waits off: its release does not mean the actions are done; or no plan's waits are
// in force), closes order the advisor's stream at once, and the pending ones do at the advisor's
// next migration.
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
  // Launch path, when a launch on `s` is made to wait for the counter: every action of the
  // launches up to `covered` is done once that wait is met.
  void note_counter_wait(CUstream s, uint64_t covered);
  // After the launch is submitted on `s` (every launch: a no-op unless make_resident() opened).
  void close(CUstream s);
  // Closes may wait in a list for hold() while `words` shows launches waiting on the counter: set
  // by the advisor thread once its counter exists.
  void defer(const Progress* words) { words_.store(words, std::memory_order_release); }
  // Advisor thread, before a migration for launch `g`: the returned lock held, no such launch is
  // between make_resident() and close() (or 1 s has passed: counted, a launch whose close never
  // came), and the advisor's stream waits for the closed ones whose B is below g (all of them
  // once no launch waits on the counter).
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
  std::atomic<const Progress*> words_{nullptr};         // set: closes may wait (defer())
  std::deque<std::pair<uint64_t, CUevent>> pending_;    // under mutex_: closed, by B (contract)
  std::vector<std::pair<CUstream, uint64_t>> covered_;  // under mutex_: each stream's B so far
  std::vector<CUevent> spare_;                          // under mutex_: events to record again
  std::atomic<bool> ready_{false};  // set_up() done: no migration was issued before
  std::atomic<uint64_t> launches_{0}, calls_{0}, bytes_{0}, failures_{0}, unscanned_{0},
      call_ns_{0};
  std::atomic<uint64_t> gate_failures_{0}, gate_timeouts_{0}, gate_waits_{0}, deferred_{0},
      most_pending_{0};
  // Whether closes may wait in the list now (the contract above).
  bool deferring() const;
  CUevent take_event();  // under mutex_; null: none could be made
  // Under mutex_: the advisor's stream waits for `e`, which goes back to spare_.
  void order_after(CUevent e);
};

}  // namespace umswap::advisor
