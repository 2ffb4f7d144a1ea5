// The advisor's watchdog: its own thread, because the advisor thread itself can be the one stuck
// (inside the driver, measured on cudnn_vgg16). A launch must never wait for ever on the
// advisor: if launches wait for a counter value that has not moved for 2 s (while the advisor
// thread issues nothing either; 10 s at most), the waits are turned off for the rest of the run,
// with one warning and, the first time, a report of where things stood; with copies live it asks
// the advisor thread to bring everything back first (releasing launches would let them read
// discarded pages) and, if that does not come, says where things stand, once. It also reports,
// once, a launch held 30 s inside umswap's launch path. Runs only while launches can wait (the
// counter exists: UMSWAP_PREFETCH_WAIT, UMSWAP_EVICT_WAIT or UMSWAP_EVICT_COPY).
//
// Threads: start() and join() from the advisor's facade (start on the advisor thread once it is
// set up); its thread reads Progress, the event rings, the copy evictor's words and the launch
// waits, writes Progress's waits_off, waits_from and the counter (host side: no driver call), and
// asks the copy evictor for a rescue. LaunchWaitLog: written by the launch path, read by the
// watchdog and, after join, by the stats.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "umswap/advisor/advisor.h"
#include "umswap/advisor/copy_evictor.h"
#include "umswap/advisor/event_ring.h"
#include "umswap/advisor/progress.h"
#include "umswap/core/log.h"

namespace umswap::advisor {

// What the last launches waited for on the GPU: for the stall reports, and in the stats file
// (launch_waits), where they can be set beside a trace's kernel times.
class LaunchWaitLog {
 public:
  struct Entry {
    std::atomic<uint64_t> index{UINT64_MAX}, stream{0}, restore{0}, progress{0}, populates{0};
    // When the launch path began and left this launch (steady_clock ns; 0: not noted).
    std::atomic<int64_t> entered{0}, left{0};
  };
  static constexpr size_t kKept = 8192;  // about three GPT-2 iterations

  // Launch `index`'s entry, started afresh if it held another launch, with the waits given
  // (0: unchanged); returns it.
  Entry& note(uint64_t index, CUstream s, uint64_t restore, uint64_t progress,
              uint64_t populates = 0);
  const Entry& at(uint64_t index) const { return entries_[index % kKept]; }
  // The stats' launch_waits, oldest first: [launch, copy-back word value waited for, progress
  // value (even: evictions for room, odd: a launch's actions), populates, steady_clock ns when
  // the launch path began and left it].
  nlohmann::json rows_json() const;

 private:
  std::array<Entry, kKept> entries_;
};

class Watchdog {
 public:
  Watchdog(const AdvisorDriver& d, const AdvisorConfig& config, Progress& words,
           const EventRing& done, const EventRing& reached, CopyEvictor& copier)
      : d_(d), config_(config), words_(words), done_(done), reached_(reached), copier_(copier) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts its thread (with the counter only); `main` names the advisor's stream in reports,
  // `planned` says whether a plan is in force.
  void start(CUstream main, std::function<bool()> planned);
  void join();  // after Progress::stop is set

  LaunchWaitLog& launch_waits() { return launch_waits_; }
  const LaunchWaitLog& launch_waits() const { return launch_waits_; }
  uint64_t stalls() const { return stalls_.load(); }  // times the waits were turned off (0 or 1)

 private:
  void run();
  // The report, once, of launches left waiting on the advisor thread while copies are live.
  void report_stuck(const char* waiting_for, std::chrono::steady_clock::duration waited);
  // The report, once, of a launch held in the launch path with no other coming.
  void report_quiet(std::chrono::steady_clock::duration quiet);
  void report_state();  // both reports' tail: where things stood, and the stacks if asked
  // Where the GPU and the advisor stood at `launch`, said with `what`.
  void report_where(const char* what, uint64_t launch);

  const AdvisorDriver& d_;
  const AdvisorConfig& config_;
  Progress& words_;
  const EventRing& done_;
  const EventRing& reached_;
  CopyEvictor& copier_;
  CUstream main_stream_ = nullptr;
  std::function<bool()> planned_;
  std::thread thread_;
  std::atomic<uint64_t> stalls_{0};
  OnceFlag warned_stuck_, warned_quiet_;
  LaunchWaitLog launch_waits_;
};

}  // namespace umswap::advisor
