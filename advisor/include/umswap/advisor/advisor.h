// The advisor: executes a plan (planner.h) inside the traced program, so that kernels find their
// data on the GPU and GPU-resident managed memory stays under the budget.
//
// Modes:
//   * online: the advisor thread watches the tracer's step log; once the launch sequence repeats
//     (two iterations with the same period), it plans from the last complete iteration and
//     applies the plan from the next iteration boundary on.
//   * replay: the plan comes from a recorded trace at start (replay.h matches the trace's buffers
//     to this process's allocations by identity); it applies from the trace's first iteration.
//     If the launches stop matching the trace, the advisor says so once and learns online.
//     If they match but an applied iteration skipped 1% or more of the plan's bytes because their
//     buffers were not found here (replay_should_relearn), the advisor learns this process's own
//     iteration while the replay plan runs on, and switches to that plan at an iteration boundary
//     (stats: advisor.replay_relearned). The launch path takes the new plan from its first launch
//     (next_plan), the advisor thread once it has applied the old one up to there.
//
// Execution: non-blocking streams of the advisor's own (the driver's migrations take turns on
// one; copies, populates and discards have their own). At each launch the tracer calls
// on_step() (serialized, cheap: compares the key with the plan, publishes the launch count);
// the advisor thread, polling every 50 us, issues the actions of every launch it has not handled
// yet, evictions before prefetches. The two directions of migration never overlap because they
// share the one stream (measured on an H200: together they fall to 7.8 GB/s). Each eviction
// waits, through an event the launch path records at API exit of the step that last uses the
// range, for that use to finish on the GPU; the prefetches of launch g wait, through an event the
// launch path records just before launch g, for the GPU to reach it (the plan gives a prefetch
// room that a free before launch g makes, and the program's stream discards the freed block only
// there: the application's launches run far ahead of the GPU). If the launches diverge from the
// plan (a different kernel at a position, 8 in a row), the plan is dropped and learning starts
// again.
//
// UMSWAP_PREFETCH_WAIT: a kernel that needs a range the plan prefetches must not start before the
// prefetch is done, even when the advisor has not issued it yet (the application's launches run
// far ahead of the GPU). So the launch path puts a cuStreamWaitValue64 into the application's
// stream: wait until a counter in mapped host memory reaches the launch at which the prefetch is
// issued; the advisor's stream writes the counter after each launch's prefetches. Waits start
// only after the advisor's first barrier on the application's streams (which must not include a
// wait, or the two streams would wait for each other), and the counter is set to its maximum
// when a plan is dropped and at exit, so no wait outlives the advisor.
//
// UMSWAP_EVICT_WAIT: a launch does not start before the evictions whose room it needs are done
// (Plan::room_wait_back: what the advisor's stream has not done yet must fit in the room the
// plan leaves at the launch; an eviction whose room goes to a prefetch needs no wait, as the
// prefetch runs after it), so that what the launch brings to the GPU (its outputs, populated as
// it writes them) never joins data on its way out: the budget holds on the GPU, not only in the
// plan. The same counter: the advisor's stream writes 2g once launch g's evictions are done and
// 2g + 1 once all its actions are; a launch waits for the larger value it needs.
//
// Contract:
//   * start() once, from the first CUDA-using thread, outside any lock; on failure the program
//     runs on plain managed memory and the caller says so once.
//   * on_step()/after_step() run on launching threads and allocate only to grow thread-local
//     scratch; on_step() blocks with UMSWAP_EVICT_COPY, for a launch that reaches memory copied
//     to the host, until the advisor has brought it all back (docs/advisor.md "Evictions umswap
//     copies"), and for a launch that must find its memory on the GPU, for its prefetch calls
//     and while the advisor thread issues one migration (resident_mutex).
//   * on_finish() (from the tracer's exit handler, before the CUDA runtime tears down) stops and
//     joins the thread; stats() may be called afterwards.
//
// The invariant (DESIGN.md, "Two engines, one invariant"): an access the plan did not foresee
// costs time, never correctness. What keeps it, and where it does not hold:
//   * Default (UMSWAP_EVICT_COPY=0): every prefetch and eviction is the driver's migration of
//     managed memory (cuMemPrefetchAsync), which stays coherent whatever a kernel touches,
//     through its parameters or through pointers stored in device memory: an access nobody
//     foresaw faults the page back (slow, never wrong).
//   * UMSWAP_EVICT_COPY=1 (opt-in, fast): an eviction copies the range to pinned host memory and
//     discards its GPU pages. The launch path's guard brings a held range back before any launch
//     whose parameters point into it, but a kernel that reaches it through a pointer the
//     parameter scan cannot see (a pointer table in device memory: grouped or batched GEMMs,
//     foreach lists passed through memory, custom extensions) reads discarded pages, and what it
//     writes there is lost to the copy back. umswap cannot find such kernels in general, so this
//     path is not the default; `umswap run --verify` runs a program on it once and reports every
//     GPU page fault on a discarded page (copy_clashes.h, find_unforeseen_faults()).
//   * Not for every kernel: cuDNN's fused attention with dropout computes a different output when
//     part of its memory is not on the GPU (faulted in, or read through a mapping to the host),
//     with or without umswap (docs/RELIABILITY.md, "Kernels that a page fault changes"). For such
//     kernels (resident_launches.h) the launch path makes the invariant true itself: everything
//     their parameters point at is prefetched to the GPU on their stream before they run, they
//     wait for the migrations issued before them, and migrate() issues none while one is being
//     launched (the later ones wait for it on the advisor's stream). What it cannot cover: a
//     pointer such a kernel loads from memory, and a kernel with the same flaw not named there.
//     New allocations are also populated before the program gets them
//     (ManagedAllocator::populate_on_allocation()), so a run without a budget takes no faults.
//   * Within the copy path, a copy out never reads pages whose copy back is still on its way
//     (HostCopies::copy_back_pending(): it waits for that copy back's event, or the driver
//     evicts): before 2026-11-28 a plan switch's copies back raced the new plan's copies out,
//     which saved pages not yet filled and later wrote them over the program's tensors (issue 36).
// Streams: the advisor uses several of its own (evictions, copies back, populates, discards,
// sweeps), ordered among themselves and with the program's streams by events and stream waits;
// the program's streams are never reordered.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "umswap/allocator/placement.h"
#include "umswap/allocator/registry.h"
#include "umswap/core/options.h"
#include "umswap/tracer/tracer.h"
#include "umswap/tracer/tracer_ports.h"

