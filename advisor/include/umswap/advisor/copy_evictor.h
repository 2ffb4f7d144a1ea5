// UMSWAP_EVICT_COPY's evictions (docs/advisor.md, "Evictions umswap copies"): an eviction is a
// copy of the range's whole 2 MiB pages to pinned host memory on the advisor's stream, followed
// there by a discard of those GPU pages; a prefetch of such a range is a populate and a copy back
// on restore_stream, ordered on the GPU after the launch that issues it and after the discards,
// then a `restored` word (mapped host memory) says g + 1, and the launches that use the range
// wait for it as for the advisor's counter. A range held on the host holds nothing on the GPU, so
// no launch may reach it before its copy back: the launch path checks each launch's pointers
// before it is submitted (guard(): one that does waits until what it reaches is back), and the
// advisor copies out only ranges that no launch submitted after the last use reaches before their
// copy back (both under copies_mutex_). Whatever goes wrong (a copy fails, an event cannot be
// recorded, the watchdog asks, the program issues a call the tracer cannot see into), stop()
// brings everything back and evictions go through the driver.
//
// Threads:
//  - the advisor thread: set_up(), go_live(), evict(), restore(), finish_launch(), tend(),
//    serve_rescue(), take_requests(), stop(), settle_at_exit(), and every field not said below;
//  - the launching threads (under the tracer's launch lock): begin_launch(), cover(), guard(),
//    wait_for_stop(), wait_on_host(), epoch_of(); the program's freeing thread: before_free();
//    any thread calling into the driver's opaque paths: on_opaque();
//  - the watchdog: live(), word_now(), ask_rescue(), rescue_asked(), populate_stream(),
//    restored_written();
//  - stats_json(), copied_in(), copied_out(): after the advisor thread has joined.
// Fields read across threads are atomics, or under copies_mutex_ (copies_, the rescue request).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "umswap/advisor/advisor.h"
#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/evictor.h"
#include "umswap/advisor/host_copies.h"
#include "umswap/advisor/round_trips.h"
#include "umswap/core/log.h"
#include "umswap/tracer/tracer.h"
#include "umswap/tracer/tracer_ports.h"

namespace umswap::advisor {

class CopyEvictor final : public Evictor {
 public:
  using Host = EvictorHost;

  // `config` and `d` are the advisor's, read as they are when set_up() runs (its set-up may
  // change both before); `times` is the advisor thread's time accounting; `steps` and
  // `residency` are the tracer's (tracer_ports.h).
  CopyEvictor(const AdvisorConfig& config, const AdvisorDriver& d, Host& host, CallTimes& times,
              const tracer::StepLogReader& steps, tracer::ResidencySink& residency)
      : config_(config), d_(d), host_(host), times_(times), steps_(steps), residency_(residency) {}
  CopyEvictor(const CopyEvictor&) = delete;
  CopyEvictor& operator=(const CopyEvictor&) = delete;

  // Advisor thread, once, with the advisor's stream and device: the copies' streams, events,
  // words and host memory; with copies off (not asked for, or no counter, or a driver without
  // the calls) it says why once and every call below does nothing.
  void set_up(CUstream stream, CUdevice device, bool have_counter);
  // The advisor's streams the copies use, with their names (the op log's).
  std::vector<std::pair<CUstream, const char*>> streams() const;

  // ---- advisor thread ----
  // From a plan's first applied launch on (its waits in place).
  void go_live();
  // Evictor. evict(): its whole 2 MiB pages copied out and discarded (the rest through the
  // driver), or declined (copies off, not ordered, not brought back whole, no host memory), or
  // kept (a launch already submitted reaches the range before its copy back could be waited for).
  Outcome evict(uint64_t address, uint64_t length, uint64_t g, uint64_t j, bool ordered,
                uint64_t due) override;
  // The parts held on the host come back by copy (issued by finish_launch(g)), the rest through
  // the driver; declined when nothing of it is held.
  bool restore(uint64_t address, uint64_t length, uint64_t g) override;
  // Launch g's copies back issued; the restored word then says g + 1.
  void finish_launch(uint64_t g, bool wait_reached) override;
  // Copies seen done: the residency count, reusable host blocks, --verify's round trips.
  void tend();
  // Serves the guard's request: the ranges a caught launch reaches come back.
  void serve_rescue();
  // The watchdog's request or an opaque call: everything comes back, copies stop for good.
  void take_requests();
  // Everything held comes back now, and copies stop: for the rest of the run (`for_good`), or
  // until the next plan goes live.
  void stop(const std::string& why, bool for_good = true);
  // The program ends (after stop()): with --verify, the last round trips are compared.
  void settle_at_exit();

