#include "umswap/core/trace_iterations.h"

#include <algorithm>
#include <cstddef>

namespace umswap::trace {

std::optional<size_t> replay_iteration(const Trace& t) {
  const uint64_t p = t.detection.period;
  if (p == 0 || t.iterations.empty()) return std::nullopt;
  const uint64_t first = t.iterations.front().first_step;
  for (size_t i = t.iterations.size(); i-- > 0;) {
    const Iteration& it = t.iterations[i];
    if (it.step_count == p && it.first_step >= first && (it.first_step - first) % p == 0) return i;
  }
  return std::nullopt;
}

Trace first_iterations(const Trace& t, uint64_t iterations) {
  if (iterations == 0 || t.iterations.size() <= iterations) return t;
  const Iteration& last = t.iterations[iterations - 1];
  const uint64_t steps = std::min<uint64_t>(last.first_step + last.step_count, t.steps.size());
  Trace out;
  out.program = t.program;
  out.pid = t.pid;
  out.dropped_records = t.dropped_records;
  out.detection = t.detection;
  out.names = t.names;
  out.buffers = t.buffers;
  out.steps.assign(t.steps.begin(), t.steps.begin() + static_cast<std::ptrdiff_t>(steps));
  uint64_t accesses = 0;
  uint64_t gpu_end = 0;
  for (const Step& s : out.steps) {
    accesses = std::max(accesses, s.first_access + s.access_count);
    gpu_end = std::max(gpu_end, s.end_ns);
  }
  out.accesses.assign(t.accesses.begin(),
                      t.accesses.begin() + static_cast<std::ptrdiff_t>(accesses));
  for (size_t i = 0; i < iterations; ++i) {
    out.iterations.push_back(t.iterations[i]);
    const Counters& c = t.iterations[i].counters;
    out.totals.gpu_page_faults += c.gpu_page_faults;
    out.totals.bytes_htod += c.bytes_htod;
    out.totals.bytes_dtoh += c.bytes_dtoh;
    out.totals.thrashing_events += c.thrashing_events;
    out.totals.cpu_page_faults += c.cpu_page_faults;
  }
  for (const Lifetime& l : t.lifetimes) {
    if (l.before_step <= steps) out.lifetimes.push_back(l);
  }
  for (const Fault& f : t.faults) {
    if (gpu_end == 0 || f.time_ns <= gpu_end) out.faults.push_back(f);
  }
  for (const Transfer& x : t.transfers) {
    if (gpu_end == 0 || x.start_ns <= gpu_end) out.transfers.push_back(x);
  }
  return out;
}

}  // namespace umswap::trace
