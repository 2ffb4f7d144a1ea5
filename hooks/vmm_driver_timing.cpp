#include "vmm_driver_timing.h"

#include <array>
#include <atomic>
#include <chrono>

namespace umswap {
namespace {

constexpr std::array<std::string_view, 17> kNames = {
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemcpyDtoDAsync",
    "cuStreamSynchronize",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy",
    "cuCtxSynchronize",
    "cuStreamSynchronize (frees)",
    "cuMemCreate (host)",  // of cuMemCreate's calls, those made on the host
};
constexpr size_t kHostCreates = 16;
static_assert(kNames[kHostCreates] == "cuMemCreate (host)");

struct Total {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> ns{0};
  void add(int64_t elapsed_ns) {
    calls.fetch_add(1, std::memory_order_relaxed);
    ns.fetch_add(static_cast<uint64_t>(elapsed_ns), std::memory_order_relaxed);
  }
};
std::array<Total, kNames.size()> g_totals;
std::array<Total, kNames.size()> g_window_totals;
// Initial-exec, as the hooks' other thread-locals: no lazy TLS allocation inside a hook.
thread_local bool t_in_window __attribute__((tls_model("initial-exec"))) = false;

template <size_t I, typename Fn>
struct Timed;

template <size_t I, typename... Args>
struct Timed<I, CUresult(CUDAAPI*)(Args...)> {
  static inline CUresult(CUDAAPI* real)(Args...) = nullptr;
  static CUresult CUDAAPI call(Args... args) {
    const auto started = std::chrono::steady_clock::now();
    const CUresult r = real(args...);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count();
    g_totals[I].add(ns);
    if (t_in_window) g_window_totals[I].add(ns);
    return r;
  }
};

// cuMemCreate counted in all, and apart for host memory (pinned host memory is dear to make).
PFN_cuMemCreate_v10020 g_real_create = nullptr;
CUresult CUDAAPI timed_create(CUmemGenericAllocationHandle* handle, size_t size,
                              const CUmemAllocationProp* prop, unsigned long long flags) {
  const auto started = std::chrono::steady_clock::now();
  const CUresult r = g_real_create(handle, size, prop, flags);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - started)
                      .count();
  g_totals[2].add(ns);
  if (t_in_window) g_window_totals[2].add(ns);
  if (prop && prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    g_totals[kHostCreates].add(ns);
    if (t_in_window) g_window_totals[kHostCreates].add(ns);
  }
  return r;
}

template <size_t I, typename Fn>
void wrap(Fn& slot) {
  static_assert(I < kNames.size());
  if (!slot) return;
  Timed<I, Fn>::real = slot;
  slot = &Timed<I, Fn>::call;
}

}  // namespace

void time_vmm_driver(vmm::VmmDriver& arena, VmmSyncDriver& sync) {
  wrap<0>(arena.mem_address_reserve);
  wrap<1>(arena.mem_address_free);
  if (arena.mem_create) {
    g_real_create = arena.mem_create;
    arena.mem_create = &timed_create;
  }
  wrap<3>(arena.mem_release);
  wrap<4>(arena.mem_map);
  wrap<5>(arena.mem_unmap);
  wrap<6>(arena.mem_set_access);
  wrap<7>(arena.memcpy_dtod_async);
  wrap<8>(arena.stream_synchronize);
  wrap<9>(sync.event_create);
  wrap<10>(sync.event_record);
  wrap<11>(sync.event_query);
  wrap<12>(sync.event_synchronize);
  wrap<13>(sync.event_destroy);
  wrap<14>(sync.ctx_synchronize);
  wrap<15>(sync.stream_synchronize);
}

void vmm_driver_in_window(bool inside) {
  t_in_window = inside;
}

std::vector<DriverCallTotal> vmm_driver_call_totals() {
  std::vector<DriverCallTotal> out;
  for (size_t i = 0; i < kNames.size(); ++i) {
    const uint64_t calls = g_totals[i].calls.load(std::memory_order_relaxed);
    if (calls == 0) continue;
    auto ms = [](const Total& t) {
      return static_cast<double>(t.ns.load(std::memory_order_relaxed)) / 1e6;
    };
    out.push_back({kNames[i], calls, ms(g_totals[i]),
                   g_window_totals[i].calls.load(std::memory_order_relaxed),
                   ms(g_window_totals[i])});
  }
  return out;
}

}  // namespace umswap
