// CUPTI's callback on the program's driver calls, and the launch path: a launch's function looked
// up (its parameter layout read from the driver once), the launch or copy handed to the
// StepRecorder, the observer told before blocking calls and at each step's API exit; CUDA graph
// captures counted; NVTX iteration markers.
#include "umswap/tracer/own_calls.h"
#include "umswap/tracer/tracer.h"

#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <iterator>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "tracer_impl.h"
#include "umswap/core/driver_lock.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/memory_calls.h"
#include "umswap/tracer/param_scanner.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap::tracer::detail {
namespace {

bool begins_capture(CUpti_CallbackId cbid) {
  return std::ranges::find(kCaptureBegins, cbid) != std::end(kCaptureBegins);
}
bool is_capture_call(CUpti_CallbackId cbid) {
  return begins_capture(cbid) || std::ranges::find(kCaptureEnds, cbid) != std::end(kCaptureEnds);
}

// The launch this thread is inside (set at API entry, used at API exit), for the observer.
struct PendingLaunch {
  bool active = false;
  uint64_t index = 0;
  CUstream stream = nullptr;
};
thread_local PendingLaunch t_pending __attribute__((tls_model("initial-exec")));
// The opaque call this thread is inside (its stream), for the observer's after_opaque.
struct PendingOpaque {
  bool active = false;
  CUstream stream = nullptr;
};
thread_local PendingOpaque t_opaque __attribute__((tls_model("initial-exec")));
// The correlation id of the untraced thread's last copy between host and device
// (last_own_copy()).
thread_local uint32_t t_own_copy __attribute__((tls_model("initial-exec"))) = 0;

// The `extra` form: CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE pairs, ended by CU_LAUNCH_PARAM_END.
std::span<const std::byte> packed_params(void** extra) {
  const void* pointer = nullptr;
  size_t size = 0;
  for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) pointer = extra[i + 1];
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<const size_t*>(extra[i + 1]);
  }
  return pointer ? std::span<const std::byte>(static_cast<const std::byte*>(pointer), size)
                 : std::span<const std::byte>();
}

}  // namespace

