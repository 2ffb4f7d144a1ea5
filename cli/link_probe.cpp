// The link probe: libcuda through dlopen, cuda.h for types only (the CLI must run without a
// driver, so it cannot link libcuda).
#include "umswap/cli/link_probe.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace umswap::cli {
namespace {

// The exported name of a driver function as this cuda.h spells it (cuMemGetInfo is a macro for
// cuMemGetInfo_v2, cuMemPrefetchAsync for cuMemPrefetchAsync_v2, ...).
#define UMSWAP_PROBE_NAME2(name) #name
#define UMSWAP_PROBE_NAME(name) UMSWAP_PROBE_NAME2(name)

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kCopyBytes = 256 * kMiB;
constexpr size_t kManagedBytes = 512 * kMiB;
constexpr int kManagedRounds = 6;  // timed managed round trips, after one that creates the pages
// Below this much free memory the probe allocates nothing: on a shared GPU another user's job
// matters more than a bandwidth figure.
constexpr uint64_t kMinFreeBytes = uint64_t{1} << 30;
constexpr int kCopyRepeats = 3;

struct Driver {
  decltype(&cuGetErrorName) get_error_name = nullptr;
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGetCount) device_get_count = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetName) device_get_name = nullptr;
  decltype(&cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
  decltype(&cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&cuMemGetInfo) mem_get_info = nullptr;
  decltype(&cuMemAlloc) mem_alloc = nullptr;
  decltype(&cuMemFree) mem_free = nullptr;
  decltype(&cuMemHostAlloc) mem_host_alloc = nullptr;
  decltype(&cuMemFreeHost) mem_free_host = nullptr;
  decltype(&cuMemAllocManaged) mem_alloc_managed = nullptr;
  decltype(&cuMemcpyHtoDAsync) memcpy_htod_async = nullptr;
  decltype(&cuMemcpyDtoHAsync) memcpy_dtoh_async = nullptr;
  decltype(&cuMemPrefetchAsync) mem_prefetch_async = nullptr;  // CUmemLocation form (12.2+)
  decltype(&cuStreamCreate) stream_create = nullptr;
  decltype(&cuStreamDestroy) stream_destroy = nullptr;
  decltype(&cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&cuEventCreate) event_create = nullptr;
  decltype(&cuEventDestroy) event_destroy = nullptr;
  decltype(&cuEventRecord) event_record = nullptr;
  decltype(&cuEventSynchronize) event_synchronize = nullptr;
  decltype(&cuEventElapsedTime) event_elapsed_time = nullptr;
};

template <typename F>
bool resolve(void* handle, F* out, std::initializer_list<const char*> names, std::string* missing) {
  for (const char* name : names) {
    if (void* symbol = ::dlsym(handle, name)) {
      *out = reinterpret_cast<F>(symbol);
      return true;
    }
  }
  if (missing->empty()) *missing = *names.begin();
  return false;
}

// Loads libcuda.so.1 and resolves every function the probe uses. The library is never closed:
// the driver starts threads and registers exit handlers that must not outlive its code.
std::optional<Driver> load_driver(std::string* error) {
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    *error = fmt::format("no NVIDIA driver: {}", why ? why : "cannot load libcuda.so.1");
    return std::nullopt;
  }
  Driver d;
  std::string missing;
