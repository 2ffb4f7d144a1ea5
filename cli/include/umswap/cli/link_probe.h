// A short measurement of the GPU's links, for `umswap compare`: free and total memory, pinned
// copies each way, and managed-memory prefetches each way (the driver path umswap's advisor uses).
//
// The CLI links neither libcuda nor cudart: probe_link() dlopens libcuda.so.1 and uses cuda.h for
// types only, so `umswap` runs (and says why there are no link figures) on a machine without a
// driver. Callers take the probe as a function (LinkProber) so tests can pass a fake.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace umswap::cli {

// Bytes per second; nullopt when that part could not be measured.
struct LinkRates {
  std::optional<double> htod_bytes_per_s;      // pinned cuMemcpyHtoDAsync
  std::optional<double> dtoh_bytes_per_s;      // pinned cuMemcpyDtoHAsync
  std::optional<double> prefetch_bytes_per_s;  // cuMemPrefetchAsync of managed memory to the GPU
  std::optional<double> evict_bytes_per_s;     // cuMemPrefetchAsync of managed memory to the host
};

struct LinkProbe {
  std::string device_name;   // of device 0
  uint64_t total_bytes = 0;  // cuMemGetInfo on device 0, before the probe allocated anything
  uint64_t free_bytes = 0;
  LinkRates rates;
  std::vector<std::string> notes;  // one sentence per part that could not be measured, and why
};

// A probe, or why there is none ("no NVIDIA driver: libcuda.so.1: cannot open shared object
// file", "no GPU: cuInit: CUDA_ERROR_NO_DEVICE").
struct LinkProbeResult {
  std::optional<LinkProbe> probe;
  std::string error;  // set when !probe
};

using LinkProber = std::function<LinkProbeResult()>;

// Measures device 0 through its primary context: cuMemGetInfo; 256 MiB pinned host->device and
// device->host copies (best of 3, timed with events); a 512 MiB managed buffer, touched on the
// host, prefetched to the GPU and back 7 times (the best of the last 6 each way). Never holds more
// than 256 MiB of device memory plus 256 MiB pinned, then 512 MiB managed; skips the copies when
// less than 1 GiB is free. Everything it allocates is freed and the primary context released,
// on every path. Takes about a second on a GPU. Not thread-safe (it uses the calling thread's
// current context); does not throw.
LinkProbeResult probe_link();

}  // namespace umswap::cli
