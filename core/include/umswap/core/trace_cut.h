// A trace cut after its first iterations: what `umswap record --iterations N` and the plan cache
// write, so that a trace of a long run stays the size of a few iterations. Pure.
#pragma once

#include "umswap/core/trace.h"

#include <cstdint>

namespace umswap::trace {

// The trace up to the end of its iteration `iterations` (from 1; the warm-up steps before the
// first iteration kept): steps, their accesses, the iterations and the lifetimes logged up to
// there; faults and transfers that started before the last kept step's GPU end (all of them when
// no kept step has a GPU time); totals the sum of the kept iterations' counters. Names, buffers,
// the detection and the rest are kept whole. A trace with `iterations` or fewer iterations, or
// `iterations` = 0, comes back unchanged. The result passes check_trace() when `t` does.
Trace first_iterations(const Trace& t, uint64_t iterations);

}  // namespace umswap::trace
