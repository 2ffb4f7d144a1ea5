#include "umswap/advisor/advisor.h"

#include "advisor_impl.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
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

#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/copy_evictor.h"
#include "umswap/advisor/event_ring.h"
#include "umswap/advisor/logged_calls.h"
#include "umswap/advisor/online_learning.h"
#include "umswap/advisor/op_log.h"
#include "umswap/advisor/plan_streams.h"
#include "umswap/advisor/planner.h"
#include "umswap/advisor/progress.h"
#include "umswap/advisor/replay.h"
#include "umswap/advisor/resident_gate.h"
#include "umswap/advisor/watchdog.h"
#include "umswap/allocator/driver_api.h"
#include "umswap/allocator/drop_order.h"
#include "umswap/allocator/managed_allocator.h"
#include "umswap/allocator/placement.h"
#include "umswap/core/driver_lock.h"
#include "umswap/core/log.h"
#include "umswap/core/thread_stacks.h"
#include "umswap/tracer/extents.h"
#include "umswap/tracer/iteration_detector.h"
#include "umswap/tracer/memory_calls.h"

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

constexpr uint32_t kDivergeRun = 8;  // consecutive launches off the plan that end it
// The counter's values: launch g's evictions done (2g), all of launch g's actions done (2g + 1).
constexpr uint64_t evictions_done(uint64_t g) {
  return 2 * g;
}
constexpr uint64_t actions_done(uint64_t g) {
  return 2 * g + 1;
}

