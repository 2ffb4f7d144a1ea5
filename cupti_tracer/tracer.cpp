#include "umswap/tracer/tracer.h"
#include "umswap/tracer/own_calls.h"

#include <cupti.h>

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "umswap/core/driver_lock.h"
#include "umswap/core/log.h"
#include "umswap/core/trace.h"
#include "umswap/core/trace_file.h"
#include "umswap/tracer/cupti_library.h"
#include "umswap/tracer/extents.h"
#include "umswap/tracer/injected_tool.h"
#include "umswap/tracer/iteration_detector.h"
#include "umswap/tracer/memory_calls.h"
#include "umswap/tracer/param_scanner.h"
#include "umswap/tracer/residency.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap::tracer {
namespace {

constexpr size_t kActivityBufferBytes = 4 << 20;  // a few MB, as CUPTI's samples suggest
constexpr size_t kMaxActivityBuffers = 64;        // past this, records are dropped and counted
constexpr size_t kMaxFunctions = 16384;           // layouts cached; past this, read per launch
// How often the flush thread looks for a finished iteration: at most this many flushes a second.
constexpr auto kFlushPoll = std::chrono::milliseconds(100);
// Slab lifetimes kept for the advisor and the trace (32 bytes each).
constexpr size_t kMaxLifetimes = size_t{1} << 20;

// A unified-memory counter record, kept raw until the trace is assembled.
struct UmRecord {
  CUpti_ActivityUnifiedMemoryCounterKind kind;
  uint64_t value, start, end, address;
  uint32_t flags;
  bool own = false;  // not the driver's record: umswap discarded or populated the range
  // own: the steps logged before the call; the GPU runs it before that step (stream order), so
  // the count places it at that step's GPU start (the host runs far ahead of the GPU).
  uint64_t before_step = UINT64_MAX;
  // own, nonzero: the correlation id of the copy of umswap's own that the GPU runs right before
  // (a discard) or right after it (a populate): placed at that copy's end or start when CUPTI
  // reported it.
  uint32_t copy = 0;
};

class Tracer {
 public:
  bool start(const TracerConfig& config, const TracerDriver& driver, Registry& registry,
             std::string* reason);
  void finish(bool used_cuda = true);
  void yield_cupti(const std::string& what);
  static constexpr uint64_t kNow = UINT64_MAX;  // own_record_time falls back to the call's time
  static constexpr uint64_t kCurrentStep = UINT64_MAX - 1;    // between launches
  static constexpr uint64_t kLaunchingStep = UINT64_MAX - 2;  // from the launch path
  void note_residency(uint64_t address, uint64_t bytes, bool on_gpu, uint64_t at_step,
                      uint32_t copy = 0);
  void note_lifetime(uint64_t address, uint64_t bytes, bool freed);
  void note_own_copy(uint32_t correlation, uint64_t address, uint64_t length, bool to_gpu);
  static constexpr size_t kMaxOwnCopies = 1 << 20;  // 32 MiB of records at most
  std::vector<LifetimeEvent> copy_lifetimes(uint64_t from_step, uint64_t to_step);
  std::string yielded_to() {
    std::lock_guard lock(owner_mutex_);
    return yielded_to_;
  }
  void* cupti_symbol(const char* name) const {
    return cupti_.handle ? dlsym(cupti_.handle, name) : nullptr;
  }
  void mark(std::string_view source) {
    if (StepRecorder* r = recorder()) r->mark(source);
  }
  bool running() const { return running_.load(std::memory_order_acquire); }
  // The log's readers (the advisor thread): no lock, never in a launch's way.
  StepRecorder* recorder() const { return recorder_.load(std::memory_order_acquire); }
  const RunSummary* summary() const { return summary_.get(); }
  bool saw_calls() const { return first_call_done_.load(); }

