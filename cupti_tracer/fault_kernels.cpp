#include "umswap/tracer/fault_kernels.h"

#include <algorithm>
#include <unordered_map>

namespace umswap::tracer {

FaultKernelReport faults_by_kernel(std::span<const StepSpan> steps,
                                   std::span<const uint64_t> fault_times, size_t keep) {
  FaultKernelReport report;
  report.faults = fault_times.size();
  std::vector<StepSpan> by_start;
  by_start.reserve(steps.size());
  for (const StepSpan& s : steps) {
    if (s.start_ns != 0 && s.end_ns >= s.start_ns) by_start.push_back(s);
  }
  std::sort(by_start.begin(), by_start.end(),
            [](const StepSpan& a, const StepSpan& b) { return a.start_ns < b.start_ns; });
  std::vector<uint64_t> times(fault_times.begin(), fault_times.end());
  std::sort(times.begin(), times.end());
  std::unordered_map<uint32_t, KernelFaults> counts;
  std::vector<StepSpan> running;  // started at or before the current fault, not yet known ended
  size_t next = 0;
  for (const uint64_t t : times) {
    while (next < by_start.size() && by_start[next].start_ns <= t)
      running.push_back(by_start[next++]);
    std::erase_if(running, [t](const StepSpan& s) { return s.end_ns < t; });
    if (running.empty()) {
      ++report.outside;
      continue;
    }
    for (const StepSpan& s : running) {
      KernelFaults& k = counts[s.name];
      if (k.faults++ == 0) {
        k.name = s.name;
        k.first_ns = t;
      }
    }
  }
  for (const auto& [name, k] : counts) report.by_kernel.push_back(k);
  std::sort(report.by_kernel.begin(), report.by_kernel.end(),
            [](const KernelFaults& a, const KernelFaults& b) {
              return a.faults != b.faults ? a.faults > b.faults : a.name < b.name;
            });
  if (report.by_kernel.size() > keep) report.by_kernel.resize(keep);
  return report;
}

}  // namespace umswap::tracer
