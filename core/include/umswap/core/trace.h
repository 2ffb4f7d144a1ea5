// The access trace: what one traced run learned, in memory. Written by the tracer inside the
// traced program, read back by `umswap report|timeline|replay` through one reader
// (trace_file.h). Plain data; no CUDA. Indices are into the vectors of the same Trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace umswap::trace {

// A buffer the program allocated (a registry record at the time of the run).
struct Buffer {
  uint64_t id = 0;         // BufferId: allocation order in the recording process
  uint64_t size = 0;       // bytes requested
  uint64_t call_site = 0;  // CallSiteId, stable across runs
  uint64_t base = 0;       // address in the recording process (informational only)
  uint8_t api = 0;         // AllocApi
  bool freed = false;      // freed before the trace was written
};

enum class StepKind : uint8_t { kernel = 0, memcpy = 1, memset = 2 };

// One byte range of one buffer touched by a step.
struct Access {
  uint32_t buffer = 0;  // index into Trace::buffers
  uint64_t offset = 0;  // from the buffer's base
  uint64_t length = 0;  // bytes; > 0, offset + length <= buffer size
};

// One launch (kernel, memcpy or memset) in program order.
struct Step {
  StepKind kind = StepKind::kernel;
  uint32_t name = 0;          // index into Trace::names (kernel symbol, or "memcpy HtoD", ...)
  uint64_t stream = 0;        // stream handle value in the recording process (identifies, per run)
  uint64_t first_access = 0;  // index into Trace::accesses
  uint32_t access_count = 0;
  uint64_t start_ns = 0;  // GPU start/end from CUPTI activity; 0 when not known
  uint64_t end_ns = 0;
};

// Unified-memory counters over one span of the run.
struct Counters {
  uint64_t gpu_page_faults = 0;  // fault groups (CUPTI GPU_PAGE_FAULT value)
  uint64_t bytes_htod = 0;
  uint64_t bytes_dtoh = 0;
  uint64_t thrashing_events = 0;
  uint64_t cpu_page_faults = 0;
};

// One training iteration: a contiguous run of steps.
struct Iteration {
  uint64_t first_step = 0;
  uint64_t step_count = 0;
  uint64_t start_ns = 0;  // host clock (CLOCK_MONOTONIC) at its first and after its last launch
  uint64_t end_ns = 0;
  Counters counters;
};

// A GPU page fault seen by CUPTI, for timelines.
struct Fault {
  uint64_t time_ns = 0;
  uint64_t address = 0;
  uint32_t buffer = UINT32_MAX;  // index into buffers, UINT32_MAX when outside every buffer
  uint8_t access = 0;            // CUPTI access type: 1 read, 2 write, 3 atomic, 4 prefetch
};

// A block of a buffer handed to the program (freed false) or given back (freed true), between two
// launches: after step before_step - 1 was launched and before step before_step (0 = before the
// first step; steps.size() = after the last). Only stream-ordered allocations carved out of
// umswap's slabs have them; the buffer is the slab.
struct Lifetime {
  uint64_t before_step = 0;
  uint32_t buffer = 0;  // index into Trace::buffers
  uint64_t offset = 0;  // from the buffer's base
  uint64_t length = 0;  // > 0, offset + length <= buffer size
  bool freed = false;
};

// Bytes moving between the GPU and the host for managed memory, from CUPTI's records, for
// timelines: umswap's own copies (UMSWAP_EVICT_COPY), the migrations of prefetch calls (the
// advisor's prefetches and evictions), and the driver's own (faults, its evictions).
struct Transfer {
  enum Kind : uint8_t { copy = 0, prefetch_call = 1, driver = 2 };
  uint64_t start_ns = 0;  // GPU clock (CUPTI)
  uint64_t end_ns = 0;    // >= start_ns
  uint64_t address = 0;
  uint64_t bytes = 0;
  bool to_gpu = true;
  uint8_t kind = copy;  // Kind
};

struct Detection {
  uint64_t period = 0;        // steps per iteration; 0 = none found
  double confidence = 0.0;    // 0..1: share of the steady part that repeats exactly
  uint64_t warmup_steps = 0;  // steps before the first detected iteration
  std::string source;         // "period", "nvtx:<name>", "api" (umswap_mark_iteration)
};

struct Trace {
  std::string program;  // argv[0] of the recording process
  uint64_t pid = 0;
  uint64_t dropped_records = 0;  // CUPTI records dropped rather than blocking the program
  Detection detection;
  std::vector<std::string> names;
  std::vector<Buffer> buffers;
  std::vector<Step> steps;
  std::vector<Access> accesses;
  std::vector<Iteration> iterations;
  std::vector<Fault> faults;
  std::vector<Lifetime> lifetimes;  // in program order (before_step non-decreasing)
  std::vector<Transfer> transfers;  // by start_ns
  Counters totals;
};

}  // namespace umswap::trace
