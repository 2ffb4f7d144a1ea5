// A trace's iterations: the one a replay plans from (the advisor's replay, and the plan cache,
// which keeps only traces that have one), and the trace cut after its first iterations (what
// `umswap record --iterations N` and the plan cache write, so that a trace of a long run stays
// the size of a few iterations). Pure.
#pragma once

#include "umswap/core/trace.h"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace umswap::trace {

// The iteration a replay plans from: the trace's last of its detected period, in phase with the
// first; nullopt when there is none (no period, no such iteration).
std::optional<size_t> replay_iteration(const Trace& t);

// The trace up to the end of its iteration `iterations` (from 1; the warm-up steps before the
// first iteration kept): steps, their accesses, the iterations and the lifetimes logged up to
// there; faults and transfers that started before the last kept step's GPU end (all of them when
// no kept step has a GPU time); totals the sum of the kept iterations' counters. Names, buffers,
// the detection and the rest are kept whole. A trace with `iterations` or fewer iterations, or
// `iterations` = 0, comes back unchanged. The result passes check_trace() when `t` does.
Trace first_iterations(const Trace& t, uint64_t iterations);

}  // namespace umswap::trace
