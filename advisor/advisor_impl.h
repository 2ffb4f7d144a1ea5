// The advisor's facade state (advisor.h's Advisor owns one): the parts it is made of, and
// what has not moved into a part of its own yet. Internal to advisor/: advisor.cpp runs it,
// advisor_stats.cpp reads it after the advisor thread has joined.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "umswap/advisor/advisor.h"
#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/boundary_hold.h"
#include "umswap/advisor/copy_evictor.h"
#include "umswap/advisor/event_ring.h"
#include "umswap/advisor/evictor.h"
#include "umswap/advisor/learn_path.h"
#include "umswap/advisor/learning_timeline.h"
#include "umswap/advisor/logged_calls.h"
#include "umswap/advisor/online_learning.h"
#include "umswap/advisor/op_log.h"
#include "umswap/advisor/placement_hand_off.h"
#include "umswap/advisor/planner.h"
#include "umswap/advisor/progress.h"
#include "umswap/advisor/replay.h"
#include "umswap/advisor/resident_gate.h"
#include "umswap/advisor/sweeps.h"
#include "umswap/advisor/watchdog.h"
#include "umswap/allocator/driver_api.h"
#include "umswap/allocator/managed_allocator.h"
#include "umswap/allocator/placement.h"
#include "umswap/core/driver_lock.h"
#include "umswap/core/log.h"
#include "umswap/core/thread_stacks.h"
#include "umswap/tracer/extents.h"
#include "umswap/tracer/iteration_detector.h"

namespace umswap::advisor {

// The plan's drops by 2 MiB page of this process: the windows [last_use, next_use) of phases
// (cyclic; equal = the whole iteration) in which a free that empties the page should discard it.
struct DropTable {
  struct Window {
    uint32_t last_use, next_use;
    uint32_t slot;  // index into `discarded`
  };
  struct Populate {
    uint64_t address, bytes;
  };
  using Populates = std::vector<Populate>;
  std::unordered_map<uint64_t, std::vector<Window>> windows;
  std::unordered_set<uint64_t> planned;  // every page a range of the plan touches
  uint64_t unresolved = 0;               // drops whose buffer was not found in this process (yet)
  // Diagnostics, by window: how often a free discarded the page in it; and how often a free asked
  // about a page of the table at a phase outside all of its windows.
  mutable std::vector<std::atomic<uint32_t>> discarded;
  mutable std::atomic<uint64_t> asked_outside{0};
  mutable std::atomic<uint64_t> unplanned{0};  // pages discarded because no range touches them
  // By phase: the whole pages of the drops whose next use is at that launch, which the launch
  // path populates on the GPU at that launch, on its stream (the allocator leaves them).
  std::vector<Populates> populate_at;
};

// A plan in force: the planner's actions indexed by phase, and where its buffers live now.
struct LivePlan {
  uint64_t base = 0;  // launch index of step 0 of some iteration
  uint64_t period = 0;
  uint64_t applied_from = 0;  // first launch whose actions run (an iteration boundary)
  // The first iteration boundary at or after the launch the program had reached when the advisor
  // issued the plan's first actions: the advisor trails the launches, so with short iterations
  // the program can run whole iterations past applied_from before the plan moves anything.
  std::atomic<uint64_t> started_at{UINT64_MAX};
  // Staged to replace the plan in force (relearned): the launch path's learning evictions never
  // run for it.
  bool staged = false;
  // Learned while the launch path evicted (UMSWAP_LEARN_EVICT): relearned once from a planned
  // iteration (check_relearn()).
  bool learned_evicting = false;
  // Launches below this were on their streams when the advisor's barrier at applied_from was
  // taken: the GPU has run them once the barrier has passed (no event needed). 0: no barrier.
  uint64_t barrier_covers = 0;
  // Whether that barrier was taken (a plan that replaced another while launches wait on the
  // advisor's stream takes none: its launches below applied_from are not covered).
  bool barrier_taken = false;
  // In force from the launch BoundaryHold held for it, which goes on once the plan is visible,
  // before the advisor issues the plan's start work (its barrier and migrations): the launches of
  // its first iteration wait for none of it, and waits begin an iteration later.
  bool held_start = false;
  std::vector<uint32_t> keys;          // expected step key per phase; empty = not checked here
  std::vector<uint8_t> needs_event;    // per phase: a later eviction waits for this launch
  std::vector<uint8_t> prefetches;     // per phase: the plan prefetches at this launch
  std::vector<uint32_t> wait_ahead;    // per phase: launches back to its last prefetch's issue
  std::vector<uint8_t> populates;      // per phase: a drop's next use, or a populate ahead of one
  std::vector<uint32_t> first_action;  // per phase, CSR into plan.actions (size period + 1)
  // By action index, for evictions: launches from it to the last prefetch that brings part of
  // its range back before the range is evicted again (UMSWAP_EVICT_COPY: a launch that waits
  // for the copies back up to there finds it all); UINT32_MAX: none within an iteration.
  std::vector<uint32_t> evict_due;
  // The launch at which launch `index` waits for the copies back (the latest of its
  // prefetches' issuing launches), or UINT64_MAX: it waits for none.
  uint64_t covered(uint64_t index, uint64_t waits_start) const {
    if (index < base) return UINT64_MAX;
    const uint32_t ahead = wait_ahead[(index - base) % period];
    if (ahead == UINT32_MAX || index < ahead || index - ahead < waits_start) return UINT64_MAX;
    return index - ahead;
  }
  Plan plan;
  std::vector<uint64_t> address;  // by plan buffer index; 0 = not (yet) known
  std::vector<BufferId> buffer_id;
  std::vector<uint64_t> streams;     // application streams seen in the planned iteration
  std::string source;                // "online" or "replay"
  ReplayMatcher* matcher = nullptr;  // replay: resolves trace buffers to live ones
  // Read by the allocator (Advisor::discard_page, populate_later) and the launch path; built by
  // the advisor thread.
  std::atomic<std::shared_ptr<const DropTable>> drops;
};

class AdvisorImpl final : public EvictorHost {
 public:
  AdvisorImpl(const tracer::StepLogReader& step_log, tracer::ResidencySink& residency_sink)
      : steps(step_log), residency(residency_sink) {}