#define UMSWAP_RESOLVE(field, name) resolve(handle, &d.field, {UMSWAP_PROBE_NAME(name)}, &missing)
  bool ok = UMSWAP_RESOLVE(get_error_name, cuGetErrorName);
  ok = UMSWAP_RESOLVE(init, cuInit) && ok;
  ok = UMSWAP_RESOLVE(device_get_count, cuDeviceGetCount) && ok;
  ok = UMSWAP_RESOLVE(device_get, cuDeviceGet) && ok;
  ok = UMSWAP_RESOLVE(device_get_name, cuDeviceGetName) && ok;
  ok = UMSWAP_RESOLVE(device_get_attribute, cuDeviceGetAttribute) && ok;
  ok = UMSWAP_RESOLVE(primary_ctx_retain, cuDevicePrimaryCtxRetain) && ok;
  ok = UMSWAP_RESOLVE(primary_ctx_release, cuDevicePrimaryCtxRelease) && ok;
  ok = UMSWAP_RESOLVE(ctx_set_current, cuCtxSetCurrent) && ok;
  ok = UMSWAP_RESOLVE(mem_get_info, cuMemGetInfo) && ok;
  ok = UMSWAP_RESOLVE(mem_alloc, cuMemAlloc) && ok;
  ok = UMSWAP_RESOLVE(mem_free, cuMemFree) && ok;
  ok = UMSWAP_RESOLVE(mem_host_alloc, cuMemHostAlloc) && ok;
  ok = UMSWAP_RESOLVE(mem_free_host, cuMemFreeHost) && ok;
  ok = UMSWAP_RESOLVE(mem_alloc_managed, cuMemAllocManaged) && ok;
  ok = UMSWAP_RESOLVE(memcpy_htod_async, cuMemcpyHtoDAsync) && ok;
  ok = UMSWAP_RESOLVE(memcpy_dtoh_async, cuMemcpyDtoHAsync) && ok;
  ok = UMSWAP_RESOLVE(stream_create, cuStreamCreate) && ok;
  ok = UMSWAP_RESOLVE(stream_destroy, cuStreamDestroy) && ok;
  ok = UMSWAP_RESOLVE(stream_synchronize, cuStreamSynchronize) && ok;
  ok = UMSWAP_RESOLVE(event_create, cuEventCreate) && ok;
  ok = UMSWAP_RESOLVE(event_destroy, cuEventDestroy) && ok;
  ok = UMSWAP_RESOLVE(event_record, cuEventRecord) && ok;
  ok = UMSWAP_RESOLVE(event_synchronize, cuEventSynchronize) && ok;
#undef UMSWAP_RESOLVE
  // cuEventElapsedTime_v2 is new in 12.8; the older entry point has the same signature.
  ok = resolve(handle, &d.event_elapsed_time,
               {UMSWAP_PROBE_NAME(cuEventElapsedTime), "cuEventElapsedTime"}, &missing) &&
       ok;
  if (!ok) {
    *error = fmt::format("the NVIDIA driver is too old: libcuda.so.1 has no {}", missing);
    return std::nullopt;
  }
  // Optional: a driver before 12.2 has no CUmemLocation prefetch; the copies are still measured.
  std::string ignored;
  resolve(handle, &d.mem_prefetch_async, {UMSWAP_PROBE_NAME(cuMemPrefetchAsync)}, &ignored);
  return d;
}

// Everything the probe holds, released in reverse order whatever path it leaves by.
class Session {
 public:
  explicit Session(const Driver& d) : d_(d) {}
  ~Session() {
    if (managed_) d_.mem_free(managed_);
    if (device_) d_.mem_free(device_);
    if (host_) d_.mem_free_host(host_);
    for (CUevent e : events_) {
      if (e) d_.event_destroy(e);
    }
    if (stream_) d_.stream_destroy(stream_);
    if (context_) {
      d_.ctx_set_current(nullptr);
      d_.primary_ctx_release(device_ordinal_);
    }
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::string name(CUresult r) const {
    const char* text = nullptr;
    if (d_.get_error_name(r, &text) == CUDA_SUCCESS && text) return text;
    return fmt::format("CUresult {}", static_cast<int>(r));
  }
  // "" when `r` is CUDA_SUCCESS, else "<what>: <CUDA_ERROR_...>".
  std::string check(CUresult r, std::string_view what) const {
    return r == CUDA_SUCCESS ? std::string() : fmt::format("{}: {}", what, name(r));
  }

  const Driver& d_;
  CUdevice device_ordinal_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent events_[3] = {nullptr, nullptr, nullptr};
  CUdeviceptr device_ = 0;
  void* host_ = nullptr;
  CUdeviceptr managed_ = 0;
};

double rate(size_t bytes, float ms) {
  return ms > 0 ? static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) : 0.0;
}

