// What `umswap report` prints and what `umswap timeline` writes, computed from a trace. Pure
// functions: data in, text or JSON out; nothing is read, written or printed here.
//
// Precondition of both: `trace` is consistent (check_trace() in trace_file.h passes), as every
// trace read_trace_file() returns is. Names are copied into the JSON byte for byte and may not be
// valid UTF-8: dump it with nlohmann::json::error_handler_t::replace.
#pragma once

#include "umswap/core/trace.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <utility>

namespace umswap {

// A human-readable report: iterations (count, detection source, period, confidence, warm-up),
// steps per iteration, the top kernels by launches, buffers (count, footprint, largest), the
// working set of one step (max and median bytes touched), and per iteration the bytes touched
// against the bytes of the buffers ("segments") they lie in, faults and bytes moved each way,
// with totals; dropped CUPTI records. Lines are at most 100 columns (long kernel names are cut).
std::string render_report(const trace::Trace& trace);

// Track (tid) convention of the timeline, all in process kTimelinePid. Streams get
// kTimelineFirstStreamTid, +1, ... in the order they first appear in the trace. The trace's
// transfers (GPU clock) are "X" events: to the GPU on kTimelineAdvisorPrefetchTid ("to the GPU"),
// to the host on kTimelineAdvisorEvictTid ("to the host"), named "umswap copy in/out",
// "prefetch"/"evict" (a prefetch call's migration: the advisor's) or "driver in/out" (faults and
// the driver's own evictions), with args {"address", "bytes", and "buffer", "id", "offset" when
// the address lies in a buffer}.
inline constexpr int kTimelinePid = 1;
inline constexpr int kTimelineIterationsTid = 1;
inline constexpr int kTimelineFaultsTid = 2;
inline constexpr int kTimelineAdvisorPrefetchTid = 3;
inline constexpr int kTimelineAdvisorEvictTid = 4;
inline constexpr int kTimelineFirstStreamTid = 10;

// A Chrome trace / Perfetto JSON object: {"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": {...}}. Times ("ts", "dur") are microseconds from the earliest event drawn.
//  - "M" metadata events name the process and each track and fix the tracks' order.
//  - one "X" event per step with GPU start and end times, on its stream's track: name = kernel
//    name (or "memcpy HtoD", ...), cat = kernel|memcpy|memset, args = step index, iteration, and
//    the buffers touched (index, id, offset, bytes).
//  - one "X" event per iteration on the iterations track, spanning its steps' GPU times (host
//    times when no step has GPU times), args = steps and unified-memory counters.
//  - one "i" (instant) event per GPU page fault on the faults track (drawn only on the GPU
//    clock), args = address, buffer, access type.
// Steps without GPU times are not drawn (their times would be invented); "otherData" counts them
// ("steps_without_gpu_times") and says so in "note", and names the clock used ("clock").
// With `iterations` (first, last; both < trace.iterations.size(), first <= last), only those
// iterations, their steps, and the faults and transfers within their span are drawn
// ("otherData.iterations" names them); the rest of the run is left out.
nlohmann::json render_timeline(
    const trace::Trace& trace,
    std::optional<std::pair<uint64_t, uint64_t>> iterations = std::nullopt);

}  // namespace umswap