  static void CUPTIAPI on_callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                   const void* data);
  static void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer,
                                           size_t size, size_t valid_size);
  void prepare_launch(CUfunction f);
  // before_blocking_call(): the observer hears of a blocking call before the driver is entered.
  void before_blocking_call() {
    if (running_.load(std::memory_order_acquire) && config_.observer) {
      config_.observer->before_blocking();
    }
  }
  void before_first_use(uint64_t function);
  // A capture begun or ended (seen at the call's exit).
  void note_capture(bool begun) {
    if (begun) {
      captures_open_.fetch_add(1, std::memory_order_acq_rel);
    } else if (captures_open_.fetch_sub(1, std::memory_order_acq_rel) <= 0) {
      captures_open_.fetch_add(1, std::memory_order_acq_rel);  // an end without a begin seen
    }
  }
  // True if the call on `stream` is being captured (then it is no step and is counted). Asks the
  // driver only while some capture is open; a stream it cannot tell about counts as captured.
  bool captured(CUstream stream) {
    if (captures_open_.load(std::memory_order_acquire) <= 0 || !driver_.stream_is_capturing) {
      return false;
    }
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_.stream_is_capturing(stream, &status) == CUDA_SUCCESS &&
        status == CU_STREAM_CAPTURE_STATUS_NONE) {
      return false;
    }
    captured_calls_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

 private:
  void on_launch(CUfunction f, CUstream stream, void** params, void** extra, uint32_t correlation,
                 const char* symbol);
  void on_memory_call(const MemoryCall& call, uint32_t correlation,
                      std::span<const uint64_t> pointers);
  void pending(uint64_t index, CUstream stream);
  void summarize(trace::Trace t);
  void check_own_copies(const trace::Trace& t, RunSummary& summary);
  void on_first_call();
  const FunctionLayout& function_of(CUfunction f, const char* symbol, FunctionLayout* uncached);
  // Reads f's parameter layout from the driver (the first invalid index ends the list).
  std::vector<ParamSlot> read_params(CUfunction f);
  void parse_activity(uint8_t* buffer, size_t valid_size);
  void count_dropped_records();
  void flush_loop();
  void stop_flush_thread();
  trace::Trace assemble(StepRecorder::Recording recording);

  TracerConfig config_;
  TracerDriver driver_;
  Registry* registry_ = nullptr;
  CuptiLibrary cupti_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::atomic<bool> running_{false};
  // Who owns CUPTI: start() and yield_cupti() take owner_mutex_, so a profiler that starts while
  // the tracer is starting waits for it and then takes CUPTI over. yielded_to_ names the
  // program's CUPTI call that made the tracer step aside (or never start).
  std::mutex owner_mutex_;
  std::string yielded_to_;
  std::atomic<bool> yielding_{false};  // finish() called by yield_cupti(): release CUPTI anyway
  std::atomic<bool> first_call_done_{false};
  pid_t pid_ = 0;
  std::string marker_source_;  // "nvtx:<name>"

  // Launch path. The recorder serializes launching threads among themselves; the function cache
  // and the copy keys are read without a lock, and only a function or copy seen for the first
  // time takes functions_mutex_ (launching threads only).
  std::atomic<StepRecorder*> recorder_{nullptr};  // made by start(), never destroyed
  std::unique_ptr<ParamLayoutCache> functions_;
  std::mutex functions_mutex_;
  // Layouts read by prepare_launch() (umswap's launch hooks, before the driver's launch) for
  // functions not cached yet; function_of() takes them from here. Under functions_mutex_.
  std::unordered_map<uint64_t, std::vector<ParamSlot>> prepared_;
  // Functions (or kernels) already launched or asked about (before_first_use()).
  std::mutex used_mutex_;
  std::unordered_set<uint64_t> used_;
  std::atomic<uint64_t> first_use_waits_{0};
  std::atomic<uint64_t> prepared_count_{0}, read_in_callback_{0};
  // Functions whose first parameter's layout the driver refused with another error than "no such
  // parameter" (the layout is unknown, so their launches' pointers are not seen); the last error.
  std::atomic<uint64_t> layouts_unknown_{0};
  std::atomic<int> layout_error_{0};
  // CUDA graph captures begun and not yet ended (any thread), and the calls captured in them.
  std::atomic<int64_t> captures_open_{0};
  std::atomic<uint64_t> captured_calls_{0};
  std::atomic<uint32_t> copy_keys_[static_cast<size_t>(MemoryCallClass::count)];
  std::unique_ptr<RunSummary> summary_;
  bool um_counters_ = false;

  // Activity state, written on CUPTI's thread (or the thread that flushes).
  std::mutex activity_mutex_;
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> kernel_times_;  // correlation
  std::vector<UmRecord> um_records_;
  struct OwnCopy {
    uint32_t correlation;
    uint64_t address, length;
    bool to_gpu;
  };
  std::vector<OwnCopy> own_copies_;  // under activity_mutex_
  std::atomic<size_t> buffers_out_{0};
  std::atomic<uint64_t> dropped_records_{0};

  // The flush thread: hands CUPTI's filled-so-far buffers over after each iteration. Its mutex
  // is only for stopping it; it is never held across cuptiActivityFlushAll.
  std::thread flush_thread_;
  std::mutex flush_mutex_;
  std::condition_variable flush_wake_;
  bool flush_stop_ = false;  // guarded by flush_mutex_
  std::atomic<uint64_t> flushes_{0};

  // Lifetimes of slab blocks (note_lifetime), in program order; the oldest half goes when full.
  std::mutex lifetime_mutex_;
  std::vector<LifetimeEvent> lifetimes_;  // guarded by lifetime_mutex_
};

Tracer* g_tracer = nullptr;

// The calls that begin and end a stream's capture into a CUDA graph (seen at their exit).
constexpr CUpti_CallbackId kCaptureBegins[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
};
constexpr CUpti_CallbackId kCaptureEnds[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
};

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
// The correlation id of the untraced thread's last copy between host and device
// (last_own_copy()).
thread_local uint32_t t_own_copy __attribute__((tls_model("initial-exec"))) = 0;

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
      return;
    }
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

// Kernel launches; the copies, memsets, memory operations, graph launches and host functions are
// memory_callback_ids().
constexpr CUpti_CallbackId kTracedCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    // Not steps: blocking calls the advisor hears of (LaunchObserver::before_blocking).
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
    // Not steps: calls on a function that may load its module (before_first_use()).
    CUPTI_DRIVER_TRACE_CBID_cuFuncGetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuFuncSetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuFuncSetCacheConfig,
    CUPTI_DRIVER_TRACE_CBID_cuFuncLoad,
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuKernelSetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuKernelSetCacheConfig,
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetFunction,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessor,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialBlockSize,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialBlockSizeWithFlags,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyAvailableDynamicSMemPerBlock,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveClusters,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxPotentialClusterSize,
};

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