// Times `copy` (enqueued on the session's stream) kCopyRepeats times; the best rate.
template <typename Copy>
std::string best_rate(Session& s, Copy copy, double* best) {
  for (int i = 0; i < kCopyRepeats; ++i) {
    std::string e = s.check(s.d_.event_record(s.events_[0], s.stream_), "cuEventRecord");
    if (e.empty()) e = s.check(copy(), "copy");
    if (e.empty()) e = s.check(s.d_.event_record(s.events_[1], s.stream_), "cuEventRecord");
    if (e.empty()) e = s.check(s.d_.event_synchronize(s.events_[1]), "cuEventSynchronize");
    float ms = 0;
    if (e.empty()) {
      e = s.check(s.d_.event_elapsed_time(&ms, s.events_[0], s.events_[1]), "cuEventElapsedTime");
    }
    if (!e.empty()) return e;
    *best = std::max(*best, rate(kCopyBytes, ms));
  }
  return {};
}

// Pinned copies each way; frees its buffers before returning.
std::string measure_copies(Session& s, LinkRates* rates) {
  const Driver& d = s.d_;
  std::string e = s.check(d.mem_alloc(&s.device_, kCopyBytes), "cuMemAlloc 256 MiB");
  if (e.empty()) e = s.check(d.mem_host_alloc(&s.host_, kCopyBytes, 0), "cuMemHostAlloc 256 MiB");
  if (e.empty()) {
    std::memset(s.host_, 1, kCopyBytes);
    double htod = 0, dtoh = 0;
    e = best_rate(
        s, [&] { return d.memcpy_htod_async(s.device_, s.host_, kCopyBytes, s.stream_); }, &htod);
    if (e.empty()) {
      e = best_rate(
          s, [&] { return d.memcpy_dtoh_async(s.host_, s.device_, kCopyBytes, s.stream_); }, &dtoh);
    }
    if (e.empty()) {
      rates->htod_bytes_per_s = htod;
      rates->dtoh_bytes_per_s = dtoh;
    }
  }
  if (s.device_) d.mem_free(s.device_);
  if (s.host_) d.mem_free_host(s.host_);
  s.device_ = 0;
  s.host_ = nullptr;
  return e.empty() ? e : fmt::format("pinned copies not measured ({})", e);
}

// Managed prefetches to the GPU and back: one round trip to create the GPU pages and settle the
// host ones, then kManagedRounds timed; the best rate each way. The rate to the host is bimodal on
// an H200: 11.0-12.8 or 15.2-18.6 GB/s, switching between consecutive round trips of one process
// (4 processes of 8 round trips, 2026-11-22 19:28 UTC), so one round trip gave a bar that moved
// by half between compare runs.
std::string measure_prefetch(Session& s, LinkRates* rates) {
  const Driver& d = s.d_;
  if (!d.mem_prefetch_async) {
    return "prefetch not measured (the driver has no cuMemPrefetchAsync_v2: older than 12.2)";
  }
  int concurrent = 0;
  d.device_get_attribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                         s.device_ordinal_);
  if (!concurrent) {
    return "prefetch not measured (the device does not support concurrent managed access)";
  }
  std::string e = s.check(d.mem_alloc_managed(&s.managed_, kManagedBytes, CU_MEM_ATTACH_GLOBAL),
                          "cuMemAllocManaged 512 MiB");
  if (!e.empty()) return fmt::format("prefetch not measured ({})", e);
  std::memset(reinterpret_cast<void*>(s.managed_), 1, kManagedBytes);  // host pages exist
  const CUmemLocation gpu{.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = s.device_ordinal_};
  const CUmemLocation host{.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
  float best_to_gpu_ms = 0, best_to_host_ms = 0;
  for (int round = 0; round <= kManagedRounds && e.empty(); ++round) {
    float to_gpu_ms = 0, to_host_ms = 0;
    e = s.check(d.event_record(s.events_[0], s.stream_), "cuEventRecord");
    if (e.empty()) {
      e = s.check(d.mem_prefetch_async(s.managed_, kManagedBytes, gpu, 0, s.stream_),
                  "cuMemPrefetchAsync to the GPU");
    }
    if (e.empty()) e = s.check(d.event_record(s.events_[1], s.stream_), "cuEventRecord");
    if (e.empty()) {
      e = s.check(d.mem_prefetch_async(s.managed_, kManagedBytes, host, 0, s.stream_),
                  "cuMemPrefetchAsync to the host");
    }
    if (e.empty()) e = s.check(d.event_record(s.events_[2], s.stream_), "cuEventRecord");
    if (e.empty()) e = s.check(d.event_synchronize(s.events_[2]), "cuEventSynchronize");
    if (e.empty()) {
      e = s.check(d.event_elapsed_time(&to_gpu_ms, s.events_[0], s.events_[1]),
                  "cuEventElapsedTime");
    }
    if (e.empty()) {
      e = s.check(d.event_elapsed_time(&to_host_ms, s.events_[1], s.events_[2]),
                  "cuEventElapsedTime");
    }
    if (e.empty() && round > 0) {  // round 0 creates the pages
      if (best_to_gpu_ms == 0 || to_gpu_ms < best_to_gpu_ms) best_to_gpu_ms = to_gpu_ms;
      if (best_to_host_ms == 0 || to_host_ms < best_to_host_ms) best_to_host_ms = to_host_ms;
    }
  }
  d.mem_free(s.managed_);
  s.managed_ = 0;
  if (!e.empty()) return fmt::format("prefetch not measured ({})", e);
  rates->prefetch_bytes_per_s = rate(kManagedBytes, best_to_gpu_ms);
  rates->evict_bytes_per_s = rate(kManagedBytes, best_to_host_ms);
  return {};
}

}  // namespace

