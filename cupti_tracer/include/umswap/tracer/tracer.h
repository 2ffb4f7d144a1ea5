// The tracer: a CUPTI subscriber inside the traced program that turns its kernel launches,
// memcpys and memsets into steps (which buffers each touches), detects iterations, collects
// kernel times and unified-memory counters, and writes the access trace at exit.
//
// Contract:
//   * start() is called once, after the driver is usable and outside any lock; it loads CUPTI
//     and subscribes. On failure it returns false with the cause; the caller says so once and the
//     program runs on as before (plain managed memory, no trace).
//   * The launch path (CUPTI callback on the launching thread) looks its function up in a
//     lock-free per-function cache (the driver is asked once per function), takes one registry
//     snapshot, and hands the launch to a StepRecorder (step_recorder.h): parameter scan, launch
//     log append, detector, observer, under a mutex that only launching threads take. Nothing it
//     does allocates in steady state except a new 2 MiB log chunk every 64 Ki steps, and it never
//     blocks on the activity path or on the log's readers.
//   * The log's readers (copy_keys, copy_steps, logged_steps, key_name; the advisor thread) take
//     no lock: they read what the launch log has published (launch_log.h). The log keeps the
//     whole run, up to 16 Mi steps and 64 Mi pointer hits; later steps are dropped and counted.
//   * Activity buffers (4 MiB, at most 64 out) are handed to CUPTI and parsed on CUPTI's own
//     thread. A flush thread hands CUPTI's filled-so-far buffers over within 100 ms of an
//     iteration's end (a marker or a detected boundary); finish() does the final forced flush.
//     Records that cannot be kept are dropped, never waited for, and counted
//     (cuptiActivityGetNumDroppedRecords) into the trace's dropped_records, with dropped steps.
//   * finish() (at exit) stops the flush thread, flushes CUPTI, assembles the trace and writes it
//     atomically (when a trace path was given), and keeps a RunSummary for the stats file.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "umswap/allocator/registry.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/copy_clashes.h"
#include "umswap/tracer/fault_kernels.h"
#include "umswap/tracer/launch_log.h"
#include "umswap/tracer/lifetimes.h"
#include "umswap/tracer/param_scanner.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap::tracer {

// Driver functions the launch path needs to read a kernel's parameter layout and name.
struct TracerDriver {
  PFN_cuFuncGetParamInfo_v12040 func_get_param_info = nullptr;
  PFN_cuKernelGetParamInfo_v12040 kernel_get_param_info = nullptr;
  PFN_cuFuncGetName_v12030 func_get_name = nullptr;
  PFN_cuKernelGetName_v12030 kernel_get_name = nullptr;
  // The device whose unified-memory counters are collected: the current context's at the first
  // traced call (a DDP rank's own GPU), device 0 without it.
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  // Whether a launch's stream is being captured into a CUDA graph (asked only while a capture is
  // open): a captured launch does not run now, so it is no step, and nothing may be added to its
  // stream (a prefetch there ends the capture with an error).
  PFN_cuStreamIsCapturing_v10000 stream_is_capturing = nullptr;
};

struct TracerConfig {
  std::string trace_path;  // where the trace is written at exit
  // The trace file holds the first this many iterations (trace::first_iterations; 0 = all). The
  // whole run is logged either way: the advisor learns from the log, and the iterations are
  // found from all of it at exit.
  uint64_t max_iterations = 0;
  std::string cupti_library;           // explicit libcupti path, or empty to search
  std::string iteration_marker;        // NVTX range name marking iterations; empty = detect
  std::string program;                 // argv[0], for the trace header
  LaunchObserver* observer = nullptr;  // outlives the tracer; may be null
};

// The log, read from any thread without a lock (StepLog is in launch_log.h).
// Keys of steps [first, ...) logged so far (at most `max` of them).
std::vector<uint32_t> copy_keys(uint64_t first, uint64_t max = UINT64_MAX);
// False if those steps are not (all) in the log.
bool copy_steps(uint64_t first, uint64_t count, StepLog* out);
// Number of steps in the log (the launch index of the next logged step while none is dropped).
uint64_t logged_steps();
// The kernel name (or "memcpy ..."/"memset") a step key stands for; empty if unknown.
std::string key_name(uint32_t key);
// The same without a copy: valid while the tracer lives (until the process exits); no lock.
std::string_view key_view(uint32_t key);

