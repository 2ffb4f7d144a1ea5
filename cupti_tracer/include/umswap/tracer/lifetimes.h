// Slab lifetimes: the allocator's block events as the tracer logs them, and as the trace (and the
// planner, through it) sees them: by buffer and offset instead of by address.
//
// Pure; reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "umswap/allocator/placement.h"
#include "umswap/core/trace.h"

namespace umswap::tracer {

// A block of umswap's cudaMallocAsync slabs handed to the program (freed false) or given back
// (freed true), between two launches: `when` = the steps logged before it. The allocator's own
// type, so that the log feeds plan_placement() as it is.
using LifetimeEvent = BlockEvent;

// The events that lie inside one of `buffers` ((base, size) by buffer index, disjoint), as
// lifetimes of that buffer, in the events' order. Events outside every buffer, running past the
// end of theirs, or of 0 bytes are left out.
std::vector<trace::Lifetime> lifetimes_in(std::span<const LifetimeEvent> events,
                                          std::span<const std::pair<uint64_t, uint64_t>> buffers);

}  // namespace umswap::tracer