  // ---- launch path ----
  // Whether copies are live for this launch, and the restored word it then waits on.
  bool begin_launch(CUdeviceptr* restored);
  // The launch up to which launch `index` on `on` finds the copies back done: its own wait `own`
  // (placed later in the launch path) or an earlier launch's on the same stream; UINT64_MAX:
  // none.
  uint64_t cover(uint64_t own, uint64_t index, CUstream on);
  // Before launch `index` is submitted: if it reaches a range held on the host that its waits
  // (`covered`, from cover()) do not bring back first, it waits here until what it reaches is
  // back (or copies have stopped). hits null: unknown; everything comes back, copies stop.
  void guard(uint64_t index, const std::vector<tracer::PointerHit>* hits, uint64_t covered,
             CUstream on);
  // While the copies back of the last stop() are not seen done, `on` waits for them.
  void wait_for_stop(CUstream on);
  // A launch whose wait for the copies back could not be placed on its stream waits here on the
  // host until `word` reaches `value` (or is released).
  void wait_on_host(CUdeviceptr word, uint64_t value, uint64_t index);
  // The epoch of a restored word (nullopt: not one of ours).
  std::optional<uint64_t> epoch_of(CUdeviceptr word) const;
  // A call the tracer cannot see into (a graph launch, a host function) at launch `launched`:
  // while copies are live, everything comes back and copies stop; returns once they have.
  void on_opaque(const char* what, uint64_t launched, CUstream on);
  // The program frees [base, base + size): what is held of it is forgotten; waits for copies of
  // it still in flight.
  void before_free(uint64_t base, uint64_t size);

  // ---- any thread ----
  bool live() const { return live_.load(std::memory_order_acquire); }
  // The restored word in use now: its epoch and value (nullopt: copies are off).
  std::optional<std::pair<uint64_t, uint64_t>> word_now() const;
  void ask_rescue() { rescue_asked_.store(true); }
  bool rescue_asked() const { return rescue_asked_.load(); }
  CUstream populate_stream() const { return populate_stream_; }
  uint64_t restored_written() const { return restored_written_.load(std::memory_order_relaxed); }

  // ---- after join ----
  // The stats' advisor.evict_copy (with --verify its round_trips, whose mismatches name the
  // summary's buffers).
  nlohmann::json stats_json(const tracer::RunSummary* summary) const;
  const std::vector<Transfer>& copied_in() const { return copied_in_; }
  const std::vector<Transfer>& copied_out() const { return copied_out_; }

 private:
  struct TicketEvent {
    uint64_t ticket;
    CUevent event;
  };
  struct Restore {
    uint64_t g;  // the launch that issues it; restored value g + 1
    uint64_t ticket = 0;
    std::vector<HostCopies::Segment> segments;
  };
  // Discards issued behind copies out (ticket), noted in the residency count once seen done.
  struct DiscardNote {
    uint64_t ticket = 0;
    uint32_t copy = 0;  // the correlation id of the copy the discard follows (0: unknown)
    std::vector<HostCopies::Segment> segments;
  };
  enum class Reach : uint8_t { none, reached, unknown };
  // Launch path only: per stream (the first 16 seen; later ones find no cover), the largest
  // launch its waits cover so far.
  struct StreamCover {
    bool used = false;
    CUstream stream = nullptr;
    uint64_t covered = UINT64_MAX;
  };