LinkProbeResult probe_link() {
  LinkProbeResult result;
  const std::optional<Driver> driver = load_driver(&result.error);
  if (!driver) return result;
  const Driver& d = *driver;
  Session s(d);
  auto fail = [&](std::string why) {
    result.error = std::move(why);
    return result;
  };

  if (const CUresult r = d.init(0); r != CUDA_SUCCESS) {
    return fail(fmt::format("{}: cuInit: {}",
                            r == CUDA_ERROR_NO_DEVICE ? "no GPU" : "no usable GPU", s.name(r)));
  }
  int count = 0;
  if (std::string e = s.check(d.device_get_count(&count), "cuDeviceGetCount"); !e.empty()) {
    return fail("no usable GPU: " + e);
  }
  if (count == 0) return fail("no GPU: the driver sees no device");
  if (std::string e = s.check(d.device_get(&s.device_ordinal_, 0), "cuDeviceGet"); !e.empty()) {
    return fail("no usable GPU: " + e);
  }
  LinkProbe probe;
  char name[256] = {};
  if (d.device_get_name(name, sizeof(name) - 1, s.device_ordinal_) == CUDA_SUCCESS) {
    probe.device_name = name;
  }
  CUcontext context = nullptr;
  if (std::string e =
          s.check(d.primary_ctx_retain(&context, s.device_ordinal_), "cuDevicePrimaryCtxRetain");
      !e.empty()) {
    return fail("no usable GPU: " + e);
  }
  s.context_ = context;
  std::string e = s.check(d.ctx_set_current(context), "cuCtxSetCurrent");
  size_t free_bytes = 0, total_bytes = 0;
  if (e.empty()) e = s.check(d.mem_get_info(&free_bytes, &total_bytes), "cuMemGetInfo");
  if (!e.empty()) return fail("no usable GPU: " + e);
  probe.free_bytes = free_bytes;
  probe.total_bytes = total_bytes;

  if (free_bytes < kMinFreeBytes) {
    probe.notes.push_back(fmt::format(
        "link rates not measured: only {} MiB of GPU memory is free (the probe needs 1024 MiB)",
        free_bytes / kMiB));
    result.probe = std::move(probe);
    return result;
  }
  e = s.check(d.stream_create(&s.stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (CUevent& event : s.events_) {
    if (e.empty()) e = s.check(d.event_create(&event, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  if (!e.empty()) {
    probe.notes.push_back(fmt::format("link rates not measured ({})", e));
  } else {
    if (std::string why = measure_copies(s, &probe.rates); !why.empty()) {
      probe.notes.push_back(std::move(why));
    }
    if (std::string why = measure_prefetch(s, &probe.rates); !why.empty()) {
      probe.notes.push_back(std::move(why));
    }
  }
  result.probe = std::move(probe);
  return result;
}

}  // namespace umswap::cli
