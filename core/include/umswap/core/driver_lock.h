// A lock of umswap's own around driver calls that the CUDA driver must not run at the same time on
// two threads. Seen on an H200 (driver 580.159.04, 2026-11-26): a cuKernelGetParamInfo for a
// kernel launched for the first time (the tracer reading its parameter layout) waited for good
// while another thread's cuMemHostAlloc waited for a lock of the driver's (the advisor's pinned
// memory for UMSWAP_EVICT_COPY): `umswap replay` of the bundled cuDNN sample hung in its first
// iteration. The tracer's reads take it shared, the advisor's pinned allocations and module loads
// exclusively; neither holds it across anything that waits for the other.
#pragma once

#include <shared_mutex>

namespace umswap {

std::shared_mutex& driver_setup_mutex();

}  // namespace umswap