// Done at the first traced call rather than at start(): the unified-memory counters can only be
// configured once the driver has a context (CUPTI answers CUPTI_ERROR_NOT_READY before), and the
// exit handler registered now runs before the CUDA runtime's own (registered during its
// initialization, which start() precedes), so the final flush still finds the context alive.
void Tracer::on_first_call() {
  if (first_call_done_.exchange(true)) return;
  CUptiResult r = CUPTI_SUCCESS;
  // Unified-memory counters: faults with addresses, bytes each way, thrashing. Refused on some
  // platforms (MIG, confidential computing, some virtualization): the trace then lacks them.
  CUpti_ActivityUnifiedMemoryCounterConfig um[5] = {};
  const CUpti_ActivityUnifiedMemoryCounterKind kinds[5] = {
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
      CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT};
  CUdevice device = 0;
  if (!driver_.ctx_get_device || driver_.ctx_get_device(&device) != CUDA_SUCCESS) device = 0;
  for (int i = 0; i < 5; ++i) {
    um[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
    um[i].kind = kinds[i];
    um[i].deviceId = static_cast<uint32_t>(device);
    um[i].enable = 1;
  }
  r = cupti_.configure_unified_memory_counter(um, 5);
  if (r == CUPTI_SUCCESS) r = cupti_.activity_enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  if (r != CUPTI_SUCCESS) {
    log_warning(
        "CUPTI unified-memory counters unavailable ({}); the trace has no fault or "
        "transfer counts",
        cupti_.result_string(r));
  }
  um_counters_ = r == CUPTI_SUCCESS;
  std::atexit([] { finish_tracer(); });
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

void CUPTIAPI Tracer::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  if (!g_tracer || g_tracer->buffers_out_.fetch_add(1) >= kMaxActivityBuffers) {
    if (g_tracer) g_tracer->buffers_out_.fetch_sub(1);
    // Never wait for a buffer to come back: CUPTI drops the records and counts them, and
    // count_dropped_records() adds them up.
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer ? kActivityBufferBytes : 0;
}

void CUPTIAPI Tracer::on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t,
                                          size_t valid_size) {
  if (g_tracer && buffer) {
    g_tracer->parse_activity(buffer, valid_size);
    g_tracer->buffers_out_.fetch_sub(1);
  }
  if (g_tracer) g_tracer->count_dropped_records();
  std::free(buffer);
}

// Records CUPTI dropped for want of a buffer since the last call (the query resets the count).
// Since CUDA 6 all buffers are global: context NULL, stream 0.
void Tracer::count_dropped_records() {
  size_t dropped = 0;
  if (cupti_.activity_get_num_dropped_records(nullptr, 0, &dropped) == CUPTI_SUCCESS) {
    dropped_records_.fetch_add(dropped, std::memory_order_relaxed);
  }
}

// Flushes CUPTI's activity buffers after iterations end, so that kernel times and unified-memory
// records arrive while the program runs, not all at exit. From this thread, never from a CUPTI
// callback: cuptiActivityFlushAll blocks until the completion callbacks have parsed the buffers
// (CUPTI's header: "Default flush can be done at a regular interval in a separate thread"), and
// it is never called while one of the tracer's own locks is held. Polls at kFlushPoll: a launch
// only bumps a counter (StepRecorder::boundaries), nothing on the launch path waits or wakes.
void Tracer::flush_loop() {
  pthread_setname_np(pthread_self(), "umswap-flush");
  uint64_t flushed_at = 0;
  std::unique_lock lock(flush_mutex_);
  while (!flush_stop_) {
    flush_wake_.wait_for(lock, kFlushPoll);
    if (flush_stop_) break;
    const uint64_t boundaries = recorder()->boundaries();
    if (boundaries == flushed_at) continue;
    flushed_at = boundaries;
    lock.unlock();
    cupti_.activity_flush_all(0);  // completed records only; the forced flush is at exit
    flushes_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

void Tracer::stop_flush_thread() {
  if (!flush_thread_.joinable()) return;
  {
    std::lock_guard lock(flush_mutex_);
    flush_stop_ = true;
  }
  flush_wake_.notify_one();
  flush_thread_.join();
}

void Tracer::parse_activity(uint8_t* buffer, size_t valid_size) {
  std::lock_guard lock(activity_mutex_);
  CUpti_Activity* record = nullptr;
  while (cupti_.activity_get_next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      kernel_times_[k->correlationId] = {k->start, k->end};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      kernel_times_[m->correlationId] = {m->start, m->end};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      kernel_times_[m->correlationId] = {m->start, m->end};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) {
      const auto* u = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
      um_records_.push_back({u->counterKind, u->value, u->start, u->end, u->address, u->flags});
    }
  }
}

// Placed where the program's stream runs it (summarize(), own_record_time()): a discard at the
// GPU end of the step launched before it, a populate at the GPU start of the next one.
void Tracer::note_residency(uint64_t address, uint64_t bytes, bool on_gpu, uint64_t at_step,
                            uint32_t copy) {
  if (!running() || !um_counters_ || !cupti_.get_timestamp) return;
  uint64_t now = 0;
  if (cupti_.get_timestamp(&now) != CUPTI_SUCCESS) return;
  const StepRecorder* r = recorder();
  // kNow: placed at the call's time (own_record_time's fallback); kCurrentStep and
  // kLaunchingStep: by the log (noted_before()).
  uint64_t step = at_step;
  if (at_step == kCurrentStep || at_step == kLaunchingStep) {
    step = noted_before(
        at_step == kLaunchingStep ? NotedAt::launching_step : NotedAt::between_launches,
        r && r->recording() ? r->log().size() : UINT64_MAX);
  }
  std::lock_guard lock(activity_mutex_);
  um_records_.push_back({on_gpu ? CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD
                                : CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                         bytes, now, now, address, 0, true, step, copy});
}

void Tracer::note_own_copy(uint32_t correlation, uint64_t address, uint64_t length, bool to_gpu) {
  if (!running() || correlation == 0) return;
  std::lock_guard lock(activity_mutex_);
  if (own_copies_.size() < kMaxOwnCopies) {
    own_copies_.push_back({correlation, address, length, to_gpu});
  }
}

// UMSWAP_EVICT_COPY: umswap's copies against the steps that reach their pages, on the GPU's clock
// (copy_clashes.h). Copies without CUPTI's record are left out.
void Tracer::check_own_copies(const trace::Trace& t, RunSummary& summary) {
  std::vector<OwnCopySpan> copies;
  {
    std::lock_guard lock(activity_mutex_);
    if (own_copies_.empty()) return;
    copies.reserve(own_copies_.size());
    for (const OwnCopy& c : own_copies_) {
      if (const auto it = kernel_times_.find(c.correlation); it != kernel_times_.end()) {
        copies.push_back({c.address, c.length, c.to_gpu, it->second.first, it->second.second});
      }
    }
  }
  std::vector<StepAccessSpan> accesses;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const trace::Step& s = t.steps[i];
    if (s.start_ns == 0) continue;
    for (uint64_t a = s.first_access; a < s.first_access + s.access_count; ++a) {
      const trace::Access& x = t.accesses[a];
      const uint64_t lo = t.buffers[x.buffer].base + x.offset;
      accesses.push_back({i, s.start_ns, s.end_ns, lo, lo + x.length});
    }
  }
  summary.copy_clashes = find_copy_clashes(copies, accesses);
  {
    std::vector<FaultAt> faults;
    faults.reserve(t.faults.size());
    for (const trace::Fault& f : t.faults) {
      faults.push_back({f.time_ns, f.address, f.access, f.buffer});
    }
    UnforeseenReport u = find_unforeseen_faults(copies, faults);
    for (const UnforeseenAccess& a : u.first) {
      std::vector<std::string>& steps = summary.unforeseen_steps.emplace_back();
      // The steps running on the GPU then (the faulting kernel is among them).
      for (size_t i = 0; i < t.steps.size() && steps.size() < 4; ++i) {
        const trace::Step& s = t.steps[i];
        if (s.start_ns && s.start_ns <= a.time_ns && a.time_ns <= s.end_ns) {
          steps.push_back(fmt::format(
              "step {} {}", i, s.name < t.names.size() ? t.names[s.name].substr(0, 160) : "?"));
        }
      }
    }
    if (u.outs_before_back > 0) {
      log_warning(
          "UMSWAP_EVICT_COPY: {} copies to the host of pages began before those pages' copy back "
          "had ended: they may have saved pages not yet filled, and the program's results may "
          "have changed (the stats file's copy_check unforeseen names the pages)",
          u.outs_before_back);
    }
    if (u.faults > 0) {
      log_warning(
          "UMSWAP_EVICT_COPY: {} GPU page faults hit pages while umswap held them on the host "
          "(discarded on the GPU): a kernel reached memory through a pointer umswap could not "
          "see, and the program's results may have changed (the stats file's copy_check "
          "unforeseen names the first)",
          u.faults);
    }
    summary.unforeseen = std::move(u);
  }
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (size_t i = 0; i < t.iterations.size(); ++i) {
    windows.push_back(iteration_window(t.iterations, i));
  }
  summary.iteration_copy_busy = copy_busy(copies, windows);
  // The last iteration but one that copied (the last may be cut short by the program's end).
  size_t pick = SIZE_MAX, seen = 0;
  for (size_t i = summary.iteration_copy_busy.size(); i-- > 0;) {
    const CopyBusy& b = summary.iteration_copy_busy[i];
    if (b.out_ns + b.in_ns > 0 && ++seen == 2) {
      pick = i;
      break;
    }
  }
  if (pick != SIZE_MAX) {
    const auto [lo, hi] = windows[pick];
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const trace::Step& st : t.steps) {
      if (st.start_ns && st.end_ns > lo && st.start_ns < hi)
        spans.emplace_back(st.start_ns, st.end_ns);
    }
    summary.copy_idle_iteration = pick;
    for (const CopyIdleGap& g : copy_idle_gaps(copies, spans, lo, hi, 12)) {
      RunSummary::IdleGap& out = summary.copy_idle_gaps.emplace_back();
      out.gap = g;
      uint64_t first_start = UINT64_MAX;
      for (size_t i = 0; i < t.steps.size(); ++i) {
        const uint64_t st = t.steps[i].start_ns;
        if (st >= g.start_ns && st < g.start_ns + g.length_ns && st < first_start) {
          out.first_step = i;
          first_start = st;
        }
      }
      if (out.first_step != UINT64_MAX && t.steps[out.first_step].name < t.names.size()) {
        out.first_name = t.names[t.steps[out.first_step].name].substr(0, 120);
      }
    }
  }
  for (const CopyClash& c : summary.copy_clashes->first) {
    const trace::Step& s = t.steps[c.step];
    summary.copy_clash_names.push_back(s.name < t.names.size() ? t.names[s.name] : "?");
  }
  if (summary.copy_clashes->harmful > 0) {
    log_warning(
        "UMSWAP_EVICT_COPY: {} steps reached a page while it was discarded or coming back "
        "(the stats file's copy_check names the first)",
        summary.copy_clashes->harmful);
  }
}