namespace umswap {
class DropOrder;  // allocator/drop_order.h
}  // namespace umswap

namespace umswap::advisor {

struct AdvisorDriver {
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  PFN_cuDeviceTotalMem_v3020 device_total_mem = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuStreamWaitEvent_v3020 stream_wait_event = nullptr;
  PFN_cuMemPrefetchAsync_v12020 mem_prefetch_async = nullptr;
  // For UMSWAP_PREFETCH_WAIT and UMSWAP_EVICT_WAIT only (a launch waits on a counter the
  // advisor's stream writes).
  PFN_cuMemHostAlloc_v2020 mem_host_alloc = nullptr;
  PFN_cuMemHostGetDevicePointer_v3020 mem_host_get_device_pointer = nullptr;
  PFN_cuStreamWaitValue64_v11070 stream_wait_value64 = nullptr;
  PFN_cuStreamWriteValue64_v11070 stream_write_value64 = nullptr;
  // For UMSWAP_EVICT_COPY only (evictions copied to pinned host memory, host_copies.h).
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuMemFreeHost_v2000 mem_free_host = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 memcpy_dtoh_async = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 memcpy_htod_async = nullptr;
  PFN_cuMemDiscardBatchAsync_v13000 mem_discard_batch_async = nullptr;
  // For umswap's copy kernel only (copy_kernel.h); without them a copy engine copies.
  PFN_cuModuleLoadData_v2000 module_load_data = nullptr;
  PFN_cuModuleGetFunction_v2000 module_get_function = nullptr;
  PFN_cuLaunchKernel_v4000 launch_kernel = nullptr;
  // The advisor thread takes the relaxed capture mode, so that its calls never end a CUDA
  // graph capture a program thread has open in the global mode (without it they may).
  PFN_cuThreadExchangeStreamCaptureMode_v10010 thread_exchange_capture_mode = nullptr;
  bool complete() const;
  bool can_copy() const;
};

struct AdvisorConfig {
  Mode mode = Mode::online;  // online or replay
  SizeSpec budget;           // 0 = the GPU's memory
  std::string replay_path;   // replay: the trace
  // A launch waits for its late prefetch (UMSWAP_PREFETCH_WAIT; on in the library by default,
  // off here so that a test turns it on where it means to).
  bool prefetch_wait = false;
  bool evict_wait = false;  // a launch waits for the evictions planned at it (UMSWAP_EVICT_WAIT)
  // Evictions copied to pinned host memory and discarded, brought back by a populate and a copy
  // (UMSWAP_EVICT_COPY; needs the waits' counter, docs/advisor.md "Evictions umswap copies").
  // The copies are umswap's copy kernel (copy_kernel.h) on a few SMs instead of cuMemcpyAsync,
  // whose two directions share one copy engine's bandwidth for managed memory; if the kernel
  // does not load, a copy engine copies (said once, in the stats). A copy back's populate and a
  // copy out's discard run on streams of their own (after the same waits), so that the copies
  // each way follow each other without them in between.
  bool evict_copy = false;
  // A diagnostic (UMSWAP_DEBUG=keep-pages): the copies out and back run as with evict_copy, but
  // the GPU pages are not discarded, so a launch that reads a range before its copy back still
  // finds the data, while a stale copy back still overwrites newer bytes.
  bool keep_pages = false;
  // umswap run --verify (UMSWAP_VERIFY): with evict_copy, each range copied out is hashed on the
  // GPU as it leaves and once it is back (round_trips.h); the stats say what agreed.
  bool verify = false;
  // UMSWAP_LEARN_EVICT: while learning, each launch evicts the least recently used blocks past
  // the budget and prefetches its own, on its stream (learning_evictor.h).
  bool learn_evict = true;
  // UMSWAP_DEBUG=hang-stacks: when the watchdog reports a stall, every thread prints its stack.
  bool hang_stacks = false;
  // UMSWAP_DEBUG=op-log (op_log.h): every call on the advisor's streams followed on the GPU, for
  // the stall reports. Without it, only a write of a number to pinned memory between a stream's
  // event waits and the managed call after them (docs/advisor.md, "Closing the advisor's calls":
  // without, the bundled cuDNN sample hung with copies).
  bool op_log = false;
  // True while umswap's own code runs on the calling thread (a hook): its blocking calls (the
  // allocator's, under its lock) do not wait for the advisor in before_blocking(). Empty: never.
  std::function<bool()> in_own_code;
  // Asked when a plan is made: plan with slab lifetimes (UMSWAP_LIFETIMES)? True only when the
  // allocator discards what discard_page() approves; empty or false: every byte a kernel touched
  // is live.
  std::function<bool()> lifetimes;
  // Hands a placement to the slab allocator (ManagedAllocator::place); empty: no placement
  // (UMSWAP_PLACEMENT=0, or no lifetimes). Online, the first iteration learned with lifetimes is
  // placed and learned again; replay places what the trace's iteration gives when the trace holds
  // that placement's arena (docs/advisor.md, "Placement").
  std::function<bool(umswap::Placement)> place;
  // Discards the wholly free slab pages `discard` accepts (ManagedAllocator::sweep_free_pages);
  // called when a plan takes effect and at its next two iteration boundaries, with
  // discard_page() as `discard`: pages freed before the plan knew they were dead, or that no plan
  // uses (an earlier iteration's addresses); on a non-blocking stream of the advisor's own.
  // Empty: no sweeps.
  std::function<uint64_t(const std::function<bool(uint64_t)>&, CUstream)> sweep;
  // The frees' and sweeps' discards, ordered with migrate()'s calls (drop_order.h): a migration
  // leaves out the pages of discards not seen finished. Null: none (no discards, or no events).
  DropOrder* drop_order = nullptr;
  // The GPU memory the program mapped itself, now (ProgramMappings: NCCL's buffers, JAX): it
  // stays on the GPU and counts against the budget, so online plans and learning keep managed
  // memory under managed_budget(). Empty: none. (A replay plan is made at start, before.)
  std::function<uint64_t()> program_gpu_bytes;
  double prefetch_bytes_per_s = 40e9;
  double evict_bytes_per_s = 12e9;
};

class AdvisorImpl;

// The process-wide advisor. Also the tracer's LaunchObserver.
class Advisor final : public tracer::LaunchObserver {
 public:
  // `steps` and `residency` are the tracer's (tracer_ports.h: the process's are
  // tracer::process_step_log() and process_residency_sink()); both outlive the advisor.
  Advisor(const tracer::StepLogReader& steps, tracer::ResidencySink& residency);
  ~Advisor() override;
  Advisor(const Advisor&) = delete;
  Advisor& operator=(const Advisor&) = delete;

