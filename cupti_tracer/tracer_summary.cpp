// The run summary for the stats file, made from the assembled trace at finish(): GPU-resident
// bytes counted from the records (peaks by iteration, the buffers and step at each peak), the
// kernels that took faults, and UMSWAP_EVICT_COPY's copies checked against the steps.
#include <cupti.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tracer_impl.h"
#include "umswap/core/log.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/copy_clashes.h"
#include "umswap/tracer/fault_kernels.h"
#include "umswap/tracer/residency.h"

namespace umswap::tracer::detail {

// UMSWAP_EVICT_COPY: umswap's copies against the steps that reach their pages, on the GPU's clock
// (copy_clashes.h). Copies without CUPTI's record are left out.
void Tracer::check_own_copies(const trace::Trace& t, RunSummary& summary) {
  std::vector<OwnCopySpan> copies;
  {
    std::lock_guard lock(activity_mutex_);
    if (own_copies_.empty()) return;
    if (own_copies_dropped_ > 0) {
      log_warning(
          "UMSWAP_EVICT_COPY: {} of umswap's copies past the first {} were not kept; the check of "
          "copies against the program's accesses covers the first ones only",
          own_copies_dropped_, own_copies_.size());
    }
    copies.reserve(own_copies_.size());
    for (const OwnCopy& c : own_copies_) {
      if (const auto it = kernel_times_.find(c.correlation); it != kernel_times_.end()) {
        copies.push_back({c.address, c.length, c.to_gpu, it->second.first, it->second.second});
      }
    }
  }
  std::vector<StepAccessSpan> accesses;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const trace::Step& s = t.steps[i];
    if (s.start_ns == 0) continue;
    for (uint64_t a = s.first_access; a < s.first_access + s.access_count; ++a) {
      const trace::Access& x = t.accesses[a];
      const uint64_t lo = t.buffers[x.buffer].base + x.offset;
      accesses.push_back({i, s.start_ns, s.end_ns, lo, lo + x.length});
    }
  }
  summary.copy_clashes = find_copy_clashes(copies, accesses);
  {
    std::vector<FaultAt> faults;
    faults.reserve(t.faults.size());
    for (const trace::Fault& f : t.faults) {
      faults.push_back({f.time_ns, f.address, f.access, f.buffer});
    }
    UnforeseenReport u = find_unforeseen_faults(copies, faults);
    for (const UnforeseenAccess& a : u.first) {
      std::vector<std::string>& steps = summary.unforeseen_steps.emplace_back();
      // The steps running on the GPU then (the faulting kernel is among them).
      for (size_t i = 0; i < t.steps.size() && steps.size() < 4; ++i) {
        const trace::Step& s = t.steps[i];
        if (s.start_ns && s.start_ns <= a.time_ns && a.time_ns <= s.end_ns) {
          steps.push_back(fmt::format(
              "step {} {}", i, s.name < t.names.size() ? t.names[s.name].substr(0, 160) : "?"));
        }
      }
    }
    if (u.outs_before_back > 0) {
      log_warning(
          "UMSWAP_EVICT_COPY: {} copies to the host of pages began before those pages' copy back "
          "had ended: they may have saved pages not yet filled, and the program's results may "
          "have changed (the stats file's copy_check unforeseen names the pages)",
          u.outs_before_back);
    }
    if (u.faults > 0) {
      log_warning(
          "UMSWAP_EVICT_COPY: {} GPU page faults hit pages while umswap held them on the host "
          "(discarded on the GPU): a kernel reached memory through a pointer umswap could not "
          "see, and the program's results may have changed (the stats file's copy_check "
          "unforeseen names the first)",
          u.faults);
    }
    summary.unforeseen = std::move(u);
  }
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (size_t i = 0; i < t.iterations.size(); ++i) {
    windows.push_back(iteration_window(t.iterations, i));
  }
  summary.iteration_copy_busy = copy_busy(copies, windows);
  // The last iteration but one that copied (the last may be cut short by the program's end).
  size_t pick = SIZE_MAX, seen = 0;
  for (size_t i = summary.iteration_copy_busy.size(); i-- > 0;) {
    const CopyBusy& b = summary.iteration_copy_busy[i];
    if (b.out_ns + b.in_ns > 0 && ++seen == 2) {
      pick = i;
      break;
    }
  }
  if (pick != SIZE_MAX) {
    const auto [lo, hi] = windows[pick];
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const trace::Step& st : t.steps) {
      if (st.start_ns && st.end_ns > lo && st.start_ns < hi)
        spans.emplace_back(st.start_ns, st.end_ns);
    }
    summary.copy_idle_iteration = pick;
    for (const CopyIdleGap& g : copy_idle_gaps(copies, spans, lo, hi, 12)) {
      RunSummary::IdleGap& out = summary.copy_idle_gaps.emplace_back();
      out.gap = g;
      uint64_t first_start = UINT64_MAX;
      for (size_t i = 0; i < t.steps.size(); ++i) {
        const uint64_t st = t.steps[i].start_ns;
        if (st >= g.start_ns && st < g.start_ns + g.length_ns && st < first_start) {
          out.first_step = i;
          first_start = st;
        }
      }
      if (out.first_step != UINT64_MAX && t.steps[out.first_step].name < t.names.size()) {
        out.first_name = t.names[t.steps[out.first_step].name].substr(0, 120);
      }
    }
  }
  for (const CopyClash& c : summary.copy_clashes->first) {
    const trace::Step& s = t.steps[c.step];
    summary.copy_clash_names.push_back(s.name < t.names.size() ? t.names[s.name] : "?");
  }
  if (summary.copy_clashes->harmful > 0) {
    log_warning(
        "UMSWAP_EVICT_COPY: {} steps reached a page while it was discarded or coming back "
        "(the stats file's copy_check names the first)",
        summary.copy_clashes->harmful);
  }
}