void Tracer::note_lifetime(uint64_t address, uint64_t bytes, bool freed) {
  const StepRecorder* r = recorder();
  if (!running() || !r || !r->recording()) return;
  const uint64_t before = r->log().size();
  std::lock_guard lock(lifetime_mutex_);
  if (lifetimes_.size() >= kMaxLifetimes) {
    const auto half = static_cast<ptrdiff_t>(kMaxLifetimes / 2);
    lifetimes_.erase(lifetimes_.begin(), lifetimes_.begin() + half);
  }
  // Threads race between reading the log's size and taking the lock: keep the order monotone.
  const uint64_t at = lifetimes_.empty() ? before : std::max(before, lifetimes_.back().when);
  lifetimes_.push_back({at, address, bytes, freed});
}

std::vector<LifetimeEvent> Tracer::copy_lifetimes(uint64_t from_step, uint64_t to_step) {
  std::lock_guard lock(lifetime_mutex_);
  const auto first =
      std::lower_bound(lifetimes_.begin(), lifetimes_.end(), from_step,
                       [](const LifetimeEvent& e, uint64_t step) { return e.when < step; });
  const auto last =
      std::upper_bound(first, lifetimes_.end(), to_step,
                       [](uint64_t step, const LifetimeEvent& e) { return step < e.when; });
  return {first, last};
}

