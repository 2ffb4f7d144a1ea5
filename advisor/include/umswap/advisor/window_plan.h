// Windows from the plan (engine vmm, issue 38; docs/lab/2026-12-01-vmm-windows-from-the-plan.md,
// stage 0). Under engine vmm every move between GPU and host chunks needs a window: the program
// held on every stream and the GPU drained, because a remap that races a kernel kills the
// context. Moving at each launch that needs data costs a window per launch (thousands an
// iteration, measured). So the iteration is cut into segments, runs of consecutive steps whose
// distinct blocks fit in `fill` of the budget, and the planner runs over the segments as its
// steps: every move then falls on a segment boundary, where one window makes all of them.
//
// Lifetimes (PlanInput::lifetimes) go to segment boundaries so that no live byte looks dead: an
// allocation moves to the start of the segment of its first launch, a free to the end of its
// segment. A free whose bytes a later allocation takes again within the same segment is left out
// (the two tensors' bytes stay allocated across it): at segment granularity the first tensor's
// free would otherwise end the second's life.
//
// Pure: a function of its arguments; reentrant. Throws std::invalid_argument for a fill outside
// (0, 1], and what make_plan() throws.
#pragma once

#include <cstdint>
#include <vector>

#include "umswap/advisor/planner.h"

namespace umswap::advisor {

struct WindowOptions {
  // A segment's distinct blocks take at most this share of the budget; a step whose own blocks
  // take more is a segment by itself (over the budget: unfit, as in make_plan()).
  double fill = 0.6;
};

struct WindowPlan {
  std::vector<uint32_t> segment_start;       // the first step of each segment, ascending; [0] = 0
  PlanInput segments;                        // the input with segment s as step s
  uint32_t frees_left_out = 0;               // frees whose bytes were taken again in their segment
  Plan plan;                                 // make_plan(segments)
  uint32_t windows = 0;                      // segments at whose start the plan moves something
  uint32_t segment_of(uint32_t step) const;  // which segment a step is in
};

WindowPlan plan_windows(const PlanInput& in, const WindowOptions& options = {});

// The steps at which `plan` moves something (distinct Action::at_step): a plan's windows under
// engine vmm when its steps are segments, one a launch when they are launches.
uint32_t steps_with_actions(const Plan& plan);

}  // namespace umswap::advisor