// GPU-resident bytes counted from what the tracer saw, in time order (residency.h): transfers
// each way, the 2 MiB chunk around a GPU fault (within its allocation), umswap's own discards
// and populating prefetches (note_residency), and the extents each launched step touches, from
// its GPU start. Ranges are rounded out to 64 KiB, the smallest unit the driver migrates. The
// blocks' lifetimes say how much of each iteration's peak lay in freed memory.
void Tracer::summarize(trace::Trace t) {
  constexpr uint64_t kPage = 64 << 10;
  constexpr uint64_t kChunk = 2 << 20;
  auto summary = std::make_unique<RunSummary>();
  summary->has_unified_memory_counters = um_counters_.load(std::memory_order_acquire);
  summary->layouts_prepared = prepared_count_.load(std::memory_order_relaxed);
  summary->layouts_read_in_callback = read_in_callback_.load(std::memory_order_relaxed);
  summary->layouts_unknown = layouts_unknown_.load(std::memory_order_relaxed);
  summary->layout_error = layout_error_.load(std::memory_order_relaxed);
  summary->first_uses = first_use_waits_.load(std::memory_order_relaxed);
  summary->captured_calls = captured_calls_.load(std::memory_order_relaxed);
  std::vector<ResidencyEvent> events;
  auto push = [&](uint64_t when, uint64_t lo, uint64_t hi, bool on_gpu) {
    events.push_back({when, lo / kPage * kPage, (hi + kPage - 1) / kPage * kPage, on_gpu});
  };
  // Live blocks first, so that at equal times a block is allocated before the step that touches
  // it: slab blocks between allocation and free (placed at the GPU start of the next step with
  // one); a buffer without blocks is live throughout.
  std::vector<uint64_t> step_time(t.steps.size() + 1, UINT64_MAX);
  for (size_t i = t.steps.size(); i-- > 0;) {
    step_time[i] = t.steps[i].start_ns ? t.steps[i].start_ns : step_time[i + 1];
  }
  std::vector<bool> has_blocks(t.buffers.size(), false);
  for (const trace::Lifetime& l : t.lifetimes) {
    if (l.buffer >= t.buffers.size()) continue;
    has_blocks[l.buffer] = true;
    const uint64_t lo = t.buffers[l.buffer].base + l.offset;
    events.push_back({step_time[std::min<uint64_t>(l.before_step, t.steps.size())], lo,
                      lo + l.length, !l.freed, true});
  }
  for (size_t b = 0; b < t.buffers.size(); ++b) {
    if (!has_blocks[b]) {
      events.push_back({0, t.buffers[b].base, t.buffers[b].base + t.buffers[b].size, true, true});
    }
  }
  {
    std::vector<std::pair<uint64_t, uint64_t>> bases;  // (base, size) of traced buffers
    for (const trace::Buffer& buf : t.buffers) bases.emplace_back(buf.base, buf.size);
    std::sort(bases.begin(), bases.end());
    std::vector<StepTime> times(t.steps.size());
    for (size_t i = 0; i < t.steps.size(); ++i) times[i] = {t.steps[i].start_ns, t.steps[i].end_ns};
    std::lock_guard lock(activity_mutex_);
    for (const UmRecord& u : um_records_) {
      const bool in = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD;
      const bool out = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH;
      const bool fault = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT;
      if (!in && !out && !fault) continue;
      uint64_t when = u.own ? own_record_time(times, u.before_step, out, u.start) : u.start;
      if (u.own && u.copy) {
        // Behind or ahead of a copy of umswap's own: where CUPTI saw that copy run.
        if (auto it = kernel_times_.find(u.copy); it != kernel_times_.end()) {
          when = out ? it->second.second : it->second.first;
        }
      }
      if (!fault) {
        push(when, u.address, u.address + std::max<uint64_t>(u.value, 1), in);
        continue;
      }
      // A fault populates or migrates up to a 2 MiB chunk (the driver's large page), within the
      // allocation it falls in.
      auto b = std::upper_bound(
          bases.begin(), bases.end(), u.address,
          [](uint64_t a, const std::pair<uint64_t, uint64_t>& r) { return a < r.first; });
      if (b != bases.begin() && u.address - std::prev(b)->first < std::prev(b)->second) {
        --b;
        const uint64_t chunk = u.address & ~(kChunk - 1);
        push(when, std::max(chunk, b->first), std::min(chunk + kChunk, b->first + b->second), true);
      } else {
        push(when, u.address, u.address + 1, true);
      }
    }
  }
  for (const trace::Step& s : t.steps) {
    if (s.start_ns == 0) continue;
    for (uint64_t a = s.first_access; a < s.first_access + s.access_count; ++a) {
      const trace::Access& x = t.accesses[a];
      const uint64_t lo = t.buffers[x.buffer].base + x.offset;
      push(s.start_ns, lo, lo + x.length, true);
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (const trace::Iteration& it : t.iterations) windows.emplace_back(it.start_ns, it.end_ns);
  constexpr size_t kTopBuffers = 6;
  summary->iteration_peak_buffers.resize(windows.size());
  const auto at_peak = [&](size_t w, const ResidentSet& resident, const ResidentSet& live) {
    std::vector<RunSummary::BufferShare> shares;
    for (uint32_t b = 0; b < t.buffers.size(); ++b) {
      const uint64_t lo = t.buffers[b].base, hi = lo + t.buffers[b].size;
      if (const uint64_t r = resident.bytes_within(lo, hi)) {
        shares.push_back({b, r, live.bytes_within(lo, hi), {}, {}});
      }
    }
    const size_t top = std::min(kTopBuffers, shares.size());
    std::partial_sort(shares.begin(), shares.begin() + static_cast<ptrdiff_t>(top), shares.end(),
                      [](const auto& a, const auto& b) { return a.resident > b.resident; });
    shares.resize(top);
    if (!shares.empty()) {
      const uint64_t lo = t.buffers[shares[0].buffer].base;
      const uint64_t hi = lo + t.buffers[shares[0].buffer].size;
      for (auto [set, out] : {std::pair{&resident, &shares[0].resident_ranges},
                              std::pair{&live, &shares[0].live_ranges}}) {
        for (const auto& [a, b] : set->ranges_within(lo, hi, 64)) out->emplace_back(a - lo, b - a);
      }
    }
    summary->iteration_peak_buffers[w] = std::move(shares);
  };
  ResidencyPeaks peaks = count_residency(std::move(events), windows, at_peak);
  check_own_copies(t, *summary);
  // At each peak, the step that began last at or before it (steps by GPU start).
  std::vector<std::pair<uint64_t, uint64_t>> by_start;  // (start_ns, step)
  for (size_t i = 0; i < t.steps.size(); ++i) {
    if (t.steps[i].start_ns != 0) by_start.emplace_back(t.steps[i].start_ns, i);
  }
  std::sort(by_start.begin(), by_start.end());
  for (const uint64_t when : peaks.when_by_window) {
    const auto after =
        std::upper_bound(by_start.begin(), by_start.end(), std::pair{when, uint64_t{UINT64_MAX}});
    summary->iteration_peak_step.push_back(
        when != 0 && after != by_start.begin() ? std::prev(after)->second : UINT64_MAX);
  }
  {
    // Which kernels took the faults (fault_kernels.h).
    std::vector<StepSpan> spans;
    spans.reserve(t.steps.size());
    for (const trace::Step& s : t.steps) spans.push_back({s.start_ns, s.end_ns, s.name});
    std::vector<uint64_t> fault_times;
    fault_times.reserve(t.faults.size());
    for (const trace::Fault& f : t.faults) fault_times.push_back(f.time_ns);
    // Every kernel that faulted (the stats show the first few and check them all).
    summary->fault_kernels = faults_by_kernel(spans, fault_times, SIZE_MAX);
  }
  summary->peak_resident = peaks.overall;
  summary->iteration_peak_resident = std::move(peaks.by_window);
  summary->iteration_peak_resident_free = std::move(peaks.free_by_window);
  summary->trace = std::move(t);
  summary_ = std::move(summary);
}

}  // namespace umswap::tracer::detail

namespace umswap::tracer {

std::pair<uint64_t, uint64_t> iteration_window(const std::vector<trace::Iteration>& iterations,
                                               size_t i) {
  const trace::Iteration& it = iterations[i];
  if (!it.start_ns) return {0, 0};
  const uint64_t end = i + 1 < iterations.size() && iterations[i + 1].start_ns
                           ? iterations[i + 1].start_ns
                           : it.end_ns;
  return {it.start_ns, end};
}

}  // namespace umswap::tracer