  // Returns false with a reason if the advisor cannot run (driver functions missing).
  bool start(const AdvisorConfig& config, const AdvisorDriver& driver, Registry& registry,
             std::string* reason);

  void on_step(uint64_t index, uint32_t key, CUstream stream,
               const std::vector<tracer::PointerHit>* hits) override;
  void after_step(uint64_t index, CUstream stream) override;
  void on_finish() override;
  // A CUDA graph launch, host function or stream callback (the tracer cannot see what it
  // touches): with UMSWAP_EVICT_COPY in force, everything copied to the host comes back and
  // copies stop for the rest of the run before the call goes on; the call's stream waits for
  // those copies back.
  void on_opaque(CUstream stream, const char* what) override;
  // Before the program blocks on the GPU: waits until the advisor has applied every launch
  // submitted (at most 5 s), so that no word a launch waits on is left for the advisor to write
  // while the blocking call may hold the driver.
  void before_blocking() override;
  // The program is about to free its allocation [base, base + size) (not a slab block): with
  // UMSWAP_EVICT_COPY what umswap holds of it on the host is dead, and is dropped rather than
  // copied back into memory that is gone (or reused); copies of it still in flight are waited
  // for. Any thread; cheap when copies are not in force.
  void before_free(uint64_t base, uint64_t size);

