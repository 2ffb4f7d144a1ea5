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
//   * finish() (at exit) flushes CUPTI, assembles the trace and writes it atomically.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "umswap/allocator/registry.h"

namespace umswap::tracer {

// Driver functions the launch path needs to read a kernel's parameter layout and name.
struct TracerDriver {
  PFN_cuFuncGetParamInfo_v12040 func_get_param_info = nullptr;
  PFN_cuKernelGetParamInfo_v12040 kernel_get_param_info = nullptr;
  PFN_cuFuncGetName_v12030 func_get_name = nullptr;
  PFN_cuKernelGetName_v12030 kernel_get_name = nullptr;
};

struct TracerConfig {
  std::string trace_path;        // where the trace is written at exit
  uint64_t max_iterations = 0;   // stop recording after this many iterations (0 = all)
  std::string cupti_library;     // explicit libcupti path, or empty to search
  std::string iteration_marker;  // NVTX range name marking iterations; empty = detect
  std::string program;           // argv[0], for the trace header
};

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
