// Engine vmm's driver calls, counted and timed: the stats' `vmm.driver_calls` (docs/stats.md).
// Where a window's or an allocation's time goes, by call: set-access on host chunks, creates,
// unmaps, the copies' enqueues and waits, the events of stream-ordered frees.
//
// time_vmm_driver() replaces each pointer of the two tables with a shim that calls the original
// and adds its wall time to a process-wide total; call it once, before the tables are handed to
// the engine (the shims read the originals without a lock). vmm_driver_call_totals() reads the
// totals; any thread. vmm_driver_in_window() marks the calling thread's calls. A shim costs two
// clock reads (tens of ns) against calls of 0.3 µs (an event query) and more. The window's drain
// (VmmObserver's cuCtxSynchronize: `vmm.window_drain_ms`) is not among them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "umswap/allocator/vmm_allocator.h"
#include "umswap/vmm/vmm_driver.h"

namespace umswap {

struct DriverCallTotal {
  std::string_view name;  // the driver function, "cuMemSetAccess"
  uint64_t calls = 0;
  double ms = 0;
  uint64_t window_calls = 0;  // of them, inside windows (VmmObserver's moves)
  double window_ms = 0;
};

void time_vmm_driver(vmm::VmmDriver& arena, VmmSyncDriver& sync);

// The calling thread's calls from now on count as inside a window (true) or not (false).
void vmm_driver_in_window(bool inside);

// The functions called at least once, in the tables' order.
std::vector<DriverCallTotal> vmm_driver_call_totals();

}  // namespace umswap
