// The launch path's side of the kernels that must find their memory on the GPU
// (resident_launches.h): such a launch gets everything its parameters point at prefetched to the
// GPU on its own stream first, and no migration of the advisor's runs beside it: the launch waits
// for those issued before it (make_resident), those issued after it wait for it (close()), and
// the advisor thread issues none while one is between the two (hold()).
//
// Threads: set_up() on the advisor thread, once, before any of its migrations; needs(),
// make_resident() and close() on the launching threads (any of them); hold() on the advisor
// thread around each migration; stats_json() after join. The open count and the events'
// records under mutex_; the counters are atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "umswap/advisor/advisor.h"
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
  // After the launch is submitted on `s` (every launch: a no-op unless make_resident() opened).
  void close(CUstream s);
  // Advisor thread, before a migration: the returned lock held, no such launch is between
  // make_resident() and close() (or 1 s has passed: counted, a launch whose close never came).
  std::unique_lock<std::mutex> hold();

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
  CUevent before_ = nullptr, after_ = nullptr;
  std::atomic<bool> ready_{false};  // set_up() done: no migration was issued before
  std::atomic<uint64_t> launches_{0}, calls_{0}, bytes_{0}, failures_{0}, unscanned_{0},
      call_ns_{0};
  std::atomic<uint64_t> gate_failures_{0}, gate_timeouts_{0}, gate_waits_{0};
};

}  // namespace umswap::advisor