bool Tracer::start(const TracerConfig& config, const TracerDriver& driver, Registry& registry,
                   std::string* reason) {
  std::lock_guard owner(owner_mutex_);
  if (!yielded_to_.empty()) {
    *reason = fmt::format(
        "the program uses CUPTI itself ({}), as a profiler such as torch.profiler does, and "
        "CUPTI serves one client",
        yielded_to_);
    return false;
  }
  config_ = config;
  driver_ = driver;
  registry_ = &registry;
  if (!driver_.func_get_param_info || !driver_.kernel_get_param_info) {
    *reason = "the driver lacks cuFuncGetParamInfo/cuKernelGetParamInfo (needs CUDA 12.4+)";
    return false;
  }
  if (const std::optional<std::string> tool = injected_cuda_tool(
          std::getenv("CUDA_INJECTION64_PATH"), std::getenv("NVTX_INJECTION64_PATH"))) {
    // It would take CUPTI after this subscribed, and check or record nothing (injected_tool.h).
    *reason = fmt::format("another CUPTI subscriber, {}, is injected into the program", *tool);
    return false;
  }
  if (!cupti_.load(config_.cupti_library, reason)) return false;
  CUptiResult r = cupti_.subscribe(&subscriber_, &Tracer::on_callback, this);
  if (r != CUPTI_SUCCESS) {
    *reason = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                  ? "another CUPTI subscriber (a tool injected into the program, such as Nsight "
                    "Systems or compute-sanitizer) already holds CUPTI"
                  : "cuptiSubscribe failed: " + cupti_.result_string(r);
    return false;
  }
  for (CUpti_CallbackId cbid : kTracedCallbacks) {
    cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  }
  for (uint32_t cbid : memory_callback_ids()) {
    cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  }
  if (driver_.stream_is_capturing) {
    for (CUpti_CallbackId cbid : kCaptureBegins) {
      cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    }
    for (CUpti_CallbackId cbid : kCaptureEnds) {
      cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    }
  }
  if (!config_.iteration_marker.empty()) {
    // Reaches CUPTI only if NVTX_INJECTION64_PATH named libcupti before the program started
    // (`umswap record --marker` sets it).
    marker_source_ = "nvtx:" + config_.iteration_marker;
    for (CUpti_CallbackId cbid : {CUPTI_CBID_NVTX_nvtxRangePushA, CUPTI_CBID_NVTX_nvtxRangeStartA,
                                  CUPTI_CBID_NVTX_nvtxMarkA}) {
      cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_NVTX, cbid);
    }
  }
  g_tracer = this;
  cupti_.activity_register_callbacks(&Tracer::on_buffer_requested, &Tracer::on_buffer_completed);
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                    CUPTI_ACTIVITY_KIND_MEMSET}) {
    r = cupti_.activity_enable(kind);
    if (r != CUPTI_SUCCESS)
      log_warning("CUPTI activity kind {}: {}", static_cast<int>(kind), cupti_.result_string(r));
  }
  recorder_.store(
      new StepRecorder({.max_iterations = config.max_iterations, .observer = config.observer}),
      std::memory_order_release);
  functions_ = std::make_unique<ParamLayoutCache>(kMaxFunctions);
  for (auto& key : copy_keys_) key.store(UINT32_MAX, std::memory_order_relaxed);
  pid_ = ::getpid();
  running_.store(true, std::memory_order_release);
  try {
    flush_thread_ = std::thread([this] { flush_loop(); });
  } catch (const std::system_error& e) {
    log_warning("no activity flush thread ({}): CUPTI records arrive when buffers fill", e.what());
  }
  return true;
}

// The program asked CUPTI for something only one client can have (a subscriber, the activity
// buffers): a profiler is starting. Before start() the tracer will not start; while it runs it
// finishes now, as at exit (advisor stopped, CUPTI flushed and released, the trace so far written),
// and the program goes on with plain managed memory. Said once.
void Tracer::yield_cupti(const std::string& what) {
  std::lock_guard owner(owner_mutex_);
  if (!yielded_to_.empty()) return;
  yielded_to_ = what;
  if (!running_.load() || ::getpid() != pid_) return;
  log_warning(
      "the program started a profiler ({}); umswap's tracer and advisor step aside so that it "
      "gets CUPTI: from here on the program runs on plain managed memory, without advice{}",
      what, config_.trace_path.empty() ? "" : ", and the trace holds the steps until now");
  yielding_.store(true);
  finish();
}