void CUPTIAPI Tracer::on_callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                  const void* data) {
  auto* tracer = static_cast<Tracer*>(self);
  // Acquire: what start() made before running_ (the recorder, the function cache) is visible.
  if (!tracer->running_.load(std::memory_order_acquire)) return;
  if (domain == CUPTI_CB_DOMAIN_NVTX) {
    if (!tracer->recorder()->recording()) return;
    // nvtxRangePushA, nvtxRangeStartA and nvtxMarkA all take `const char* message` first.
    if (cbid == CUPTI_CBID_NVTX_nvtxRangePushA || cbid == CUPTI_CBID_NVTX_nvtxRangeStartA ||
        cbid == CUPTI_CBID_NVTX_nvtxMarkA) {
      const auto* nvtx = static_cast<const CUpti_NvtxData*>(data);
      const auto* message = static_cast<const char* const*>(nvtx->functionParams);
      if (message && *message && tracer->config_.iteration_marker == *message) {
        tracer->mark(tracer->marker_source_);
      }
    }
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (t_own_calls) {
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (cb->callbackSite == CUPTI_API_ENTER &&
        (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2 ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2 ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz)) {
      t_own_copy = cb->correlationId;
    }
    return;
  }
  tracer->on_first_call();
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) {
    if (is_capture_call(cbid)) {
      const auto* result = static_cast<const CUresult*>(cb->functionReturnValue);
      // An invalidated capture ends too (its graph is null); another failure ended nothing.
      const bool begun = begins_capture(cbid);
      if (result && (*result == CUDA_SUCCESS ||
                     (!begun && *result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))) {
        tracer->note_capture(begun);
      }
    }
    // An opaque call's exit, or a capture begin's (counted above first, so that an observer
    // holding the program sees the capture once the call has left).
    if (t_opaque.active) {
      t_opaque.active = false;
      if (tracer->config_.observer) {
        const OwnCallsScope own;
        tracer->config_.observer->after_opaque(t_opaque.stream);
      }
    }
    if (is_capture_call(cbid)) return;
    if (t_pending.active) {
      t_pending.active = false;
      if (tracer->config_.observer) {
        const OwnCallsScope own;
        tracer->config_.observer->after_step(t_pending.index, t_pending.stream);
      }
    }
    return;
  }
  const void* p = cb->functionParams;
  const uint32_t corr = cb->correlationId;
  if (begins_capture(cbid) && tracer->config_.observer) {
    const OwnCallsScope own;
    tracer->config_.observer->on_capture_begin();
    t_opaque = {true, nullptr};  // its exit: after_opaque
    return;
  }
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchKernel_params*>(p);
      tracer->on_launch(a->f, a->hStream, a->kernelParams, a->extra, corr, cb->symbolName);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      const auto* a = static_cast<const cuLaunchKernelEx_params*>(p);
      tracer->on_launch(a->f, a->config ? a->config->hStream : nullptr, a->kernelParams, a->extra,
                        corr, cb->symbolName);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      const auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(p);
      tracer->on_launch(a->f, a->hStream, a->kernelParams, nullptr, corr, cb->symbolName);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
      // The thread is about to block on the GPU: the advisor may need to catch up first. umswap's
      // hook of the call has waited for that already, outside the driver (before_blocking_call):
      // this finds the advisor there, unless the call came by another way.
      if (tracer->config_.observer) tracer->config_.observer->before_blocking();
      break;
#define UMSWAP_FIRST_USE(name, field)                                             \
  case CUPTI_DRIVER_TRACE_CBID_##name:                                            \
    tracer->before_first_use(                                                     \
        reinterpret_cast<uint64_t>(static_cast<const name##_params*>(p)->field)); \
    break;
      UMSWAP_FIRST_USE(cuFuncGetAttribute, hfunc)
      UMSWAP_FIRST_USE(cuFuncSetAttribute, hfunc)
      UMSWAP_FIRST_USE(cuFuncSetCacheConfig, hfunc)
      UMSWAP_FIRST_USE(cuFuncLoad, function)
      UMSWAP_FIRST_USE(cuKernelGetAttribute, kernel)
      UMSWAP_FIRST_USE(cuKernelSetAttribute, kernel)
      UMSWAP_FIRST_USE(cuKernelSetCacheConfig, kernel)
      UMSWAP_FIRST_USE(cuKernelGetFunction, kernel)
      UMSWAP_FIRST_USE(cuOccupancyMaxActiveBlocksPerMultiprocessor, func)
      UMSWAP_FIRST_USE(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, func)
      UMSWAP_FIRST_USE(cuOccupancyMaxPotentialBlockSize, func)
      UMSWAP_FIRST_USE(cuOccupancyMaxPotentialBlockSizeWithFlags, func)
      UMSWAP_FIRST_USE(cuOccupancyAvailableDynamicSMemPerBlock, func)
      UMSWAP_FIRST_USE(cuOccupancyMaxActiveClusters, func)
      UMSWAP_FIRST_USE(cuOccupancyMaxPotentialClusterSize, func)
#undef UMSWAP_FIRST_USE
    default: {
      // Copies, memsets and stream memory operations: steps like launches. A graph launch or a
      // host function: not a step (what it touches is unknown), but the observer hears of it.
      thread_local std::vector<uint64_t> pointers __attribute__((tls_model("initial-exec")));
      MemoryCall call;
      if (!decode_memory_call(cbid, p, &call, &pointers)) break;
      if (call.what == MemoryCallClass::opaque) {
        // A graph launched inside a capture becomes a node of the graph being captured.
        if (tracer->captured(call.stream)) break;
        if (tracer->config_.observer) {
          const OwnCallsScope own;
          tracer->config_.observer->on_opaque(call.stream, call.opaque);
          t_opaque = {true, call.stream};
        }
        break;
      }
      tracer->on_memory_call(call, corr, pointers);
      // A copy from or to pageable memory holds the thread in the driver until the GPU is done
      // with it, as a synchronize does (the cuDNN sample's loss, copied back every iteration).
      // umswap's hook waited for the launches before this one, outside the driver
      // (before_blocking_call); this copy is a step too, and its own waits may be for words the
      // advisor writes once it has applied it: that is left for here, where it is known.
      if (may_wait_for_gpu(call.what) && tracer->config_.observer) {
        tracer->config_.observer->before_blocking();
      }
      break;
    }
  }
}

// Layout and step key of a kernel, read from the driver once per function (under
// functions_mutex_, so two threads meeting a new function read it once) and cached. Runtime
// launches arrive with a CUkernel in place of the CUfunction (cuda13-cupti-notes §3): the cuFunc*
// calls then fail with CUDA_ERROR_INVALID_HANDLE and the cuKernel* ones answer. When the cache is
// full the layout is read into `uncached` for this launch only.
std::vector<ParamSlot> Tracer::read_params(CUfunction f) {
  std::vector<ParamSlot> params;
  bool as_kernel = false;
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    CUresult r =
        as_kernel ? CUDA_ERROR_INVALID_HANDLE : driver_.func_get_param_info(f, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_HANDLE && i == 0) as_kernel = true;
    if (as_kernel) {
      r = driver_.kernel_get_param_info(reinterpret_cast<CUkernel>(f), i, &offset, &size);
    }
    if (r != CUDA_SUCCESS) {
      if (i == 0 && r != CUDA_ERROR_INVALID_VALUE) {
        layouts_unknown_.fetch_add(1, std::memory_order_relaxed);
        layout_error_.store(static_cast<int>(r), std::memory_order_relaxed);
      }
      break;  // no count API: the first invalid index ends the list
    }
    params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
  }
  return params;
}

