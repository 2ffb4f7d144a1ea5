#include "umswap/advisor/logged_calls.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/op_log.h"
#include "umswap/core/driver_lock.h"
#include "umswap/core/flight_recorder.h"
#include "umswap/core/log.h"

namespace umswap::advisor {

namespace {

struct OpLogged {
  AdvisorDriver real;
  CUdeviceptr words = 0;
  std::unique_ptr<OpLog> log;
  // Without UMSWAP_DEBUG=op-log: one write before a managed call that follows event waits on its
  // stream, none after.
  bool between_waits_only = false;
  // The advisor thread's prefetch or discard in progress (with op-log its copies too;
  // steady_clock ns, 0: none), and which: a stall report says how long it has been in it.
  std::thread::id advisor_thread;
  std::atomic<int64_t> call_since{0};
  std::atomic<const char*> call_what{""};
};
OpLogged* g_op_log = nullptr;

// Marks the advisor thread's call through a wrapper for the stall report.
struct InCall {
  bool mine;
  explicit InCall(const char* what) : mine(g_op_log->advisor_thread == std::this_thread::get_id()) {
    if (!mine) return;
    g_op_log->call_what.store(what, std::memory_order_relaxed);
    g_op_log->call_since.store(now_ns(), std::memory_order_release);
  }
  ~InCall() {
    if (mine) g_op_log->call_since.store(0, std::memory_order_release);
  }
};

// Numbers a call on `s` and puts the write of its number after it there (followed streams only).
void write_number(CUstream s, const char* what, uint64_t a, uint64_t b) {
  uint64_t number = 0;
  size_t word = 0;
  if (g_op_log->log->note(s, what, a, b, &number, &word)) {
    g_op_log->real.stream_write_value64(s, g_op_log->words + word * sizeof(uint64_t), number, 0);
  }
}
// After an event wait or a managed call: its write with op-log; without, the writes go only
// between waits and managed calls. The other calls are wrapped only with op-log
// (start_logged_calls), and always written.
void op_logged(CUstream s, const char* what, uint64_t a, uint64_t b) {
  if (!g_op_log->between_waits_only) write_number(s, what, a, b);
}
// Without op-log: before a managed call, a write if event waits came before it.
void close_waits_before(CUstream s) {
  if (g_op_log->between_waits_only && g_op_log->log->take_wait(s)) {
    write_number(s, "write after waits", 0, 0);
  }
}
CUresult CUDAAPI logged_prefetch(CUdeviceptr p, size_t n, CUmemLocation to, unsigned flags,
                                 CUstream s) {
  close_waits_before(s);
  const CUresult r =
      (InCall("cuMemPrefetchAsync"), g_op_log->real.mem_prefetch_async(p, n, to, flags, s));
  if (r == CUDA_SUCCESS) {
    flight::record(
        to.type == CU_MEM_LOCATION_TYPE_HOST ? flight::Kind::evict : flight::Kind::prefetch, p, n,
        s);
  }
  op_logged(s, to.type == CU_MEM_LOCATION_TYPE_HOST ? "prefetch to host" : "prefetch to gpu", p, n);
  return r;
}
CUresult CUDAAPI logged_discard(CUdeviceptr* ps, size_t* sizes, size_t count,
                                unsigned long long flags, CUstream s) {
  close_waits_before(s);
  const CUresult r = (InCall("cuMemDiscardBatchAsync"),
                      g_op_log->real.mem_discard_batch_async(ps, sizes, count, flags, s));
  for (size_t i = 0; r == CUDA_SUCCESS && i < count; ++i) {
    flight::record(flight::Kind::discard, ps[i], sizes[i], s);
  }
  op_logged(s, "discard", count ? ps[0] : 0, count ? sizes[0] : 0);
  return r;
}
CUresult CUDAAPI logged_dtoh(void* to, CUdeviceptr from, size_t n, CUstream s) {
  const CUresult r =
      (InCall("cuMemcpyDtoHAsync"), g_op_log->real.memcpy_dtoh_async(to, from, n, s));
  write_number(s, "copy out", from, n);
  return r;
}
CUresult CUDAAPI logged_htod(CUdeviceptr to, const void* from, size_t n, CUstream s) {
  const CUresult r =
      (InCall("cuMemcpyHtoDAsync"), g_op_log->real.memcpy_htod_async(to, from, n, s));
  write_number(s, "copy back", to, n);
  return r;
}
CUresult CUDAAPI logged_record(CUevent e, CUstream s) {
  const CUresult r = g_op_log->real.event_record(e, s);
  write_number(s, "event record", reinterpret_cast<uintptr_t>(e), 0);
  return r;
}
CUresult CUDAAPI logged_wait_event(CUstream s, CUevent e, unsigned flags) {
  const CUresult r = g_op_log->real.stream_wait_event(s, e, flags);
  if (g_op_log->between_waits_only) {
    g_op_log->log->mark_wait(s);
  } else {
    write_number(s, "event wait", reinterpret_cast<uintptr_t>(e), 0);
  }
  return r;
}
CUresult CUDAAPI logged_write(CUstream s, CUdeviceptr at, cuuint64_t v, unsigned flags) {
  const CUresult r = g_op_log->real.stream_write_value64(s, at, v, flags);
  write_number(s, "word write", at, v);
  return r;
}
CUresult CUDAAPI logged_wait_value(CUstream s, CUdeviceptr at, cuuint64_t v, unsigned flags) {
  const CUresult r = g_op_log->real.stream_wait_value64(s, at, v, flags);
  write_number(s, "word wait", at, v);
  return r;
}
CUresult CUDAAPI logged_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, CUstream s, void** params,
                               void** extra) {
  const CUresult r =
      g_op_log->real.launch_kernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
  write_number(s, "copy kernel", gx, 0);
  return r;
}

}  // namespace