  void set_up_copy_kernel();
  void set_up_round_trips(CUmodule module);
  Outcome evict_by_copy(uint64_t address, uint64_t length, uint64_t g, uint64_t j, uint64_t due);
  Reach submitted_reach(uint64_t j, uint64_t lo, uint64_t hi, uint64_t due);
  void discard_behind(std::vector<HostCopies::Segment> segments, uint64_t ticket, uint32_t copy,
                      CUstream ds);
  bool seal_copy_out(uint64_t ticket, CUstream ds);
  void count_copy_out(uint64_t g, uint64_t bytes);
  bool record_copied();
  // `for_launch`: a plan's copies back at launch r.g (not a rescue's or a stop's).
  void issue_restore(bool for_launch, bool wait_reached, Restore r);
  CUresult copy_async(uint64_t dst, uint64_t src, uint64_t bytes, bool to_host, CUstream s);
  CUevent take_event();
  uint64_t poll(std::deque<TicketEvent>& q, uint64_t seen);
  bool copy_back_event(uint64_t ticket, CUevent* event);
  // What cover() said for launch `index`, or UINT64_MAX (not kept any more, or none).
  uint64_t covered_launch(uint64_t index) const;
  // On s, the hashes of the whole pages of [address, address + length) leaving (with copy out
  // `ticket`) or back (copy back `ticket`) at launch g (--verify).
  void hash_pages(uint64_t address, uint64_t length, bool leaving, uint64_t ticket, uint64_t g,
                  CUstream s);
  void settle_round_trips();
  nlohmann::json round_trips_json(const tracer::RunSummary* summary) const;

  const AdvisorConfig& config_;
  const AdvisorDriver& d_;
  Host& host_;
  CallTimes& times_;
  const tracer::StepLogReader& steps_;
  tracer::ResidencySink& residency_;
  CUstream stream_ = nullptr;  // the advisor's: copies out and their discards
  CUdevice device_ = 0;