// What finish() assembled, for the stats file: the run's trace (also when none is written) and
// GPU-resident bytes counted from CUPTI's unified-memory records (transfers to the GPU add their
// pages, to the host remove them, a GPU fault adds the 2 MiB chunk around it within its
// allocation; independent of any plan; pages populated on the GPU by a prefetch without a
// transfer are not seen until they first move).
struct RunSummary {
  trace::Trace trace;
  std::vector<uint64_t> iteration_peak_resident;       // by trace.iterations index
  std::vector<uint64_t> iteration_peak_resident_free;  // of it, in no live block (residency.h)
  // At each iteration's peak: the step running (launch index; UINT64_MAX: unknown) and the
  // buffers holding the most resident bytes.
  struct BufferShare {
    uint32_t buffer = 0;  // index into trace.buffers
    uint64_t resident = 0, live = 0;
    // The first one's resident and live ranges as (offset, length), 64 at most each.
    std::vector<std::pair<uint64_t, uint64_t>> resident_ranges, live_ranges;
  };
  std::vector<uint64_t> iteration_peak_step;
  std::vector<std::vector<BufferShare>> iteration_peak_buffers;
  uint64_t peak_resident = 0;
  bool has_unified_memory_counters = false;
  // New functions' parameter layouts read before the driver's launch (prepare_launch()), and
  // those read inside it, for launches that came by none of umswap's launch hooks.
  uint64_t layouts_prepared = 0, layouts_read_in_callback = 0;
  // Functions whose layout the driver could not give (their pointers go unseen), its last error.
  uint64_t layouts_unknown = 0;
  int layout_error = 0;
  // Functions whose first use waited for the advisor to catch up (lazy module loading).
  uint64_t first_uses = 0;
  // Launches, copies and memsets captured into CUDA graphs: not steps (their graph's launches
  // are, as opaque calls).
  uint64_t captured_calls = 0;
  // The GPU page faults recorded (the first 2^20) by the kernels running when they came
  // (fault_kernels.h); name indexes trace.names.
  FaultKernelReport fault_kernels;
  // UMSWAP_EVICT_COPY's copies checked against the steps (copy_clashes.h), with the kernel names
  // of report.first; absent when umswap copied nothing.
  std::optional<CopyClashReport> copy_clashes;
  std::vector<std::string> copy_clash_names;
  // GPU page faults on pages umswap had copied to the host and discarded (copy_clashes.h,
  // find_unforeseen_faults()): accesses nobody foresaw, which may have changed the program's
  // results (each one's buffer indexes trace.buffers). For each of report.first: the steps that
  // ran on the GPU at the fault's time ("step <index> <kernel>").
  std::optional<UnforeseenReport> unforeseen;
  std::vector<std::vector<std::string>> unforeseen_steps;
  // By trace.iterations index (empty when umswap copied nothing): how long its copies kept the
  // link busy each way in the iteration's GPU time (copy_busy()).
  std::vector<CopyBusy> iteration_copy_busy;
  // In the last full iteration with copies (copy_idle_iteration): the longest stretches with no
  // copy either way (copy_idle_gaps()), and the first step that started in each (UINT64_MAX:
  // none) with its kernel's name.
  struct IdleGap {
    CopyIdleGap gap;
    uint64_t first_step = UINT64_MAX;
    std::string first_name;
  };
  uint64_t copy_idle_iteration = UINT64_MAX;
  std::vector<IdleGap> copy_idle_gaps;
};
// Iteration i of `iterations` on the GPU's clock: from its first step's start to the next
// iteration's (host gaps included), or to its own last end when it is the last; {0, 0} when it
// has no GPU time. The window of its wall time and of its copies' busy time.
std::pair<uint64_t, uint64_t> iteration_window(const std::vector<trace::Iteration>& iterations,
                                               size_t i);
// After finish(): the summary, or null when the tracer never ran.
const RunSummary* run_summary();

// Starts the process-wide tracer. Returns false and sets `reason` if CUPTI cannot be used.
bool start_tracer(const TracerConfig& config, const TracerDriver& driver, Registry& registry,
                  std::string* reason);
