// The stats file's schema: every field the CLI reads (`umswap compare`, `umswap run --verify`),
// declared once, with its version, its kind and its meaning. docs/stats.md is checked against it
// (tests/cli/stats_schema_test.cpp).
//
// How it is laid out:
//   * kFields is the table: one row per field, `path` from the file's top with `.` between keys
//     and `[]` for an array's elements ("iterations[].wall_ms"). Every object or array on the way
//     to a field has its own row.
//   * The named constants mirror the path: the namespaces are its keys, the constant is `k` and
//     the last key in CamelCase: "advisor.evict_copy.copied_out_bytes" is
//     stats_schema::advisor::evict_copy::kCopiedOutBytes; the fields of an array's elements are in
//     the array's namespace (stats_schema::iterations::kWallMs). Each constant is looked up in the
//     table at compile time, so one whose path is not a row does not compile.
//   * find(json, field) walks a field's path; for a field of an array's elements it walks from
//     the element. A writer takes a field's last key from name().
//
// Version: kStatsFormatVersion changes when a field here is renamed, moved, removed, or changes
// type or meaning; read_stats_file() refuses any other version. Adding a field does not change
// it. The file holds more than these fields (the advisor's internals, timings, the allocator's
// counters); those are not part of the schema and may change in any release.
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string_view>

namespace umswap {

// The stats file's format version, written as its `umswap_stats_version`.
inline constexpr int kStatsFormatVersion = 1;

namespace stats_schema {

enum class Kind {
  user,        // what a user reads: compare's columns and --verify's verdict are computed from it
  diagnostic,  // what explains a figure or a failure: notes, first examples, internals
};

struct Field {
  std::string_view path;  // "advisor.evict_copy.copied_out_bytes", "iterations[].wall_ms"
  Kind kind;
  std::string_view type;     // integer, integer or null, number, boolean, string, string or null,
                             // object, array
  std::string_view written;  // the writer: file and function
  std::string_view meaning;  // one line, as docs/stats.md gives it