  // The tracer's, handed in (tracer_ports.h): the launch log the plans are learned from and
  // checked against, and where moves the tracer cannot count are told. Any thread.
  const tracer::StepLogReader& steps;
  tracer::ResidencySink& residency;
  AdvisorConfig config;
  AdvisorDriver d;
  // Where the launch path and the advisor thread are, and the words launches wait on
  // (progress.h): read by every thread, the watchdog's among them.
  Progress words;
  // Launches of kernels that must find their memory on the GPU (resident_gate.h).
  ResidentGate resident{d, steps, residency};
  // The launch after the first placed iteration waits while the first plan is made
  // (boundary_hold.h): armed, claimed and released by the advisor thread.
  BoundaryHold boundary{words.launched};
  bool stream_released = false;  // advisor thread: kReleased written on `stream` after waits_off
  Registry* registry = nullptr;

  // Launch path.
  std::atomic<LivePlan*> plan{nullptr};
  // A plan learned while `plan` runs (replay relearning): the launch path takes it from its
  // applied_from on; the advisor thread makes it `plan` once its cursor gets there.
  std::atomic<LivePlan*> next_plan{nullptr};
  // The plan launch `index` runs under (launch path). next_plan is read first: the advisor stores
  // `plan` before it clears next_plan, so a launch never sees neither.
  LivePlan* plan_at(uint64_t index) const {
    LivePlan* q = next_plan.load(std::memory_order_acquire);
    return q && index >= q->applied_from ? q : plan.load(std::memory_order_acquire);
  }
  uint32_t mismatch_run = 0;
  std::atomic<bool> diverged{false};
  std::atomic<uint64_t> diverged_at{0};
  std::atomic<CUcontext> context{nullptr};
  std::atomic<bool> events_ready{false};
  // Launches that finished on the GPU (recorded at API exit, for evictions), and launches the
  // GPU reached (recorded before the launch, for prefetches), by launch index modulo the ring.
  EventRing done, reached;
  std::atomic<uint64_t> waits_placed{0};
  std::atomic<uint64_t> evict_waits_placed{0};
  std::atomic<uint64_t> launch_populates{0}, launch_populated_bytes{0};
  // UMSWAP_LEARN_EVICT: the launch path's evictions while no plan is in force (learn_path.h).
  LearnPath learn_path{config, d};
  bool relearn_after_learning = false;  // relearn_from is a plan learned while evicting
  // Populates on the launching stream; counted.
  void populate_ranges(std::span<const DropTable::Populate> ranges, CUstream s);
  std::atomic<CUdevice> device_for_launches{0};

  // Advisor thread.
  std::thread thread;
  CUstream stream = nullptr;
  CUstream sweep_stream = nullptr;  // non-blocking, for the sweeps' discards (waits on nothing)
  CUevent barrier = nullptr;
  CUdevice device = 0;
  uint64_t budget = 0;
  uint64_t cursor = 0;
  uint64_t learn_from = 0;
  uint64_t next_check = 0;
  OnlineLearning online;      // which iteration to plan from; remembers diverged plans
  LearningTimeline timeline;  // when each learning step happened (the stats' advisor.timeline)
  bool learning_failed = false;
  // The placement made online or from the trace, until the allocator has it
  // (placement_hand_off.h).
  PlacementHandOff placement{config.place};
  Sweeps sweeps;                                 // a plan's sweeps of free slab pages (sweeps.h)
  std::vector<std::unique_ptr<LivePlan>> plans;  // every plan ever made; never freed while running
  std::unique_ptr<ReplayMatcher> matcher;
  uint64_t replay_checked = 0;  // replay: launches whose keys were compared with the trace
  // Replay relearning (replay_should_relearn): the bytes of the iteration being applied whose
  // actions were skipped, and once relearning started, from where and why.
  uint64_t skipped_bytes = 0;
  bool relearning = false;
  std::optional<uint64_t> relearn_from;
  uint64_t relearn_skipped_bytes = 0;
  std::future<std::unique_ptr<LivePlan>> relearn_task;  // the plan being built, off this thread
  uint64_t relearned_at = 0;  // applied_from of the plan that replaced the replay's; 0 = none
  std::pair<uint64_t, uint64_t> replay_found{0, 0};  // the replay plan's buffers, found of them

