#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "advisor_impl.h"
#include "umswap/advisor/advisor.h"
#include "umswap/allocator/drop_order.h"
#include "umswap/core/stats_schema.h"

namespace umswap::advisor {

nlohmann::json Advisor::stats(const tracer::RunSummary* summary) const {
  const AdvisorImpl& a = *impl_;
  const LivePlan* last = a.plans.empty() ? nullptr : a.plans.back().get();
  nlohmann::json advisor = {
      {stats_schema::advisor::kMode.name(), std::string(to_string(a.config.mode))},
      {stats_schema::advisor::kBudgetBytes.name(), a.budget},
      {stats_schema::advisor::kState.name(), a.state},
      {stats_schema::advisor::kFallback.name(),
       a.fallback.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.fallback)},
      {"plans", a.plans.size()},
      {"divergences", a.divergences},
      {stats_schema::advisor::kPrefetchedBytes.name(), a.prefetched_bytes},
      {stats_schema::advisor::kEvictedBytes.name(), a.evicted_bytes},
      {"prefetch_calls", a.prefetch_calls},
      {"evict_calls", a.evict_calls},
      {"failed_calls", a.failed_calls},
      {"stale_actions", a.stale_actions},
      {"late_events", a.late_events},
      {"late_start_events", a.late_start_events},
      {"opaque_calls", a.opaque_calls.load()},
      {stats_schema::advisor::kGraphLaunches.name(), a.graph_launches.load()},
      {"first_opaque_call",
       a.first_opaque.load() ? nlohmann::json(a.first_opaque.load()) : nlohmann::json(nullptr)},
      {stats_schema::advisor::kWaitStalls.name(), a.watchdog.stalls()},
      {"blocking_waits", a.words.blocking_waits.load()},
      {"blocking_timeouts", a.words.blocking_timeouts.load()},
      {"waits_placed", a.waits_placed.load()},
      {"evict_waits_placed", a.evict_waits_placed.load()},
      {"learn_evict", a.learn_path.stats_json()},
      {"resident_launches", a.resident.stats_json()},
      {"boundary_hold", a.boundary.stats_json()},
      {"launch_populates", a.launch_populates.load()},
      {"launch_populated_bytes", a.launch_populated_bytes.load()},
      {"launch_populate_call_seconds", a.launch_populate_call_ns.load() * 1e-9},
      {"launch_populate_longest_call_seconds", a.launch_populate_longest_ns.load() * 1e-9},
      {"launch_path_seconds", a.launch_path_ns.load() * 1e-9},
      {"prefetch_call_seconds", a.times.prefetch_call_s},
      {"evict_call_seconds", a.times.evict_call_s},
      {"longest_call_seconds", a.times.longest_call_s},
      {"planned_seconds", a.times.planned_s},
      {"apply_seconds", a.times.apply_s},
      {"tend_copies_seconds", a.times.tend_copies_s},
      {"event_wait_seconds", a.times.event_wait_s},
      {"scan_seconds", a.times.scan_s},
      {"take_seconds", a.times.take_s},
      {"managed_call_seconds", a.times.managed_call_s},
      {"copy_call_seconds", a.times.copy_call_s},
      {"most_launches_behind", a.most_behind},
      {"plan_buffers", a.plan_buffers},
      {"plan_buffers_found", a.plan_buffers_found},
      {"relearned_once_planned",
       a.relearn_after_learning
           ? nlohmann::json{{"from_launch", *a.relearn_from},
                            {"applied_from_launch", a.relearned_at ? nlohmann::json(a.relearned_at)
                                                                   : nlohmann::json(nullptr)}}
           : nlohmann::json(nullptr)},
      {"replay_relearned",
       a.relearn_from && !a.relearn_after_learning
           ? nlohmann::json{{"from_launch", *a.relearn_from},
                            {"skipped_bytes", a.relearn_skipped_bytes},
                            {"replay_plan_buffers", a.replay_found.first},
                            {"replay_plan_buffers_found", a.replay_found.second},
                            {"applied_from_launch", a.relearned_at ? nlohmann::json(a.relearned_at)
                                                                   : nlohmann::json(nullptr)}}
           : nlohmann::json(nullptr)},
      {stats_schema::advisor::kPrefetchWait.name(), a.config.prefetch_wait},
      {stats_schema::advisor::kEvictWait.name(), a.config.evict_wait},
  };
  if (a.config.evict_copy) {
    advisor[stats_schema::advisor::kEvictCopy.name()] = a.copier.stats_json(summary);
  }
  advisor["placement"] = a.placement.stats_json();
  advisor["timeline"] = a.timeline.to_json();
  // The first plan that took effect (its actions started): the iterations after it run planned,
  // whatever plans replace it.
  nlohmann::json first_in_force(nullptr);
  for (const auto& q : a.plans) {
    if (q->started_at.load() != UINT64_MAX) {
      first_in_force = q->applied_from;
      break;
    }
  }
  advisor[stats_schema::advisor::kFirstPlanAppliedFromLaunch.name()] = first_in_force;
  if (last) {
    advisor[stats_schema::advisor::kPlan.name()] = {
        {"source", last->source},
        {"period", last->period},
        {stats_schema::advisor::plan::kAppliedFromLaunch.name(), last->applied_from},
        {"started_at_launch", last->started_at.load() == UINT64_MAX
                                  ? nlohmann::json(nullptr)
                                  : nlohmann::json(last->started_at.load())},
        {"footprint_bytes", last->plan.footprint_bytes},
        {"bytes_prefetched_per_iteration", last->plan.bytes_prefetched_per_iteration},
        {"bytes_evicted_per_iteration", last->plan.bytes_evicted_per_iteration},
        {stats_schema::advisor::plan::kUnfitSteps.name(), last->plan.unfit_steps.size()},
        {stats_schema::advisor::plan::kLargestStepBytes.name(), last->plan.largest_step_bytes},
        {"dead_gap_bytes_per_iteration", last->plan.dead_gap_bytes},
        {"bytes_dropped_per_iteration", last->plan.bytes_dropped_per_iteration},
        {"peak_resident_at_frees_bytes", last->plan.peak_resident_at_frees_bytes},
        {"drops", last->plan.drops.size()}};
    advisor["discards_approved"] = a.discards_approved.load();
    if (const DropOrder* order = a.config.drop_order) {
      const DropOrder::Stats s = order->stats();
      advisor["drop_order"] = {{"pages_kept", s.pages_kept},
                               {"kept_by_evictions", s.kept_by_evictions},
                               {"kept_prefetched_after", s.kept_prefetched_after},
                               {"kept_eviction_last", s.kept_eviction_last},
                               {"pages_after_waits", s.pages_after_waits},
                               {"stream_waits", s.stream_waits},
                               {"kept_capturing", s.kept_capturing},
                               {"migrations_cut", s.migrations_cut},
                               {"pages_left_out", s.pages_left_out},
                               {"event_failures", s.event_failures},
                               {"stopped", s.stopped},
                               {"discards_pending", s.discards_pending},
                               {"migrations_pending", s.migrations_pending},
                               {"most_migrations_pending", s.most_migrations_pending}};
    }
    // The last launches' waits (LaunchWaitLog::rows_json).
    advisor["launch_waits"] = a.watchdog.launch_waits().rows_json();
    advisor["swept_bytes"] = a.sweeps.swept_bytes();
    advisor["sweeps"] = nlohmann::json::array();
    for (const auto& [launch, bytes] : a.sweeps.done()) {
      advisor["sweeps"].push_back({{"launch", launch}, {"bytes", bytes}});
    }
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
    advisor[stats_schema::advisor::kPeakResidentPlanBytes.name()] = last->plan.peak_resident_bytes;
  }
  if (summary && summary->has_unified_memory_counters) {
    advisor[stats_schema::advisor::kPeakResidentBytes.name()] = summary->peak_resident;
  }
  nlohmann::json j = {{stats_schema::kAdvisor.path, advisor}};
  if (summary) {
    j[stats_schema::kIterations.path] =
        iterations_json(*summary, [&](uint64_t first, uint64_t last_step) {
          const auto [learn_in, learn_out] = a.learn_path.sum(first, last_step);  // while learning
          return std::pair{sum_in(a.prefetched, first, last_step) + learn_in,
                           sum_in(a.evicted, first, last_step) + learn_out};
        });
    // Bytes umswap's own copies moved (UMSWAP_EVICT_COPY): on the link, but not in CUPTI's
    // unified-memory counters.
    if (a.config.evict_copy) {
      auto& its = j[stats_schema::kIterations.path];
      const auto& steps = summary->trace.iterations;
      for (size_t i = 0; i < its.size() && i < steps.size(); ++i) {
        const uint64_t first = steps[i].first_step, end = first + steps[i].step_count;
        its[i][stats_schema::iterations::kCopiedInBytes.name()] =
            sum_in(a.copier.copied_in(), first, end);
        its[i][stats_schema::iterations::kCopiedOutBytes.name()] =
            sum_in(a.copier.copied_out(), first, end);
        // How long the copies kept the link busy each way (CUPTI's times): out + in - both near
        // the wall time means the directions took turns; far below it, the copies waited.
        if (i < summary->iteration_copy_busy.size()) {
          const tracer::CopyBusy& b = summary->iteration_copy_busy[i];
          its[i]["copy_out_busy_ms"] = b.out_ns / 1e6;
          its[i]["copy_in_busy_ms"] = b.in_ns / 1e6;
          its[i]["copy_both_busy_ms"] = b.both_ns / 1e6;
        }
      }
    }
    // Peak GPU-resident bytes once the plan is in force: from its second iteration on (the
    // learning iterations fault in the whole footprint; the first planned one moves it out),
    // counted from where the advisor really started it.
    // The counted peak over the iterations whose first step passes `keep` (none: no figure).
    const auto peak_where = [&](const char* key, const auto& keep) {
      std::optional<uint64_t> peak;
      const auto& its = summary->trace.iterations;
      for (size_t i = 0; i < its.size() && i < summary->iteration_peak_resident.size(); ++i) {
        if (keep(its[i].first_step)) {
          peak = std::max(peak.value_or(0), summary->iteration_peak_resident[i]);
        }
      }
      if (peak && summary->has_unified_memory_counters) j["advisor"][key] = *peak;
    };
    const uint64_t started = last ? last->started_at.load() : UINT64_MAX;
    peak_where("peak_resident_applied_bytes", [&](uint64_t first_step) {
      return started != UINT64_MAX && first_step >= started + last->period;
    });
    // And before: the iterations that began before the last plan learned from scratch (not a
    // relearned one) was in force; all, without one.
    const LivePlan* learned = nullptr;
    for (const auto& q : a.plans) {
      if (!q->staged) learned = q.get();
    }
    const uint64_t learned_started = learned ? learned->started_at.load() : UINT64_MAX;
    peak_where("peak_resident_learning_bytes",
               [&](uint64_t first_step) { return first_step < learned_started; });
    if (learned) j["advisor"]["learned_plan_applied_from_launch"] = learned->applied_from;
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
    const auto [start, end] = tracer::iteration_window(its, i);
    nlohmann::json o = {
        {stats_schema::iterations::kIndex.name(), i},
        {stats_schema::iterations::kFirstStep.name(), it.first_step},
        {"steps", it.step_count},
        {stats_schema::iterations::kWallMs.name(), end > start ? (end - start) / 1e6 : 0.0},
        {stats_schema::iterations::kGpuPageFaults.name(), it.counters.gpu_page_faults},
        {stats_schema::iterations::kBytesHtod.name(), it.counters.bytes_htod},
        {stats_schema::iterations::kBytesDtoh.name(), it.counters.bytes_dtoh},
        {"thrashing_events", it.counters.thrashing_events},
    };
    if (summary.has_unified_memory_counters && i < summary.iteration_peak_resident.size()) {
      o[stats_schema::iterations::kPeakResidentBytes.name()] = summary.iteration_peak_resident[i];
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
      o[stats_schema::iterations::kPrefetchedBytes.name()] = in;
      o[stats_schema::iterations::kEvictedBytes.name()] = out_bytes;
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace umswap::advisor
