// The tracer's one object, shared by the files that implement it (tracer.h is its public face);
// internal to cupti_tracer/. Each file owns a part of its state, and says here which threads
// touch it:
//
//   tracer.cpp           The lifecycle (start(), on_first_call(), yield_cupti(), finish()) and the
//                        public functions. config_, driver_, registry_, cupti_, subscriber_, pid_
//                        and marker_source_ are written by start() under owner_mutex_ before it
//                        releases running_, and only read after that, by any thread that has
//                        acquired running_ (finish() clears it). yielded_to_: under owner_mutex_
//                        (start(); yield_cupti(), on the program's thread that called CUPTI);
//                        yielding_: set by yield_cupti(), read by finish(). first_call_done_ and
//                        um_counters_: the first traced call's thread (um_counters_ then read by
//                        note_residency(), any thread, and at finish()). summary_: written by
//                        finish() under finish_mutex_ (an exit handler, or yield_cupti()), read
//                        once a finish() has returned.
//   tracer_callback.cpp  CUPTI's callback, on the program's calling threads, and the launch path.
//                        recorder_ (made by start(), never destroyed) serializes launching threads
//                        itself. functions_ and copy_keys_ are read without a lock; prepared_
//                        (also written by prepare_launch(), on a launching thread before the
//                        driver's launch) under functions_mutex_; used_ under used_mutex_;
//                        captures_open_ and the atomic counters by any calling thread (the
//                        counters read by finish()). Thread-locals: t_pending (the launching
//                        thread), t_opaque (the thread in an opaque call or a capture begin),
//                        t_own_copy (an untraced thread: the advisor's).
//   tracer_records.cpp   What arrives besides the launch log. kernel_times_, um_records_ and
//                        own_copies_ under activity_mutex_: CUPTI's buffer-completion callback (on
//                        CUPTI's thread, or on the thread in cuptiActivityFlushAll: the flush
//                        thread, finish()), note_residency() (any thread: allocations, slabs, the
//                        advisor, the launch path), note_own_copy() (the advisor thread).
//                        buffers_out_ and dropped_records_: CUPTI's threads and finish().
//                        flush_thread_, flush_stop_ (under flush_mutex_) and flushes_: the flush
//                        thread, started by start() and stopped by finish(). lifetimes_ under
//                        lifetime_mutex_: the slab allocator's callers (note_lifetime(), under its
//                        lock), the advisor thread (copy_lifetimes()), finish().
//   tracer_assembly.cpp  assemble(), on finish()'s thread: the log (complete once recording has
//                        stopped) and the records above, under their mutexes.
//   tracer_summary.cpp   summarize() and check_own_copies(), on finish()'s thread: the assembled
//                        trace, the records under activity_mutex_, the launch path's counters.
#pragma once

#include <cupti.h>

#include <dlfcn.h>
#include <sys/types.h>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "umswap/allocator/registry.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/cupti_library.h"
#include "umswap/tracer/lifetimes.h"
#include "umswap/tracer/memory_calls.h"
#include "umswap/tracer/param_scanner.h"
#include "umswap/tracer/step_recorder.h"
#include "umswap/tracer/tracer.h"

namespace umswap::tracer::detail {

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

// The callbacks the tracer subscribes to (start()) and tells apart (on_callback()).

// The calls that begin and end a stream's capture into a CUDA graph (seen at their exit).
inline constexpr CUpti_CallbackId kCaptureBegins[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
};
inline constexpr CUpti_CallbackId kCaptureEnds[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
};

// Kernel launches; the copies, memsets, memory operations, graph launches and host functions are
// memory_callback_ids().
inline constexpr CUpti_CallbackId kTracedCallbacks[] = {
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

// The process-wide tracer: one, made on first use and never destroyed (tracer.cpp).
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
  bool capture_open() const { return captures_open_.load(std::memory_order_acquire) > 0; }
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
  // finish() runs under it, whole (taken after owner_mutex_ when yield_cupti() calls finish()).
  std::mutex finish_mutex_;
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
  std::atomic<bool> um_counters_{false};  // written once (on_first_call()), read by any thread

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
  uint64_t own_copies_dropped_ = 0;  // past kMaxOwnCopies, under activity_mutex_
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

// The tracer CUPTI's activity callbacks reach (they take no user pointer): set by start().
extern Tracer* g_tracer;

}  // namespace umswap::tracer::detail
