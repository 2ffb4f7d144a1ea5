// The tracer's lifecycle: loading CUPTI and subscribing (start()), what can only be set up at the
// first traced call (on_first_call()), stepping aside for a profiler (yield_cupti()), the final
// flush and the trace written at exit (finish()); and tracer.h's functions, which forward to the
// one Tracer (tracer_impl.h).
#include "umswap/tracer/tracer.h"
#include "umswap/core/trace_iterations.h"
#include "umswap/tracer/own_calls.h"

#include <cupti.h>

#include <unistd.h>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tracer_impl.h"
#include "umswap/core/log.h"
#include "umswap/core/trace.h"
#include "umswap/core/trace_file.h"
#include "umswap/tracer/injected_tool.h"
#include "umswap/tracer/memory_calls.h"
#include "umswap/tracer/param_scanner.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap::tracer::detail {
namespace {

constexpr size_t kMaxFunctions = 16384;  // layouts cached; past this, read per launch

}  // namespace

Tracer* g_tracer = nullptr;

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
  um_counters_.store(r == CUPTI_SUCCESS, std::memory_order_release);
  std::atexit([] { finish_tracer(); });
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
  recorder_.store(new StepRecorder({.observer = config.observer}), std::memory_order_release);
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

void Tracer::finish(bool used_cuda) {
  // Once, whole: the exit handler and a profiler's yield_cupti() on another thread may both come
  // here; the second waits for the first to end (the observer joined once, summary_ written
  // before anyone reads it) and then finds the tracer stopped.
  std::lock_guard finishing(finish_mutex_);
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
    // The stats (summarize() below) keep every iteration; the file only the first ones asked for.
    std::optional<trace::Trace> cut;
    if (config_.max_iterations > 0 && t.iterations.size() > config_.max_iterations) {
      cut = trace::first_iterations(t, config_.max_iterations);
    }
    const trace::Trace& written = cut ? *cut : t;
    if (!write_trace_file(config_.trace_path, written, &error)) {
      log_warning("trace not written: {}", error);
    } else {
      log_info("trace written to {}: {} steps, {} iterations (period {}), {} buffers",
               config_.trace_path, written.steps.size(), written.iterations.size(),
               written.detection.period, written.buffers.size());
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

}  // namespace umswap::tracer::detail

namespace umswap::tracer {
namespace {

using detail::Tracer;

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

bool capture_open() {
  return tracer_instance().capture_open();
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