  // The last key: "wall_ms" for "iterations[].wall_ms".
  constexpr std::string_view name() const {
    const size_t dot = path.rfind('.');
    return dot == std::string_view::npos ? path : path.substr(dot + 1);
  }
  // The path that find() walks: from the innermost array's element ("wall_ms" for
  // "iterations[].wall_ms"), else the whole path.
  constexpr std::string_view relative_path() const {
    const size_t brackets = path.rfind("[].");
    return brackets == std::string_view::npos ? path : path.substr(brackets + 3);
  }
};

namespace detail {
inline constexpr std::string_view kPreload = "hooks/preload.cpp Preload::write_stats_at_exit";
inline constexpr std::string_view kAllocator =
    "allocator/managed_allocator.cpp to_json(AllocatorStats)";
inline constexpr std::string_view kVmmAllocator =
    "allocator/vmm_allocator.cpp to_json(VmmAllocatorStats)";
inline constexpr std::string_view kAdvisor = "advisor/advisor_stats.cpp Advisor::stats";
inline constexpr std::string_view kIterations =
    "advisor/advisor_stats.cpp iterations_json (from Advisor::stats, or from hooks/preload.cpp "
    "Preload::write_stats_at_exit without an advisor)";
inline constexpr std::string_view kCopyEvictor = "advisor/copy_evictor.cpp CopyEvictor::stats_json";
inline constexpr std::string_view kRoundTrips =
    "advisor/copy_evictor.cpp CopyEvictor::round_trips_json";
}  // namespace detail

// clang-format off
inline constexpr Field kFields[] = {
    {"umswap_stats_version", Kind::user, "integer", detail::kPreload,
     "The file's format version; a reader refuses any other than its own."},

    {"allocator", Kind::user, "object", detail::kAllocator,
     "umswap's allocator: what it allocated for the program."},
    {"allocator.managed_bytes_peak", Kind::user, "integer", detail::kAllocator,
     "Most managed memory allocated for the program at once, in bytes."},
    {"allocator.allocations_by_api", Kind::user, "object", detail::kAllocator,
     "The program's allocations umswap served, by the call that made them (cudaMalloc, "
     "cudaMallocAsync, cuMemAllocAsync...): stream-ordered ones give the advisor exact blocks."},
    {"allocator.unmanaged_vmm_allocations", Kind::user, "integer", detail::kAllocator,
     "Memory the program mapped itself (cuMemCreate, cuMemMap): not managed; what lies on this "
     "GPU counts against the budget."},

    {"torch_blocks", Kind::user, "object", detail::kPreload,
     "The blocks of PyTorch's caching allocator, learned from its own events."},
    {"torch_blocks.state", Kind::user, "string", detail::kPreload,
     "checked: plans follow each of its blocks; not PyTorch: no cudaMalloc came from "
     "libc10_cuda.so; nothing redirected: no allocator (engine vmm, mode passthrough); anything "
     "else says why plans follow its whole segments."},
    {"torch_blocks.segments", Kind::user, "integer", detail::kPreload,
     "Its segments whose blocks were followed."},
    {"torch_blocks.blocks", Kind::user, "integer", detail::kPreload,
     "The blocks it allocated in them."},

    {"rank", Kind::user, "integer or null", detail::kPreload,
     "The process's rank in a distributed job (the RANK variable torchrun sets); null without "
     "one."},
    {"engine", Kind::user, "string", detail::kPreload,
     "Where the program's device allocations lived: um (managed memory) or vmm (umswap's "
     "chunks); a file without it is from engine um."},
    {"vmm", Kind::user, "object", detail::kVmmAllocator,
     "Engine vmm's allocations (UMSWAP_ENGINE=vmm); absent under engine um."},
    {"vmm.budget_bytes", Kind::user, "integer", detail::kVmmAllocator,
     "The GPU pool: bytes of GPU chunks the engine may hold (the budget, in whole 2 MiB "
     "chunks)."},
    {"vmm.host_limit_bytes", Kind::user, "integer", detail::kVmmAllocator,
     "Bytes of host chunks the engine may hold (UMSWAP_MANAGED_LIMIT, else half the host "
     "memory available at start)."},
    {"vmm.program_gpu_bytes_peak", Kind::user, "integer", detail::kVmmAllocator,
     "Most bytes of this GPU's memory the program mapped itself at once (NCCL's buffers, JAX): "
     "they stay on the GPU and count against the budget, so the pool shrinks by them."},
    {"vmm.gpu_and_program_bytes_peak", Kind::user, "integer", detail::kVmmAllocator,
     "Most bytes of GPU chunks in use plus the program's own GPU memory at once (sampled at "
     "allocations, windows and the program's mappings): what the budget holds."},
    {"vmm.gpu_bytes_peak", Kind::user, "integer", detail::kVmmAllocator,
     "Most bytes of GPU chunks backing live allocations and released ranges kept for reuse at "
     "once: exact, never above budget_bytes."},
    {"vmm.host_bytes_peak", Kind::user, "integer", detail::kVmmAllocator,
     "Most bytes of host chunks backing live allocations and kept ranges at once (kernels read "
     "them over the link)."},
    {"vmm.gpu_bytes", Kind::user, "integer", detail::kVmmAllocator,
     "Bytes of GPU chunks backing live allocations and kept ranges at exit."},
    {"vmm.host_bytes", Kind::user, "integer", detail::kVmmAllocator,
     "Bytes of host chunks backing live allocations and kept ranges at exit."},
    {"vmm.requested_bytes_peak", Kind::user, "integer", detail::kVmmAllocator,
     "Most bytes the program had allocated at once, as it asked (below the chunks' bytes by "
     "what rounding up to 2 MiB wastes)."},
    {"vmm.out_of_memory", Kind::user, "integer", detail::kVmmAllocator,
     "Allocations refused with out-of-memory: past the GPU pool and the host limit together."},
    {"launches_in_stream_order", Kind::diagnostic, "integer", detail::kPreload,
     "Kernel launches (`cuLaunchKernelEx[_ptsz]`, counted before the driver's answer) that "
     "asked to overlap the kernel ahead of them on their stream (programmatic dependent launch) "
     "and that umswap launched in stream order instead, as it does with every such launch of "
     "the program while it redirects memory under engine um (not in `--mode passthrough`): a "
     "race in the merge sort of CUDA 13.0's CUB, built into PyTorch 2.11, that faults make "
     "likely (docs/RELIABILITY.md). A launch captured into a graph counts once, not per replay. "
     "0 under engine vmm, which leaves them as they are."},
    {"flight_recorder", Kind::diagnostic, "object", detail::kPreload,
     "Only when the program's CUDA context held an error at exit (its GPU work failed; umswap "
     "also prints one warning): `context_error`, the driver's error number, and `events`, the "
     "last 16,384 things umswap did to device memory, oldest first, each `[seq, time_ns, launch, "
     "what, address, bytes, stream]`: slab blocks handed out (`block alloc`) and taken back "
     "(`block free`), slabs made and given back, the placement's `arena`, `discard` and "
     "`populate` ranges, the advisor's `prefetch` and `evict` calls; `launch` is the launches "
     "the tracer had logged by then."},
    {"vmm.copies_to_host", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Chunks copied from the GPU to the host by moves (0 while nothing moves)."},
    {"vmm.copies_to_gpu", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Chunks copied from the host to the GPU by moves (0 while nothing moves)."},
    {"vmm.remaps", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Chunk slots remapped to another chunk by moves (0 while nothing moves)."},
    {"vmm.program_mapped_bytes", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Bytes the program made itself with cuMemCreate (NCCL's buffers, JAX), in all, wherever "
     "they live."},
    {"vmm.bytes_to_gpu", Kind::user, "integer", detail::kVmmAllocator,
     "Bytes moved from host chunks to GPU chunks, in all."},
    {"vmm.bytes_to_host", Kind::user, "integer", detail::kVmmAllocator,
     "Bytes moved from GPU chunks to host chunks, in all."},
    {"vmm.windows", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Windows: the program held and the GPU drained at a step that reached host chunks, while "
     "ranges moved."},
    {"vmm.graph_launches", Kind::user, "integer", detail::kVmmAllocator,
     "CUDA graph launches (XLA's command buffers, torch.compile's reduce-overhead mode): their "
     "kernels are not seen, so no window brings what they reach to the GPU; host chunks are read "
     "over the link."},
    {"vmm.window_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Milliseconds the program was held by windows, in all (drains included)."},
    {"vmm.windows_not_logged", Kind::diagnostic, "integer", detail::kPreload,
     "Windows past the log's size, left out of iterations[].vmm_*: present only when some were "
     "(the iterations' window figures then fall short)."},
    {"vmm.block_bytes", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "The physical blocks ranges' large pieces are mapped and moved in (2 MiB chunks for the rest "
     "and for small ranges)."},
    {"vmm.window_open_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Of window_ms: waiting for the program's calls in flight to leave the driver."},
    {"vmm.window_drain_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Of window_ms: waiting for the GPU to finish the work queued before the window."},
    {"vmm.step_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Milliseconds the program's launches spent in engine vmm's look at their ranges, windows "
     "included."},
    {"vmm.allocate_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Milliseconds the program's threads spent in engine vmm's allocations, in all (pending frees "
     "released on the way included)."},
    {"vmm.free_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Milliseconds the program's threads spent in engine vmm's frees, in all."},
    {"vmm.copy_wait_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Milliseconds moves waited for their chunk copies, in all (inside windows)."},
    {"vmm.remap_ms", Kind::diagnostic, "number", detail::kVmmAllocator,
     "Milliseconds moves spent remapping chunk slots (unmap, map, access), in all."},
    {"vmm.driver_calls", Kind::diagnostic, "object", detail::kPreload,
     "The driver functions engine vmm's allocations and moves called (the window's drain apart): "
     "each one's calls and wall milliseconds in all, and of them those inside windows. "
     "`cuMemCreate (host)` counts again, apart, the creates of host memory (pinned, dear to "
     "make)."},
    {"vmm.ranges_restored", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Ranges brought to the GPU for the step that opened the window."},
    {"vmm.ranges_prefetched", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Ranges brought to the GPU ahead, for coming steps the last iteration predicted."},
    {"vmm.ranges_evicted", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Ranges moved to host chunks to make room."},
    {"vmm.ranges_evicted_for_room", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Of them, ranges a window moved out for the allocations that follow it (a program whose "
     "allocations are mostly stream-ordered: an eighth of the pool left free)."},
    {"vmm.bytes_allocated_on_host", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Bytes of new ranges placed on host chunks (the pool full), in all."},
    {"vmm.ranges_reused", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Allocations served by a released range kept mapped (no new mapping made), in all."},
    {"vmm.reused_on_stream", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Stream-ordered allocations served by a range whose free on the same stream was still "
     "pending (no wait, no new mapping), in all."},
    {"vmm.ranges_kept", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Released ranges kept mapped for reuse at exit."},
    {"vmm.kept_bytes", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Bytes of those kept ranges at exit."},
    {"vmm.ranges_unwritten", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Moves of ranges nothing had written yet (allocated since the last step), remapped with no "
     "copy."},
    {"vmm.bytes_not_copied", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Bytes those moves remapped with no copy, either way (not in bytes_to_gpu or bytes_to_host)."},
    {"vmm.period", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Steps per iteration of the table of windows from the plan in force at the end (0: none)."},
    {"vmm.own_period", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "The steps' period the windows without a table last found (0: none, the least recently used "
     "range goes out)."},
    {"vmm.small_allocations", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Allocations of at most 1 MiB served from a slab: a 2 MiB range shared with other small "
     "ones (they move together), in all."},
    {"vmm.slabs", Kind::diagnostic, "integer", detail::kVmmAllocator,
     "Slabs live at the end of the run (the one empty slab kept for the next small allocation "
     "included)."},

    {"advisor", Kind::user, "object", detail::kAdvisor,
     "The advisor, in modes online and replay; absent in the others."},
    {"advisor.mode", Kind::user, "string", detail::kAdvisor,
     "The advisor's mode: online or replay."},
    {"advisor.budget_bytes", Kind::user, "integer", detail::kAdvisor,
     "GPU memory the advisor keeps the program's managed memory within, in bytes (the GPU's "
     "whole memory without a budget)."},
    {"advisor.state", Kind::user, "string", detail::kAdvisor,
     "Where the advisor ended: starting, learning, applied (a plan in force) or off."},
    {"advisor.fallback", Kind::user, "string or null", detail::kAdvisor,
     "Why the advisor did not do what its mode asks (it learned online instead of replaying, or "
     "turned off); null when it did."},
    {"advisor.prefetched_bytes", Kind::user, "integer", detail::kAdvisor,
     "Bytes the advisor's plans prefetched to the GPU in the run."},
    {"advisor.evicted_bytes", Kind::user, "integer", detail::kAdvisor,
     "Bytes the advisor's plans evicted to the host in the run."},
    {"advisor.peak_resident_bytes", Kind::user, "integer", detail::kAdvisor,
     "Most managed bytes on the GPU at once, counted from CUPTI's records (with CUPTI's "
     "unified-memory counters only)."},
    {"advisor.peak_resident_plan_bytes", Kind::diagnostic, "integer", detail::kAdvisor,
     "The last plan's peak of GPU-resident bytes in the planner's own simulation."},
    {"advisor.plan", Kind::diagnostic, "object", detail::kAdvisor,
     "The last plan; absent before the first."},
    {"advisor.plan.applied_from_launch", Kind::diagnostic, "integer", detail::kAdvisor,
     "The launch from which the last plan is in force (a relearned plan's, or one made too late "
     "to start: then after the last iteration)."},
    {"advisor.plan.unfit_steps", Kind::diagnostic, "integer", detail::kAdvisor,
     "Launches of the last plan's iteration whose own data (in 2 MiB blocks) is more than the "
     "budget: they fault in what does not fit, and no plan holds the budget there."},
    {"advisor.plan.largest_step_bytes", Kind::diagnostic, "integer", detail::kAdvisor,
     "The most one launch of the last plan's iteration touches (in 2 MiB blocks): the smallest "
     "budget with no unfit launch."},
    {"advisor.first_plan_applied_from_launch", Kind::diagnostic, "integer or null",
     detail::kAdvisor,
     "The launch from which the first plan that started was in force; null when none started. "
     "Compare's and the run summary's steady iterations begin after it (after "
     "`advisor.plan.applied_from_launch` in files without it)."},
    {"advisor.prefetch_wait", Kind::diagnostic, "boolean", detail::kAdvisor,
     "Whether launches wait for their late prefetches (UMSWAP_PREFETCH_WAIT)."},
    {"advisor.evict_wait", Kind::diagnostic, "boolean", detail::kAdvisor,
     "Whether launches wait for the evictions that make room for them (UMSWAP_EVICT_WAIT)."},
    {"advisor.wait_stalls", Kind::diagnostic, "integer", detail::kAdvisor,
     "Times the watchdog released launches that waited 2 s for the advisor (the waits are then "
     "off)."},
    {"advisor.graph_launches", Kind::user, "integer", detail::kAdvisor,
     "CUDA graph launches (XLA's command buffers, torch.compile's reduce-overhead mode): their "
     "kernels' memory is not seen, so neither planned nor counted in the resident figures."},

    {"advisor.evict_copy", Kind::user, "object", detail::kCopyEvictor,
     "The copy path (UMSWAP_EVICT_COPY=1, which --verify turns on); absent without it."},
    {"advisor.evict_copy.copied_out_bytes", Kind::user, "integer", detail::kCopyEvictor,
     "Bytes umswap copied from the GPU to pinned host memory."},
    {"advisor.evict_copy.copied_in_bytes", Kind::user, "integer", detail::kCopyEvictor,
     "Bytes umswap copied back from the host to the GPU."},
    {"advisor.evict_copy.lost_bytes", Kind::user, "integer", detail::kCopyEvictor,
     "Bytes whose copy back failed and were lost (--verify fails)."},
    {"advisor.evict_copy.off_reason", Kind::user, "string or null", detail::kCopyEvictor,
     "Why the copy path was off or stopped (evictions then went through the driver); null when "
     "it never stopped."},
    {"advisor.evict_copy.kept_reached", Kind::diagnostic, "object", detail::kCopyEvictor,
     "Evictions left on the GPU because a launch already submitted reaches their range."},
    {"advisor.evict_copy.kept_reached.evictions", Kind::diagnostic, "integer",
     detail::kCopyEvictor, "The number of evictions left on the GPU so."},
    {"advisor.evict_copy.kept_reached.bytes", Kind::diagnostic, "integer", detail::kCopyEvictor,
     "The bytes of the evictions left on the GPU so."},

    {"advisor.evict_copy.round_trips", Kind::user, "object", detail::kRoundTrips,
     "--verify's round trips: each 2 MiB page copied out hashed on the GPU as it left and once "
     "back."},
    {"advisor.evict_copy.round_trips.hashed", Kind::user, "boolean", detail::kRoundTrips,
     "Whether the round trips were hashed."},
    {"advisor.evict_copy.round_trips.off_reason", Kind::diagnostic, "string or null",
     detail::kRoundTrips, "Why the round trips were not hashed; null when they were."},
    {"advisor.evict_copy.round_trips.page_bytes", Kind::diagnostic, "integer", detail::kRoundTrips,
     "The size of a compared page, in bytes."},
    {"advisor.evict_copy.round_trips.checked_pages", Kind::user, "integer", detail::kRoundTrips,
     "Pages compared once back."},
    {"advisor.evict_copy.round_trips.mismatched_pages", Kind::user, "integer", detail::kRoundTrips,
     "Pages that came back different from what left the GPU (--verify fails)."},
    {"advisor.evict_copy.round_trips.not_compared_pages", Kind::diagnostic, "object",
     detail::kRoundTrips, "Pages not compared, by reason."},
    {"advisor.evict_copy.round_trips.not_compared_pages.no_slot", Kind::diagnostic, "integer",
     detail::kRoundTrips, "No hash slot was free when the page left."},
    {"advisor.evict_copy.round_trips.not_compared_pages.unmatched", Kind::diagnostic, "integer",
     detail::kRoundTrips, "The page came back without being seen leaving."},
    {"advisor.evict_copy.round_trips.not_compared_pages.away_at_exit", Kind::diagnostic,
     "integer", detail::kRoundTrips, "The page was still on the host at exit."},
    {"advisor.evict_copy.round_trips.not_compared_pages.returning_at_exit", Kind::diagnostic,
     "integer", detail::kRoundTrips, "The page was on its way back at exit."},
    {"advisor.evict_copy.round_trips.first_mismatches", Kind::diagnostic, "array",
     detail::kRoundTrips, "The first pages that came back different."},
    {"advisor.evict_copy.round_trips.first_mismatches[].page", Kind::diagnostic, "string",
     detail::kRoundTrips, "The page's address, in hex."},
    {"advisor.evict_copy.round_trips.first_mismatches[].buffer", Kind::diagnostic, "object",
     detail::kRoundTrips, "The traced buffer holding the page, when there is one."},
    {"advisor.evict_copy.round_trips.first_mismatches[].buffer.index", Kind::diagnostic,
     "integer", detail::kRoundTrips, "The buffer's index in the trace."},
    {"advisor.evict_copy.round_trips.first_mismatches[].buffer.base", Kind::diagnostic, "string",
     detail::kRoundTrips, "The buffer's base address, in hex."},
    {"advisor.evict_copy.round_trips.first_mismatches[].left_at_launch", Kind::diagnostic,
     "integer", detail::kRoundTrips, "The launch at which the page was copied out."},
    {"advisor.evict_copy.round_trips.first_mismatches[].left_kernel", Kind::diagnostic, "string",
     detail::kRoundTrips, "The kernel of the launch at which the page was copied out."},
    {"advisor.evict_copy.round_trips.first_mismatches[].back_at_launch", Kind::diagnostic,
     "integer", detail::kRoundTrips, "The launch by which the page was back."},
    {"advisor.evict_copy.round_trips.first_mismatches[].back_kernel", Kind::diagnostic, "string",
     detail::kRoundTrips, "The kernel of the launch by which the page was back."},

    {"iterations", Kind::user, "array", detail::kIterations,
     "One entry per iteration the tracer detected; absent when the tracer did not run."},
    {"iterations[].index", Kind::user, "integer", detail::kIterations,
     "The iteration's number, from 0."},
    {"iterations[].first_step", Kind::diagnostic, "integer", detail::kIterations,
     "The iteration's first launch (step) number."},
    {"iterations[].wall_ms", Kind::user, "number", detail::kIterations,
     "Milliseconds from the iteration's first GPU start to the next iteration's."},
    {"iterations[].gpu_page_faults", Kind::user, "integer", detail::kIterations,
     "GPU page faults on managed memory in the iteration (CUPTI)."},
    {"iterations[].bytes_htod", Kind::user, "integer", detail::kIterations,
     "Bytes the driver migrated to the GPU in the iteration (CUPTI; umswap's own copies are "
     "apart)."},
    {"iterations[].bytes_dtoh", Kind::user, "integer", detail::kIterations,
     "Bytes the driver migrated to the host in the iteration (CUPTI; umswap's own copies are "
     "apart)."},
    {"iterations[].copied_in_bytes", Kind::user, "integer", detail::kAdvisor,
     "Bytes the copy path copied to the GPU in the iteration (with UMSWAP_EVICT_COPY=1)."},
    {"iterations[].copied_out_bytes", Kind::user, "integer", detail::kAdvisor,
     "Bytes the copy path copied to the host in the iteration (with UMSWAP_EVICT_COPY=1)."},
    {"iterations[].prefetched_bytes", Kind::user, "integer", detail::kIterations,
     "Bytes the advisor prefetched in the iteration (with an advisor)."},
    {"iterations[].evicted_bytes", Kind::user, "integer", detail::kIterations,
     "Bytes the advisor evicted in the iteration (with an advisor)."},
    {"iterations[].peak_resident_bytes", Kind::user, "integer", detail::kIterations,
     "Most managed bytes on the GPU at once in the iteration, counted (with CUPTI's "
     "unified-memory counters only)."},
    {"iterations[].vmm_windows", Kind::diagnostic, "integer", detail::kPreload,
     "Engine vmm: windows in the iteration (the program held, the GPU drained, ranges moved); "
     "absent, with the other vmm_ fields, when the tracer did not log every step."},
    {"iterations[].vmm_window_ms", Kind::diagnostic, "number", detail::kPreload,
     "Engine vmm: milliseconds those windows held the program."},
    {"iterations[].vmm_bytes_to_gpu", Kind::diagnostic, "integer", detail::kPreload,
     "Engine vmm: bytes those windows moved from host chunks to GPU chunks."},
    {"iterations[].vmm_bytes_to_host", Kind::diagnostic, "integer", detail::kPreload,
     "Engine vmm: bytes those windows moved from GPU chunks to host chunks."},

    {"detection", Kind::diagnostic, "object", detail::kPreload,
     "The tracer's iteration detection; absent when the tracer did not run."},
    {"detection.period", Kind::diagnostic, "integer", detail::kPreload,
     "Launches per iteration as the run's end found them (0: no iteration found)."},
    {"detection.confidence", Kind::diagnostic, "number", detail::kPreload,
     "Of the launches after the first detected iteration, the share that matched their "
     "counterpart one iteration earlier (0 to 1)."},
    {"detection.warmup_steps", Kind::diagnostic, "integer", detail::kPreload,
     "The launch the first detected iteration begins at."},
    {"detection.source", Kind::diagnostic, "string", detail::kPreload,
     "How the iterations were found: `period` (the launch sequence's period), `nvtx:<name>`, "
     "`api` (umswap_mark_iteration()), or `none`."},
    {"detection.steps", Kind::diagnostic, "integer", detail::kPreload,
     "Launches (and copies, memsets) the tracer logged in the run."},
    {"detection.dropped_records", Kind::diagnostic, "integer", detail::kPreload,
     "CUPTI activity records dropped (--verify does not check the accesses in them)."},

    {"fault_kernels", Kind::user, "object", detail::kPreload,
     "GPU page faults by the kernel running when they came (with CUPTI's unified-memory "
     "counters only)."},
    {"fault_kernels.faults", Kind::user, "integer", detail::kPreload,
     "GPU page faults in the run."},
    {"fault_kernels.outside_kernels", Kind::user, "integer", detail::kPreload,
     "Of them, those that came while no kernel ran."},
    {"fault_kernels.kernels", Kind::diagnostic, "array", detail::kPreload,
     "The kernels that took faults (at most 12)."},
    {"fault_kernels.kernels[].kernel", Kind::diagnostic, "string", detail::kPreload,
     "The kernel's name (at most 200 characters)."},
    {"fault_kernels.kernels[].faults", Kind::diagnostic, "integer", detail::kPreload,
     "GPU page faults while the kernel ran."},
    {"fault_kernels.must_be_resident", Kind::user, "object", detail::kPreload,
     "Kernels that must find their memory on the GPU: they compute differently on memory not on it."},
    {"fault_kernels.must_be_resident.faults", Kind::user, "integer", detail::kPreload,
     "GPU page faults inside kernels that must find their memory on the GPU (--verify fails)."},
    {"fault_kernels.must_be_resident.kernels", Kind::diagnostic, "array", detail::kPreload,
     "Every kernel that must find its memory on the GPU and took faults."},
    {"fault_kernels.must_be_resident.kernels[].kernel", Kind::diagnostic, "string",
     detail::kPreload, "The kernel's name (at most 200 characters)."},
    {"fault_kernels.must_be_resident.kernels[].faults", Kind::diagnostic, "integer",
     detail::kPreload, "GPU page faults while the kernel ran."},

    {"copy_check", Kind::user, "object", detail::kPreload,
     "The copy path's copies checked against the traced steps (UMSWAP_EVICT_COPY=1 with the "
     "tracer)."},
    {"copy_check.harmful", Kind::user, "integer", detail::kPreload,
     "Steps that ran on a page while it was discarded or coming back (--verify fails)."},
    {"copy_check.unforeseen", Kind::user, "object", detail::kPreload,
     "Accesses to pages while umswap held them on the host."},
    {"copy_check.unforeseen.windows", Kind::user, "integer", detail::kPreload,
     "Page windows checked, each from a copy out to its copy back."},
    {"copy_check.unforeseen.faults", Kind::user, "integer", detail::kPreload,
     "GPU page faults on pages umswap held on the host, their GPU pages discarded (--verify "
     "fails)."},
    {"copy_check.unforeseen.copies_out_before_copy_back_ended", Kind::user, "integer",
     detail::kPreload,
     "Copies out of a page that began before its copy back had ended (--verify fails)."},
    {"copy_check.unforeseen.first", Kind::diagnostic, "array", detail::kPreload,
     "The first GPU page faults on pages umswap held on the host."},
    {"copy_check.unforeseen.first[].address", Kind::diagnostic, "string", detail::kPreload,
     "The faulting address, in hex."},
    {"copy_check.unforeseen.first[].access", Kind::diagnostic, "integer", detail::kPreload,
     "CUPTI's access type: 1 read, 2 write, 3 atomic."},
    {"copy_check.unforeseen.first[].buffer", Kind::diagnostic, "object", detail::kPreload,
     "The traced buffer holding the address, when there is one."},
    {"copy_check.unforeseen.first[].buffer.index", Kind::diagnostic, "integer", detail::kPreload,
     "The buffer's index in the trace."},
    {"copy_check.unforeseen.first[].buffer.base", Kind::diagnostic, "string", detail::kPreload,
     "The buffer's base address, in hex."},
    {"copy_check.unforeseen.first[].buffer.size", Kind::diagnostic, "integer", detail::kPreload,
     "The buffer's size, in bytes."},
    {"copy_check.unforeseen.first[].steps_running", Kind::diagnostic, "array", detail::kPreload,
     "The steps on the GPU then, each as text."},
};
// clang-format on

// The row of `path`, at compile time: a path that is not in kFields does not compile.
consteval const Field& field(std::string_view path) {
  for (const Field& f : kFields) {
    if (f.path == path) return f;
  }
  throw "not a field of the stats schema (stats_schema.h, kFields)";
}

// The row of `path`, or nullptr.
inline const Field* find_field(std::string_view path) {
  for (const Field& f : kFields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

inline std::span<const Field> fields() {
  return kFields;
}

// The value of `f` in `j`, or nullptr where a key on the way is missing or not an object. For a
// field of an array's elements (`[]` in its path), `j` is the element.
inline const nlohmann::json* find(const nlohmann::json& j, const Field& f) {
  const nlohmann::json* at = &j;
  std::string_view rest = f.relative_path();
  while (true) {
    const size_t dot = rest.find('.');
    const std::string_view key = rest.substr(0, dot);
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (dot == std::string_view::npos) return at;
    rest.remove_prefix(dot + 1);
  }
}

// --- The named fields, by path ---------------------------------------------------------------

inline constexpr const Field& kVersion = field("umswap_stats_version");

inline constexpr const Field& kAllocator = field("allocator");
namespace allocator {
inline constexpr const Field& kManagedBytesPeak = field("allocator.managed_bytes_peak");
inline constexpr const Field& kAllocationsByApi = field("allocator.allocations_by_api");
inline constexpr const Field& kUnmanagedVmmAllocations =
    field("allocator.unmanaged_vmm_allocations");
}  // namespace allocator

// PyTorch's caching allocator's blocks (torch_blocks.h): state is "checked" when plans follow them.
inline constexpr const Field& kTorchBlocks = field("torch_blocks");
namespace torch_blocks {
inline constexpr const Field& kState = field("torch_blocks.state");
inline constexpr const Field& kSegments = field("torch_blocks.segments");
inline constexpr const Field& kBlocks = field("torch_blocks.blocks");
}  // namespace torch_blocks

inline constexpr const Field& kEngine = field("engine");
inline constexpr const Field& kRank = field("rank");
inline constexpr const Field& kVmm = field("vmm");
namespace vmm {
inline constexpr const Field& kBudgetBytes = field("vmm.budget_bytes");
inline constexpr const Field& kHostLimitBytes = field("vmm.host_limit_bytes");
inline constexpr const Field& kGpuBytesPeak = field("vmm.gpu_bytes_peak");
inline constexpr const Field& kHostBytesPeak = field("vmm.host_bytes_peak");
inline constexpr const Field& kGpuBytes = field("vmm.gpu_bytes");
inline constexpr const Field& kHostBytes = field("vmm.host_bytes");
inline constexpr const Field& kRequestedBytesPeak = field("vmm.requested_bytes_peak");
inline constexpr const Field& kOutOfMemory = field("vmm.out_of_memory");
inline constexpr const Field& kCopiesToHost = field("vmm.copies_to_host");
inline constexpr const Field& kCopiesToGpu = field("vmm.copies_to_gpu");
inline constexpr const Field& kRemaps = field("vmm.remaps");
inline constexpr const Field& kProgramMappedBytes = field("vmm.program_mapped_bytes");
inline constexpr const Field& kProgramGpuBytesPeak = field("vmm.program_gpu_bytes_peak");
inline constexpr const Field& kGpuAndProgramBytesPeak = field("vmm.gpu_and_program_bytes_peak");
inline constexpr const Field& kBytesToGpu = field("vmm.bytes_to_gpu");
inline constexpr const Field& kBytesToHost = field("vmm.bytes_to_host");
inline constexpr const Field& kWindows = field("vmm.windows");
inline constexpr const Field& kGraphLaunches = field("vmm.graph_launches");
inline constexpr const Field& kWindowMs = field("vmm.window_ms");
inline constexpr const Field& kWindowsNotLogged = field("vmm.windows_not_logged");
inline constexpr const Field& kBlockBytes = field("vmm.block_bytes");
inline constexpr const Field& kWindowOpenMs = field("vmm.window_open_ms");
inline constexpr const Field& kWindowDrainMs = field("vmm.window_drain_ms");
inline constexpr const Field& kCopyWaitMs = field("vmm.copy_wait_ms");
inline constexpr const Field& kRemapMs = field("vmm.remap_ms");
inline constexpr const Field& kDriverCalls = field("vmm.driver_calls");
inline constexpr const Field& kRangesRestored = field("vmm.ranges_restored");
inline constexpr const Field& kRangesPrefetched = field("vmm.ranges_prefetched");
inline constexpr const Field& kRangesEvicted = field("vmm.ranges_evicted");
inline constexpr const Field& kRangesEvictedForRoom = field("vmm.ranges_evicted_for_room");
inline constexpr const Field& kPeriod = field("vmm.period");
inline constexpr const Field& kRangesReused = field("vmm.ranges_reused");
inline constexpr const Field& kKeptBytes = field("vmm.kept_bytes");
}  // namespace vmm

inline constexpr const Field& kAdvisor = field("advisor");
namespace advisor {
inline constexpr const Field& kMode = field("advisor.mode");
inline constexpr const Field& kBudgetBytes = field("advisor.budget_bytes");
inline constexpr const Field& kState = field("advisor.state");
inline constexpr const Field& kFallback = field("advisor.fallback");
inline constexpr const Field& kPrefetchedBytes = field("advisor.prefetched_bytes");
inline constexpr const Field& kEvictedBytes = field("advisor.evicted_bytes");
inline constexpr const Field& kPeakResidentBytes = field("advisor.peak_resident_bytes");
inline constexpr const Field& kPeakResidentPlanBytes = field("advisor.peak_resident_plan_bytes");
inline constexpr const Field& kFirstPlanAppliedFromLaunch =
    field("advisor.first_plan_applied_from_launch");
inline constexpr const Field& kPlan = field("advisor.plan");
namespace plan {
inline constexpr const Field& kAppliedFromLaunch = field("advisor.plan.applied_from_launch");
inline constexpr const Field& kUnfitSteps = field("advisor.plan.unfit_steps");
inline constexpr const Field& kLargestStepBytes = field("advisor.plan.largest_step_bytes");
}  // namespace plan
inline constexpr const Field& kPrefetchWait = field("advisor.prefetch_wait");
inline constexpr const Field& kEvictWait = field("advisor.evict_wait");
inline constexpr const Field& kWaitStalls = field("advisor.wait_stalls");
inline constexpr const Field& kGraphLaunches = field("advisor.graph_launches");

inline constexpr const Field& kEvictCopy = field("advisor.evict_copy");
namespace evict_copy {
inline constexpr const Field& kCopiedOutBytes = field("advisor.evict_copy.copied_out_bytes");
inline constexpr const Field& kCopiedInBytes = field("advisor.evict_copy.copied_in_bytes");
inline constexpr const Field& kLostBytes = field("advisor.evict_copy.lost_bytes");
inline constexpr const Field& kOffReason = field("advisor.evict_copy.off_reason");
inline constexpr const Field& kKeptReached = field("advisor.evict_copy.kept_reached");
namespace kept_reached {
inline constexpr const Field& kEvictions = field("advisor.evict_copy.kept_reached.evictions");
inline constexpr const Field& kBytes = field("advisor.evict_copy.kept_reached.bytes");
}  // namespace kept_reached

inline constexpr const Field& kRoundTrips = field("advisor.evict_copy.round_trips");
namespace round_trips {
inline constexpr const Field& kHashed = field("advisor.evict_copy.round_trips.hashed");
inline constexpr const Field& kOffReason = field("advisor.evict_copy.round_trips.off_reason");
inline constexpr const Field& kPageBytes = field("advisor.evict_copy.round_trips.page_bytes");
inline constexpr const Field& kCheckedPages = field("advisor.evict_copy.round_trips.checked_pages");
inline constexpr const Field& kMismatchedPages =
    field("advisor.evict_copy.round_trips.mismatched_pages");
inline constexpr const Field& kNotComparedPages =
    field("advisor.evict_copy.round_trips.not_compared_pages");
namespace not_compared_pages {
inline constexpr const Field& kNoSlot =
    field("advisor.evict_copy.round_trips.not_compared_pages.no_slot");
inline constexpr const Field& kUnmatched =
    field("advisor.evict_copy.round_trips.not_compared_pages.unmatched");
inline constexpr const Field& kAwayAtExit =
    field("advisor.evict_copy.round_trips.not_compared_pages.away_at_exit");
inline constexpr const Field& kReturningAtExit =
    field("advisor.evict_copy.round_trips.not_compared_pages.returning_at_exit");
}  // namespace not_compared_pages
inline constexpr const Field& kFirstMismatches =
    field("advisor.evict_copy.round_trips.first_mismatches");
namespace first_mismatches {  // of each element
inline constexpr const Field& kPage =
    field("advisor.evict_copy.round_trips.first_mismatches[].page");
inline constexpr const Field& kBuffer =
    field("advisor.evict_copy.round_trips.first_mismatches[].buffer");
namespace buffer {
inline constexpr const Field& kIndex =
    field("advisor.evict_copy.round_trips.first_mismatches[].buffer.index");
inline constexpr const Field& kBase =
    field("advisor.evict_copy.round_trips.first_mismatches[].buffer.base");
}  // namespace buffer
inline constexpr const Field& kLeftAtLaunch =
    field("advisor.evict_copy.round_trips.first_mismatches[].left_at_launch");
inline constexpr const Field& kLeftKernel =
    field("advisor.evict_copy.round_trips.first_mismatches[].left_kernel");
inline constexpr const Field& kBackAtLaunch =
    field("advisor.evict_copy.round_trips.first_mismatches[].back_at_launch");
inline constexpr const Field& kBackKernel =
    field("advisor.evict_copy.round_trips.first_mismatches[].back_kernel");
}  // namespace first_mismatches
}  // namespace round_trips
}  // namespace evict_copy
}  // namespace advisor

inline constexpr const Field& kIterations = field("iterations");
namespace iterations {  // of each element
inline constexpr const Field& kIndex = field("iterations[].index");
inline constexpr const Field& kFirstStep = field("iterations[].first_step");
inline constexpr const Field& kWallMs = field("iterations[].wall_ms");
inline constexpr const Field& kVmmWindows = field("iterations[].vmm_windows");
inline constexpr const Field& kVmmWindowMs = field("iterations[].vmm_window_ms");
inline constexpr const Field& kVmmBytesToGpu = field("iterations[].vmm_bytes_to_gpu");
inline constexpr const Field& kVmmBytesToHost = field("iterations[].vmm_bytes_to_host");
inline constexpr const Field& kGpuPageFaults = field("iterations[].gpu_page_faults");
inline constexpr const Field& kBytesHtod = field("iterations[].bytes_htod");
inline constexpr const Field& kBytesDtoh = field("iterations[].bytes_dtoh");
inline constexpr const Field& kCopiedInBytes = field("iterations[].copied_in_bytes");
inline constexpr const Field& kCopiedOutBytes = field("iterations[].copied_out_bytes");
inline constexpr const Field& kPrefetchedBytes = field("iterations[].prefetched_bytes");
inline constexpr const Field& kEvictedBytes = field("iterations[].evicted_bytes");
inline constexpr const Field& kPeakResidentBytes = field("iterations[].peak_resident_bytes");
}  // namespace iterations

inline constexpr const Field& kFlightRecorder = field("flight_recorder");
inline constexpr const Field& kLaunchesInStreamOrder = field("launches_in_stream_order");
inline constexpr const Field& kDetection = field("detection");
namespace detection {
inline constexpr const Field& kPeriod = field("detection.period");
inline constexpr const Field& kConfidence = field("detection.confidence");
inline constexpr const Field& kWarmupSteps = field("detection.warmup_steps");
inline constexpr const Field& kSource = field("detection.source");
inline constexpr const Field& kSteps = field("detection.steps");
inline constexpr const Field& kDroppedRecords = field("detection.dropped_records");
}  // namespace detection

inline constexpr const Field& kFaultKernels = field("fault_kernels");
namespace fault_kernels {
inline constexpr const Field& kFaults = field("fault_kernels.faults");
inline constexpr const Field& kOutsideKernels = field("fault_kernels.outside_kernels");
inline constexpr const Field& kKernels = field("fault_kernels.kernels");
namespace kernels {  // of each element
inline constexpr const Field& kKernel = field("fault_kernels.kernels[].kernel");
inline constexpr const Field& kFaults = field("fault_kernels.kernels[].faults");
}  // namespace kernels
inline constexpr const Field& kMustBeResident = field("fault_kernels.must_be_resident");
namespace must_be_resident {
inline constexpr const Field& kFaults = field("fault_kernels.must_be_resident.faults");
inline constexpr const Field& kKernels = field("fault_kernels.must_be_resident.kernels");
namespace kernels {  // of each element
inline constexpr const Field& kKernel = field("fault_kernels.must_be_resident.kernels[].kernel");
inline constexpr const Field& kFaults = field("fault_kernels.must_be_resident.kernels[].faults");
}  // namespace kernels
}  // namespace must_be_resident
}  // namespace fault_kernels

inline constexpr const Field& kCopyCheck = field("copy_check");
namespace copy_check {
inline constexpr const Field& kHarmful = field("copy_check.harmful");
inline constexpr const Field& kUnforeseen = field("copy_check.unforeseen");
namespace unforeseen {
inline constexpr const Field& kWindows = field("copy_check.unforeseen.windows");
inline constexpr const Field& kFaults = field("copy_check.unforeseen.faults");
inline constexpr const Field& kCopiesOutBeforeCopyBackEnded =
    field("copy_check.unforeseen.copies_out_before_copy_back_ended");
inline constexpr const Field& kFirst = field("copy_check.unforeseen.first");
namespace first {  // of each element
inline constexpr const Field& kAddress = field("copy_check.unforeseen.first[].address");
inline constexpr const Field& kAccess = field("copy_check.unforeseen.first[].access");
inline constexpr const Field& kBuffer = field("copy_check.unforeseen.first[].buffer");
namespace buffer {
inline constexpr const Field& kIndex = field("copy_check.unforeseen.first[].buffer.index");
inline constexpr const Field& kBase = field("copy_check.unforeseen.first[].buffer.base");
inline constexpr const Field& kSize = field("copy_check.unforeseen.first[].buffer.size");
}  // namespace buffer
inline constexpr const Field& kStepsRunning = field("copy_check.unforeseen.first[].steps_running");
}  // namespace first
}  // namespace unforeseen
}  // namespace copy_check

}  // namespace stats_schema
}  // namespace umswap