  // The slab allocator's question at a free (any thread, under its lock; cheap, no CUDA): should
  // the wholly free 2 MiB page at `page` be discarded now? Yes when the plan in force drops that
  // page (its data is dead and not kept) at the current launch's phase, or uses it nowhere (no
  // range of the plan touches it: a free page nobody plans to touch is dead).
  bool discard_page(uint64_t page);

  // The slab allocator's question when an allocation overlaps discarded pages (same rules): may
  // the 2 MiB page at `page` stay unpopulated? Yes when the plan in force drops it: the launch
  // path populates it (cuMemPrefetchAsync to the GPU on the launch's stream, no transfer) just
  // before the launch the plan says uses it next.
  bool populate_later(uint64_t page);

  // The "advisor" object of the stats file, and per-iteration figures merged into `iterations`
  // (one object per iteration of `summary`, which may be null).
  nlohmann::json stats(const tracer::RunSummary* summary) const;

 private:
  AdvisorImpl* impl_;
};

// The stats file's "iterations" array from a run summary: per iteration wall time, faults and
// bytes moved (CUPTI), counted peak GPU-resident bytes, and, when `transfers` is given, the bytes
// umswap prefetched and evicted during launches [first, last) of the iteration.
nlohmann::json iterations_json(
    const tracer::RunSummary& summary,
    const std::function<std::pair<uint64_t, uint64_t>(uint64_t, uint64_t)>& transfers = {});

}  // namespace umswap::advisor