trace::Trace Tracer::assemble(StepRecorder::Recording recording) {
  const LaunchLog& log = recorder()->log();  // complete: stop() ended recording
  const uint64_t steps = log.size();
  trace::Trace t;
  t.program = config_.program;
  t.pid = static_cast<uint64_t>(getpid());
  t.names = std::move(recording.names);
  // Buffers: every one a step touched, in allocation order.
  std::unordered_map<uint64_t, uint32_t> index_of;
  for (const BufferRecord& r : recording.buffers) {
    index_of[r.id] = static_cast<uint32_t>(t.buffers.size());
    t.buffers.push_back({r.id, r.size, r.call_site, r.base, static_cast<uint8_t>(r.api),
                         !registry_->contains(r.base)});
  }
  // Iterations: between markers if the program gave any, else from the period of the whole
  // recorded sequence (warm-up steps first; a final partial iteration is left out).
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  const std::vector<uint64_t>& marks = recording.marks;
  t.detection = std::move(recording.detection);
  if (!marks.empty()) {
    for (size_t m = 0; m + 1 < marks.size(); ++m) {
      spans.emplace_back(marks[m], marks[m + 1] - marks[m]);
    }
  } else if (t.detection.period > 0) {
    for (uint64_t first = t.detection.warmup_steps; first + t.detection.period <= steps;
         first += t.detection.period) {
      spans.emplace_back(first, t.detection.period);
    }
  }
  // Steps and their accesses (byte extents within each buffer), each iteration's measured within
  // that iteration, as the online advisor measures the one it learns (the warm-up and a final
  // partial iteration are chunks of their own).
  std::vector<std::span<const PointerHit>> step_hits;
  step_hits.reserve(steps);
  for (uint64_t i = 0; i < steps; ++i) step_hits.push_back(log.hits(log.step(i)));
  std::vector<uint64_t> boundaries;
  for (const auto& [first, count] : spans) {
    if (first > 0 && (boundaries.empty() || boundaries.back() < first)) boundaries.push_back(first);
    boundaries.push_back(first + count);
  }
  std::vector<uint64_t> step_first;
  compute_extents_by_chunk(
      step_hits, boundaries, [&](BufferId id) { return index_of.at(id); }, t.accesses, step_first);
  std::lock_guard lock(activity_mutex_);
  t.steps.reserve(steps);
  for (uint64_t i = 0; i < steps; ++i) {
    const LoggedStep& s = log.step(i);
    trace::Step step;
    step.kind = s.kind;
    step.name = s.key;
    step.stream = s.stream;
    step.first_access = step_first[i];
    step.access_count = static_cast<uint32_t>(step_first[i + 1] - step_first[i]);
    if (auto it = kernel_times_.find(s.correlation); it != kernel_times_.end()) {
      step.start_ns = it->second.first;
      step.end_ns = it->second.second;
    }
    t.steps.push_back(step);
  }
  for (const auto& [first, count] : spans) {
    trace::Iteration it;
    it.first_step = first;
    it.step_count = count;
    it.start_ns = UINT64_MAX;
    for (uint64_t i = first; i < first + count; ++i) {
      if (t.steps[i].start_ns) it.start_ns = std::min(it.start_ns, t.steps[i].start_ns);
      it.end_ns = std::max(it.end_ns, t.steps[i].end_ns);
    }
    if (it.start_ns == UINT64_MAX) it.start_ns = 0;
    t.iterations.push_back(it);
  }
  // Unified-memory counters: totals, per iteration by time, faults for the timeline.
  auto find_iteration = [&](uint64_t time) -> trace::Iteration* {
    for (auto& it : t.iterations) {
      if (it.start_ns && time >= it.start_ns && time <= it.end_ns) return &it;
    }
    return nullptr;
  };
  const auto snapshot_index = [&](uint64_t address) -> uint32_t {
    for (size_t b = 0; b < t.buffers.size(); ++b) {
      if (address - t.buffers[b].base < t.buffers[b].size) return static_cast<uint32_t>(b);
    }
    return UINT32_MAX;
  };
  // Transfers for the timeline: the driver's migrations (a prefetch call's: the advisor's
  // prefetches and evictions; the others: faults, the driver's own evictions) and umswap's own
  // copies (first), each with CUPTI's GPU times; at most kMaxTransfers of them (8.9 MB).
  constexpr size_t kMaxTransfers = 1 << 18;
  const auto add_transfer = [&](uint64_t start, uint64_t end, uint64_t address, uint64_t bytes,
                                bool to_gpu, uint8_t kind) {
    if (t.transfers.size() >= kMaxTransfers || start == 0) return;
    t.transfers.push_back({start, std::max(start, end), address, bytes, to_gpu, kind});
  };
  for (const OwnCopy& c : own_copies_) {
    if (const auto k = kernel_times_.find(c.correlation); k != kernel_times_.end()) {
      add_transfer(k->second.first, k->second.second, c.address, c.length, c.to_gpu,
                   trace::Transfer::copy);
    }
  }
  for (const UmRecord& u : um_records_) {
    trace::Iteration* it = find_iteration(u.start);
    auto add = [&](uint64_t trace::Counters::*field) {
      t.totals.*field += u.value;
      if (it) it->counters.*field += u.value;
    };
    if (u.own) continue;  // moved no bytes
    switch (u.kind) {
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH: {
        const bool in = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD;
        add(in ? &trace::Counters::bytes_htod : &trace::Counters::bytes_dtoh);
        // For transfers, flags is the migration's cause.
        add_transfer(u.start, u.end, u.address, u.value, in,
                     u.flags == CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER
                         ? trace::Transfer::prefetch_call
                         : trace::Transfer::driver);
        break;
      }
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        add(&trace::Counters::gpu_page_faults);
        if (t.faults.size() < (1u << 20)) {
          t.faults.push_back(
              {u.start, u.address, snapshot_index(u.address), static_cast<uint8_t>(u.flags)});
        }
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        add(&trace::Counters::thrashing_events);
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT:
        add(&trace::Counters::cpu_page_faults);
        break;
      default:
        break;
    }
  }
  std::stable_sort(
      t.transfers.begin(), t.transfers.end(),
      [](const trace::Transfer& a, const trace::Transfer& b) { return a.start_ns < b.start_ns; });
  // Lifetimes inside the traced buffers (slabs); all logged while recording, so none is past
  // the last step.
  {
    std::vector<std::pair<uint64_t, uint64_t>> buffers;
    for (const trace::Buffer& b : t.buffers) buffers.emplace_back(b.base, b.size);
    std::lock_guard lifetimes(lifetime_mutex_);
    t.lifetimes = lifetimes_in(lifetimes_, buffers);
  }
  t.dropped_records = dropped_records_.load() + recording.dropped_steps;
  return t;
}

void Tracer::finish(bool used_cuda) {
  // A forked child inherits the parent's tracer state and exit handlers, but must neither flush
  // CUPTI nor write the parent's trace.
  if (::getpid() != pid_ || !running_.load()) return;
  // The observer (advisor) stops first, while launches are still traced normally.
  if (config_.observer) config_.observer->on_finish();
  if (!running_.exchange(false)) return;
  StepRecorder::Recording recording = recorder()->stop();
  stop_flush_thread();
  // Without a traced call CUPTI holds nothing of ours, and this may run from the library's
  // destructor, after libcupti's own teardown, where calling it crashed (torchrun's launcher:
  // it looks the driver up, which starts the tracer, then only starts the workers): leave it.
  const bool traced = first_call_done_.load() || yielding_.load();
  if (traced) {
    // Collect what CUPTI still buffers, then stop it before the CUDA runtime tears the context
    // down after this exit handler: no more callbacks, no more activity records.
    cupti_.activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    count_dropped_records();
    cupti_.unsubscribe(subscriber_);
    for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER}) {
      cupti_.activity_disable(kind);
    }
  }
  // A process that used no CUDA (the launcher) writes no trace over its workers' one.
  if (!traced && !used_cuda) return;
  trace::Trace t = assemble(std::move(recording));
  if (!config_.trace_path.empty()) {
    std::string error;
    if (!write_trace_file(config_.trace_path, t, &error)) {
      log_warning("trace not written: {}", error);
    } else {
      log_info("trace written to {}: {} steps, {} iterations (period {}), {} buffers",
               config_.trace_path, t.steps.size(), t.iterations.size(), t.detection.period,
               t.buffers.size());
    }
  }
  if (t.dropped_records > 0) {
    log_warning(
        "tracer: {} records dropped rather than waited for (steps past the log's bound, "
        "CUPTI records without a buffer)",
        t.dropped_records);
  }
  log_debug("tracer: {} activity flushes at iteration ends", flushes_.load());
  summarize(std::move(t));
}