  // Accounting (advisor thread; read after join).
  std::vector<Transfer> prefetched, evicted;
  uint64_t prefetched_bytes = 0, evicted_bytes = 0, prefetch_calls = 0, evict_calls = 0;
  uint64_t failed_calls = 0, stale_actions = 0, divergences = 0, late_events = 0;
  uint64_t late_start_events = 0;
  std::atomic<uint64_t> discards_approved{0};  // pages the allocator was told to discard
  // Host time the launching threads spend in on_step (ns), and inside the launch path's
  // populate calls (a managed-memory call blocks once about 57 wait on the GPU).
  std::atomic<uint64_t> launch_path_ns{0}, launch_populate_call_ns{0};
  std::atomic<uint64_t> launch_populate_longest_ns{0};
  std::string state = "starting";
  std::string fallback;  // why replay fell back to online, or why advice is off
  OnceFlag warned_call_failure;

  void run();
  bool set_up();
  void learn();
  std::vector<uint64_t> step_signatures(uint64_t count) const;
  void relearn(const LivePlan& replayed);
  std::unique_ptr<LivePlan> build_plan(uint64_t e, uint64_t first, uint64_t period) const;
  void log_learned(const LivePlan& p, uint64_t first) const;
  void activate(std::unique_ptr<LivePlan> p);
  void index_plan(LivePlan& p);
  void stage(std::unique_ptr<LivePlan> p);
  void switch_to_next();
  void take_effect(const LivePlan& p);
  void check_relearn(const LivePlan& p, uint64_t g);
  void apply(uint64_t n);
  void reset_to_start(LivePlan& p);
  bool barrier_all(const LivePlan& p);
  bool wait_for_launch(const LivePlan& p, uint64_t j);
  bool resolve(LivePlan& p, uint32_t buffer);
  void migrate(uint64_t address, uint64_t length, bool to_gpu, uint64_t launch) override;
  void check_replay_keys(LivePlan& p);
  void drop_plan(uint64_t at, const char* why);
  void release_waits();
  void build_drops(LivePlan& p);
  void tend(LivePlan& p, uint64_t n);
  bool discard_page(uint64_t page);
  bool sweep_may_discard(uint64_t page);
  bool populate_later(uint64_t page);
  // The plan in force's drop table once the program has reached the plan's first applied launch
  // (else null), with the plan and the launches seen.
  std::shared_ptr<const DropTable> applied_drops(LivePlan** plan_out, uint64_t* launched_out) const;
  bool use_lifetimes() const { return config.lifetimes && config.lifetimes(); }

  uint64_t plan_buffers = 0, plan_buffers_found = 0;  // at the last plan's first applied launch
  // How far the advisor thread trails the launches (a thread blocked in the driver falls behind,
  // and its prefetches come late), and its host time (advisor_common.h).
  uint64_t most_behind = 0;
  CallTimes times;
  // The plan's evictions and prefetches are offered to the evictors in this order (evictor.h):
  // UMSWAP_EVICT_COPY's copies (copy_evictor.h: its own state), then the driver, which takes
  // everything. This is their EvictorHost.
  CopyEvictor copier{config, d, *this, times, steps, residency};
  DriverEvictor driver_evictor{*this};
  std::array<Evictor*, 2> evictors{&copier, &driver_evictor};
  // Its own thread, watching the words launches wait on (watchdog.h); the launch path notes each
  // launch's waits in its log.
  Watchdog watchdog{d, config, words, done, reached, copier};

  // Graph launches, host functions and stream callbacks seen (the plan knows nothing of what
  // they touch), and the first one's name.
  std::atomic<uint64_t> opaque_calls{0};
  std::atomic<uint64_t> graph_launches{0};  // of them, CUDA graph launches
  std::atomic<const char*> first_opaque{nullptr};
  void relax_capture_mode();

  // EvictorHost.
  void wait_reached(uint64_t g, CUstream on) override {
    const Timed timed(times.event_wait_s);
    if (!reached.wait(d, g, on, words.launched.load(std::memory_order_acquire)))
      ++late_start_events;
  }
  void count(bool to_gpu, uint64_t launch, uint64_t bytes) override {
    (to_gpu ? prefetched : evicted).push_back({launch, bytes});
    (to_gpu ? prefetched_bytes : evicted_bytes) += bytes;
  }
  void note_doing(const char* what) override { words.doing.store(what, std::memory_order_relaxed); }
  void issued_call() override { words.issued_calls.fetch_add(1, std::memory_order_relaxed); }
  uint64_t launches_seen() const override { return words.launched.load(std::memory_order_acquire); }
  uint64_t waits_start() const override { return words.waits_from.load(std::memory_order_acquire); }
  bool stopping() const override { return words.stop.load(std::memory_order_acquire); }
};

}  // namespace umswap::advisor