// Before the driver's launch, on the launching thread (umswap's launch hooks). The launch
// callback runs inside the driver's launch, which holds a lock of the driver's: a
// cuKernelGetParamInfo made there waited for good behind another thread's cuMemHostAlloc, itself
// waiting for that lock (the advisor's pinned memory; H200, 2026-11-26: `umswap replay` of the
// cuDNN sample with UMSWAP_EVICT_COPY hung in its first iteration, when every kernel was new).
// Read here, outside the driver, a new function's layout waits for nobody. functions_mutex_ is
// not held across the driver calls (a launch callback may wait for it inside the driver).
void Tracer::prepare_launch(CUfunction f) {
  if (!f || !running_.load(std::memory_order_acquire) || !functions_) return;
  const auto handle = reinterpret_cast<uint64_t>(f);
  if (functions_->find(handle)) return;
  before_first_use(handle);
  {
    std::lock_guard lock(functions_mutex_);
    if (functions_->find(handle) || prepared_.contains(handle)) return;
  }
  std::vector<ParamSlot> params;
  {
    const std::shared_lock driver(driver_setup_mutex());
    params = read_params(f);
  }
  std::lock_guard lock(functions_mutex_);
  if (prepared_.emplace(handle, std::move(params)).second) {
    prepared_count_.fetch_add(1, std::memory_order_relaxed);
  }
}

// A function's first launch, or the first question about it, may load its module into the
// context: with lazy loading (CUDA_MODULE_LOADING=LAZY, CUDA's default) a load can wait for the
// GPU to be idle, holding the driver meanwhile. Launches already submitted may wait on the GPU for
// words the advisor thread has yet to issue, and its driver calls would wait behind the load: the
// run hangs (H200, 2026-11-26: the cuDNN sample under `umswap replay` with UMSWAP_EVICT_COPY, in
// its first iteration, when every kernel was new). So before a function's first use the thread
// waits, as before a synchronize, until the advisor has applied every launch submitted. Once per
// handle; after the first iterations nothing is new and this costs a set look-up at most.
void Tracer::before_first_use(uint64_t function) {
  if (!function || !config_.observer || !running_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lock(used_mutex_);
    if (!used_.insert(function).second) return;
  }
  first_use_waits_.fetch_add(1, std::memory_order_relaxed);
  config_.observer->before_blocking();
}

const FunctionLayout& Tracer::function_of(CUfunction f, const char* symbol,
                                          FunctionLayout* uncached) {
  const auto handle = reinterpret_cast<uint64_t>(f);
  if (const FunctionLayout* cached = functions_->find(handle)) return *cached;
  std::lock_guard lock(functions_mutex_);
  if (const FunctionLayout* cached = functions_->find(handle)) return *cached;
  FunctionLayout& info = *uncached;
  if (auto it = prepared_.find(handle); it != prepared_.end()) {
    info.params = std::move(it->second);
    prepared_.erase(it);
  } else {
    // Not prepared (a launch that came by no hook of umswap's): read inside the driver's launch,
    // where waiting long for the advisor could hold the driver; so at most 2 ms, then read anyway.
    read_in_callback_.fetch_add(1, std::memory_order_relaxed);
    std::shared_lock driver(driver_setup_mutex(), std::defer_lock);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (!driver.try_lock() && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    info.params = read_params(f);
  }
  const char* name = symbol;
  if (!name || !*name) {  // a CUkernel in place of the CUfunction: the cuFunc* call refuses it
    if (!driver_.func_get_name || driver_.func_get_name(&name, f) != CUDA_SUCCESS) {
      name = nullptr;
      if (driver_.kernel_get_name) driver_.kernel_get_name(&name, reinterpret_cast<CUkernel>(f));
    }
  }
  info.key = recorder()->intern(name && *name ? name : "<unknown kernel>");
  if (const FunctionLayout* cached = functions_->insert(handle, info.params, info.key)) {
    return *cached;
  }
  return info;
}

void Tracer::on_launch(CUfunction f, CUstream stream, void** params, void** extra,
                       uint32_t correlation, const char* symbol) {
  if (captured(stream)) return;
  FunctionLayout uncached;  // used only past the cache's capacity; allocates nothing otherwise
  const FunctionLayout& function = function_of(f, symbol, &uncached);
  const auto snapshot = registry_->snapshot();
  const uint64_t index = recorder()->record_kernel(
      function, params, params ? std::span<const std::byte>() : packed_params(extra), stream,
      correlation, *snapshot);
  pending(index, stream);
}

void Tracer::on_memory_call(const MemoryCall& call, uint32_t correlation,
                            std::span<const uint64_t> pointers) {
  if (captured(call.stream)) return;
  std::atomic<uint32_t>& cached = copy_keys_[static_cast<size_t>(call.what)];
  uint32_t key = cached.load(std::memory_order_relaxed);
  if (key == UINT32_MAX) {
    key = recorder()->intern(step_name(call.what));
    cached.store(key, std::memory_order_relaxed);
  }
  const auto snapshot = registry_->snapshot();
  const trace::StepKind kind =
      call.what == MemoryCallClass::memset ? trace::StepKind::memset : trace::StepKind::memcpy;
  pending(recorder()->record_copy(kind, key, call.stream, correlation, pointers, *snapshot),
          call.stream);
}

// The observer sees this launch again at API exit (after_step), on this thread.
void Tracer::pending(uint64_t index, CUstream stream) {
  if (config_.observer) t_pending = {true, index, stream};
}

}  // namespace umswap::tracer::detail

namespace umswap::tracer {

uint32_t last_own_copy() {
  return detail::t_own_copy;
}

}  // namespace umswap::tracer
