// The trace assembled at finish(): the buffers the steps touched, the iterations (marked or
// detected), each step's accesses and GPU times, the unified-memory counters, transfers and
// faults, and the slab lifetimes within the traced buffers.
#include <cupti.h>

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tracer_impl.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/extents.h"
#include "umswap/tracer/launch_log.h"
#include "umswap/tracer/lifetimes.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap::tracer::detail {

trace::Trace Tracer::assemble(StepRecorder::Recording recording) {
  const LaunchLog& log = recorder()->log();  // complete: stop() ended recording
  const uint64_t steps = log.size();
  trace::Trace t;
  t.program = config_.program;
  t.pid = static_cast<uint64_t>(getpid());
  t.names = std::move(recording.names);
  // Buffers: every one a step touched, in allocation order.
  std::unordered_map<uint64_t, uint32_t> index_of;
  for (const BufferRecord& r : recording.buffers) {
    index_of[r.id] = static_cast<uint32_t>(t.buffers.size());
    t.buffers.push_back({r.id, r.size, r.call_site, r.base, static_cast<uint8_t>(r.api),
                         !registry_->contains(r.base)});
  }
  // Iterations: between markers if the program gave any, else from the period of the whole
  // recorded sequence (warm-up steps first; a final partial iteration is left out).
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  const std::vector<uint64_t>& marks = recording.marks;
  t.detection = std::move(recording.detection);
  if (!marks.empty()) {
    for (size_t m = 0; m + 1 < marks.size(); ++m) {
      spans.emplace_back(marks[m], marks[m + 1] - marks[m]);
    }
  } else if (t.detection.period > 0) {
    for (uint64_t first = t.detection.warmup_steps; first + t.detection.period <= steps;
         first += t.detection.period) {
      spans.emplace_back(first, t.detection.period);
    }
  }
  // Steps and their accesses (byte extents within each buffer), each iteration's measured within
  // that iteration, as the online advisor measures the one it learns (the warm-up and a final
  // partial iteration are chunks of their own).
  std::vector<std::span<const PointerHit>> step_hits;
  step_hits.reserve(steps);
  for (uint64_t i = 0; i < steps; ++i) step_hits.push_back(log.hits(log.step(i)));
  std::vector<uint64_t> boundaries;
  for (const auto& [first, count] : spans) {
    if (first > 0 && (boundaries.empty() || boundaries.back() < first)) boundaries.push_back(first);
    boundaries.push_back(first + count);
  }
  std::vector<uint64_t> step_first;
  compute_extents_by_chunk(
      step_hits, boundaries, [&](BufferId id) { return index_of.at(id); }, t.accesses, step_first);
  std::lock_guard lock(activity_mutex_);
  t.steps.reserve(steps);
  for (uint64_t i = 0; i < steps; ++i) {
    const LoggedStep& s = log.step(i);
    trace::Step step;
    step.kind = s.kind;
    step.name = s.key;
    step.stream = s.stream;
    step.first_access = step_first[i];
    step.access_count = static_cast<uint32_t>(step_first[i + 1] - step_first[i]);
    if (auto it = kernel_times_.find(s.correlation); it != kernel_times_.end()) {
      step.start_ns = it->second.first;
      step.end_ns = it->second.second;
    }
    t.steps.push_back(step);
  }
  for (const auto& [first, count] : spans) {
    trace::Iteration it;
    it.first_step = first;
    it.step_count = count;
    it.start_ns = UINT64_MAX;
    for (uint64_t i = first; i < first + count; ++i) {
      if (t.steps[i].start_ns) it.start_ns = std::min(it.start_ns, t.steps[i].start_ns);
      it.end_ns = std::max(it.end_ns, t.steps[i].end_ns);
    }
    if (it.start_ns == UINT64_MAX) it.start_ns = 0;
    t.iterations.push_back(it);
  }
  // Unified-memory counters: totals, per iteration by time, faults for the timeline.
  auto find_iteration = [&](uint64_t time) -> trace::Iteration* {
    for (auto& it : t.iterations) {
      if (it.start_ns && time >= it.start_ns && time <= it.end_ns) return &it;
    }
    return nullptr;
  };
  const auto snapshot_index = [&](uint64_t address) -> uint32_t {
    for (size_t b = 0; b < t.buffers.size(); ++b) {
      if (address - t.buffers[b].base < t.buffers[b].size) return static_cast<uint32_t>(b);
    }
    return UINT32_MAX;
  };
  // Transfers for the timeline: the driver's migrations (a prefetch call's: the advisor's
  // prefetches and evictions; the others: faults, the driver's own evictions) and umswap's own
  // copies (first), each with CUPTI's GPU times; at most kMaxTransfers of them (8.9 MB).
  constexpr size_t kMaxTransfers = 1 << 18;
  const auto add_transfer = [&](uint64_t start, uint64_t end, uint64_t address, uint64_t bytes,
                                bool to_gpu, uint8_t kind) {
    if (t.transfers.size() >= kMaxTransfers || start == 0) return;
    t.transfers.push_back({start, std::max(start, end), address, bytes, to_gpu, kind});
  };
  for (const OwnCopy& c : own_copies_) {
    if (const auto k = kernel_times_.find(c.correlation); k != kernel_times_.end()) {
      add_transfer(k->second.first, k->second.second, c.address, c.length, c.to_gpu,
                   trace::Transfer::copy);
    }
  }
  for (const UmRecord& u : um_records_) {
    trace::Iteration* it = find_iteration(u.start);
    auto add = [&](uint64_t trace::Counters::*field) {
      t.totals.*field += u.value;
      if (it) it->counters.*field += u.value;
    };
    if (u.own) continue;  // moved no bytes
    switch (u.kind) {
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH: {
        const bool in = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD;
        add(in ? &trace::Counters::bytes_htod : &trace::Counters::bytes_dtoh);
        // For transfers, flags is the migration's cause.
        add_transfer(u.start, u.end, u.address, u.value, in,
                     u.flags == CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER
                         ? trace::Transfer::prefetch_call
                         : trace::Transfer::driver);
        break;
      }
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        add(&trace::Counters::gpu_page_faults);
        if (t.faults.size() < (1u << 20)) {
          t.faults.push_back(
              {u.start, u.address, snapshot_index(u.address), static_cast<uint8_t>(u.flags)});
        }
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        add(&trace::Counters::thrashing_events);
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT:
        add(&trace::Counters::cpu_page_faults);
        break;
      default:
        break;
    }
  }
  std::stable_sort(
      t.transfers.begin(), t.transfers.end(),
      [](const trace::Transfer& a, const trace::Transfer& b) { return a.start_ns < b.start_ns; });
  // Lifetimes inside the traced buffers (slabs); all logged while recording, so none is past
  // the last step.
  {
    std::vector<std::pair<uint64_t, uint64_t>> buffers;
    for (const trace::Buffer& b : t.buffers) buffers.emplace_back(b.base, b.size);
    std::lock_guard lifetimes(lifetime_mutex_);
    t.lifetimes = lifetimes_in(lifetimes_, buffers);
  }
  t.dropped_records = dropped_records_.load() + recording.dropped_steps;
  return t;
}

}  // namespace umswap::tracer::detail