// Raises `a` to `value` if it is below (any thread; the watchdog reads the highest waits).
void raise_to(std::atomic<uint64_t>& a, uint64_t value) {
  uint64_t seen = a.load(std::memory_order_relaxed);
  while (seen < value && !a.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

Advisor::Advisor(const tracer::StepLogReader& steps, tracer::ResidencySink& residency)
    : impl_(new AdvisorImpl(steps, residency)) {}

Advisor::~Advisor() {
  // Leaked on purpose when the thread still runs (exit paths): never joined from a destructor.
  if (impl_->thread.joinable()) return;
  if (impl_->config.drop_order) impl_->config.drop_order->allow_waits(nullptr);  // reads words
  delete impl_;
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

void Advisor::on_step(uint64_t index, uint32_t key, CUstream stream,
                      const std::vector<tracer::PointerHit>* hits) {
  AdvisorImpl& a = *impl_;
  // The launch path's host time, in all and for this launch (the stats' launch_waits): entered
  // now, left when it returns (0 meanwhile: the watchdog's report_quiet() reads that).
  struct Noted {
    AdvisorImpl& a;
    uint64_t index;
    LaunchWaitLog::Entry& w;
    int64_t entered = now_ns();
    Noted(AdvisorImpl& impl, uint64_t i, CUstream s)
        : a(impl), index(i), w(impl.watchdog.launch_waits().note(i, s, 0, 0)) {
      w.entered.store(entered, std::memory_order_relaxed);
    }
    ~Noted() {
      const int64_t left = now_ns();
      a.launch_path_ns.fetch_add(static_cast<uint64_t>(left - entered), std::memory_order_relaxed);
      if (w.index.load(std::memory_order_relaxed) == index) {
        w.left.store(left, std::memory_order_relaxed);
      }
    }
  } noted{a, index, stream};
  // Sequentially consistent with the hold's read of the launch armed (boundary_hold.h).
  a.words.launched.store(index + 1, std::memory_order_seq_cst);
  a.boundary.hold(index);  // the first plan may start here
  LivePlan* p = a.plan_at(index);
  // While learning, and once a plan is staged until the advisor thread takes it up (the launches
  // in between have no actions yet: it begins the plan with a barrier, reset_to_start()).
  if (a.config.learn_evict) {
    if (!p || (!p->staged && (index < p->applied_from ||
                              p->started_at.load(std::memory_order_acquire) == UINT64_MAX))) {
      a.learn_path.step(index, stream, hits, *a.registry);
    } else {
      a.learn_path.mark_stale();
    }
  }
  // UMSWAP_EVICT_COPY: the launch up to which this one waits for the copies back (its own wait),
  // decided once: the guard counts on it, so it is placed further down even if copies stop
  // meanwhile.
  CUdeviceptr restored = 0;
  uint64_t own_wait = UINT64_MAX;
  if (a.copier.begin_launch(&restored)) {
    if (p && index >= p->base) own_wait = p->covered(index, a.words.waits_from.load());
    a.copier.guard(index, hits, a.copier.cover(own_wait, index, stream), stream);
  }
  a.copier.wait_for_stop(stream);
  // A kernel whose results change on memory that is not GPU-resident runs only once everything
  // its parameters point at is on the GPU, whatever the plan did (resident_launches.h).
  if (a.resident.needs(key)) {
    a.resident.make_resident(hits, stream, a.device_for_launches.load(std::memory_order_relaxed));
  }
  if (!p || index < p->base) return;
  const uint64_t phase = (index - p->base) % p->period;
  // Before anything this launch adds to its stream (its populates, its waits: a prefetch that
  // waited behind a wait for itself would never come).
  if (index > p->applied_from && p->prefetches[phase] &&
      a.events_ready.load(std::memory_order_acquire)) {
    a.reached.record(a.d, index, stream);
  }
  // Dropped pages this launch is the next user of, populated on the GPU so that it neither
  // faults them in (0.6 GB/s measured) nor had them from their allocation on.
  const bool populates = index >= p->applied_from && p->populates[phase];
  if (const std::shared_ptr<const DropTable> table =
          populates ? p->drops.load(std::memory_order_acquire) : nullptr;
      table && phase < table->populate_at.size()) {
    if (!table->populate_at[phase].empty()) {
      a.watchdog.launch_waits().note(index, stream, 0, 0, table->populate_at[phase].size());
    }
    a.populate_ranges(table->populate_at[phase], stream);
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
  // UMSWAP_EVICT_COPY: the launch runs once the copies back of the launch that issues its
  // prefetches are done (after its "reached" event: that launch may be this one).
  if (own_wait != UINT64_MAX) {
    if (a.d.stream_wait_value64(stream, restored, own_wait + 1, CU_STREAM_WAIT_VALUE_GEQ) !=
        CUDA_SUCCESS) {
      a.copier.wait_on_host(restored, own_wait + 1, index);  // the guard counted on that wait
    } else if (const std::optional<uint64_t> epoch = a.copier.epoch_of(restored)) {
      a.watchdog.launch_waits().note(index, stream, own_wait + 1, 0);
      raise_to(a.words.highest_restore_wait, *epoch << 48 | ((own_wait + 1) & kRestoreWaitMask));
    }
  }
  if (!a.words.progress_device) return;
  // A launch waits for the counter to reach `value` (at most once: the larger of its waits).
  uint64_t value = 0;
  uint64_t covered = 0;  // every action of the launches up to it is done once the wait is met
  bool evict_wait = false;
  if (a.config.prefetch_wait && p->wait_ahead[phase] != UINT32_MAX &&
      index >= p->wait_ahead[phase]) {
    const uint64_t issued_at = index - p->wait_ahead[phase];
    if (issued_at >= a.words.waits_from.load(std::memory_order_acquire)) {
      value = actions_done(issued_at);
      covered = issued_at;
    }
  }
  // UMSWAP_EVICT_WAIT: the evictions that must be done for this launch to run within the budget
  // (Plan::room_wait_back), not before the advisor has waits on.
  const std::vector<uint32_t>& room_wait = p->plan.room_wait_back;
  if (a.config.evict_wait && phase < room_wait.size() && room_wait[phase] != Plan::kNoRoomWait &&
      index >= room_wait[phase] && index >= a.words.waits_from.load() &&
      evictions_done(index - room_wait[phase]) > value) {
    value = evictions_done(index - room_wait[phase]);
    // Its evictions only: every action of the launches before it.
    covered = index - room_wait[phase] > 0 ? index - room_wait[phase] - 1 : 0;
    evict_wait = true;
  }
  if (value == 0) return;
  if (a.d.stream_wait_value64(stream, a.words.progress_device, value, CU_STREAM_WAIT_VALUE_GEQ) ==
      CUDA_SUCCESS) {
    (evict_wait ? a.evict_waits_placed : a.waits_placed).fetch_add(1, std::memory_order_relaxed);
    if (covered > 0) a.resident.note_counter_wait(stream, covered);  // resident_gate.h
    raise_to(a.words.highest_wait, value + 1);
    a.watchdog.launch_waits().note(index, stream, 0, value);
  }
}

// The program's thread is about to block until the GPU gets somewhere (a device, stream or event
// synchronize). Launches it submitted may wait on the GPU for words the advisor thread writes once
// it has applied them, and with copies for copies back it has not issued yet. A blocking call can
// hold the driver while its thread waits (a synchronous cudaMemcpy was seen to: "Every copy is
// issued at once" in docs/advisor.md), and the advisor thread's next call would wait behind it.
// So the thread waits here, before the driver is entered, until the advisor has applied every
// launch submitted so far; at most 5 s (then it goes on, and the stats count it).
void Advisor::before_blocking() {
  AdvisorImpl& a = *impl_;
  // Cheapest first: this runs before every synchronize and every copy with a host side.
  const LivePlan* p = a.plan.load(std::memory_order_acquire);
  if (!p || (a.config.in_own_code && a.config.in_own_code())) return;
  const bool waits = a.words.progress_device &&
                     !a.words.waits_off.load(std::memory_order_relaxed) &&
                     a.words.waits_from.load(std::memory_order_acquire) != UINT64_MAX;
  if (!waits && !impl_->copier.live()) return;
  const uint64_t target = a.words.launched.load(std::memory_order_acquire);
  if (target <= p->applied_from ||
      a.words.applied_through.load(std::memory_order_acquire) >= target) {
    return;
  }
  a.words.blocking_waits.fetch_add(1, std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  a.words.blocking_since.store(now_ns(), std::memory_order_relaxed);
  struct Held {
    std::atomic<int64_t>& since;
    ~Held() { since.store(0, std::memory_order_relaxed); }
  } held{a.words.blocking_since};
  while (a.words.applied_through.load(std::memory_order_acquire) < target) {
    if (a.words.stop.load(std::memory_order_acquire)) return;
    // A relearned plan that takes over (switch_to_next) goes on applying the launches submitted,
    // which wait for its words: the wait goes on. A plan dropped has released its waits, and a
    // plan made since starts past the launches submitted.
    const LivePlan* now = a.plan.load(std::memory_order_acquire);
    if (!now || (now != p && target <= now->applied_from)) return;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) {
      a.words.blocking_timeouts.fetch_add(1, std::memory_order_relaxed);
      a.words.blocking_let_go_at.store(now_ns(), std::memory_order_relaxed);
      return;
    }
    sleep_us(50);
  }
}

void Advisor::before_free(uint64_t base, uint64_t size) {
  impl_->copier.before_free(base, size);
}

void Advisor::on_opaque(CUstream stream, const char* what) {
  AdvisorImpl& a = *impl_;
  if (a.opaque_calls.fetch_add(1, std::memory_order_relaxed) == 0) a.first_opaque.store(what);
  if (what && what == tracer::kGraphLaunch)
    a.graph_launches.fetch_add(1, std::memory_order_relaxed);
  a.copier.on_opaque(what, a.words.launched.load(std::memory_order_acquire), stream);
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
  const uint64_t n = words.launched.load(std::memory_order_acquire);
  if (n == 0 || n - 1 < p->applied_from) return nullptr;
  if (plan_out) *plan_out = p;
  if (launched_out) *launched_out = n;
  return p->drops.load(std::memory_order_acquire);
}

void AdvisorImpl::populate_ranges(std::span<const DropTable::Populate> ranges, CUstream s) {
  if (ranges.empty()) return;
  CUmemLocation gpu{};
  gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
  gpu.id = device_for_launches.load(std::memory_order_relaxed);
  for (const auto& [address, bytes] : ranges) {
    const int64_t before = now_ns();
    const CUresult r = d.mem_prefetch_async(address, bytes, gpu, 0, s);
    const auto took = static_cast<uint64_t>(now_ns() - before);
    launch_populate_call_ns.fetch_add(took, std::memory_order_relaxed);
    uint64_t longest = launch_populate_longest_ns.load(std::memory_order_relaxed);
    while (took > longest && !launch_populate_longest_ns.compare_exchange_weak(
                                 longest, took, std::memory_order_relaxed)) {
    }
    if (r == CUDA_SUCCESS) {
      launch_populates.fetch_add(1, std::memory_order_relaxed);
      launch_populated_bytes.fetch_add(bytes, std::memory_order_relaxed);
      residency.note_launch_populate(address, bytes);  // at this launch's GPU start
    }
  }
}

bool AdvisorImpl::populate_later(uint64_t page) {
  const std::shared_ptr<const DropTable> table = applied_drops(nullptr, nullptr);
  return table && table->windows.contains(page);
}

// A sweep's discard (on sweep_stream): as a free's.
bool AdvisorImpl::sweep_may_discard(uint64_t page) {
  return discard_page(page);
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
    if (Drop{{}, w.last_use, w.next_use, Drop::kAfterLastUse}.covers(phase)) {
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
  a.resident.close(stream);
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
  a.words.stop.store(true);
  a.thread.join();
  a.watchdog.join();
  // No plan applies any more: a free's discard waits for no prefetch (drop_order.h).
  if (a.config.drop_order) a.config.drop_order->allow_waits(nullptr);
  a.plan.store(nullptr, std::memory_order_release);
  if (a.words.progress_host)
    *a.words.progress_host = kReleased;  // no launch waits for the advisor any more
}

bool AdvisorImpl::set_up() {
  while (!context.load() && !words.stop.load()) sleep_us(1000);
  if (words.stop.load()) return false;
  d.ctx_set_current(context.load());
  relax_capture_mode();  // once the driver is initialized (before, it answers error 3)
  if (!start_logged_calls(d, config.op_log)) {
    log_warning("{}: no pinned memory for the calls' numbers; not followed",
                config.op_log ? "UMSWAP_DEBUG=op-log" : "advisor");
  } else if (config.op_log) {
    log_warning("UMSWAP_DEBUG=op-log: each stream's calls are followed by a write of their number");
  }
  if (d.ctx_get_device(&device) != CUDA_SUCCESS ||
      d.stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.stream_create(&sweep_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.event_create(&barrier, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS || !sweeps.set_up(d)) {
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
  done.name = "last use";
  reached.name = "reached";
  events_ready.store(true, std::memory_order_release);
  if (!resident.set_up(stream)) {
    state = "off";
    fallback = "could not create events";
    log_warning("advisor off: {}", fallback);
    return false;
  }
  if (config.evict_copy && (!config.prefetch_wait || !config.evict_wait)) {
    log_info("UMSWAP_EVICT_COPY: UMSWAP_PREFETCH_WAIT and UMSWAP_EVICT_WAIT are on with it");
    config.prefetch_wait = config.evict_wait = true;
  }
  if (config.prefetch_wait || config.evict_wait) {
    void* host = nullptr;
    const std::lock_guard driver(driver_setup_mutex());  // pinned memory (driver_lock.h)
    if (d.mem_host_alloc && d.mem_host_get_device_pointer && d.stream_wait_value64 &&
        d.stream_write_value64 &&
        d.mem_host_alloc(&host, sizeof(uint64_t),
                         CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS &&
        d.mem_host_get_device_pointer(&words.progress_device, host, 0) == CUDA_SUCCESS) {
      words.progress_host = static_cast<volatile uint64_t*>(host);
      *words.progress_host = 0;
    } else {
      words.progress_device = 0;
      log_warning("{}: stream memory operations unavailable; launches do not wait",
                  config.prefetch_wait ? "UMSWAP_PREFETCH_WAIT" : "UMSWAP_EVICT_WAIT");
    }
  }
  // While launches wait for the advisor's prefetches, a resident launch orders only the
  // migrations for it and later launches (resident_gate.h), and a free's discard may wait for a
  // prefetch (drop_order.h). Not with copies: their waits and stops are their own.
  if (config.prefetch_wait && !config.evict_copy && words.progress_device != 0) {
    resident.defer(&words);
    if (config.drop_order) {
      config.drop_order->allow_waits([this] {
        return !words.waits_off.load(std::memory_order_acquire) &&
               words.waits_from.load(std::memory_order_acquire) != UINT64_MAX;
      });
    }
  }
  copier.set_up(stream, device, words.progress_device != 0);
  name_logged_stream(stream, "main");
  name_logged_stream(sweep_stream, "sweep");
  for (const auto& [on, name] : copier.streams()) name_logged_stream(on, name);
  size_t total = 0;
  d.device_total_mem(&total, device);
  budget = config.budget.is_zero() ? total : config.budget.resolve(total);
  log_info("advisor: {} mode, budget {}", to_string(config.mode), format_bytes(budget));
  return true;
}

// The advisor thread takes the relaxed stream-capture mode. In the default (global) mode a call
// the driver deems unsafe (pinned allocations, module loads, ...) made while any program thread
// captures a CUDA graph in the global mode invalidates that capture (torch.cuda.graph captures
// so); in the relaxed mode it does not. None of its streams is ever captured. (The watchdog makes
// no driver calls.)
void AdvisorImpl::relax_capture_mode() {
  if (!d.thread_exchange_capture_mode) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (const CUresult r = d.thread_exchange_capture_mode(&mode); r != CUDA_SUCCESS) {
    log_info("advisor: its thread could not take the relaxed capture mode (error {})",
             static_cast<int>(r));
  }
}

void AdvisorImpl::run() {
  timeline.start();
  residency.untrace_this_thread();  // its copies are not the program's steps
  if (!set_up()) return;
  watchdog.start(stream, [this] { return plan.load() != nullptr; });
  state = "learning";
  if (matcher) {
    std::string why;
    auto p = std::make_unique<LivePlan>();
    const auto planning = LearningTimeline::Clock::now();
    if (make_replay_plan(*matcher, budget, config.prefetch_bytes_per_s, config.evict_bytes_per_s,
                         &p->plan, &p->base, &p->period, &why, use_lifetimes())) {
      if (config.place && use_lifetimes()) placement.from_trace(matcher->trace());
      // From the first iteration boundary still ahead (the program ran on while the plan was
      // made), with the arena handed there: a plan applied to launches already past, or before
      // its arena exists, acts on what is no longer where it says.
      p->applied_from =
          boundary_at_or_after(p->base, p->period, words.launched.load(std::memory_order_acquire));
      if (placement.pending()) placement.hand_at(p->applied_from);
      p->source = "replay";
      p->matcher = matcher.get();
      p->address.assign(matcher->buffer_count(), 0);
      p->buffer_id.assign(matcher->buffer_count(), 0);
      timeline.note("plan from the trace", launches_seen(),
                    LearningTimeline::seconds_since(planning), p->applied_from);
      activate(std::move(p));
    } else {
      fallback = why + "; learning online instead";
      log_warning("replay: {}", fallback);
    }
  }
  while (!words.stop.load(std::memory_order_acquire)) {
    const uint64_t n = words.launched.load(std::memory_order_acquire);
    LivePlan* p = plan.load(std::memory_order_relaxed);
    if (p && diverged.load(std::memory_order_acquire)) {
      drop_plan(diverged_at.load(), "the launches no longer match the plan");
      p = nullptr;
    }
    if (p && p->matcher) check_replay_keys(*p);
    p = plan.load(std::memory_order_relaxed);
    if (p) {
      const Timed planned(times.planned_s);
      const LivePlan* q = next_plan.load(std::memory_order_relaxed);
      words.doing.store("applying the plan", std::memory_order_relaxed);
      if (placement.tend(n)) build_drops(*p);  // replay: the arena, before the plan uses it
      {
        const Timed timed(times.apply_s);
        apply(q ? std::min(n, q->applied_from) : n);
      }
      if (q && cursor >= q->applied_from) switch_to_next();
      p = plan.load(std::memory_order_relaxed);
      tend(*p, n);
      if (relearning && !next_plan.load(std::memory_order_relaxed)) relearn(*p);
      words.doing.store("tending copies", std::memory_order_relaxed);
      {
        const Timed timed(times.tend_copies_s);
        copier.tend();
      }
      words.doing.store("serving a rescue", std::memory_order_relaxed);
      copier.serve_rescue();
      words.doing.store("waiting for launches", std::memory_order_relaxed);
      copier.take_requests();
      sleep_us(50);
    } else if (placement.pending()) {
      if (placement.tend(n)) {
        learn_from = placement.learn_again_from();
        next_check = 0;
        // The placed iteration starts: the launch after it waits while its plan is made.
        if (plans.empty()) boundary.arm(learn_from + placement.placed_period());
      }
      sleep_us(50);
    } else {
      if (!learning_failed) learn();
      sleep_us(500);
    }
  }
  boundary.release();  // before any driver call (boundary_hold.h)
  copier.stop("the program ends");
  release_waits();
  if (relearn_task.valid()) relearn_task.wait();  // reads the tracer's log: not past the exit
  if (stream) d.stream_synchronize(stream);
  copier.settle_at_exit();
  if (words.progress_host) *words.progress_host = kReleased;
}

// Releases every launch waiting on the counter, now and for good (until a new plan's reset
// writes it again). The host write frees them at once; the stream write keeps a counter write
// still queued on the advisor's stream (a lower value) from taking the release back.
void AdvisorImpl::release_waits() {
  words.waits_from.store(UINT64_MAX, std::memory_order_release);
  if (!words.progress_device || words.waits_off.load()) return;
  *words.progress_host = kReleased;
  d.stream_write_value64(stream, words.progress_device, kReleased, 0);
}

void AdvisorImpl::drop_plan(uint64_t at, const char* why) {
  timeline.note("plan dropped", at);
  LivePlan* p = plan.load();
  plan.store(nullptr, std::memory_order_release);
  next_plan.store(nullptr, std::memory_order_release);  // a relearned plan not yet in force
  relearning = false;
  if (relearn_after_learning) {  // the next plan learned while evicting is relearned in turn
    // A plan still being built for the dropped one must not be taken for the next one's.
    if (relearn_task.valid()) {
      try {
        relearn_task.get();
      } catch (const std::exception&) {
      }
    }
    relearn_from.reset();
    relearn_after_learning = false;
    relearned_at = 0;
  }
  copier.stop(std::string("the plan ends: ") + why, false);
  if (p && !p->matcher) online.diverged(p->keys);  // maybe an inner loop (online_learning.h)
  // The placement may have come from this inner loop's blocks: the next iteration learned places
  // again (the allocator replaces the arena).
  if (p && !p->matcher) placement.plan_ended(p->period);
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

void AdvisorImpl::index_plan(LivePlan& plan_ref) {
  LivePlan* p = &plan_ref;
  const Plan& plan_data = p->plan;
  p->needs_event.assign(p->period, 0);
  p->prefetches.assign(p->period, 0);
  p->wait_ahead.assign(p->period, UINT32_MAX);
  p->populates.assign(p->period, 0);
  for (const Drop& drop : plan_data.drops) {
    if (drop.next_use >= p->period) continue;
    p->populates[drop.next_use] = 1;
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
  // evict_due: per buffer, the actions in step order, walked cyclically after each eviction.
  const std::vector<Action>& acts = plan_data.actions;
  p->evict_due.assign(acts.size(), UINT32_MAX);
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_buffer;
  for (uint32_t i = 0; i < acts.size(); ++i) by_buffer[acts[i].range.buffer].push_back(i);
  const auto overlap = [](const PlanRange& a, const PlanRange& b) {
    return a.offset < b.offset + b.length && b.offset < a.offset + a.length;
  };
  for (const auto& [buffer, list] : by_buffer) {
    for (size_t k = 0; k < list.size(); ++k) {
      const Action& e = acts[list[k]];
      if (e.kind != ActionKind::evict) continue;
      uint32_t due = UINT32_MAX;
      std::vector<std::pair<uint64_t, uint64_t>> back;  // the prefetched parts, [lo, hi)
      for (size_t m = 1; m <= list.size(); ++m) {
        const size_t at = (k + m) % list.size();
        const Action& x = acts[list[at]];
        if (!overlap(x.range, e.range)) continue;
        uint32_t delta = static_cast<uint32_t>((x.at_step + p->period - e.at_step) % p->period);
        if (delta == 0 && at <= k) delta = static_cast<uint32_t>(p->period);  // a cycle on
        if (x.kind == ActionKind::evict) break;  // evicted again (or itself, a cycle later)
        due = due == UINT32_MAX ? delta : std::max(due, delta);
        back.emplace_back(x.range.offset, x.range.offset + x.range.length);
      }
      // Only a range brought back whole: a part left held would be missing at its next use.
      std::sort(back.begin(), back.end());
      uint64_t reach = e.range.offset;
      for (const auto& [lo, hi] : back) {
        if (lo > reach) break;
        reach = std::max(reach, hi);
      }
      p->evict_due[list[k]] = reach >= e.range.offset + e.range.length ? due : UINT32_MAX;
    }
  }
  build_drops(*p);
}

// What runs beside a plan in force, at launch `n`: the sweeps (sweeps.h).
void AdvisorImpl::tend(LivePlan& p, uint64_t n) {
  if (!config.sweep || !use_lifetimes()) return;
  sweeps.tend(d, stream, n, p.period, [this] {
    return config.sweep([this](uint64_t page) { return sweep_may_discard(page); }, sweep_stream);
  });
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
  // The watchdog released the launches on the host: a lower counter value still queued on this
  // stream must not take the release back, before any close is waited for (resident_gate.h).
  if (!stream_released && words.progress_device && words.waits_off.load()) {
    d.stream_write_value64(stream, words.progress_device, kReleased, 0);
    stream_released = true;
  }
  std::unique_lock held = resident.hold(launch);
  const auto t0 = std::chrono::steady_clock::now();
  CUresult r = CUDA_SUCCESS;
  uint64_t moved = 0;
  if (DropOrder* order = config.drop_order) {
    // Around pages a free or a sweep is discarding: both at once lose data (drop_order.h).
    thread_local std::vector<DropOrder::Range> parts;
    const uint64_t ticket = order->begin_migration(address, length, to_gpu, &parts);
    for (const auto& [from, to] : parts) {
      const CUresult part = d.mem_prefetch_async(from, to - from, where, 0, stream);
      if (part == CUDA_SUCCESS) {
        moved += to - from;
      } else if (r == CUDA_SUCCESS) {
        r = part;
      }
    }
    order->end_migration(ticket, stream);
  } else {
    r = d.mem_prefetch_async(address, length, where, 0, stream);
    if (r == CUDA_SUCCESS) moved = length;
  }
  held.unlock();
  words.issued_calls.fetch_add(1, std::memory_order_relaxed);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (to_gpu ? times.prefetch_call_s : times.evict_call_s) += took;
  times.longest_call_s = std::max(times.longest_call_s, took);
  if (r != CUDA_SUCCESS) {
    ++failed_calls;
    if (warned_call_failure.first()) {
      log_warning("advisor: cuMemPrefetchAsync of {} at {:#x} failed (error {}); skipped",
                  format_bytes(length), address, static_cast<int>(r));
    }
  }
  if (moved == 0) return;  // failed, or every page was being discarded
  (to_gpu ? prefetched : evicted).push_back({launch, moved});
  (to_gpu ? prefetched_bytes : evicted_bytes) += moved;
  ++(to_gpu ? prefetch_calls : evict_calls);
}

// Makes the advisor's stream wait for everything submitted so far on the planned streams. True
// when it waits for every one of them (false with none).
bool AdvisorImpl::barrier_all(const LivePlan& p) {
  bool all = !p.streams.empty();
  for (uint64_t s : p.streams) {
    all = d.event_record(barrier, reinterpret_cast<CUstream>(s)) == CUDA_SUCCESS &&
          d.stream_wait_event(stream, barrier, 0) == CUDA_SUCCESS && all;
  }
  return all;
}

// The advisor's stream waits until launch j has finished on the GPU. False: it could not (the
// eviction goes unordered).
bool AdvisorImpl::wait_for_launch(const LivePlan& p, uint64_t j) {
  // Covered by the barrier taken at applied_from (the program may have run past it: a replay plan
  // applies from the start, before the advisor could record events).
  // Without a barrier (a relearned plan's first launches) launch j must have its event: an
  // eviction taken as ordered would let UMSWAP_EVICT_COPY copy and discard a range before its
  // last use ran.
  if (j < p.barrier_covers || (p.barrier_taken && j < p.applied_from)) return true;
  bool recorded = false;
  {
    const Timed timed(times.event_wait_s);
    recorded = done.wait(d, j, stream, words.launched.load(std::memory_order_acquire));
  }
  if (!recorded) {
    // Not recorded (yet) or already reused: wait for everything instead; not while launches may
    // wait for this stream (a barrier would then wait for itself), the eviction goes unordered
    // (managed memory stays correct; the range may fault back).
    ++late_events;
    if (words.progress_device) return false;
    barrier_all(p);
  }
  return true;
}

// At the first applied launch: the GPU holds what the plan expects at an iteration start.
void AdvisorImpl::reset_to_start(LivePlan& p) {
  // Not while launches wait for this stream (a plan that replaced another: launches from its
  // applied_from on may wait for counter values written after this barrier, which would wait for
  // them); the migrations below then go unordered, which costs faults, never data.
  if (!words.progress_device || words.waits_from.load(std::memory_order_acquire) == UINT64_MAX) {
    const uint64_t seen = words.launched.load(std::memory_order_acquire);
    // A replay plan's trace names no stream of this process: those of the steps before.
    if (p.streams.empty()) p.streams = streams_before(steps, seen, p.period);
    // Launches are taken as run on the GPU only where the barrier waits for all their streams.
    if (barrier_all(p)) {
      p.barrier_covers = seen > kEventSlack ? seen - kEventSlack : 0;
      p.barrier_taken = true;
    }
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
    size_t named = 0;  // the first few, by trace buffer id, size and call site
    for (uint32_t b = 0; b < p.address.size() && named < 8; ++b) {
      if (p.address[b] != 0) continue;
      const trace::Buffer& t = p.matcher->trace().buffers[b];
      log_info("replay: not found: the trace's buffer {} ({}, call site {:016x}){}", t.id,
               format_bytes(t.size), t.call_site,
               ++named == 8 && p.address.size() - planned.size() > 8 ? ", and more" : "");
    }
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
  for (uint64_t g = std::max(cursor, p.applied_from); g < n; ++g) {
    words.applied_through.store(g, std::memory_order_release);
    most_behind = std::max(most_behind, words.launched.load(std::memory_order_relaxed) - g);
    if (words.stop.load(std::memory_order_relaxed) || diverged.load(std::memory_order_relaxed)) {
      cursor = g;
      return;
    }
    if (g == p.applied_from) {
      const uint64_t now = std::max(words.launched.load(std::memory_order_acquire), g);
      p.started_at.store(g + (now - g + p.period - 1) / p.period * p.period,
                         std::memory_order_release);
      reset_to_start(p);
      if (words.progress_device && !words.waits_off.load()) {
        d.stream_write_value64(stream, words.progress_device, actions_done(g), 0);
        words.waits_from.store(std::max(n, g + (p.held_start ? p.period : 1)),
                               std::memory_order_release);
        copier.go_live();
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
      if (evicted_here && words.progress_device && !words.waits_off.load()) {
        d.stream_write_value64(stream, words.progress_device, evictions_done(g), 0);
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
        const uint64_t due = p.evict_due[i] == UINT32_MAX ? UINT64_MAX : g + p.evict_due[i];
        for (Evictor* e : evictors) {
          if (e->evict(address, a.range.length, g, j, ordered, due) != Evictor::Outcome::declined) {
            break;
          }
        }
        evicted_here = true;
      } else {
        // Not before the GPU reaches launch g: the room the plan gives this prefetch may be a
        // block freed just before it (discarded on the program's stream, not before then).
        if (!prefetched_here && g > p.applied_from && g >= p.barrier_covers) {
          const Timed timed(times.event_wait_s);
          if (!reached.wait(d, g, stream, words.launched.load(std::memory_order_acquire))) {
            ++late_start_events;
          }
        }
        for (Evictor* e : evictors) {
          if (e->restore(address, a.range.length, g)) break;
        }
        prefetched_here = prefetch_planned = true;
      }
    }
    evictions_issued();
    if (words.progress_device && !words.waits_off.load() && prefetch_planned) {
      d.stream_write_value64(stream, words.progress_device, actions_done(g), 0);
    }
    // Launches that wait for g's prefetches wait for its copies back too (none: the value only).
    if (prefetch_planned) {
      for (Evictor* e : evictors) e->finish_launch(g, g > p.applied_from && g >= p.barrier_covers);
    }
  }
  // Every launch seen is handled: a launch waiting on one whose actions were skipped (a buffer
  // gone) must not wait for a later prefetch that may never come.
  if (words.progress_device && !words.waits_off.load() && n > std::max(cursor, p.applied_from)) {
    d.stream_write_value64(stream, words.progress_device, actions_done(n - 1), 0);
  }
  cursor = std::max(cursor, n);
  words.applied_through.store(cursor, std::memory_order_release);
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
    const auto [first, end] =
        whole_pages(p.address[drop.range.buffer] + drop.range.offset, drop.range.length);
    for (uint64_t page = first; page < end; page += kPage) {
      table->windows[page].push_back(
          {drop.last_use, drop.next_use, static_cast<uint32_t>(slots++)});
    }
    if (first < end && drop.next_use < p.period) {
      table->populate_at[drop.next_use].push_back({first, end - first});
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
  const uint64_t logged = steps.logged_steps();
  if (logged <= replay_checked) return;
  const std::vector<uint32_t> keys = steps.copy_keys(replay_checked);
  uint32_t run = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t index = replay_checked + i;
    if (!p.matcher->matches(index, keys[i], [this](uint32_t key) { return steps.key_name(key); })) {
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

}  // namespace umswap::advisor