// GPU-resident bytes counted from what the tracer saw, in time order (residency.h): transfers
// each way, the 2 MiB chunk around a GPU fault (within its allocation), umswap's own discards
// and populating prefetches (note_residency), and the extents each launched step touches, from
// its GPU start. Ranges are rounded out to 64 KiB, the smallest unit the driver migrates. The
// blocks' lifetimes say how much of each iteration's peak lay in freed memory.
void Tracer::summarize(trace::Trace t) {
  constexpr uint64_t kPage = 64 << 10;
  constexpr uint64_t kChunk = 2 << 20;
  auto summary = std::make_unique<RunSummary>();
  summary->has_unified_memory_counters = um_counters_;
  summary->layouts_prepared = prepared_count_.load(std::memory_order_relaxed);
  summary->layouts_read_in_callback = read_in_callback_.load(std::memory_order_relaxed);
  summary->layouts_unknown = layouts_unknown_.load(std::memory_order_relaxed);
  summary->layout_error = layout_error_.load(std::memory_order_relaxed);
  summary->first_uses = first_use_waits_.load(std::memory_order_relaxed);
  summary->captured_calls = captured_calls_.load(std::memory_order_relaxed);
  std::vector<ResidencyEvent> events;
  auto push = [&](uint64_t when, uint64_t lo, uint64_t hi, bool on_gpu) {
    events.push_back({when, lo / kPage * kPage, (hi + kPage - 1) / kPage * kPage, on_gpu});
  };
  // Live blocks first, so that at equal times a block is allocated before the step that touches
  // it: slab blocks between allocation and free (placed at the GPU start of the next step with
  // one); a buffer without blocks is live throughout.
  std::vector<uint64_t> step_time(t.steps.size() + 1, UINT64_MAX);
  for (size_t i = t.steps.size(); i-- > 0;) {
    step_time[i] = t.steps[i].start_ns ? t.steps[i].start_ns : step_time[i + 1];
  }
  std::vector<bool> has_blocks(t.buffers.size(), false);
  for (const trace::Lifetime& l : t.lifetimes) {
    if (l.buffer >= t.buffers.size()) continue;
    has_blocks[l.buffer] = true;
    const uint64_t lo = t.buffers[l.buffer].base + l.offset;
    events.push_back({step_time[std::min<uint64_t>(l.before_step, t.steps.size())], lo,
                      lo + l.length, !l.freed, true});
  }
  for (size_t b = 0; b < t.buffers.size(); ++b) {
    if (!has_blocks[b]) {
      events.push_back({0, t.buffers[b].base, t.buffers[b].base + t.buffers[b].size, true, true});
    }
  }
  {
    std::vector<std::pair<uint64_t, uint64_t>> bases;  // (base, size) of traced buffers
    for (const trace::Buffer& buf : t.buffers) bases.emplace_back(buf.base, buf.size);
    std::sort(bases.begin(), bases.end());
    std::vector<StepTime> times(t.steps.size());
    for (size_t i = 0; i < t.steps.size(); ++i) times[i] = {t.steps[i].start_ns, t.steps[i].end_ns};
    std::lock_guard lock(activity_mutex_);
    for (const UmRecord& u : um_records_) {
      const bool in = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD;
      const bool out = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH;
      const bool fault = u.kind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT;
      if (!in && !out && !fault) continue;
      uint64_t when = u.own ? own_record_time(times, u.before_step, out, u.start) : u.start;
      if (u.own && u.copy) {
        // Behind or ahead of a copy of umswap's own: where CUPTI saw that copy run.
        if (auto it = kernel_times_.find(u.copy); it != kernel_times_.end()) {
          when = out ? it->second.second : it->second.first;
        }
      }
      if (!fault) {
        push(when, u.address, u.address + std::max<uint64_t>(u.value, 1), in);
        continue;
      }
      // A fault populates or migrates up to a 2 MiB chunk (the driver's large page), within the
      // allocation it falls in.
      auto b = std::upper_bound(
          bases.begin(), bases.end(), u.address,
          [](uint64_t a, const std::pair<uint64_t, uint64_t>& r) { return a < r.first; });
      if (b != bases.begin() && u.address - std::prev(b)->first < std::prev(b)->second) {
        --b;
        const uint64_t chunk = u.address & ~(kChunk - 1);
        push(when, std::max(chunk, b->first), std::min(chunk + kChunk, b->first + b->second), true);
      } else {
        push(when, u.address, u.address + 1, true);
      }
    }
  }
  for (const trace::Step& s : t.steps) {
    if (s.start_ns == 0) continue;
    for (uint64_t a = s.first_access; a < s.first_access + s.access_count; ++a) {
      const trace::Access& x = t.accesses[a];
      const uint64_t lo = t.buffers[x.buffer].base + x.offset;
      push(s.start_ns, lo, lo + x.length, true);
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (const trace::Iteration& it : t.iterations) windows.emplace_back(it.start_ns, it.end_ns);
  constexpr size_t kTopBuffers = 6;
  summary->iteration_peak_buffers.resize(windows.size());
  const auto at_peak = [&](size_t w, const ResidentSet& resident, const ResidentSet& live) {
    std::vector<RunSummary::BufferShare> shares;
    for (uint32_t b = 0; b < t.buffers.size(); ++b) {
      const uint64_t lo = t.buffers[b].base, hi = lo + t.buffers[b].size;
      if (const uint64_t r = resident.bytes_within(lo, hi)) {
        shares.push_back({b, r, live.bytes_within(lo, hi), {}, {}});
      }
    }
    const size_t top = std::min(kTopBuffers, shares.size());
    std::partial_sort(shares.begin(), shares.begin() + static_cast<ptrdiff_t>(top), shares.end(),
                      [](const auto& a, const auto& b) { return a.resident > b.resident; });
    shares.resize(top);
    if (!shares.empty()) {
      const uint64_t lo = t.buffers[shares[0].buffer].base;
      const uint64_t hi = lo + t.buffers[shares[0].buffer].size;
      for (auto [set, out] : {std::pair{&resident, &shares[0].resident_ranges},
                              std::pair{&live, &shares[0].live_ranges}}) {
        for (const auto& [a, b] : set->ranges_within(lo, hi, 64)) out->emplace_back(a - lo, b - a);
      }
    }
    summary->iteration_peak_buffers[w] = std::move(shares);
  };
  ResidencyPeaks peaks = count_residency(std::move(events), windows, at_peak);
  check_own_copies(t, *summary);
  // At each peak, the step that began last at or before it (steps by GPU start).
  std::vector<std::pair<uint64_t, uint64_t>> by_start;  // (start_ns, step)
  for (size_t i = 0; i < t.steps.size(); ++i) {
    if (t.steps[i].start_ns != 0) by_start.emplace_back(t.steps[i].start_ns, i);
  }
  std::sort(by_start.begin(), by_start.end());
  for (const uint64_t when : peaks.when_by_window) {
    const auto after =
        std::upper_bound(by_start.begin(), by_start.end(), std::pair{when, uint64_t{UINT64_MAX}});
    summary->iteration_peak_step.push_back(
        when != 0 && after != by_start.begin() ? std::prev(after)->second : UINT64_MAX);
  }
  {
    // Which kernels took the faults (fault_kernels.h).
    std::vector<StepSpan> spans;
    spans.reserve(t.steps.size());
    for (const trace::Step& s : t.steps) spans.push_back({s.start_ns, s.end_ns, s.name});
    std::vector<uint64_t> fault_times;
    fault_times.reserve(t.faults.size());
    for (const trace::Fault& f : t.faults) fault_times.push_back(f.time_ns);
    // Every kernel that faulted (the stats show the first few and check them all).
    summary->fault_kernels = faults_by_kernel(spans, fault_times, SIZE_MAX);
  }
  summary->peak_resident = peaks.overall;
  summary->iteration_peak_resident = std::move(peaks.by_window);
  summary->iteration_peak_resident_free = std::move(peaks.free_by_window);
  summary->trace = std::move(t);
  summary_ = std::move(summary);
}

Tracer& tracer_instance() {
  static Tracer* instance = new Tracer();  // never destroyed: callbacks may fire during exit
  return *instance;
}

}  // namespace

bool start_tracer(const TracerConfig& config, const TracerDriver& driver, Registry& registry,
                  std::string* reason) {
  return tracer_instance().start(config, driver, registry, reason);
}

void mark_iteration() {
  if (tracer_instance().running()) tracer_instance().mark("api");
}

void finish_tracer(bool used_cuda) {
  tracer_instance().finish(used_cuda);
}

void yield_cupti(const std::string& what) {
  tracer_instance().yield_cupti(what);
}

void note_residency(uint64_t address, uint64_t bytes, bool on_gpu) {
  tracer_instance().note_residency(address, bytes, on_gpu, Tracer::kCurrentStep);
}

void note_launch_populate(uint64_t address, uint64_t bytes) {
  tracer_instance().note_residency(address, bytes, true, Tracer::kLaunchingStep);
}

void prepare_launch(CUfunction f) {
  tracer_instance().prepare_launch(f);
}

void before_blocking_call() {
  if (!t_own_calls) tracer_instance().before_blocking_call();
}

void note_residency_by_copy(uint64_t address, uint64_t bytes, bool on_gpu, uint32_t copy,
                            uint64_t step) {
  tracer_instance().note_residency(address, bytes, on_gpu, step, copy);
}

std::pair<uint64_t, uint64_t> iteration_window(const std::vector<trace::Iteration>& iterations,
                                               size_t i) {
  const trace::Iteration& it = iterations[i];
  if (!it.start_ns) return {0, 0};
  const uint64_t end = i + 1 < iterations.size() && iterations[i + 1].start_ns
                           ? iterations[i + 1].start_ns
                           : it.end_ns;
  return {it.start_ns, end};
}

uint32_t last_own_copy() {
  return t_own_copy;
}

void note_own_copy(uint32_t correlation, uint64_t address, uint64_t length, bool to_gpu) {
  tracer_instance().note_own_copy(correlation, address, length, to_gpu);
}

void untrace_this_thread() {
  t_own_calls = true;
}

void note_lifetime(uint64_t address, uint64_t bytes, bool freed) {
  tracer_instance().note_lifetime(address, bytes, freed);
}

std::vector<LifetimeEvent> copy_lifetimes(uint64_t from_step, uint64_t to_step) {
  return tracer_instance().copy_lifetimes(from_step, to_step);
}

std::string yielded_cupti_to() {
  return tracer_instance().yielded_to();
}

void* cupti_symbol(const char* name) {
  return tracer_instance().cupti_symbol(name);
}

bool tracer_running() {
  return tracer_instance().running();
}

bool tracer_saw_calls() {
  return tracer_instance().saw_calls();
}

std::vector<uint32_t> copy_keys(uint64_t first, uint64_t max) {
  const StepRecorder* r = tracer_instance().recorder();
  return r ? r->log().copy_keys(first, max) : std::vector<uint32_t>();
}

bool copy_steps(uint64_t first, uint64_t count, StepLog* out) {
  const StepRecorder* r = tracer_instance().recorder();
  return r && r->log().copy_steps(first, count, out);
}

uint64_t logged_steps() {
  const StepRecorder* r = tracer_instance().recorder();
  return r ? r->log().size() : 0;
}

std::string key_name(uint32_t key) {
  const StepRecorder* r = tracer_instance().recorder();
  return r ? r->key_name(key) : std::string();
}

std::string_view key_view(uint32_t key) {
  const StepRecorder* r = tracer_instance().recorder();
  return r ? r->key_view(key) : std::string_view();
}

const RunSummary* run_summary() {
  return tracer_instance().summary();
}

}  // namespace umswap::tracer
