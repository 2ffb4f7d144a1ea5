// The tracer: a CUPTI subscriber inside the traced program that turns its kernel launches,
// memcpys and memsets into steps (which buffers each touches), detects iterations, collects
// kernel times and unified-memory counters, and writes the access trace at exit.
//
// Contract:
//   * start() is called once, after the driver is usable and outside any lock; it loads CUPTI
//     and subscribes. On failure it returns false with the cause; the caller says so once and the
//     program runs on as before (plain managed memory, no trace).
//   * The launch path (CUPTI callback on the launching thread) takes one registry snapshot, scans
//     the parameters, appends to the step log under a mutex shared only by launching threads,
//     and never blocks on the activity path. Nothing it does allocates once the kernel's layout
//     is cached, except when the step log grows (amortized).
//   * Activity buffers (4 MiB) are handed to CUPTI and parsed on CUPTI's own thread; records
//     that cannot be kept are dropped and counted, never waited for.
//   * finish() (at exit) flushes CUPTI, assembles the trace and writes it atomically (when a
//     trace path was given), and keeps a RunSummary for the stats file.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "umswap/allocator/registry.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/param_scanner.h"

namespace umswap::tracer {

// Who else wants to see each launch (the advisor). Calls come from the launching threads.
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  // Launch `index` (0-based count of every step the tracer saw, logged or not) with step `key`
  // on `stream`, at API entry. Serialized: called under the tracer's launch-path lock. Must be
  // cheap and must not call the CUDA API.
  virtual void on_step(uint64_t index, uint32_t key, CUstream stream) = 0;
  // The same launch after the driver call returned (API exit), on the same thread, outside the
  // tracer's lock: the work is in the stream, so an event recorded now completes after it.
  virtual void after_step(uint64_t index, CUstream stream) = 0;
  // finish() calls this first, before the final flush: stop using CUDA.
  virtual void on_finish() = 0;
};

// Driver functions the launch path needs to read a kernel's parameter layout and name.
struct TracerDriver {
  PFN_cuFuncGetParamInfo_v12040 func_get_param_info = nullptr;
  PFN_cuKernelGetParamInfo_v12040 kernel_get_param_info = nullptr;
  PFN_cuFuncGetName_v12030 func_get_name = nullptr;
  PFN_cuKernelGetName_v12030 kernel_get_name = nullptr;
};

struct TracerConfig {
  std::string trace_path;              // where the trace is written at exit
  uint64_t max_iterations = 0;         // stop recording after this many iterations (0 = all)
  std::string cupti_library;           // explicit libcupti path, or empty to search
  std::string iteration_marker;        // NVTX range name marking iterations; empty = detect
  std::string program;                 // argv[0], for the trace header
  LaunchObserver* observer = nullptr;  // outlives the tracer; may be null
};

// Steps [first, first + count) of the log, copied for the advisor thread (a short hold of the
// launch-path lock).
struct StepLog {
  std::vector<uint32_t> keys;
  std::vector<uint64_t> streams;
  std::vector<PointerHit> hits;     // all steps' hits, in step order
  std::vector<uint64_t> first_hit;  // step i's hits: [first_hit[i], first_hit[i + 1])
};
// Keys of steps [first, ...) logged so far (at most `max` of them).
std::vector<uint32_t> copy_keys(uint64_t first, uint64_t max = UINT64_MAX);
// False if those steps are not (all) in the log.
bool copy_steps(uint64_t first, uint64_t count, StepLog* out);
// Number of steps in the log (the launch index of the next logged step while none is dropped).
uint64_t logged_steps();
// The kernel name (or "memcpy ..."/"memset") a step key stands for; empty if unknown.
std::string key_name(uint32_t key);

// What finish() assembled, for the stats file: the run's trace (also when none is written) and
// GPU-resident bytes counted from CUPTI's unified-memory records (transfers to the GPU add their
// pages, to the host remove them, a GPU fault adds the 2 MiB chunk around it within its
// allocation; independent of any plan; pages populated on the GPU by a prefetch without a
// transfer are not seen until they first move).
struct RunSummary {
  trace::Trace trace;
  std::vector<uint64_t> iteration_peak_resident;  // by trace.iterations index
  uint64_t peak_resident = 0;
  bool has_unified_memory_counters = false;
};
// After finish(): the summary, or null when the tracer never ran.
const RunSummary* run_summary();

// Starts the process-wide tracer. Returns false and sets `reason` if CUPTI cannot be used.
bool start_tracer(const TracerConfig& config, const TracerDriver& driver, Registry& registry,
                  std::string* reason);
// An explicit iteration boundary (umswap_mark_iteration()).
void mark_iteration();
// Flushes CUPTI, assembles and writes the trace. Safe to call more than once; later calls do
// nothing.
void finish_tracer();
bool tracer_running();

}  // namespace umswap::tracer