// An explicit iteration boundary (umswap_mark_iteration()).
void mark_iteration();
// Flushes CUPTI, assembles and writes the trace. Safe to call more than once; later calls do
// nothing. `used_cuda` false: the process allocated nothing through umswap, and if the tracer saw
// no call either, nothing is written (a launcher must not overwrite its workers' trace).
void finish_tracer(bool used_cuda = true);
bool tracer_running();
// True once the tracer has seen a CUDA call (a launch, copy or memset) in this process.
bool tracer_saw_calls();
// True while a stream capture (CUDA graph) begun in this process has not ended, as the tracer saw
// them: engine vmm opens no window then (synchronizing the context would invalidate a capture in
// the global mode).
bool capture_open();

// The program itself called a CUPTI function that only one client can use (cuptiSubscribe,
// cuptiActivityRegisterCallbacks, cuptiActivityEnable...): a profiler such as torch.profiler is
// starting. Before start_tracer() the tracer will not start (start_tracer() says why); while it
// runs it steps aside at once: one warning, the advisor stopped, CUPTI flushed and released, the
// trace so far written, as finish_tracer() does. `what` names the call and its caller. Later
// calls do nothing.
void yield_cupti(const std::string& what);
// umswap discarded [address, address + bytes) of managed memory (on_gpu false) or populated it
// on the GPU without a transfer (on_gpu true; the slabs' planned discards): the residency count
// removes or adds its pages as a transfer would, without counting bytes moved.
void note_residency(uint64_t address, uint64_t bytes, bool on_gpu);
// The same for a populate issued from the launch path (Observer::on_step), placed at the GPU
// start of the step being launched.
void note_launch_populate(uint64_t address, uint64_t bytes);
// A kernel launch is about to enter the driver (umswap's launch hooks, on the launching thread):
// a function not seen before has its parameter layout read now, outside the driver's launch,
// where such a read can wait for good behind another thread's driver call (tracer_callback.cpp).
void prepare_launch(CUfunction f);
// A call that holds its thread until the GPU gets somewhere (a copy to the host, a synchronize)
// is about to enter the driver (umswap's hooks, on the calling thread): the observer hears of it
// now (before_blocking()), outside the driver. The tracer's callback inside the call tells it
// again, for a copy's own step (tracer_callback.cpp); by then it rarely has to wait.
void before_blocking_call();
// The same for UMSWAP_EVICT_COPY's discards and populates, placed where CUPTI saw a copy of
// umswap's own run (`copy`: its correlation id, from last_own_copy()): a discard at the end of the
// copy it follows on its stream, a populate at the start of the copy that follows it. Without
// CUPTI's record of that copy: where the GPU runs step `step` (a populate at its start, a discard
// at the previous step's end), or with `step` UINT64_MAX at the time of the call (a discard noted
// once seen done: the count errs high).
void note_residency_by_copy(uint64_t address, uint64_t bytes, bool on_gpu, uint32_t copy,
                            uint64_t step);
// The correlation id of the calling thread's last cuMemcpyDtoHAsync/cuMemcpyHtoDAsync or
// cuLaunchKernel (umswap's copy kernel), for a thread untrace_this_thread() marked; 0: none seen.
uint32_t last_own_copy();
// A copy of umswap's own (`correlation`: last_own_copy() right after it) of [address, address +
// length) to the GPU or to the host: checked against the steps at the end (RunSummary::
// copy_clashes), where CUPTI recorded its times.
void note_own_copy(uint32_t correlation, uint64_t address, uint64_t length, bool to_gpu);
// The calling thread's CUDA calls are umswap's own (the advisor thread's copies): not logged as
// the program's steps.
void untrace_this_thread();
// The slab allocator's lifetime callback (called under its lock): logged (LifetimeEvent, in
// lifetimes.h) while the tracer records, under a mutex no launch takes. The log keeps the last
// 1 Mi events (plans need only recent iterations); the trace gets those that fall inside buffers
// it lists.
void note_lifetime(uint64_t address, uint64_t bytes, bool freed);
// The logged events with from_step <= when <= to_step, in program order.
std::vector<LifetimeEvent> copy_lifetimes(uint64_t from_step, uint64_t to_step);
// What yield_cupti() was told, or empty.
std::string yielded_cupti_to();
// `name` from the libcupti the tracer loaded, or null (not loaded, no such symbol).
void* cupti_symbol(const char* name);

}  // namespace umswap::tracer
