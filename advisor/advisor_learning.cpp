// The advisor's plans, learned and in force (advisor_impl.h; the advisor thread, but for
// build_plan(), which any thread may call): online learning's choice of the iteration, replay's
// relearning of this process's iteration, and a plan's coming into force (activate, stage,
// switch to the next).
#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include "advisor_impl.h"
#include "umswap/advisor/online_learning.h"
#include "umswap/advisor/planner.h"
#include "umswap/advisor/replay.h"
#include "umswap/core/log.h"
#include "umswap/tracer/step_data.h"

namespace umswap::advisor {

// The signatures of the `count` steps from learn_from (online_learning.h): the pointers each was
// launched with. Empty when they are not all in the log, or too many to copy at each check.
std::vector<uint64_t> AdvisorImpl::step_signatures(uint64_t count) const {
  constexpr uint64_t kMostSteps = 1 << 16;
  std::vector<uint64_t> out;
  tracer::StepLog log;
  if (count > kMostSteps || !steps.copy_steps(learn_from, count, &log)) return out;
  out.reserve(count);
  const std::span<const tracer::PointerHit> hits(log.hits);
  for (uint64_t i = 0; i < count; ++i) {
    out.push_back(tracer::hits_signature(
        hits.subspan(log.first_hit[i], log.first_hit[i + 1] - log.first_hit[i])));
  }
  return out;
}

// Online learning: once two iterations repeat, plan from the last complete one.
void AdvisorImpl::learn() {
  const uint64_t logged = steps.logged_steps();
  uint64_t from = learn_from;  // the launch of the first key the choice counts from
  std::optional<LearnChoice> choice;
  uint64_t held = BoundaryHold::kNone;  // the launch after the placed iteration (boundary_hold.h)
  if (const uint64_t period = placement.placed_period()) {
    // After a placement's hand-off: the first placed iteration, with the placed period, not
    // detected again (online_learning.h). + 1: its block events after its last launch are
    // logged before the next launch.
    if (logged < learn_from + period + 1) return;
    from = learn_from - period;
    held = learn_from + period;
    choice = OnlineLearning::placed_iteration(steps.copy_keys(from, 2 * period), period);
    placement.learned();
    if (!choice) {  // the program changed: detected as usual from here
      boundary.release();
      log_info("advisor: launch {}: the first placed iteration differs; learning again",
               learn_from);
      next_check = 0;
      return;
    }
  } else {
    if (logged < learn_from + 64 || logged < next_check) return;
    next_check = logged + std::max<uint64_t>(64, (logged - learn_from) / 4);
    const std::vector<uint32_t> keys = steps.copy_keys(learn_from);
    choice = online.choose(keys);
    if (!choice) return;
    // Whether the keys' iteration repeats its data too (online_learning.h): the steps' pointers
    // are copied only once the keys give an iteration, not at every check.
    if (const std::vector<uint64_t> buffers = step_signatures(keys.size()); !buffers.empty()) {
      choice = online.choose(keys, buffers);
      if (!choice) return;
    }
    timeline.note("iteration found", launches_seen());
  }
  const uint64_t e = from + choice->region_start;
  const uint64_t first = from + choice->first;
  if (placement.may_try() && config.place && use_lifetimes() && first >= choice->period) {
    // Place the iteration's blocks first (at its next boundary), then learn it again at their
    // new addresses (run()).
    const auto placing = LearningTimeline::Clock::now();
    // Its local search ends before the boundary it would be handed at (search_deadline()).
    const uint64_t period = choice->period;
    const uint64_t deadline = PlacementHandOff::search_deadline(e, period, launches_seen());
    if (placement.try_learned(steps.copy_lifetimes(first - period, first + period - 1), first,
                              period, [this, deadline] { return launches_seen() >= deadline; })) {
      const uint64_t hand = boundary_at_or_after(e, period, launches_seen());
      placement.hand_at(hand);
      timeline.note("placement made", launches_seen(), LearningTimeline::seconds_since(placing),
                    hand);
      return;
    }
  }
  std::unique_ptr<LivePlan> p;
  const auto planning = LearningTimeline::Clock::now();
  try {
    p = build_plan(e, first, choice->period);
  } catch (const std::exception& ex) {
    boundary.release();
    learning_failed = true;
    state = "off";
    fallback = std::string("planning failed: ") + ex.what();
    log_warning("advisor off: {}", fallback);
    return;
  }
  if (!p) {
    boundary.release();
    return;
  }
  p->learned_evicting = learn_path.take_moved();
  // From the next iteration boundary on (launch indices below it may already be running), or
  // from the launch held for it, which waits until the plan is in force.
  p->held_start = held != BoundaryHold::kNone && held >= e && (held - e) % p->period == 0 &&
                  boundary.claim(held);
  p->applied_from = p->held_start ? held : boundary_at_or_after(e, p->period, launches_seen());
  log_learned(*p, first);
  timeline.note(p->held_start ? "plan learned, its first launch held" : "plan learned",
                launches_seen(), LearningTimeline::seconds_since(planning), p->applied_from);
  activate(std::move(p));
  boundary.release();
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
    if (steps.logged_steps() < first + replayed.period + 1) return;
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
  if (!steps.copy_steps(first, period, &log)) return nullptr;

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
  in.budget_bytes =
      managed_budget(budget, config.program_gpu_bytes ? config.program_gpu_bytes() : 0);
  in.prefetch_bytes_per_s = config.prefetch_bytes_per_s;
  in.evict_bytes_per_s = config.evict_bytes_per_s;
  if (use_lifetimes()) {
    std::vector<std::pair<uint64_t, uint64_t>> buffers;  // (base, size) by plan buffer
    for (size_t b = 0; b < p->address.size(); ++b) {
      buffers.emplace_back(p->address[b], in.buffer_sizes[b]);
    }
    append_lifetimes(tracer::lifetimes_in(steps.copy_lifetimes(first + 1, first + period), buffers),
                     first, period, in);
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
  if (plans.empty()) {
    // The one line a user sees by default (UMSWAP_VERBOSE=0): the first plan, when it is made.
    // The program's own GPU memory (NCCL's buffers) counts against the budget.
    const uint64_t own = config.program_gpu_bytes ? config.program_gpu_bytes() : 0;
    log_notice(
        "a plan {} is in force from launch {} ({} launches an iteration, budget {}{})",
        p->source == "replay" ? "from the trace" : "learned from the program", p->applied_from,
        p->period, config.budget.is_zero() ? std::string("none") : format_bytes(budget),
        own == 0 || config.budget.is_zero() ? std::string()
                                            : fmt::format(", {} of it the program's own GPU memory",
                                                          format_bytes(std::min(own, budget))));
  } else {
    log_info("advisor: applying the {} plan from launch {}", p->source, p->applied_from);
  }
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
  sweeps.start(p.applied_from);
}

// A relearned plan waits in next_plan until the plan in force has run up to its applied_from.
// It joins `plans` now: the launch path may hold it from then on, so it is never freed.
void AdvisorImpl::stage(std::unique_ptr<LivePlan> p) {
  index_plan(*p);
  p->source =
      relearn_after_learning ? "online (relearned once planned)" : "online (relearned in replay)";
  p->staged = true;
  // The launch path must not have reached applied_from before it can see the plan: the boundary
  // is taken again now, 16 launches clear of the last one (the store below follows at once).
  p->applied_from =
      boundary_at_or_after(p->base, p->period, words.launched.load(std::memory_order_acquire) + 16);
  plans.push_back(std::move(p));
  next_plan.store(plans.back().get(), std::memory_order_release);
  log_info("advisor: the plan learned from this process applies from launch {}",
           plans.back()->applied_from);
  timeline.note("plan relearned", launches_seen(), 0, plans.back()->applied_from);
}

// The advisor's cursor reached next_plan's applied_from: the launch path already takes it from
// there (on_step), and the plan before it has handled every launch below.
void AdvisorImpl::switch_to_next() {
  copier.stop("a relearned plan takes over", false);  // the new plan knows nothing of them
  LivePlan* q = next_plan.load(std::memory_order_relaxed);
  plan.store(q, std::memory_order_release);
  next_plan.store(nullptr, std::memory_order_release);
  relearning = false;
  relearned_at = q->applied_from;
  take_effect(*q);
  timeline.note("relearned plan in force", launches_seen(), 0, q->applied_from);
}

// Replay, at each iteration boundary g after the first applied iteration: if the iteration that
// ended skipped a noticeable share of its bytes (buffers not found in this process), learn this
// process's iteration while the replay plan runs on (once).
void AdvisorImpl::check_relearn(const LivePlan& p, uint64_t g) {
  const uint64_t skipped = std::exchange(skipped_bytes, 0);
  // A plan learned while the launch path evicted: learned from iterations whose launches were
  // held back by evictions, it can differ from the program's steady iteration (VGG-16: 9 bias
  // reductions carried a word pointing at a 3.1 GiB activation, seen only then; 1 GB more moved
  // each way, 12% slower). So learned again, once, from its second planned iteration.
  if (p.learned_evicting && !p.matcher && !relearn_from) {
    const uint64_t started = p.started_at.load(std::memory_order_relaxed);
    if (started != UINT64_MAX && g >= started + p.period) {
      relearning = true;
      relearn_from = g;
      relearn_after_learning = true;
      log_info("advisor: learning the iteration from launch {} again, now planned", g);
      timeline.note("relearning once planned", launches_seen(), 0, g);
    }
    return;
  }
  if (!p.matcher || relearn_from || !replay_should_relearn(skipped, p.plan)) {
    return;
  }
  relearning = true;
  relearn_from = g;
  relearn_skipped_bytes = skipped;
  timeline.note("relearning in replay", launches_seen(), 0, g);
  replay_found = {plan_buffers, plan_buffers_found};
  placement.settle();  // the arena came from the trace
  log_info(
      "replay: the iteration before launch {} skipped {} of actions on buffers not found in this "
      "process (the plan moves {} per iteration); learning this process's iteration to replace "
      "the plan",
      g, format_bytes(skipped),
      format_bytes(p.plan.bytes_prefetched_per_iteration + p.plan.bytes_evicted_per_iteration));
}

}  // namespace umswap::advisor
