// Windows from the plan against moving at each launch (engine vmm, issue 38, stage 0:
// docs/lab/2026-12-01-vmm-windows-from-the-plan.md). Reads a trace that `umswap record` wrote,
// takes the iteration replay plans from, and for each budget (a share of the iteration's
// footprint) prints the planner's per-launch plan (bytes each way per iteration, launches at
// which it moves something: each a window under engine vmm) beside plan_windows() at each fill
// (segments, windows, bytes each way, against the per-launch plan). CPU only. Both with the
// trace's lifetimes (dead data dropped, not moved).
//
//   window_plan_bench TRACE [SHARES [FILLS [PERIOD]]]   e.g. window_plan_bench run.umtrace 0.5 0.6
//
// PERIOD: plan the last PERIOD launches before the end of the trace's last iteration instead
// (a trace whose iteration is an inner loop: the CuPy chain's keys repeat every 2 launches, its
// layers' data every 48).
//
// Exit: 0, 1 when the trace cannot be read or has no iteration, 2 for bad arguments.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "share_list.h"
#include "umswap/advisor/planner.h"
#include "umswap/advisor/replay.h"
#include "umswap/advisor/window_plan.h"
#include "umswap/core/trace_file.h"
#include "umswap/core/trace_iterations.h"

namespace {

using umswap::bench::gb;
using umswap::bench::parse_share_list;

int report(const umswap::trace::Trace& trace, size_t iteration, const std::vector<double>& shares,
           const std::vector<double>& fills, const char* path);

}  // namespace

int main(int argc, char** argv) {
  using namespace umswap;
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "usage: window_plan_bench TRACE [SHARES [FILLS [PERIOD]]]\n");
    return 2;
  }
  uint64_t period = 0;
  if (argc > 4) {
    char* end = nullptr;
    period = std::strtoull(argv[4], &end, 10);
    if (argv[4][0] < '0' || argv[4][0] > '9' || *end != '\0' || period == 0) {
      std::fprintf(stderr, "window_plan_bench: PERIOD is a number of launches (> 0)\n");
      return 2;
    }
  }
  std::vector<double> shares, fills;
  if (!parse_share_list(argc > 2 ? argv[2] : "0.25,0.5", &shares) ||
      !parse_share_list(argc > 3 ? argv[3] : "0.3,0.45,0.6,0.75,0.9", &fills)) {
    std::fprintf(stderr, "window_plan_bench: SHARES and FILLS are numbers in (0, 1], commas\n");
    return 2;
  }
  std::string error;
  std::optional<trace::Trace> t = read_trace_file(argv[1], &error);
  if (!t) {
    std::fprintf(stderr, "window_plan_bench: %s: %s\n", argv[1], error.c_str());
    return 1;
  }
  std::optional<size_t> iteration = trace::replay_iteration(*t);
  if (!iteration || t->iterations.empty()) {
    std::fprintf(stderr, "window_plan_bench: %s: no complete iteration\n", argv[1]);
    return 1;
  }
  if (period) {
    const trace::Iteration& last = t->iterations.back();
    const uint64_t end = last.first_step + last.step_count;
    if (period > end) {
      std::fprintf(stderr,
                   "window_plan_bench: PERIOD %llu is longer than the trace's %llu launches\n",
                   static_cast<unsigned long long>(period), static_cast<unsigned long long>(end));
      return 2;
    }
    t->iterations.push_back({end - period, period, 0, 0, {}});
    iteration = t->iterations.size() - 1;
  }
  try {
    return report(*t, *iteration, shares, fills, argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "window_plan_bench: %s: %s\n", argv[1], e.what());
    return 1;
  }
}

namespace {

int report(const umswap::trace::Trace& trace, size_t iteration, const std::vector<double>& shares,
           const std::vector<double>& fills, const char* path) {
  using namespace umswap;
  // The footprint: the iteration planned with room for everything.
  advisor::PlanInput in =
      advisor::plan_input_from_trace(trace, iteration, uint64_t{1} << 61, false);
  const uint64_t footprint = advisor::make_plan(in).footprint_bytes;
  std::printf("%s: iteration %zu, %zu launches, footprint %.2f GB\n", path, iteration,
              in.steps.size(), gb(footprint));
  for (const double share : shares) {
    in = advisor::plan_input_from_trace(trace, iteration, uint64_t(share * double(footprint)));
    const advisor::Plan per_launch = advisor::make_plan(in);
    std::printf(
        "budget %.0f%% (%.2f GB): per launch %.2f GB in, %.2f GB out, moves at %u launches\n",
        share * 100, gb(in.budget_bytes), gb(per_launch.bytes_prefetched_per_iteration),
        gb(per_launch.bytes_evicted_per_iteration), advisor::steps_with_actions(per_launch));
    for (const double fill : fills) {
      const advisor::WindowPlan w = advisor::plan_windows(in, {fill});
      const double in_ratio = per_launch.bytes_prefetched_per_iteration
                                  ? double(w.plan.bytes_prefetched_per_iteration) /
                                        double(per_launch.bytes_prefetched_per_iteration)
                                  : 0.0;
      std::printf(
          "  fill %.2f: %zu segments, %u windows, %.2f GB in, %.2f GB out (%.2fx the per-launch "
          "plan's), %zu unfit segments, %u frees left out\n",
          fill, w.segment_start.size(), w.windows, gb(w.plan.bytes_prefetched_per_iteration),
          gb(w.plan.bytes_evicted_per_iteration), in_ratio, w.plan.unfit_steps.size(),
          w.frees_left_out);
    }
  }
  return 0;
}

}  // namespace