  std::unique_ptr<HostCopies> copies_;  // null: off
  std::atomic<bool> live_{false};       // the launch path checks launches, places restore waits
  std::mutex copies_mutex_;             // copies_ (the launch path reads it), the rescue request
  // Held on the host when the program freed the allocation (before_free), and the frees that
  // waited for copies of it in flight.
  std::atomic<uint64_t> freed_held_bytes_{0}, freed_waits_{0};
  std::atomic<uint64_t> guard_launch_{UINT64_MAX};  // a launch the launch path caught
  std::atomic<const char*> opaque_call_{nullptr};   // a call the tracer cannot see into
  // A launch the guard caught reaching held ranges its waits do not cover: the advisor thread
  // gives back those ranges (rounded out to 2 MiB pages) and records rescue_event_ after their
  // copies back on restore_stream_; the launch waits for it on its stream. rescue_ranges_ and
  // rescue_serial_ under copies_mutex_; one request at a time (the launch path holds the tracer's
  // launch lock).
  std::vector<std::pair<uint64_t, uint64_t>> rescue_ranges_;
  uint64_t rescue_serial_ = 0;
  uint64_t rescue_launch_ = 0;  // the launch caught
  std::atomic<uint64_t> rescue_wanted_{0}, rescue_served_{0};
  CUevent rescue_event_ = nullptr;
  uint64_t copy_rescued_bytes_ = 0;
  std::vector<std::string> guard_kernels_;  // the first kernels the guard caught, for the stats
  // After stop(): stopped_event_ is recorded after the last copies back; launches wait for it
  // until it is seen done. The number of the stop it belongs to (0: none pending), so that a
  // launch that saw an earlier stop's event done cannot clear a later stop's (two stops in quick
  // succession: the event is re-recorded between its query and its clearing).
  std::atomic<uint64_t> stopped_pending_{0};
  uint64_t stops_recorded_ = 0;
  CUstream restore_stream_ = nullptr;
  // The populates of the plan's copies back run on populate_stream_, so that the next launch's
  // populates overlap this one's copies in (populated_event_ orders each copy after its own
  // populate); the discards behind the copies out run on discard_stream_ (copied_event_ orders
  // each after its copies), so that the next copy out need not wait for them. Null (the streams
  // could not be created): they run on restore_stream_ and stream_.
  CUstream populate_stream_ = nullptr, discard_stream_ = nullptr;
  CUevent populated_event_ = nullptr;
  // The event a discard on discard_stream_ waits for (recorded on stream_ after the copies it
  // follows), made at its first use (record_copied()) and reused: a wait takes the record made
  // before it.
  CUevent copied_event_ = nullptr;
  // The restored words, one per epoch: a plan that ends releases its word for good, and the next
  // plan's copies count on a fresh one (a released word cannot be taken back from waits already
  // placed on it).
  static constexpr uint32_t kEpochs = 64;
  volatile uint64_t* copy_words_ = nullptr;
  CUdeviceptr restored_base_ = 0;
  uint32_t epoch_ = 0;
  std::atomic<CUdeviceptr> restored_device_{0};
  std::deque<TicketEvent> out_events_, in_events_;
  std::vector<CUevent> spare_events_;
  uint64_t out_ticket_ = 0, in_ticket_ = 0, out_done_ = 0, in_done_ = 0;
  // After the last discard (on discard_stream_, or stream_); copies back wait for it.
  CUevent discarded_event_ = nullptr;
  CUevent stopped_event_ = nullptr;  // after the copies back of the last stop()
  bool discards_issued_ = false;
  std::deque<DiscardNote> discard_notes_;
  std::vector<HostCopies::Segment> pending_in_;  // the launch being applied's copies back
  uint64_t pending_ticket_ = 0;
  std::atomic<uint64_t> restored_written_{0};  // the highest restored value queued
  std::atomic<bool> rescue_asked_{false};      // the watchdog's request
  std::vector<Transfer> copied_out_, copied_in_;
  uint64_t copied_out_bytes_ = 0, copied_in_bytes_ = 0, copy_discarded_bytes_ = 0;
  uint64_t copy_forgotten_bytes_ = 0, copy_calls_ = 0, copy_fallbacks_ = 0, copy_rescues_ = 0;
  uint64_t copy_guard_hits_ = 0, copy_failures_ = 0;
  uint64_t copy_lost_bytes_ = 0;   // copies back that failed twice, their GPU pages discarded
  bool copy_back_failed_ = false;  // one did: copies stop after the restore
  // Evictions left to the driver: a submitted launch reaches the range before its copy back; the
  // eviction could not be ordered after its last use; the plan does not bring the whole range
  // back before evicting it again (dead parts, say); before the waits began.
  uint64_t copy_reached_ = 0, copy_skipped_unordered_ = 0, copy_skipped_not_back_ = 0;
  // Copies out ordered after a copy back of their range still on its way (copy_back_pending()),
  // and evictions left to the driver because that copy back had no event to wait for.
  uint64_t copies_out_after_back_ = 0, copy_out_unordered_back_ = 0;
  uint64_t kept_reached_bytes_ = 0;  // evictions evict_by_copy() kept: not made at all
  uint64_t copy_skipped_early_ = 0;
  // Launches after a last use the advisor scans before a copy out; past it, the driver evicts.
  static constexpr uint64_t kScanLimit = 60000;  // below kCoverRing
  std::string copy_off_reason_;                  // why copies stopped (empty: they did not)
  OnceFlag warned_copy_failure_;
  OnceFlag warned_wait_failure_;  // launch path
  // The loaded copy kernel (null: copy engines copy), why it is not used, and how many copies
  // each path made.
  CUfunction copy_fn_ = nullptr;
  std::string copy_kernel_off_;
  uint64_t kernel_copies_ = 0, engine_copies_ = 0;
  // umswap run --verify (round_trips.h): the page hash kernel and its pinned, mapped memory of
  // kTripSlots slots, one page's hash each; trips_off_ says why the round trips are not hashed.
  static constexpr uint64_t kTripSlots = uint64_t{1} << 20;
  CUfunction hash_fn_ = nullptr;
  const volatile uint64_t* trip_memory_ = nullptr;
  std::unique_ptr<RoundTrips> trips_;
  std::string trips_off_;
  // The kernels of the launches of the first mismatches' copies out and back (by mismatch).
  std::vector<std::pair<std::string, std::string>> mismatch_kernels_;
  // Launch path: cover()'s state, and what it said by launch index for the advisor's scan.
  std::array<StreamCover, 16> stream_cover_{};
  static constexpr size_t kCoverRing = 65536;
  std::array<std::pair<std::atomic<uint64_t>, std::atomic<uint64_t>>, kCoverRing> covered_at_{};
  static_assert(kScanLimit < kCoverRing);
};

}  // namespace umswap::advisor
