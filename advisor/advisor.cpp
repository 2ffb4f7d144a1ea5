#include "umswap/advisor/advisor.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "umswap/advisor/host_copies.h"
#include "umswap/advisor/online_learning.h"
#include "umswap/advisor/planner.h"
#include "umswap/advisor/replay.h"
#include "umswap/allocator/managed_allocator.h"
#include "umswap/allocator/placement.h"
#include "umswap/core/log.h"
#include "umswap/tracer/extents.h"
#include "umswap/tracer/iteration_detector.h"

namespace umswap::advisor {

bool AdvisorDriver::can_copy() const {
  return event_query && mem_host_alloc && mem_free_host && memcpy_dtoh_async && memcpy_htod_async &&
         mem_discard_batch_async && stream_wait_value64 && stream_write_value64 &&
         mem_host_get_device_pointer;
}

bool AdvisorDriver::complete() const {
  return ctx_get_current && ctx_set_current && ctx_get_device && device_total_mem &&
         stream_create && stream_synchronize && event_create && event_record && stream_wait_event &&
         mem_prefetch_async;
}

namespace {

constexpr size_t kEventRing = 4096;  // last-use events, by launch index modulo this
constexpr uint32_t kDivergeRun = 8;  // consecutive launches off the plan that end it
// Launches that may be between on_step() and their submission at once (several launching
// threads): a launch this far behind the launch count is on its stream, and its events (if any)
// are recorded.
constexpr uint64_t kEventSlack = 8;
// The prefetch-wait counter's "nobody waits" value. cuStreamWaitValue64's GEQ is a cyclic
// comparison, (int64_t)(*addr - value) >= 0, so UINT64_MAX would release nothing (it hung
// cudnn_vgg16); 2^62 is ahead of every launch index and within the comparison's half range.
constexpr uint64_t kReleased = uint64_t{1} << 62;
// The counter's values: launch g's evictions done (2g), all of launch g's actions done (2g + 1).
constexpr uint64_t evictions_done(uint64_t g) {
  return 2 * g;
}
constexpr uint64_t actions_done(uint64_t g) {
  return 2 * g + 1;
}

void sleep_us(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

constexpr uint64_t kPage = uint64_t{2} << 20;  // the slab allocator's discard unit

// The first launch at or after `n` that begins an iteration (base + k period).
uint64_t boundary_at_or_after(uint64_t base, uint64_t period, uint64_t n) {
  return n <= base ? base : base + (n - base + period - 1) / period * period;
}

// The plan's drops by 2 MiB page of this process: the windows [last_use, next_use) of phases
// (cyclic; equal = the whole iteration) in which a free that empties the page should discard it.
struct DropTable {
  struct Window {
    uint32_t last_use, next_use;
    uint32_t slot;  // index into `discarded`
  };
  std::unordered_map<uint64_t, std::vector<Window>> windows;
  std::unordered_set<uint64_t> planned;  // every page a range of the plan touches
  uint64_t unresolved = 0;               // drops whose buffer was not found in this process (yet)
  // Diagnostics, by window: how often a free discarded the page in it; and how often a free asked
  // about a page of the table at a phase outside all of its windows.
  mutable std::vector<std::atomic<uint32_t>> discarded;
  mutable std::atomic<uint64_t> asked_outside{0};
  mutable std::atomic<uint64_t> unplanned{0};  // pages discarded because no range touches them
  // By phase: the whole pages of the drops whose next use is at that launch, (address, bytes),
  // which the launch path populates on the GPU just before it (the allocator leaves them).
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> populate_at;
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
  // Launches below this were on their streams when the advisor's barrier at applied_from was
  // taken: the GPU has run them once the barrier has passed (no event needed). 0: no barrier.
  uint64_t barrier_covers = 0;
  std::vector<uint32_t> keys;          // expected step key per phase; empty = not checked here
  std::vector<uint8_t> needs_event;    // per phase: a later eviction waits for this launch
  std::vector<uint8_t> prefetches;     // per phase: the plan prefetches at this launch
  std::vector<uint32_t> wait_ahead;    // per phase: launches back to its last prefetch's issue
  std::vector<uint8_t> populates;      // per phase: a drop's next use (the launch path populates)
  std::vector<uint32_t> first_action;  // per phase, CSR into plan.actions (size period + 1)
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

struct Transfer {
  uint64_t launch;  // launch index it was issued at
  uint64_t bytes;
};

// Events recorded on the application's streams at chosen launches, which the advisor's stream
// waits for: slot = launch index modulo kEventRing; index[slot] says which launch it holds now.
struct EventRing {
  std::array<CUevent, kEventRing> events{};
  std::array<std::atomic<uint64_t>, kEventRing> index{};
  void record(const AdvisorDriver& d, uint64_t launch, CUstream stream) {
    const size_t slot = launch % kEventRing;
    if (d.event_record(events[slot], stream) == CUDA_SUCCESS) {
      index[slot].store(launch, std::memory_order_release);
    }
  }
  // Makes `waiter` wait for launch j's event; false when it was already reused, or is not
  // recorded within 20 ms while launch j may still be on its way (`launched`, the launches the
  // launch path has seen, is at most kEventSlack past it; further past, an event not there was
  // never recorded, and waiting for it would only hold the advisor back).
  bool wait(const AdvisorDriver& d, uint64_t j, CUstream waiter, uint64_t launched) const;
};

}  // namespace

class AdvisorImpl {
 public:
  AdvisorConfig config;
  AdvisorDriver d;
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
  std::atomic<uint64_t> launched{0};
  uint32_t mismatch_run = 0;
  std::atomic<bool> diverged{false};
  std::atomic<uint64_t> diverged_at{0};
  std::atomic<CUcontext> context{nullptr};
  std::atomic<bool> events_ready{false};
  // Launches that finished on the GPU (recorded at API exit, for evictions), and launches the
  // GPU reached (recorded before the launch, for prefetches), by launch index modulo the ring.
  EventRing done, reached;
  volatile uint64_t* progress_host =
      nullptr;  // prefetch wait: last launch whose prefetches are done
  CUdeviceptr progress_device = 0;
  std::atomic<uint64_t> waits_from{UINT64_MAX};  // launch-path waits target launches >= this
  std::atomic<bool> waits_off{false};            // the watchdog turned the waits off for good
  std::atomic<uint64_t> highest_wait{0};  // largest counter value a launch waits for, plus one
  std::atomic<uint64_t> waits_placed{0};
  std::atomic<uint64_t> evict_waits_placed{0};
  std::atomic<uint64_t> launch_populates{0}, launch_populated_bytes{0};
  std::atomic<CUdevice> device_for_launches{0};

  // Advisor thread.
  std::thread thread;
  std::atomic<bool> stop{false};
  CUstream stream = nullptr;
  CUstream sweep_stream = nullptr;  // non-blocking, for the sweeps' discards (waits on nothing)
  CUevent barrier = nullptr;
  CUdevice device = 0;
  uint64_t budget = 0;
  uint64_t cursor = 0;
  uint64_t learn_from = 0;
  uint64_t next_check = 0;
  OnlineLearning online;  // which iteration to plan from; remembers diverged plans
  bool learning_failed = false;
  bool placement_tried = false;
  int placement_attempts = 0;
  uint64_t placement_period = 0;  // of the iteration the placement came from
  static constexpr int kPlacementAttempts = 4;
  std::optional<Placement> placement;          // the one handed to the allocator
  std::string placement_note;                  // why there is none
  std::optional<Placement> pending_placement;  // to hand over at launch place_at
  uint64_t place_at = 0;                       // an iteration boundary
  int sweeps_left = 0;
  uint64_t sweep_at = 0;
  uint64_t swept_bytes = 0;
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
  std::string state = "starting";
  std::string fallback;  // why replay fell back to online, or why advice is off
  OnceFlag warned_call_failure;

  void run();
  bool set_up();
  void learn();
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
  void barrier_all(const LivePlan& p);
  bool wait_for_launch(const LivePlan& p, uint64_t j);
  bool resolve(LivePlan& p, uint32_t buffer);
  void migrate(uint64_t address, uint64_t length, bool to_gpu, uint64_t launch);
  void check_replay_keys(LivePlan& p);
  void drop_plan(uint64_t at, const char* why);
  void release_waits();
  void watch_waits();
  void build_drops(LivePlan& p);
  std::optional<Placement> make_placement(std::span<const BlockEvent> blocks, uint64_t start,
                                          uint64_t period, uint64_t arena_must_be);
  bool hand_placement(Placement p);
  bool tend_placement(uint64_t n);
  void place_from_trace();
  void tend(LivePlan& p, uint64_t n);
  bool discard_page(uint64_t page);
  bool populate_later(uint64_t page);
  // The plan in force's drop table once the program has reached the plan's first applied launch
  // (else null), with the plan and the launches seen.
  std::shared_ptr<const DropTable> applied_drops(LivePlan** plan_out, uint64_t* launched_out) const;
  bool use_lifetimes() const { return config.lifetimes && config.lifetimes(); }

  // Prefetch-wait watchdog: its own thread, because the advisor thread itself can be the one
  // stuck (inside the driver, measured on cudnn_vgg16).
  std::thread watchdog;
  std::atomic<uint64_t> wait_stalls{0};
  std::atomic<uint64_t> issued_calls{0};              // migrations issued, for the watchdog
  uint64_t plan_buffers = 0, plan_buffers_found = 0;  // at the last plan's first applied launch
  // Host time the advisor thread spends inside cuMemPrefetchAsync, and how far it trails the
  // launches (a thread blocked in the driver falls behind, and its prefetches come late).
  double prefetch_call_s = 0, evict_call_s = 0, longest_call_s = 0;
  uint64_t most_behind = 0;

  // UMSWAP_EVICT_COPY (host_copies.h, docs/advisor.md "Evictions umswap copies"). An eviction is
  // a copy to pinned host memory on `stream`, then, once the advisor sees it done, a discard of
  // the GPU pages on discard_stream (which waits for nothing); a prefetch of such a range is a
  // populate and a copy back on restore_stream (which waits only for discards), issued once the
  // GPU has reached the launch that brings it back. Nothing that destroys data is ever queued
  // behind a wait that can stall. Two more words of mapped host memory: `restored` (g + 1 once
  // launch g's copies back are done, written on restore_stream; a launch waits for the launch
  // that issues its prefetches, as with the other counter) and `approved` (L + 1 once the advisor
  // has checked launch L: a launch runs only after the advisor saw that nothing it points at is
  // held on the host; written from the host).
  std::unique_ptr<HostCopies> copies;    // null: off
  std::atomic<bool> copies_live{false};  // the launch path places the approval and restore waits
  uint64_t copies_from = UINT64_MAX;     // launches below may lack the approval wait
  CUstream discard_stream = nullptr, restore_stream = nullptr;
  volatile uint64_t* copy_words = nullptr;  // [0] restored, [1] approved
  CUdeviceptr restored_device = 0, approved_device = 0;
  struct TicketEvent {
    uint64_t ticket;
    CUevent event;
  };
  std::deque<TicketEvent> out_events, in_events;
  std::vector<CUevent> spare_events;
  uint64_t out_ticket = 0, in_ticket = 0, out_done = 0, in_done = 0;
  CUevent discarded_event = nullptr;  // after the last discard batch on discard_stream
  bool discards_issued = false;
  struct Restore {
    uint64_t g;  // the launch that issues it; restored value g + 1
    uint64_t ticket = 0;
    std::vector<HostCopies::Segment> segments;
  };
  std::deque<Restore> restores;   // in launch order, each once the GPU reached its launch
  uint64_t restored_written = 0;  // the highest restored value queued
  uint64_t approved_to = 0;       // launches below are approved
  // Launches whose approval waits for a copy back they reach: (launch, restored value needed),
  // in launch order; approvals stop before the first one until the word reaches its value.
  std::deque<std::pair<uint64_t, uint64_t>> approval_holds;
  void hold_approval(uint64_t launch, uint64_t value) {
    if (!approval_holds.empty() && approval_holds.back().first == launch) {
      approval_holds.back().second = std::max(approval_holds.back().second, value);
    } else {
      approval_holds.emplace_back(launch, value);
    }
  }
  std::atomic<bool> rescue_asked{false};  // the watchdog's request
  std::vector<Transfer> copied_out, copied_in;
  uint64_t copied_out_bytes = 0, copied_in_bytes = 0, copy_discarded_bytes = 0;
  uint64_t copy_forgotten_bytes = 0, copy_calls = 0, copy_fallbacks = 0, copy_rescues = 0;
  uint64_t copy_guard_hits = 0, copy_failures = 0;
  std::string copy_off_reason;  // why copies stopped (empty: they did not)
  OnceFlag warned_copy_failure;
  void set_up_copies();
  void go_live_copies(uint64_t waits_start);
  bool evict_by_copy(uint64_t address, uint64_t length, uint64_t g, uint64_t j);
  bool restore_by_copy(uint64_t address, uint64_t length, uint64_t g);
  void push_restore(uint64_t g, std::vector<HostCopies::Segment> segments, uint64_t ticket);
  void tend_copies(bool ignore_reached);
  void issue_restore(Restore& r);
  bool check_launch(const tracer::StepLog& log, uint64_t first, uint64_t g);
  // Writes the approved word: launches the guard checked, up to the first whose copy back is
  // not done.
  void approve() {
    if (!copies_live.load(std::memory_order_relaxed)) return;
    while (!approval_holds.empty() && copy_words[0] >= approval_holds.front().second) {
      approval_holds.pop_front();
    }
    const uint64_t to = approval_holds.empty() ? approved_to : approval_holds.front().first;
    if (copy_words[1] < to) copy_words[1] = to;
  }
  void rescue(const std::string& why, bool freeze);
  bool launch_reached(uint64_t g) const;
  CUevent take_event();
  uint64_t poll(std::deque<TicketEvent>& q, uint64_t seen);
};

Advisor::Advisor() : impl_(new AdvisorImpl) {
  for (EventRing* ring : {&impl_->done, &impl_->reached}) {
    for (auto& e : ring->index) e.store(UINT64_MAX);
  }
}

Advisor::~Advisor() {
  // Leaked on purpose when the thread still runs (exit paths): never joined from a destructor.
  if (!impl_->thread.joinable()) delete impl_;
}

bool Advisor::start(const AdvisorConfig& config, const AdvisorDriver& driver, Registry& registry,
                    std::string* reason) {
  if (!driver.complete()) {
    *reason = "the CUDA driver lacks functions the advisor needs (cuMemPrefetchAsync v2, events)";
    return false;
  }
  impl_->config = config;
  impl_->d = driver;
  impl_->registry = &registry;
  if (config.mode == Mode::replay) {
    std::string error;
    impl_->matcher = load_replay(config.replay_path, &error);
    if (!impl_->matcher) {
      impl_->fallback = error + "; learning online instead";
      log_warning("replay: {}", impl_->fallback);
    }
  }
  impl_->thread = std::thread([this] { impl_->run(); });
  return true;
}

void Advisor::on_step(uint64_t index, uint32_t key, CUstream stream) {
  AdvisorImpl& a = *impl_;
  a.launched.store(index + 1, std::memory_order_release);
  LivePlan* p = a.plan_at(index);
  if (!p || index < p->base) return;
  const uint64_t phase = (index - p->base) % p->period;
  // Before anything this launch adds to its stream (its populates, its waits: a prefetch that
  // waited behind a wait for itself would never come).
  if (index > p->applied_from && p->prefetches[phase] &&
      a.events_ready.load(std::memory_order_acquire)) {
    a.reached.record(a.d, index, stream);
  }
  // Dropped pages this launch is the next user of: populated on the GPU now, on its stream, so
  // it neither faults them in (0.6 GB/s measured) nor had them from their allocation on.
  const bool populates = index >= p->applied_from && p->populates[phase];
  if (const std::shared_ptr<const DropTable> table =
          populates ? p->drops.load(std::memory_order_acquire) : nullptr;
      table && phase < table->populate_at.size()) {
    CUmemLocation gpu{};
    gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
    gpu.id = a.device_for_launches.load(std::memory_order_relaxed);
    for (const auto& [address, bytes] : table->populate_at[phase]) {
      if (a.d.mem_prefetch_async(address, bytes, gpu, 0, stream) == CUDA_SUCCESS) {
        a.launch_populates.fetch_add(1, std::memory_order_relaxed);
        a.launch_populated_bytes.fetch_add(bytes, std::memory_order_relaxed);
      }
    }
  }
  if (!p->keys.empty()) {
    if (p->keys[phase] != key) {
      if (++a.mismatch_run == kDivergeRun && !a.diverged.load(std::memory_order_relaxed)) {
        a.diverged_at.store(index, std::memory_order_relaxed);
        a.diverged.store(true, std::memory_order_release);
      }
    } else {
      a.mismatch_run = 0;
    }
  }
  if (!a.progress_device) return;
  // A launch waits for the counter to reach `value` (at most once: the larger of its waits).
  uint64_t value = 0;
  bool evict_wait = false;
  if (a.config.prefetch_wait && p->wait_ahead[phase] != UINT32_MAX &&
      index >= p->wait_ahead[phase]) {
    const uint64_t issued_at = index - p->wait_ahead[phase];
    if (issued_at >= a.waits_from.load(std::memory_order_acquire)) value = actions_done(issued_at);
  }
  // UMSWAP_EVICT_WAIT: the evictions that must be done for this launch to run within the budget
  // (Plan::room_wait_back), not before the advisor has waits on.
  const std::vector<uint32_t>& room_wait = p->plan.room_wait_back;
  if (a.config.evict_wait && phase < room_wait.size() && room_wait[phase] != Plan::kNoRoomWait &&
      index >= room_wait[phase] && index >= a.waits_from.load() &&
      evictions_done(index - room_wait[phase]) > value) {
    value = evictions_done(index - room_wait[phase]);
    evict_wait = true;
  }
  // UMSWAP_EVICT_COPY: the launch runs once the advisor has checked it, and once the copies back
  // of the launch that issues its prefetches are done.
  if (a.copies_live.load(std::memory_order_acquire) &&
      index >= a.waits_from.load(std::memory_order_acquire)) {
    a.d.stream_wait_value64(stream, a.approved_device, index + 1, CU_STREAM_WAIT_VALUE_GEQ);
    if (p->wait_ahead[phase] != UINT32_MAX && index >= p->wait_ahead[phase] &&
        index - p->wait_ahead[phase] >= a.waits_from.load(std::memory_order_acquire)) {
      a.d.stream_wait_value64(stream, a.restored_device, index - p->wait_ahead[phase] + 1,
                              CU_STREAM_WAIT_VALUE_GEQ);
    }
  }
  if (value == 0) return;
  if (a.d.stream_wait_value64(stream, a.progress_device, value, CU_STREAM_WAIT_VALUE_GEQ) ==
      CUDA_SUCCESS) {
    (evict_wait ? a.evict_waits_placed : a.waits_placed).fetch_add(1, std::memory_order_relaxed);
    uint64_t seen = a.highest_wait.load(std::memory_order_relaxed);
    while (seen < value + 1 &&
           !a.highest_wait.compare_exchange_weak(seen, value + 1, std::memory_order_relaxed)) {
    }
  }
}

bool Advisor::discard_page(uint64_t page) {
  return impl_->discard_page(page);
}

bool Advisor::populate_later(uint64_t page) {
  return impl_->populate_later(page);
}

std::shared_ptr<const DropTable> AdvisorImpl::applied_drops(LivePlan** plan_out,
                                                            uint64_t* launched_out) const {
  LivePlan* p = plan.load(std::memory_order_acquire);
  if (!p) return nullptr;
  const uint64_t n = launched.load(std::memory_order_acquire);
  if (n == 0 || n - 1 < p->applied_from) return nullptr;
  if (plan_out) *plan_out = p;
  if (launched_out) *launched_out = n;
  return p->drops.load(std::memory_order_acquire);
}

bool AdvisorImpl::populate_later(uint64_t page) {
  const std::shared_ptr<const DropTable> table = applied_drops(nullptr, nullptr);
  return table && table->windows.contains(page);
}

bool AdvisorImpl::discard_page(uint64_t page) {
  LivePlan* p = nullptr;
  uint64_t n = 0;
  const std::shared_ptr<const DropTable> table = applied_drops(&p, &n);
  if (!table) return false;
  const auto it = table->windows.find(page);
  if (it == table->windows.end()) {
    if (table->planned.contains(page)) return false;
    table->unplanned.fetch_add(1, std::memory_order_relaxed);
    discards_approved.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  const uint64_t phase = (n - 1 - p->base) % p->period;  // the free came after launch n - 1
  for (const DropTable::Window& w : it->second) {
    if (Drop{{}, w.last_use, w.next_use}.covers(phase)) {
      discards_approved.fetch_add(1, std::memory_order_relaxed);
      table->discarded[w.slot].fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  table->asked_outside.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Advisor::after_step(uint64_t index, CUstream stream) {
  AdvisorImpl& a = *impl_;
  if (!a.context.load(std::memory_order_relaxed)) {
    CUcontext c = nullptr;
    if (a.d.ctx_get_current(&c) == CUDA_SUCCESS && c) a.context.store(c);
  }
  LivePlan* p = a.plan_at(index);
  if (!p || index < p->base || !a.events_ready.load(std::memory_order_acquire)) return;
  if (p->needs_event[(index - p->base) % p->period]) a.done.record(a.d, index, stream);
}

void Advisor::on_finish() {
  AdvisorImpl& a = *impl_;
  if (!a.thread.joinable()) return;
  a.stop.store(true);
  a.thread.join();
  if (a.watchdog.joinable()) a.watchdog.join();
  a.plan.store(nullptr, std::memory_order_release);
  if (a.progress_host) *a.progress_host = kReleased;  // no launch waits for the advisor any more
}

bool AdvisorImpl::set_up() {
  while (!context.load() && !stop.load()) sleep_us(1000);
  if (stop.load()) return false;
  d.ctx_set_current(context.load());
  if (d.ctx_get_device(&device) != CUDA_SUCCESS ||
      d.stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.stream_create(&sweep_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.event_create(&barrier, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    state = "off";
    fallback = "could not create the advisor's stream";
    log_warning("advisor off: {}", fallback);
    return false;
  }
  device_for_launches.store(device, std::memory_order_relaxed);
  for (EventRing* ring : {&done, &reached}) {
    for (size_t i = 0; i < kEventRing; ++i) {
      if (d.event_create(&ring->events[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        state = "off";
        fallback = "could not create events";
        log_warning("advisor off: {}", fallback);
        return false;
      }
    }
  }
  events_ready.store(true, std::memory_order_release);
  if (config.evict_copy && (!config.prefetch_wait || !config.evict_wait)) {
    log_info("UMSWAP_EVICT_COPY: UMSWAP_PREFETCH_WAIT and UMSWAP_EVICT_WAIT are on with it");
    config.prefetch_wait = config.evict_wait = true;
  }
  if (config.prefetch_wait || config.evict_wait) {
    void* host = nullptr;
    if (d.mem_host_alloc && d.mem_host_get_device_pointer && d.stream_wait_value64 &&
        d.stream_write_value64 &&
        d.mem_host_alloc(&host, sizeof(uint64_t),
                         CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS &&
        d.mem_host_get_device_pointer(&progress_device, host, 0) == CUDA_SUCCESS) {
      progress_host = static_cast<volatile uint64_t*>(host);
      *progress_host = 0;
      if (config.prefetch_wait) {
        log_warning(
            "UMSWAP_PREFETCH_WAIT is experimental: launches wait for the advisor's prefetches; a "
            "watchdog turns the waits off after a stall (docs/advisor.md)");
      }
    } else {
      progress_device = 0;
      log_warning("{}: stream memory operations unavailable; launches do not wait",
                  config.prefetch_wait ? "UMSWAP_PREFETCH_WAIT" : "UMSWAP_EVICT_WAIT");
    }
  }
  set_up_copies();
  size_t total = 0;
  d.device_total_mem(&total, device);
  budget = config.budget.is_zero() ? total : config.budget.resolve(total);
  log_info("advisor: {} mode, budget {}", to_string(config.mode), format_bytes(budget));
  return true;
}

void AdvisorImpl::run() {
  tracer::untrace_this_thread();  // its copies are not the program's steps
  if (!set_up()) return;
  if (progress_device) watchdog = std::thread([this] { watch_waits(); });
  state = "learning";
  if (matcher) {
    std::string why;
    auto p = std::make_unique<LivePlan>();
    if (make_replay_plan(*matcher, budget, config.prefetch_bytes_per_s, config.evict_bytes_per_s,
                         &p->plan, &p->base, &p->period, &why, use_lifetimes())) {
      if (config.place && use_lifetimes()) {
        place_from_trace();
        place_at = boundary_at_or_after(p->base, p->period, launched.load());
      }
      p->applied_from = p->base;
      p->source = "replay";
      p->matcher = matcher.get();
      p->address.assign(matcher->buffer_count(), 0);
      p->buffer_id.assign(matcher->buffer_count(), 0);
      activate(std::move(p));
    } else {
      fallback = why + "; learning online instead";
      log_warning("replay: {}", fallback);
    }
  }
  while (!stop.load(std::memory_order_acquire)) {
    const uint64_t n = launched.load(std::memory_order_acquire);
    LivePlan* p = plan.load(std::memory_order_relaxed);
    if (p && diverged.load(std::memory_order_acquire)) {
      drop_plan(diverged_at.load(), "the launches no longer match the plan");
      p = nullptr;
    }
    if (p && p->matcher) check_replay_keys(*p);
    p = plan.load(std::memory_order_relaxed);
    if (p) {
      const LivePlan* q = next_plan.load(std::memory_order_relaxed);
      apply(q ? std::min(n, q->applied_from) : n);
      if (q && cursor >= q->applied_from) switch_to_next();
      p = plan.load(std::memory_order_relaxed);
      tend(*p, n);
      if (relearning && !next_plan.load(std::memory_order_relaxed)) relearn(*p);
      tend_copies(false);
      if (rescue_asked.load()) rescue("launches waited 2 s for the advisor", true);
      approve();
      sleep_us(50);
    } else if (pending_placement) {
      if (tend_placement(n)) {
        // Learn again from the iteration after the first placed one (whose first blocks may
        // have been missed).
        learn_from = place_at + placement_period;
        next_check = 0;
      }
      sleep_us(50);
    } else {
      if (!learning_failed) learn();
      sleep_us(500);
    }
  }
  rescue("the program ends", true);
  release_waits();
  if (relearn_task.valid()) relearn_task.wait();  // reads the tracer's log: not past the exit
  if (stream) d.stream_synchronize(stream);
  if (progress_host) *progress_host = kReleased;
}

// Releases every launch waiting on the counter, now and for good (until a new plan's reset
// writes it again). The host write frees them at once; the stream write keeps a counter write
// still queued on the advisor's stream (a lower value) from taking the release back.
void AdvisorImpl::release_waits() {
  waits_from.store(UINT64_MAX, std::memory_order_release);
  if (!progress_device || waits_off.load()) return;
  *progress_host = kReleased;
  d.stream_write_value64(stream, progress_device, kReleased, 0);
}

// A launch must never wait for ever on the advisor. If launches wait for a counter value that
// has not moved for 2 s (while the advisor thread issues nothing either; 10 s at most), the waits
// are turned off for the rest of the run, with one warning: the counter is released from the host
// (no driver call: the driver may be where the advisor thread is stuck), and released again if a
// counter write still queued on the advisor's stream takes it back. Costs faults, never results.
void AdvisorImpl::watch_waits() {
  uint64_t watched = UINT64_MAX, issued = 0;
  auto since = std::chrono::steady_clock::now(), issued_since = since;
  while (!stop.load(std::memory_order_acquire)) {
    sleep_us(100000);
    const uint64_t value = *progress_host;
    const uint64_t wanted = highest_wait.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
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
    if (const uint64_t i = issued_calls.load(std::memory_order_relaxed); i != issued) {
      issued = i;
      issued_since = now;
    }
    const auto still = now - std::max(since, issued_since);
    if (still < std::chrono::seconds(2) && now - since < std::chrono::seconds(10)) continue;
    // Ranges copied to the host must be back before launches run unchecked: the advisor thread
    // brings them back first (rescue), then the waits go.
    if (copies_live.load()) {
      rescue_asked.store(true);
      continue;
    }
    if (wait_stalls.fetch_add(1) == 0) {
      log_warning(
          "advisor: launches waited {} s for the advisor's stream (launch {}'s {}; its counter at "
          "launch {}); waits are off for the rest of the run",
          std::chrono::duration_cast<std::chrono::seconds>(now - since).count(), (wanted - 1) / 2,
          (wanted - 1) % 2 ? "prefetches" : "evictions", value / 2);
    }
    waits_off.store(true);  // the advisor thread writes the counter no more
    waits_from.store(UINT64_MAX, std::memory_order_release);
    *progress_host = kReleased;
    watched = UINT64_MAX;
  }
}

void AdvisorImpl::drop_plan(uint64_t at, const char* why) {
  LivePlan* p = plan.load();
  plan.store(nullptr, std::memory_order_release);
  next_plan.store(nullptr, std::memory_order_release);  // a relearned plan not yet in force
  relearning = false;
  rescue(std::string("the plan ends: ") + why, true);
  if (p && !p->matcher) online.diverged(p->keys);  // maybe an inner loop (online_learning.h)
  if (p && !p->matcher && placement && p->period == placement_period &&
      placement_attempts < kPlacementAttempts) {
    // The placement came from this inner loop's blocks: the next iteration learned places again
    // (the allocator replaces the arena).
    placement_tried = false;
  }
  release_waits();  // every launch waiting for this plan
  diverged.store(false);
  mismatch_run = 0;  // read by the launch path only while a plan is in force
  ++divergences;
  learn_from = at;
  next_check = 0;
  state = "learning";
  if (p && p->matcher) {
    fallback = std::string(why) + " (the trace is from another program or input); learning online";
    log_warning("replay: launch {}: {}", at, fallback);
  } else {
    log_info("advisor: launch {}: {}; learning again", at, why);
  }
}

// Online learning: once two iterations repeat, plan from the last complete one.
void AdvisorImpl::learn() {
  const uint64_t logged = tracer::logged_steps();
  if (logged < learn_from + 64 || logged < next_check) return;
  next_check = logged + std::max<uint64_t>(64, (logged - learn_from) / 4);
  const std::vector<uint32_t> keys = tracer::copy_keys(learn_from);
  const std::optional<LearnChoice> choice = online.choose(keys);
  if (!choice) return;
  const uint64_t e = learn_from + choice->region_start;
  const uint64_t first = learn_from + choice->first;
  if (!placement_tried && config.place && use_lifetimes() && first >= choice->period) {
    // Place the iteration's blocks first (at its next boundary), then learn it again at their
    // new addresses (run()).
    placement_tried = ++placement_attempts >= kPlacementAttempts;
    pending_placement =
        make_placement(tracer::copy_lifetimes(first - choice->period, first + choice->period - 1),
                       first, choice->period, 0);
    if (pending_placement) {
      placement_tried = true;
      placement_period = choice->period;
      place_at = boundary_at_or_after(e, choice->period, launched.load(std::memory_order_acquire));
      return;
    }
  }
  std::unique_ptr<LivePlan> p;
  try {
    p = build_plan(e, first, choice->period);
  } catch (const std::exception& ex) {
    learning_failed = true;
    state = "off";
    fallback = std::string("planning failed: ") + ex.what();
    log_warning("advisor off: {}", fallback);
    return;
  }
  if (!p) return;
  // From the next iteration boundary on (launch indices below it may already be running).
  p->applied_from = boundary_at_or_after(e, p->period, launched.load(std::memory_order_acquire));
  log_learned(*p, first);
  activate(std::move(p));
}

// Replay relearning: this process's iteration from relearn_from (a boundary of the replay plan,
// whose period it keeps: no inner loop can be taken for the iteration), once it is all logged.
// Planned on a thread of its own: the advisor thread goes on applying the replay plan meanwhile.
// Planned on the advisor thread (0.08-0.10 s for GPT-2 medium), every such run with both waits
// stalled right after it (2 s, until the watchdog turned the waits off; 5 of 5 runs on an H200,
// 2026-11-22); planned here, neither of the 2 runs checked did.
void AdvisorImpl::relearn(const LivePlan& replayed) {
  const uint64_t first = *relearn_from;
  if (!relearn_task.valid()) {
    // + 1: the block events after the iteration's last launch are logged before the next launch.
    if (tracer::logged_steps() < first + replayed.period + 1) return;
    relearn_task = std::async(std::launch::async, [this, first, period = replayed.period] {
      return build_plan(first, first, period);
    });
    return;
  }
  if (relearn_task.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  std::unique_ptr<LivePlan> p;
  try {
    p = relearn_task.get();
  } catch (const std::exception& ex) {
    relearning = false;  // the replay plan goes on
    log_warning("replay: relearning this process's iteration failed ({}); the replay plan stays",
                ex.what());
    return;
  }
  if (!p) {  // the log no longer holds it: the next one
    relearn_from = first + replayed.period;
    return;
  }
  log_learned(*p, first);
  stage(std::move(p));
}

// The plan of the iteration of `period` launches from `first` (step 0 at launch `e`), from the
// tracer's log; null when the log no longer holds it. Throws what make_plan throws. Reads only
// the log (lock-free for readers), the config and the budget: any thread may call it.
std::unique_ptr<LivePlan> AdvisorImpl::build_plan(uint64_t e, uint64_t first,
                                                  uint64_t period) const {
  tracer::StepLog log;
  if (!tracer::copy_steps(first, period, &log)) return nullptr;

  auto p = std::make_unique<LivePlan>();
  p->base = e;
  p->period = period;
  p->source = "online";
  p->keys = log.keys;
  // Buffers by first appearance; extents from the next pointer seen in the iteration.
  std::unordered_map<BufferId, uint32_t> index_of;
  PlanInput in;
  for (const tracer::PointerHit& h : log.hits) {
    if (index_of.emplace(h.buffer, static_cast<uint32_t>(in.buffer_sizes.size())).second) {
      in.buffer_sizes.push_back(h.size);
      p->address.push_back(h.base);
      p->buffer_id.push_back(h.buffer);
    }
  }
  std::vector<std::span<const tracer::PointerHit>> step_hits;
  for (size_t i = 0; i < log.keys.size(); ++i) {
    step_hits.emplace_back(log.hits.data() + log.first_hit[i],
                           log.first_hit[i + 1] - log.first_hit[i]);
  }
  std::vector<trace::Access> accesses;
  std::vector<uint64_t> step_first;
  tracer::compute_extents(
      step_hits, [&](BufferId id) { return index_of.at(id); }, accesses, step_first);
  for (const trace::Access& a : accesses) in.ranges.push_back({a.buffer, a.offset, a.length});
  for (size_t i = 0; i < log.keys.size(); ++i) {
    in.steps.push_back(
        {step_first[i], static_cast<uint32_t>(step_first[i + 1] - step_first[i]), 0.0});
  }
  in.budget_bytes = budget;
  in.prefetch_bytes_per_s = config.prefetch_bytes_per_s;
  in.evict_bytes_per_s = config.evict_bytes_per_s;
  if (use_lifetimes()) {
    std::vector<std::pair<uint64_t, uint64_t>> buffers;  // (base, size) by plan buffer
    for (size_t b = 0; b < p->address.size(); ++b) {
      buffers.emplace_back(p->address[b], in.buffer_sizes[b]);
    }
    append_lifetimes(
        tracer::lifetimes_in(tracer::copy_lifetimes(first + 1, first + period), buffers), first,
        period, in);
  }
  p->plan = make_plan(in);
  std::vector<uint64_t> streams = log.streams;
  std::sort(streams.begin(), streams.end());
  streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
  p->streams = streams;
  return p;
}

void AdvisorImpl::log_learned(const LivePlan& p, uint64_t first) const {
  log_info(
      "advisor: learned an iteration of {} steps (launches {}..{}), footprint {}, {} prefetched "
      "and {} evicted per iteration in {} calls, {} of dead data dropped",
      p.period, first, first + p.period, format_bytes(p.plan.footprint_bytes),
      format_bytes(p.plan.bytes_prefetched_per_iteration),
      format_bytes(p.plan.bytes_evicted_per_iteration), p.plan.prefetch_calls + p.plan.evict_calls,
      format_bytes(p.plan.bytes_dropped_per_iteration));
}

void AdvisorImpl::activate(std::unique_ptr<LivePlan> p) {
  log_info("advisor: applying the {} plan from launch {}", p->source, p->applied_from);
  index_plan(*p);
  take_effect(*p);
  plans.push_back(std::move(p));
  plan.store(plans.back().get(), std::memory_order_release);
}

// The advisor thread's side of a plan coming into force: applied from its applied_from on, and
// swept then and at its next two iteration boundaries.
void AdvisorImpl::take_effect(const LivePlan& p) {
  cursor = p.applied_from;
  state = "applied";
  sweeps_left = 3;
  sweep_at = p.applied_from;
}

// A relearned plan waits in next_plan until the plan in force has run up to its applied_from.
// It joins `plans` now: the launch path may hold it from then on, so it is never freed.
void AdvisorImpl::stage(std::unique_ptr<LivePlan> p) {
  index_plan(*p);
  p->source = "online (relearned in replay)";
  // The launch path must not have reached applied_from before it can see the plan: the boundary
  // is taken again now, 16 launches clear of the last one (the store below follows at once).
  p->applied_from =
      boundary_at_or_after(p->base, p->period, launched.load(std::memory_order_acquire) + 16);
  plans.push_back(std::move(p));
  next_plan.store(plans.back().get(), std::memory_order_release);
  log_info("advisor: the plan learned from this process applies from launch {}",
           plans.back()->applied_from);
}

// The advisor's cursor reached next_plan's applied_from: the launch path already takes it from
// there (on_step), and the plan before it has handled every launch below.
void AdvisorImpl::switch_to_next() {
  rescue("a relearned plan takes over", false);  // the new plan knows nothing of them
  LivePlan* q = next_plan.load(std::memory_order_relaxed);
  plan.store(q, std::memory_order_release);
  next_plan.store(nullptr, std::memory_order_release);
  relearning = false;
  relearned_at = q->applied_from;
  take_effect(*q);
}

// Replay, at each iteration boundary g after the first applied iteration: if the iteration that
// ended skipped a noticeable share of its bytes (buffers not found in this process), learn this
// process's iteration while the replay plan runs on (once).
void AdvisorImpl::check_relearn(const LivePlan& p, uint64_t g) {
  const uint64_t skipped = std::exchange(skipped_bytes, 0);
  if (!p.matcher || relearn_from || !replay_should_relearn(skipped, p.plan)) {
    return;
  }
  relearning = true;
  relearn_from = g;
  relearn_skipped_bytes = skipped;
  replay_found = {plan_buffers, plan_buffers_found};
  placement_tried = true;  // the arena came from the trace
  log_info(
      "replay: the iteration before launch {} skipped {} of actions on buffers not found in this "
      "process (the plan moves {} per iteration); learning this process's iteration to replace "
      "the plan",
      g, format_bytes(skipped),
      format_bytes(p.plan.bytes_prefetched_per_iteration + p.plan.bytes_evicted_per_iteration));
}

void AdvisorImpl::index_plan(LivePlan& plan_ref) {
  LivePlan* p = &plan_ref;
  const Plan& plan_data = p->plan;
  p->needs_event.assign(p->period, 0);
  p->prefetches.assign(p->period, 0);
  p->wait_ahead.assign(p->period, UINT32_MAX);
  p->populates.assign(p->period, 0);
  for (const Drop& drop : plan_data.drops) {
    if (drop.next_use < p->period) p->populates[drop.next_use] = 1;
  }
  p->first_action.assign(p->period + 1, 0);
  for (const Action& a : plan_data.actions) {
    ++p->first_action[a.at_step + 1];
    if (a.kind == ActionKind::evict) {
      const uint64_t back = a.wait_back % p->period;
      p->needs_event[(a.at_step + p->period - back) % p->period] = 1;
    } else {
      p->prefetches[a.at_step] = 1;
      uint32_t& w = p->wait_ahead[(a.at_step + a.use_ahead) % p->period];
      w = std::min(w, a.use_ahead);
    }
  }
  for (uint64_t i = 0; i < p->period; ++i) p->first_action[i + 1] += p->first_action[i];
  build_drops(*p);
}

// A placement from two iterations' block events, or nullopt (placement_note says why). With
// `arena_must_be` (replay), only a placement whose arena has that size: the trace's plan names
// addresses in the trace's arena, and another arena would make them wrong.
std::optional<Placement> AdvisorImpl::make_placement(std::span<const BlockEvent> blocks,
                                                     uint64_t start, uint64_t period,
                                                     uint64_t arena_must_be) {
  std::string why;
  std::optional<Placement> p = plan_placement(blocks, start, period, SlabAllocator::kSmallLimit,
                                              SlabAllocator::kAlignment, &why);
  if (!p) {
    why += fmt::format(" ({} block events logged for launches {} to {})", blocks.size(),
                       start - std::min(start, period), start + period);
  } else {
    // A training iteration frees what it allocates (gradients early in the next one); an inner
    // loop taken for the iteration (one layer's forward) keeps its activations for the backward
    // pass, beyond its period. Its placement would be wrong for the real iteration.
    uint64_t all = 0, placed = 0;
    for (size_t i = 0; i < p->sizes.size(); ++i) {
      all += p->sizes[i];
      if (p->offsets[i] != Placement::kUnplaced) placed += p->sizes[i];
    }
    if (placed < all / 10 * 9) {
      why = fmt::format(
          "only {} of the {} of large blocks allocated in the iteration are freed within an "
          "iteration (an inner loop?)",
          format_bytes(placed), format_bytes(all));
      p.reset();
    }
  }
  if (p && arena_must_be != 0 &&
      (p->arena_bytes + SlabAllocator::kSlabGranule - 1) / SlabAllocator::kSlabGranule *
              SlabAllocator::kSlabGranule !=
          arena_must_be) {
    p.reset();
    why = "the trace's arena does not match the placement its iteration gives";
  }
  if (!p) {
    placement_note = why;
    log_info("advisor: no placement: {}", why);
  }
  return p;
}

// Hands a placement to the allocator; false (placement_note says why) when it refuses.
bool AdvisorImpl::hand_placement(Placement p) {
  if (!config.place(p)) {
    placement_note = "the allocator could not make the arena (UMSWAP_MANAGED_LIMIT?)";
    log_info("advisor: no placement: {}", placement_note);
    return false;
  }
  log_info(
      "advisor: placement: {} of {} large blocks of the iteration go to planned addresses in an "
      "arena of {} (their live peak {}; {})",
      p.placed, p.sizes.size(), format_bytes(p.arena_bytes), format_bytes(p.live_peak), p.order);
  placement = std::move(p);
  return true;
}

// Replay: the trace's arena (a buffer of ManagedAllocator::kArenaSite), reproduced from the
// block events of the iteration the plan comes from and the one before it. Handed over at an
// iteration boundary of the plan (run()): from the first of the trace's iterations on, the
// program allocates the sequence the placement expects; its first steps (warm-up, the
// optimizer's state) would take planned ranges for good.
void AdvisorImpl::place_from_trace() {
  placement_tried = true;
  const trace::Trace& t = matcher->trace();
  uint64_t arena = 0;
  for (const trace::Buffer& b : t.buffers) {
    if (b.call_site == ManagedAllocator::kArenaSite) arena = b.size;
  }
  const std::optional<size_t> i = replay_iteration(t);
  if (arena == 0 || !i) {
    placement_note = "the trace was recorded without a placement";
    return;
  }
  std::vector<BlockEvent> blocks;
  for (const trace::Lifetime& l : t.lifetimes) {
    blocks.push_back({l.before_step, t.buffers[l.buffer].base + l.offset, l.length, l.freed});
  }
  pending_placement =
      make_placement(blocks, t.iterations[*i].first_step, t.iterations[*i].step_count, arena);
  placement_period = t.iterations[*i].step_count;
}

// A pending placement goes to the allocator once the program reaches place_at, the first
// iteration boundary at or after the launch it was made at: the allocator expects the sequence
// from its start. The advisor notices the boundary a little late, so the first blocks of that
// iteration may be missed; the sequence picks them up in the next one. Returns true when it was
// handed.
bool AdvisorImpl::tend_placement(uint64_t n) {
  if (!pending_placement || n < place_at) return false;
  Placement handed = std::move(*pending_placement);
  pending_placement.reset();
  return hand_placement(std::move(handed));
}

// What runs beside a plan in force, at launch `n`: a pending placement handed over at its
// iteration boundary (and the drop table rebuilt, the arena being new), and the sweeps.
void AdvisorImpl::tend(LivePlan& p, uint64_t n) {
  if (tend_placement(n)) build_drops(p);  // replay: the arena is new
  if (sweeps_left > 0 && n > sweep_at && config.sweep && use_lifetimes()) {
    swept_bytes += config.sweep([this](uint64_t page) { return discard_page(page); }, sweep_stream);
    sweep_at += p.period;
    --sweeps_left;
  }
}

// Where a plan buffer lives in this process now (online: the address it was learned at, if the
// same allocation is still registered; replay: found by identity).
bool AdvisorImpl::resolve(LivePlan& p, uint32_t buffer) {
  if (p.matcher) {
    if (p.address[buffer] == 0 || !p.matcher->still_there(buffer, p.address[buffer], *registry)) {
      p.address[buffer] = p.matcher->live_address(buffer, *registry);
    }
    return p.address[buffer] != 0;
  }
  const auto r = registry->find(p.address[buffer]);
  return r && r->id == p.buffer_id[buffer] && r->base == p.address[buffer];
}

void AdvisorImpl::migrate(uint64_t address, uint64_t length, bool to_gpu, uint64_t launch) {
  CUmemLocation where{};
  where.type = to_gpu ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  where.id = to_gpu ? device : 0;
  const auto t0 = std::chrono::steady_clock::now();
  const CUresult r = d.mem_prefetch_async(address, length, where, 0, stream);
  issued_calls.fetch_add(1, std::memory_order_relaxed);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (to_gpu ? prefetch_call_s : evict_call_s) += took;
  longest_call_s = std::max(longest_call_s, took);
  if (r != CUDA_SUCCESS) {
    ++failed_calls;
    if (warned_call_failure.first()) {
      log_warning("advisor: cuMemPrefetchAsync of {} at {:#x} failed (error {}); skipped",
                  format_bytes(length), address, static_cast<int>(r));
    }
    return;
  }
  (to_gpu ? prefetched : evicted).push_back({launch, length});
  (to_gpu ? prefetched_bytes : evicted_bytes) += length;
  ++(to_gpu ? prefetch_calls : evict_calls);
}

// Makes the advisor's stream wait for everything submitted so far on the planned streams.
void AdvisorImpl::barrier_all(const LivePlan& p) {
  for (uint64_t s : p.streams) {
    if (d.event_record(barrier, reinterpret_cast<CUstream>(s)) == CUDA_SUCCESS) {
      d.stream_wait_event(stream, barrier, 0);
    }
  }
}

bool EventRing::wait(const AdvisorDriver& d, uint64_t j, CUstream waiter, uint64_t launched) const {
  const size_t slot = j % kEventRing;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(launched > j + kEventSlack ? 0 : 20);
  uint64_t seen = index[slot].load(std::memory_order_acquire);
  while ((seen < j || seen == UINT64_MAX) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    seen = index[slot].load(std::memory_order_acquire);
  }
  return seen == j && d.stream_wait_event(waiter, events[slot], 0) == CUDA_SUCCESS;
}

// The advisor's stream waits until launch j has finished on the GPU. False: it could not (the
// eviction goes unordered).
bool AdvisorImpl::wait_for_launch(const LivePlan& p, uint64_t j) {
  // Covered by the barrier taken at applied_from (the program may have run past it: a replay plan
  // applies from the start, before the advisor could record events).
  if (j < std::max(p.applied_from, p.barrier_covers)) return true;
  if (!done.wait(d, j, stream, launched.load(std::memory_order_acquire))) {
    // Not recorded (yet) or already reused: wait for everything instead; not while launches may
    // wait for this stream (a barrier would then wait for itself), the eviction goes unordered
    // (managed memory stays correct; the range may fault back).
    ++late_events;
    if (progress_device) return false;
    barrier_all(p);
  }
  return true;
}

// At the first applied launch: the GPU holds what the plan expects at an iteration start.
void AdvisorImpl::reset_to_start(LivePlan& p) {
  // Not while launches wait for this stream (a plan that replaced another: launches from its
  // applied_from on may wait for counter values written after this barrier, which would wait for
  // them); the migrations below then go unordered, which costs faults, never data.
  if (!progress_device || waits_from.load(std::memory_order_acquire) == UINT64_MAX) {
    const uint64_t seen = launched.load(std::memory_order_acquire);
    barrier_all(p);
    p.barrier_covers = seen > kEventSlack ? seen - kEventSlack : 0;
  }
  // Buffers outside the plan: not used by the loop, so they leave the GPU.
  std::vector<uint64_t> planned;
  for (uint32_t b = 0; b < p.address.size(); ++b) {
    if (resolve(p, b)) planned.push_back(p.address[b]);
  }
  plan_buffers = p.address.size();
  plan_buffers_found = planned.size();
  if (p.matcher) {
    log_info("replay: {} of the trace's {} buffers found in this process", planned.size(),
             p.address.size());
  }
  std::sort(planned.begin(), planned.end());
  const auto snapshot = registry->snapshot();
  for (const BufferRecord& r : snapshot->records()) {
    if (!std::binary_search(planned.begin(), planned.end(), r.base)) {
      migrate(r.base, r.size, false, p.applied_from);
    }
  }
  // Plan buffers: what is not resident at an iteration start leaves; the rest comes in.
  std::vector<PlanRange> start = p.plan.resident_at_start;
  std::sort(start.begin(), start.end(), [](const PlanRange& a, const PlanRange& b) {
    return a.buffer != b.buffer ? a.buffer < b.buffer : a.offset < b.offset;
  });
  size_t k = 0;
  for (uint32_t b = 0; b < p.address.size(); ++b) {
    if (!p.address[b]) continue;
    const auto r = registry->find(p.address[b]);
    if (!r) continue;
    uint64_t at = 0;
    while (k < start.size() && start[k].buffer < b) ++k;
    for (; k < start.size() && start[k].buffer == b; ++k) {
      if (start[k].offset > at)
        migrate(p.address[b] + at, start[k].offset - at, false, p.applied_from);
      at = std::max(at, start[k].offset + start[k].length);
    }
    if (at < r->size) migrate(p.address[b] + at, r->size - at, false, p.applied_from);
  }
  for (const PlanRange& s : start) {
    if (resolve(p, s.buffer))
      migrate(p.address[s.buffer] + s.offset, s.length, true, p.applied_from);
  }
}

void AdvisorImpl::apply(uint64_t n) {
  LivePlan& p = *plan.load(std::memory_order_relaxed);
  // UMSWAP_EVICT_COPY's guard reads the launches' pointers from the tracer's log.
  tracer::StepLog log;
  uint64_t log_first = UINT64_MAX;
  for (uint64_t g = std::max(cursor, p.applied_from); g < n; ++g) {
    most_behind = std::max(most_behind, launched.load(std::memory_order_relaxed) - g);
    if (stop.load(std::memory_order_relaxed) || diverged.load(std::memory_order_relaxed)) {
      cursor = g;
      return;
    }
    if (g == p.applied_from) {
      const uint64_t now = std::max(launched.load(std::memory_order_acquire), g);
      p.started_at.store(g + (now - g + p.period - 1) / p.period * p.period,
                         std::memory_order_relaxed);
      reset_to_start(p);
      if (progress_device && !waits_off.load()) {
        d.stream_write_value64(stream, progress_device, actions_done(g), 0);
        waits_from.store(std::max(n, g + 1), std::memory_order_release);
        go_live_copies(std::max(n, g + 1));
      }
    }
    if (copies_live.load(std::memory_order_relaxed) && g >= approved_to) {
      if (log_first == UINT64_MAX) {
        log_first = g;
        if (!tracer::copy_steps(g, n - g, &log)) {
          rescue("the launch log lost launches the advisor must check", true);
        }
      }
      if (copies_live.load(std::memory_order_relaxed) && check_launch(log, log_first, g)) {
        approved_to = g + 1;
        // At once, before g's driver calls: a synchronous copy of the program's may hold the
        // driver until launch g runs.
        approve();
      }
    }
    bool prefetched_here = false;
    // The plan prefetches at g (issued or skipped): launches wait for actions_done(g), which must
    // be written right after g's actions. Left to the write at the end of apply(), it would queue
    // behind the prefetches of later launches, which wait for the GPU to reach them, while those
    // launches wait for it: the stall gpu_advisor_loop's replays hit (a skipped prefetch, a buffer
    // not found; the watchdog broke it after 2 s).
    bool prefetch_planned = false;
    const uint64_t phase = (g - p.base) % p.period;
    // Replay: buffers appear as the program allocates them; look again once an iteration.
    if (phase == 0 && g > p.applied_from) {
      const std::shared_ptr<const DropTable> table = p.drops.load(std::memory_order_acquire);
      if (table && table->unresolved > 0) build_drops(p);
      check_relearn(p, g);
    }
    uint64_t waited = UINT64_MAX;
    bool ordered = true;  // the last wait_for_launch could order its eviction
    bool evicted_here = false;
    // Evictions come first: once they are issued, the counter says so (UMSWAP_EVICT_WAIT).
    const auto evictions_issued = [&] {
      if (evicted_here && progress_device && !waits_off.load()) {
        d.stream_write_value64(stream, progress_device, evictions_done(g), 0);
      }
      evicted_here = false;
    };
    for (uint32_t i = p.first_action[phase]; i < p.first_action[phase + 1]; ++i) {
      const Action& a = p.plan.actions[i];
      if (a.kind != ActionKind::evict) evictions_issued();
      if (!resolve(p, a.range.buffer)) {
        ++stale_actions;
        skipped_bytes += a.range.length;
        // Still counted done here (the same reasoning for UMSWAP_EVICT_WAIT's evictions_done).
        (a.kind == ActionKind::evict ? evicted_here : prefetch_planned) = true;
        continue;
      }
      const uint64_t address = p.address[a.range.buffer] + a.range.offset;
      if (a.kind == ActionKind::evict) {
        const uint64_t j = g >= a.wait_back ? g - a.wait_back : 0;
        if (j != waited) ordered = wait_for_launch(p, j);
        waited = j;
        // A copy out is followed by a discard: only after the last use is known done.
        if (!ordered || !evict_by_copy(address, a.range.length, g, j)) {
          migrate(address, a.range.length, false, g);
        }
        evicted_here = true;
      } else {
        // Not before the GPU reaches launch g: the room the plan gives this prefetch may be a
        // block freed just before it (discarded on the program's stream, not before then).
        if (!prefetched_here && g > p.applied_from && g >= p.barrier_covers &&
            !reached.wait(d, g, stream, launched.load(std::memory_order_acquire))) {
          ++late_start_events;
        }
        if (!restore_by_copy(address, a.range.length, g)) {
          migrate(address, a.range.length, true, g);
        }
        prefetched_here = prefetch_planned = true;
      }
    }
    evictions_issued();
    if (progress_device && !waits_off.load() && prefetch_planned) {
      d.stream_write_value64(stream, progress_device, actions_done(g), 0);
    }
    // Launches that wait for g's prefetches wait for its copies back too (none: the value only).
    if (prefetch_planned && copies_live.load(std::memory_order_relaxed)) push_restore(g, {}, 0);
  }
  // Every launch seen is handled: a launch waiting on one whose actions were skipped (a buffer
  // gone) must not wait for a later prefetch that may never come.
  if (progress_device && !waits_off.load() && n > std::max(cursor, p.applied_from)) {
    d.stream_write_value64(stream, progress_device, actions_done(n - 1), 0);
  }
  cursor = std::max(cursor, n);
}

// ---- UMSWAP_EVICT_COPY (host_copies.h; docs/advisor.md "Evictions umswap copies") ----

void AdvisorImpl::set_up_copies() {
  if (!config.evict_copy) return;
  const auto off = [this](const char* why) {
    copy_off_reason = why;
    log_warning("UMSWAP_EVICT_COPY: {}; evictions go through the driver", why);
  };
  if (!progress_device || !config.prefetch_wait) {
    return off("needs the prefetch wait's counter (UMSWAP_PREFETCH_WAIT)");
  }
  if (!d.can_copy()) return off("the CUDA driver lacks the copy, discard or event functions");
  void* words = nullptr;
  if (d.stream_create(&discard_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.stream_create(&restore_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.event_create(&discarded_event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      d.mem_host_alloc(&words, 2 * sizeof(uint64_t),
                       CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS ||
      d.mem_host_get_device_pointer(&restored_device, words, 0) != CUDA_SUCCESS) {
    return off("could not create its streams, event or counters");
  }
  copy_words = static_cast<volatile uint64_t*>(words);
  copy_words[0] = 0;
  copy_words[1] = 0;
  approved_device = restored_device + sizeof(uint64_t);
  // Pinned host memory: at most half of the machine's memory.
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const uint64_t limit = pages > 0 && page_size > 0
                             ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2
                             : uint64_t{16} << 30;
  copies = std::make_unique<HostCopies>(
      [this](uint64_t bytes) -> uint64_t {
        void* host = nullptr;
        return d.mem_host_alloc(&host, bytes, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS
                   ? reinterpret_cast<uint64_t>(host)
                   : 0;
      },
      [this](uint64_t host, uint64_t) { d.mem_free_host(reinterpret_cast<void*>(host)); }, limit);
  log_warning(
      "UMSWAP_EVICT_COPY is experimental: evictions are copied to pinned host memory (up to {}) "
      "and their GPU pages discarded; every launch waits until the advisor has checked it",
      format_bytes(limit));
}

// From the plan's first applied launch on (its waits in place): launches from `waits_start` on
// carry the approval wait once the launch path sees copies_live; those before it may not.
void AdvisorImpl::go_live_copies(uint64_t waits_start) {
  if (!copies || copies->frozen() || copies_live.load()) return;
  approved_to = waits_start;
  copy_words[1] = waits_start;
  copies_live.store(true, std::memory_order_release);
  copies_from = std::max(waits_start, launched.load(std::memory_order_acquire)) + kEventSlack;
}

CUevent AdvisorImpl::take_event() {
  CUevent e = nullptr;
  if (!spare_events.empty()) {
    e = spare_events.back();
    spare_events.pop_back();
  } else if (d.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    e = nullptr;
  }
  return e;
}

// The highest ticket whose event is done, from `done` on.
uint64_t AdvisorImpl::poll(std::deque<TicketEvent>& q, uint64_t seen) {
  while (!q.empty() && d.event_query(q.front().event) == CUDA_SUCCESS) {
    seen = std::max(seen, q.front().ticket);
    spare_events.push_back(q.front().event);
    q.pop_front();
  }
  return seen;
}

// Evicts [address, address + length) at launch g, ordered after launch j, by copying its whole
// 2 MiB pages to pinned host memory (the rest through the driver). False: nothing was done, the
// caller evicts through the driver.
bool AdvisorImpl::evict_by_copy(uint64_t address, uint64_t length, uint64_t g, uint64_t j) {
  if (!copies_live.load(std::memory_order_relaxed) || j < copies_from) return false;
  const uint64_t lo = (address + kPage - 1) / kPage * kPage;
  const uint64_t hi = (address + length) / kPage * kPage;
  if (hi <= lo) return false;
  // The launches after the last use, up to g, were approved already: none may reach the range
  // (a plan off the mark), as the copy waits for launch j only.
  if (g > j) {
    tracer::StepLog log;
    if (!tracer::copy_steps(j + 1, g - j, &log)) return false;
    for (const tracer::PointerHit& h : log.hits) {
      const uint64_t end = h.limit ? h.limit : h.base + h.size;
      if (h.pointer < hi && end > lo) return false;
    }
  }
  std::optional<std::vector<HostCopies::Segment>> segments =
      copies->take(lo, hi - lo, out_ticket + 1);
  if (!segments) {
    ++copy_fallbacks;
    return false;
  }
  ++out_ticket;
  if (lo > address) migrate(address, lo - address, false, g);
  if (address + length > hi) migrate(hi, address + length - hi, false, g);
  uint64_t bytes = 0;
  for (const HostCopies::Segment& s : *segments) {
    const auto t0 = std::chrono::steady_clock::now();
    const CUresult r =
        d.memcpy_dtoh_async(reinterpret_cast<void*>(s.host), s.address, s.length, stream);
    evict_call_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    issued_calls.fetch_add(1, std::memory_order_relaxed);
    if (r != CUDA_SUCCESS) {
      ++copy_failures;
      // Not discarded (its copy is not seen done); every held range goes back, copies stop.
      rescue(fmt::format("a copy to the host failed (error {})", static_cast<int>(r)), true);
      return true;
    }
    bytes += s.length;
    ++copy_calls;
  }
  if (!segments->empty()) {
    if (CUevent e = take_event(); e && d.event_record(e, stream) == CUDA_SUCCESS) {
      out_events.push_back({out_ticket, e});
    } else {
      rescue("could not record an event after a copy to the host", true);
      return true;
    }
  }
  copied_out.push_back({g, bytes});
  copied_out_bytes += bytes;
  evicted.push_back({g, bytes});
  evicted_bytes += bytes;
  return true;
}

// The prefetch of [address, address + length) at launch g: the parts held on the host go back
// by copy (queued, issued once the GPU reaches g); the rest goes through the driver. False:
// nothing of it is held (the caller prefetches it all).
bool AdvisorImpl::restore_by_copy(uint64_t address, uint64_t length, uint64_t g) {
  if (!copies || !copies->holds(address, address + length)) return false;
  HostCopies::Returned r = copies->give_back(address, length, in_ticket + 1);
  copy_forgotten_bytes += r.forgotten_bytes;
  // The gaps between held parts: the driver (they may be on the host).
  uint64_t at = address;
  for (const HostCopies::Segment& s : r.copy_in) {
    if (s.address > at) migrate(at, s.address - at, true, g);
    at = s.address + s.length;
  }
  if (at < address + length) migrate(at, address + length - at, true, g);
  if (!r.copy_in.empty()) {
    ++in_ticket;
    push_restore(g, std::move(r.copy_in), in_ticket);
  }
  return true;
}

void AdvisorImpl::push_restore(uint64_t g, std::vector<HostCopies::Segment> segments,
                               uint64_t ticket) {
  if (!restores.empty() && restores.back().g == g) {
    Restore& b = restores.back();
    b.segments.insert(b.segments.end(), segments.begin(), segments.end());
    b.ticket = std::max(b.ticket, ticket);
    return;
  }
  restores.push_back({g, ticket, std::move(segments)});
}

// Whether the GPU has reached launch g (its "reached" event, or a later one in its slot, done).
bool AdvisorImpl::launch_reached(uint64_t g) const {
  const size_t slot = g % kEventRing;
  const uint64_t seen = reached.index[slot].load(std::memory_order_acquire);
  if (seen == UINT64_MAX || seen < g) {
    // Not recorded: none will be once the launch is long past (no event at that launch).
    return launched.load(std::memory_order_acquire) > g + kEventSlack;
  }
  return d.event_query(reached.events[slot]) == CUDA_SUCCESS;
}

void AdvisorImpl::issue_restore(Restore& r) {
  const uint64_t value = r.g + 1;
  if (!r.segments.empty()) {
    if (discards_issued) d.stream_wait_event(restore_stream, discarded_event, 0);
    CUmemLocation gpu{};
    gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
    gpu.id = device;
    // Populate (a prefetch of discarded pages moves nothing), then copy in.
    for (const HostCopies::Segment& s : r.segments) {
      d.mem_prefetch_async(s.address, s.length, gpu, 0, restore_stream);
      tracer::note_residency_now(s.address, s.length, true);
    }
    uint64_t bytes = 0;
    for (const HostCopies::Segment& s : r.segments) {
      const CUresult e = d.memcpy_htod_async(s.address, reinterpret_cast<const void*>(s.host),
                                             s.length, restore_stream);
      if (e != CUDA_SUCCESS) {
        ++copy_failures;
        if (warned_copy_failure.first()) {
          log_warning("advisor: a copy back of {} at {:#x} failed (error {})",
                      format_bytes(s.length), s.address, static_cast<int>(e));
        }
        continue;
      }
      bytes += s.length;
      ++copy_calls;
    }
    copied_in.push_back({r.g, bytes});
    copied_in_bytes += bytes;
    prefetched.push_back({r.g, bytes});
    prefetched_bytes += bytes;
    if (CUevent e = take_event(); e && d.event_record(e, restore_stream) == CUDA_SUCCESS) {
      in_events.push_back({r.ticket, e});
    }
  }
  if (value > restored_written) {
    d.stream_write_value64(restore_stream, restored_device, value, 0);
    restored_written = value;
  }
}

// Discards what was seen copied out, issues the copies back whose launch the GPU reached (all
// of them: `ignore_reached`), and makes host blocks whose copies are done reusable.
void AdvisorImpl::tend_copies(bool ignore_reached) {
  if (!copies) return;
  out_done = poll(out_events, out_done);
  in_done = poll(in_events, in_done);
  const std::vector<HostCopies::Segment> copied = copies->copied(out_done);
  if (!copied.empty()) {
    std::vector<CUdeviceptr> starts;
    std::vector<size_t> sizes;
    for (const HostCopies::Segment& s : copied) {
      starts.push_back(s.address);
      sizes.push_back(s.length);
    }
    const CUresult r =
        d.mem_discard_batch_async(starts.data(), sizes.data(), starts.size(), 0, discard_stream);
    if (r == CUDA_SUCCESS && d.event_record(discarded_event, discard_stream) == CUDA_SUCCESS) {
      discards_issued = true;
      for (const HostCopies::Segment& s : copied) {
        tracer::note_residency_now(s.address, s.length, false);
        copy_discarded_bytes += s.length;
      }
    } else {
      // The GPU still has the data (and the host a copy): the copy back rewrites the same bytes.
      ++copy_failures;
      if (warned_copy_failure.first()) {
        log_warning("advisor: cuMemDiscardBatchAsync failed (error {})", static_cast<int>(r));
      }
    }
  }
  while (!restores.empty() && (ignore_reached || restores.front().segments.empty() ||
                               launch_reached(restores.front().g))) {
    issue_restore(restores.front());
    restores.pop_front();
  }
  copies->retire(out_done, in_done);
}

// The guard, for launch g (step g - first of `log`), before the advisor handles g's actions: the
// ranges it points at must not be held on the host (false: they were, the plan was off the mark,
// and everything went back); a range whose copy back is still queued delays the approval of
// launches until that copy is done.
bool AdvisorImpl::check_launch(const tracer::StepLog& log, uint64_t first, uint64_t g) {
  const uint64_t i = g - first;
  for (uint64_t h = log.first_hit[i]; h < log.first_hit[i + 1]; ++h) {
    const tracer::PointerHit& hit = log.hits[h];
    const uint64_t end = hit.limit ? hit.limit : hit.base + hit.size;
    if (copies->holds(hit.pointer, end)) {
      ++copy_guard_hits;
      rescue(fmt::format("launch {} ({}) reaches memory the plan had copied to the host", g,
                         tracer::key_name(log.keys[i])),
             true);
      return false;
    }
    for (const Restore& r : restores) {
      for (const HostCopies::Segment& s : r.segments) {
        if (s.address < end && s.address + s.length > hit.pointer) {
          hold_approval(g, r.g + 1);
        }
      }
    }
  }
  return true;
}

// Every range held on the host goes back now (a plan ends or switches, the guard caught a
// launch, a copy failed, the watchdog asked); with `freeze`, copies stop for the rest of the run
// and launches wait for nothing more of them once the copies back are done.
void AdvisorImpl::rescue(const std::string& why, bool freeze) {
  if (!copies || (copies->frozen() && restores.empty())) return;
  ++copy_rescues;
  if (freeze) {
    copies->freeze();
    if (copy_off_reason.empty()) copy_off_reason = why;
    log_warning(
        "UMSWAP_EVICT_COPY: {}; everything copied to the host goes back, and evictions go "
        "through the driver from now on",
        why);
  } else {
    log_info("advisor: {}; everything copied to the host goes back", why);
  }
  out_done = poll(out_events, out_done);
  HostCopies::Returned r = copies->give_back_all(in_ticket + 1);
  copy_forgotten_bytes += r.forgotten_bytes;
  tend_copies(true);  // discards seen due, then every queued copy back, in order
  if (!r.copy_in.empty()) {
    ++in_ticket;
    // Ranges copied out whose discard is not issued were forgotten (the GPU has them); those
    // discarded wait for their discard on restore_stream.
    Restore all{restored_written ? restored_written - 1 : 0, in_ticket, std::move(r.copy_in)};
    issue_restore(all);
  }
  if (!freeze) {
    hold_approval(approved_to, restored_written);
    return;
  }
  // Launches wait for nothing more from copies once these copies back are done.
  d.stream_write_value64(restore_stream, restored_device, kReleased, 0);
  restored_written = kReleased;
  d.stream_synchronize(restore_stream);
  copies_live.store(false, std::memory_order_release);
  copy_words[1] = kReleased;
  approved_to = UINT64_MAX;
}

// The drops by page of this process, for the allocator's free path: only whole 2 MiB pages (the
// allocator discards no other), of the buffers found.
void AdvisorImpl::build_drops(LivePlan& p) {
  auto table = std::make_shared<DropTable>();
  table->populate_at.resize(p.period);
  uint64_t slots = 0;
  for (const Drop& drop : p.plan.drops) {
    if (!resolve(p, drop.range.buffer)) {
      ++table->unresolved;
      continue;
    }
    const uint64_t address = p.address[drop.range.buffer] + drop.range.offset;
    const uint64_t first = (address + kPage - 1) / kPage * kPage;
    const uint64_t end = (address + drop.range.length) / kPage * kPage;
    for (uint64_t page = first; page < end; page += kPage) {
      table->windows[page].push_back(
          {drop.last_use, drop.next_use, static_cast<uint32_t>(slots++)});
    }
    if (first < end && drop.next_use < p.period) {
      table->populate_at[drop.next_use].emplace_back(first, end - first);
    }
  }
  table->discarded = std::vector<std::atomic<uint32_t>>(slots);
  const auto touch = [&](const PlanRange& r) {
    if (!resolve(p, r.buffer) || r.length == 0) return;
    const uint64_t address = p.address[r.buffer] + r.offset;
    for (uint64_t page = address / kPage * kPage; page < address + r.length; page += kPage) {
      table->planned.insert(page);
    }
  };
  for (const PlanRange& r : p.plan.resident_at_start) touch(r);
  for (const Action& a : p.plan.actions) touch(a.range);
  for (const Drop& drop : p.plan.drops) touch(drop.range);
  p.drops.store(std::move(table), std::memory_order_release);
}

// Replay: the launches must keep naming the trace's kernels at the trace's positions.
void AdvisorImpl::check_replay_keys(LivePlan& p) {
  const uint64_t logged = tracer::logged_steps();
  if (logged <= replay_checked) return;
  const std::vector<uint32_t> keys = tracer::copy_keys(replay_checked);
  uint32_t run = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t index = replay_checked + i;
    if (!p.matcher->matches(index, keys[i], [](uint32_t key) { return tracer::key_name(key); })) {
      if (++run == kDivergeRun) {
        replay_checked = index + 1;
        drop_plan(index, "the launches no longer match the trace");
        return;
      }
    } else {
      run = 0;
    }
  }
  replay_checked += keys.size();
}

namespace {

uint64_t sum_in(const std::vector<Transfer>& log, uint64_t first, uint64_t last) {
  uint64_t bytes = 0;
  for (const Transfer& t : log) {
    if (t.launch >= first && t.launch < last) bytes += t.bytes;
  }
  return bytes;
}

}  // namespace

nlohmann::json Advisor::stats(const tracer::RunSummary* summary) const {
  const AdvisorImpl& a = *impl_;
  const LivePlan* last = a.plans.empty() ? nullptr : a.plans.back().get();
  nlohmann::json advisor = {
      {"mode", std::string(to_string(a.config.mode))},
      {"budget_bytes", a.budget},
      {"state", a.state},
      {"fallback", a.fallback.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.fallback)},
      {"plans", a.plans.size()},
      {"divergences", a.divergences},
      {"prefetched_bytes", a.prefetched_bytes},
      {"evicted_bytes", a.evicted_bytes},
      {"prefetch_calls", a.prefetch_calls},
      {"evict_calls", a.evict_calls},
      {"failed_calls", a.failed_calls},
      {"stale_actions", a.stale_actions},
      {"late_events", a.late_events},
      {"late_start_events", a.late_start_events},
      {"wait_stalls", a.wait_stalls.load()},
      {"waits_placed", a.waits_placed.load()},
      {"evict_waits_placed", a.evict_waits_placed.load()},
      {"launch_populates", a.launch_populates.load()},
      {"launch_populated_bytes", a.launch_populated_bytes.load()},
      {"prefetch_call_seconds", a.prefetch_call_s},
      {"evict_call_seconds", a.evict_call_s},
      {"longest_call_seconds", a.longest_call_s},
      {"most_launches_behind", a.most_behind},
      {"plan_buffers", a.plan_buffers},
      {"plan_buffers_found", a.plan_buffers_found},
      {"replay_relearned",
       a.relearn_from
           ? nlohmann::json{{"from_launch", *a.relearn_from},
                            {"skipped_bytes", a.relearn_skipped_bytes},
                            {"replay_plan_buffers", a.replay_found.first},
                            {"replay_plan_buffers_found", a.replay_found.second},
                            {"applied_from_launch", a.relearned_at ? nlohmann::json(a.relearned_at)
                                                                   : nlohmann::json(nullptr)}}
           : nlohmann::json(nullptr)},
      {"prefetch_wait", a.config.prefetch_wait},
      {"evict_wait", a.config.evict_wait},
  };
  if (a.config.evict_copy) {
    advisor["evict_copy"] = {
        {"used", a.copies != nullptr},
        {"off_reason",
         a.copy_off_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.copy_off_reason)},
        {"copied_out_bytes", a.copied_out_bytes},
        {"copied_in_bytes", a.copied_in_bytes},
        {"discarded_bytes", a.copy_discarded_bytes},
        {"forgotten_bytes", a.copy_forgotten_bytes},
        {"copy_calls", a.copy_calls},
        {"driver_fallbacks", a.copy_fallbacks},
        {"rescues", a.copy_rescues},
        {"guard_hits", a.copy_guard_hits},
        {"failures", a.copy_failures},
        {"host_bytes", a.copies ? a.copies->host_bytes() : 0},
    };
  }
  if (a.placement) {
    advisor["placement"] = {{"arena_bytes", a.placement->arena_bytes},
                            {"live_peak_bytes", a.placement->live_peak},
                            {"blocks", a.placement->sizes.size()},
                            {"placed_blocks", a.placement->placed},
                            {"order", a.placement->order}};
  } else {
    advisor["placement"] =
        a.placement_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.placement_note);
  }
  if (last) {
    advisor["plan"] = {
        {"source", last->source},
        {"period", last->period},
        {"applied_from_launch", last->applied_from},
        {"started_at_launch", last->started_at.load() == UINT64_MAX
                                  ? nlohmann::json(nullptr)
                                  : nlohmann::json(last->started_at.load())},
        {"footprint_bytes", last->plan.footprint_bytes},
        {"bytes_prefetched_per_iteration", last->plan.bytes_prefetched_per_iteration},
        {"bytes_evicted_per_iteration", last->plan.bytes_evicted_per_iteration},
        {"unfit_steps", last->plan.unfit_steps.size()},
        {"dead_gap_bytes_per_iteration", last->plan.dead_gap_bytes},
        {"bytes_dropped_per_iteration", last->plan.bytes_dropped_per_iteration},
        {"peak_resident_at_frees_bytes", last->plan.peak_resident_at_frees_bytes},
        {"drops", last->plan.drops.size()}};
    advisor["discards_approved"] = a.discards_approved.load();
    advisor["swept_bytes"] = a.swept_bytes;
    if (const std::shared_ptr<const DropTable> table = last->drops.load()) {
      // How the last plan's drops fared: page windows never discarded (their pages stay
      // resident), and frees that came outside every window of a page the plan drops.
      uint64_t never = 0;
      for (const auto& d : table->discarded) never += d.load() == 0;
      advisor["drop_windows"] = {{"pages", table->discarded.size()},
                                 {"never_discarded", never},
                                 {"asked_outside_window", table->asked_outside.load()},
                                 {"unplanned_pages_discarded", table->unplanned.load()},
                                 {"unresolved_drops", table->unresolved}};
    }
    advisor["peak_resident_plan_bytes"] = last->plan.peak_resident_bytes;
  }
  if (summary && summary->has_unified_memory_counters) {
    advisor["peak_resident_bytes"] = summary->peak_resident;
  }
  nlohmann::json j = {{"advisor", advisor}};
  if (summary) {
    j["iterations"] = iterations_json(*summary, [&](uint64_t first, uint64_t last_step) {
      return std::pair{sum_in(a.prefetched, first, last_step), sum_in(a.evicted, first, last_step)};
    });
    // Bytes umswap's own copies moved (UMSWAP_EVICT_COPY): on the link, but not in CUPTI's
    // unified-memory counters.
    if (a.config.evict_copy) {
      auto& its = j["iterations"];
      const auto& steps = summary->trace.iterations;
      for (size_t i = 0; i < its.size() && i < steps.size(); ++i) {
        const uint64_t first = steps[i].first_step, end = first + steps[i].step_count;
        its[i]["copied_in_bytes"] = sum_in(a.copied_in, first, end);
        its[i]["copied_out_bytes"] = sum_in(a.copied_out, first, end);
      }
    }
    // Peak GPU-resident bytes once the plan is in force: from its second iteration on (the
    // learning iterations fault in the whole footprint; the first planned one moves it out),
    // counted from where the advisor really started it.
    uint64_t applied_peak = 0;
    bool any = false;
    const uint64_t started = last ? last->started_at.load() : UINT64_MAX;
    for (size_t i = 0; i < summary->trace.iterations.size(); ++i) {
      const auto& it = summary->trace.iterations[i];
      if (started != UINT64_MAX && it.first_step >= started + last->period &&
          i < summary->iteration_peak_resident.size()) {
        applied_peak = std::max(applied_peak, summary->iteration_peak_resident[i]);
        any = true;
      }
    }
    if (any && summary->has_unified_memory_counters) {
      j["advisor"]["peak_resident_applied_bytes"] = applied_peak;
    }
  }
  return j;
}

nlohmann::json iterations_json(
    const tracer::RunSummary& summary,
    const std::function<std::pair<uint64_t, uint64_t>(uint64_t, uint64_t)>& transfers) {
  nlohmann::json out = nlohmann::json::array();
  const auto& its = summary.trace.iterations;
  for (size_t i = 0; i < its.size(); ++i) {
    const trace::Iteration& it = its[i];
    // Wall time from this iteration's first GPU start to the next one's (host gaps included).
    const uint64_t end =
        i + 1 < its.size() && its[i + 1].start_ns ? its[i + 1].start_ns : it.end_ns;
    nlohmann::json o = {
        {"index", i},
        {"first_step", it.first_step},
        {"steps", it.step_count},
        {"wall_ms", it.start_ns && end > it.start_ns ? (end - it.start_ns) / 1e6 : 0.0},
        {"gpu_page_faults", it.counters.gpu_page_faults},
        {"bytes_htod", it.counters.bytes_htod},
        {"bytes_dtoh", it.counters.bytes_dtoh},
        {"thrashing_events", it.counters.thrashing_events},
    };
    if (summary.has_unified_memory_counters && i < summary.iteration_peak_resident.size()) {
      o["peak_resident_bytes"] = summary.iteration_peak_resident[i];
      if (i < summary.iteration_peak_resident_free.size()) {
        o["peak_resident_free_bytes"] = summary.iteration_peak_resident_free[i];
      }
      if (i < summary.iteration_peak_step.size() && summary.iteration_peak_step[i] != UINT64_MAX) {
        const uint64_t step = summary.iteration_peak_step[i];
        o["peak_resident_step"] = step;
        const trace::Step& st = summary.trace.steps[step];
        if (st.name < summary.trace.names.size()) {
          o["peak_resident_step_name"] = summary.trace.names[st.name].substr(0, 120);
        }
      }
      if (i < summary.iteration_peak_buffers.size()) {
        nlohmann::json shares = nlohmann::json::array();
        for (const auto& share : summary.iteration_peak_buffers[i]) {
          const trace::Buffer& b = summary.trace.buffers[share.buffer];
          shares.push_back({{"buffer", share.buffer},
                            {"size", b.size},
                            {"call_site", b.call_site},
                            {"resident_bytes", share.resident},
                            {"live_bytes", share.live}});
          if (!share.resident_ranges.empty())
            shares.back()["resident_ranges"] = share.resident_ranges;
          if (!share.live_ranges.empty()) shares.back()["live_ranges"] = share.live_ranges;
        }
        o["peak_resident_buffers"] = std::move(shares);
      }
    }
    if (transfers) {
      const auto [in, out_bytes] = transfers(it.first_step, it.first_step + it.step_count);
      o["prefetched_bytes"] = in;
      o["evicted_bytes"] = out_bytes;
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace umswap::advisor
