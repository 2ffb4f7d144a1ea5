#include "umswap/advisor/watchdog.h"

#include <algorithm>
#include <string>
#include <vector>

#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/logged_calls.h"
#include "umswap/core/thread_stacks.h"

namespace umswap::advisor {

void Watchdog::start(CUstream main, std::function<bool()> planned) {
  if (!words_.progress_device) return;
  main_stream_ = main;
  planned_ = std::move(planned);
  thread_ = std::thread([this] { run(); });
}

void Watchdog::join() {
  if (thread_.joinable()) thread_.join();
}

nlohmann::json LaunchWaitLog::rows_json() const {
  std::vector<std::array<uint64_t, 6>> rows;
  for (const Entry& w : entries_) {
    const uint64_t index = w.index.load();
    if (index == UINT64_MAX) continue;
    rows.push_back({index, w.restore.load(), w.progress.load(), w.populates.load(),
                    static_cast<uint64_t>(w.entered.load()), static_cast<uint64_t>(w.left.load())});
  }
  std::sort(rows.begin(), rows.end());
  nlohmann::json waits = nlohmann::json::array();
  for (const auto& r : rows) waits.push_back(r);
  return waits;
}

// A launch must never wait for ever on the advisor. If launches wait for a counter value that
// has not moved for 2 s (while the advisor thread issues nothing either; 10 s at most), the waits
// are turned off for the rest of the run, with one warning: the counter is released from the host
// (no driver call: the driver may be where the advisor thread is stuck), and released again if a
// counter write still queued on the advisor's stream takes it back. Costs faults, never results.
void Watchdog::run() {
  uint64_t watched = UINT64_MAX, issued = 0, restore_watched = UINT64_MAX;
  auto since = std::chrono::steady_clock::now(), issued_since = since, restore_since = since;
  uint64_t seen_launched = 0;
  auto launched_since = since;
  bool dumped = false, reported_quiet = false;
  while (!words_.stop.load(std::memory_order_acquire)) {
    sleep_us(100000);
    const uint64_t value = *words_.progress_host;
    const uint64_t wanted = words_.highest_wait.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    // Launches waiting on a copy-back word that does not move: nothing but the advisor thread can
    // bring that memory back (releasing them would let them read discarded pages), so say where
    // it is, once, after 10 s.
    if (const auto now_word = copier_.word_now()) {
      const auto [epoch_now, word] = *now_word;
      const uint64_t packed = words_.highest_restore_wait.load(std::memory_order_relaxed);
      if (packed >> 48 == epoch_now && word < (packed & kRestoreWaitMask) && word < kReleased) {
        if (word != restore_watched) {
          restore_watched = word;
          restore_since = now;
        } else if (now - restore_since > std::chrono::seconds(10)) {
          report_stuck("copies back it has not issued", now - restore_since);
        }
      } else {
        restore_watched = UINT64_MAX;
      }
    }
    // Debug (UMSWAP_VERBOSE=2): the words launches wait on, once, when no launch came for 5 s.
    if (const uint64_t l = words_.launched.load(); l != seen_launched) {
      seen_launched = l;
      launched_since = now;
    } else if (!dumped && now - launched_since > std::chrono::seconds(5)) {
      dumped = true;
      log_debug(
          "advisor: no launch for 5 s: launched {}, progress {} (highest wait {}), restored {}, "
          "copies live {}",
          l, value, wanted, copier_.word_now().value_or(std::pair<uint64_t, uint64_t>{0, 0}).second,
          copier_.live());
    }
    // A stall neither word shows: the latest launch still inside umswap's launch path after 30 s
    // (its launch_waits entry entered, not left), with a plan in force (the launch path waited
    // there once for a lock its own thread held, d388d01). Said once, with every thread's stack
    // under UMSWAP_DEBUG=hang-stacks. A program that only pauses between launches (saving a
    // checkpoint) is outside the launch path and gets no report.
    if (const uint64_t l = words_.launched.load(); !reported_quiet && l > 0 && planned_()) {
      const LaunchWaitLog::Entry& w = launch_waits_.at(l - 1);
      const int64_t entered = w.entered.load(std::memory_order_relaxed);
      if (w.index.load(std::memory_order_acquire) == l - 1 && entered != 0 &&
          w.left.load(std::memory_order_relaxed) == 0 && now_ns() - entered > 30'000'000'000) {
        reported_quiet = true;
        report_quiet(std::chrono::nanoseconds(now_ns() - entered));
      }
    }
    if (value >= kReleased || wanted == 0 || value >= wanted - 1) {
      watched = UINT64_MAX;
      continue;
    }
    if (value != watched) {
      watched = value;
      since = now;
      continue;
    }
    // A long migration queued ahead (the first planned launch moves the whole footprint) keeps
    // the counter still while the advisor thread goes on issuing: that is progress, up to 10 s.
    if (const uint64_t i = words_.issued_calls.load(std::memory_order_relaxed); i != issued) {
      issued = i;
      issued_since = now;
    }
    const auto still = now - std::max(since, issued_since);
    if (still < std::chrono::seconds(2) && now - since < std::chrono::seconds(10)) continue;
    // Ranges copied to the host must be back before launches run unchecked: the advisor thread
    // brings them back first (rescue), then the waits go.
    if (copier_.live()) {
      // Nothing but the advisor thread can bring copied memory back (driver calls). If it does
      // not take the request, say where it is, once: releasing the launches would let them read
      // discarded pages.
      if (copier_.rescue_asked() && now - since > std::chrono::seconds(10)) {
        report_stuck("it to take the watchdog's request to bring copied memory back", now - since);
      }
      copier_.ask_rescue();
      continue;
    }
    const bool first = stalls_.fetch_add(1) == 0;
    if (first) {
      log_warning(
          "advisor: launches waited {} s for the advisor's stream (launch {}'s {}; its counter at "
          "launch {}); waits are off for the rest of the run",
          std::chrono::duration_cast<std::chrono::seconds>(now - since).count(), (wanted - 1) / 2,
          (wanted - 1) % 2 ? "prefetches" : "evictions", value / 2);
    }
    words_.waits_off.store(true);  // the advisor thread writes the counter no more
    words_.waits_from.store(UINT64_MAX, std::memory_order_release);
    *words_.progress_host = kReleased;
    watched = UINT64_MAX;
    // Where the advisor thread was (its driver call, the GPU's place, the waits placed; every
    // thread's stack under UMSWAP_DEBUG=hang-stacks), once, after the release: the report's
    // event queries may wait on the driver, and the launches no longer do.
    if (first) report_state();
  }
}

LaunchWaitLog::Entry& LaunchWaitLog::note(uint64_t index, CUstream s, uint64_t restore,
                                          uint64_t progress, uint64_t populates) {
  Entry& w = entries_[index % kKept];
  if (w.index.load(std::memory_order_relaxed) != index) {
    w.restore.store(0, std::memory_order_relaxed);
    w.progress.store(0, std::memory_order_relaxed);
    w.populates.store(0, std::memory_order_relaxed);
    w.entered.store(0, std::memory_order_relaxed);
    w.left.store(0, std::memory_order_relaxed);
    w.stream.store(reinterpret_cast<uint64_t>(s), std::memory_order_relaxed);
    w.index.store(index, std::memory_order_release);
  }
  if (restore) w.restore.store(restore, std::memory_order_relaxed);
  if (progress) w.progress.store(progress, std::memory_order_relaxed);
  if (populates) w.populates.store(populates, std::memory_order_relaxed);
  return w;
}

void Watchdog::report_where(const char* what, uint64_t launch) {
  // The GPU's place: the latest launch whose events have run.
  const uint64_t done_through = done_.ran_through(d_), reached_through = reached_.ran_through(d_);
  std::string next;
  int shown = 0;
  for (uint64_t j = done_through + 1; j < words_.launched.load() && shown < 6; ++j) {
    const LaunchWaitLog::Entry& w = launch_waits_.at(j);
    ++shown;
    if (w.index.load(std::memory_order_acquire) != j) {
      next += fmt::format(" [{}: none]", j);
      continue;
    }
    next += fmt::format(" [{} on {:#x}: restored>={} progress>={} populates {}]", j,
                        w.stream.load(), w.restore.load(), w.progress.load(), w.populates.load());
  }
  // The advisor's latest GPU-side waits for launches, and whether each has run.
  for (const EventRing* ring : {&done_, &reached_}) {
    next += fmt::format("; {} waits placed:", ring->name);
    const size_t n = ring->placed_count.load(std::memory_order_acquire);
    const size_t kept = ring->placed_launch.size();
    for (size_t k = n > kept ? n - kept : 0; k < n; ++k) {
      const uint64_t j = ring->placed_launch[k % kept].load(std::memory_order_relaxed);
      const CUstream on = ring->placed_on[k % kept].load(std::memory_order_relaxed);
      const size_t slot = j % kEventRing;
      const char* ran = ring->index[slot].load() != j                        ? "re-recorded"
                        : d_.event_query(ring->events[slot]) == CUDA_SUCCESS ? "ran"
                                                                             : "not run";
      next += fmt::format(" {} on {} {}", j,
                          on == main_stream_                ? "main"
                          : on == copier_.populate_stream() ? "populate"
                                                            : "other",
                          ran);
    }
  }
  uint64_t word = 0;
  if (const auto now_word = copier_.word_now()) word = now_word->second;
  log_warning(
      "advisor: {} {}: it was {} at {} of {} launched; "
      "GPU done through {}, reached {}; progress {} (highest wait {}), restored {} (highest wait "
      "{}, written {}); blocking calls held back {} times, {} let go after 5 s; next waits:{}",
      what, launch, words_.doing.load(), words_.applied_through.load(), words_.launched.load(),
      done_through, reached_through, words_.progress_host ? *words_.progress_host : 0,
      words_.highest_wait.load(), word, words_.highest_restore_wait.load() & kRestoreWaitMask,
      copier_.restored_written(), words_.blocking_waits.load(), words_.blocking_timeouts.load(),
      next);
  const int64_t t = now_ns();
  const auto ago = [t](int64_t at) {
    return at ? fmt::format("{:.2f} s ago", (t - at) / 1e9) : std::string("-");
  };
  const LoggedCallsState calls = logged_calls_state(t, true);
  log_warning(
      "advisor: timing: the advisor thread's driver call: {}; the program's blocking call held "
      "since: {}; one last let go after 5 s: {}",
      calls.in_call, ago(words_.blocking_since.load()), ago(words_.blocking_let_go_at.load()));
  if (logged_calls_on()) {
    log_warning("advisor: each stream's calls (all of them with UMSWAP_DEBUG=op-log):{}",
                calls.streams);
  }
}

// The watchdog's report, once, of launches left waiting on the advisor thread while copies are
// live: nothing but that thread can bring copied memory back (driver calls), and releasing the
// launches would let them read discarded pages. Says what it last began and where it is.
void Watchdog::report_stuck(const char* waiting_for, std::chrono::steady_clock::duration waited) {
  if (!warned_stuck_.first()) return;
  log_warning(
      "advisor: launches have waited {} s for the advisor thread, for {} (it last began {}, at "
      "launch {} of {} launched); it may be blocked in a prefetch or discard inside the driver "
      "(seen without a stream write after its event waits, and once about 57 such calls wait on "
      "the GPU; docs/advisor.md, \"Closing the advisor's calls\")",
      std::chrono::duration_cast<std::chrono::seconds>(waited).count(), waiting_for,
      words_.doing.load(), words_.applied_through.load(), words_.launched.load());
  report_state();
}

void Watchdog::report_quiet(std::chrono::steady_clock::duration quiet) {
  if (!warned_quiet_.first()) return;
  log_warning(
      "advisor: a launch has been inside umswap's launch path for {} s and no other came (the "
      "advisor thread last began {}, at launch {} of {} launched); something holds the launching "
      "thread that neither word launches wait on shows; UMSWAP_DEBUG=hang-stacks prints every "
      "thread's stack",
      std::chrono::duration_cast<std::chrono::seconds>(quiet).count(), words_.doing.load(),
      words_.applied_through.load(), words_.launched.load());
  report_state();
}

void Watchdog::report_state() {
  report_where("where things stood at launch", words_.applied_through.load());
  if (config_.hang_stacks) {
    log_warning("advisor: every thread's stack follows (UMSWAP_DEBUG=hang-stacks)");
    log_warning("advisor: {} threads wrote their stacks", dump_thread_stacks(2));
  }
}

}  // namespace umswap::advisor
