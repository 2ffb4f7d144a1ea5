// The program's streams a plan orders itself against: the advisor's barrier at a plan's first
// launch records an event on each and makes the advisor's stream wait for them, so that the
// plan's first moves come after the GPU has run what was submitted before. An online plan knows
// the streams of the iteration it was learned from; a replay plan's trace names none of this
// process, so it takes those of the steps logged before its first launch.
//
// Thread: any (reads the step log through its port).
#pragma once

#include <cstdint>
#include <vector>

#include "umswap/tracer/tracer_ports.h"

namespace umswap::advisor {

// The distinct streams (sorted) of the last `count` steps logged before step `seen` (at most
// kMostStepsForStreams of them): empty when there are none or the log cannot give them.
inline constexpr uint64_t kMostStepsForStreams = uint64_t{1} << 16;
std::vector<uint64_t> streams_before(const tracer::StepLogReader& steps, uint64_t seen,
                                     uint64_t count);

}  // namespace umswap::advisor