// Puts the logging calls in `d`'s place (those it has); false, leaving `d` as it was, when the
// words cannot be had. On the advisor thread, before any of its streams exist and before the
// launch path uses `d` for stream calls (events_ready, progress_device are not set yet).
bool start_logged_calls(AdvisorDriver& d, bool every_call) {
  if (g_op_log || !d.mem_host_alloc || !d.mem_host_get_device_pointer || !d.stream_write_value64) {
    return false;
  }
  void* host = nullptr;
  CUdeviceptr words = 0;
  {
    const std::lock_guard driver(driver_setup_mutex());  // pinned memory (driver_lock.h)
    if (d.mem_host_alloc(&host, OpLog::kStreams * sizeof(uint64_t),
                         CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS ||
        d.mem_host_get_device_pointer(&words, host, 0) != CUDA_SUCCESS) {
      return false;
    }
  }
  auto* logged = new OpLogged;
  logged->real = d;
  logged->words = words;
  logged->log = std::make_unique<OpLog>(static_cast<volatile uint64_t*>(host));
  logged->between_waits_only = !every_call;
  logged->advisor_thread = std::this_thread::get_id();
  g_op_log = logged;  // never freed: launches may still use the wrappers at exit
  d.mem_prefetch_async = logged_prefetch;
  if (d.mem_discard_batch_async) d.mem_discard_batch_async = logged_discard;
  d.stream_wait_event = logged_wait_event;
  if (!every_call) return true;  // the launch path's event records and word waits stay direct
  if (d.memcpy_dtoh_async) d.memcpy_dtoh_async = logged_dtoh;
  if (d.memcpy_htod_async) d.memcpy_htod_async = logged_htod;
  d.event_record = logged_record;
  d.stream_write_value64 = logged_write;
  if (d.stream_wait_value64) d.stream_wait_value64 = logged_wait_value;
  if (d.launch_kernel) d.launch_kernel = logged_launch;
  return true;
}

void name_logged_stream(CUstream s, const char* name) {
  if (g_op_log && s) g_op_log->log->name(s, name);
}

bool logged_calls_on() {
  return g_op_log != nullptr;
}

LoggedCallsState logged_calls_state(int64_t now, bool with_streams) {
  LoggedCallsState state;
  if (!g_op_log) return state;
  if (const int64_t since = g_op_log->call_since.load(std::memory_order_acquire); since) {
    state.in_call =
        fmt::format("in {} since {:.2f} s ago", g_op_log->call_what.load(), (now - since) / 1e9);
  }
  if (with_streams) state.streams = g_op_log->log->describe();
  return state;
}

}  // namespace umswap::advisor
