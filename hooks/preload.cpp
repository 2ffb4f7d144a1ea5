#include "preload.h"
#include "reentry_guard.h"
#include "vmm_driver_timing.h"
#include "vmm_engine.h"
#include "vmm_observer.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <optional>

#include "umswap/advisor/advisor.h"
#include "umswap/advisor/resident_launches.h"
#include "umswap/allocator/call_site.h"
#include "umswap/allocator/discard_pages.h"
#include "umswap/core/environment.h"
#include "umswap/core/flight_recorder.h"
#include "umswap/core/log.h"
#include "umswap/core/stats_file.h"
#include "umswap/tracer/tracer.h"

#ifndef UMSWAP_VERSION
#define UMSWAP_VERSION "unknown"
#endif

namespace umswap {
namespace {

thread_local int t_runtime_api __attribute__((tls_model("initial-exec"))) = -1;
thread_local bool t_left_to_driver __attribute__((tls_model("initial-exec"))) = false;

// pid of the process that loaded the library; a forked child has another and writes nothing.
pid_t g_owner_pid = 0;

// The advisor, when the mode asks for one and the tracer runs. Never destroyed (exit paths).
std::atomic<advisor::Advisor*> g_advisor{nullptr};

// The process's rank under torchrun (RANK, a non-negative integer), else null.
nlohmann::json rank_json() {
  const char* text = env_get("RANK");
  if (!text || !*text) return nullptr;
  const std::string_view s(text);
  uint64_t rank = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), rank);
  if (ec != std::errc() || end != s.data() + s.size()) return nullptr;
  return rank;
}

// PyTorch's caching allocator's blocks as umswap learned them (torch_blocks.h); `blocks` is null
// when no allocator was set up (nothing was redirected).
nlohmann::json torch_blocks_json(const TorchBlocks* blocks) {
  TorchBlocks::Stats s;
  if (blocks)
    s = blocks->stats();
  else
    s.state = "nothing redirected";
  return {{"state", s.state},
          {"events", s.events},
          {"segments", s.segments},
          {"blocks", s.blocks},
          {"live_blocks", s.live_blocks},
          {"ignored", s.ignored},
          {"drops", s.drops},
          {"discarded_bytes", s.discarded_bytes},
          {"populated_bytes", s.populated_bytes},
          {"populate_deferred_bytes", s.populate_deferred_bytes}};
}

// The hooks the slabs and PyTorch's followed blocks share (besides the tracer's note_lifetime
// and note_residency): the advisor's plan says which dead pages to drop and which to leave for it
// to populate.
bool advisor_discard_page(uint64_t page) {
  advisor::Advisor* advisor = g_advisor.load(std::memory_order_acquire);
  return advisor != nullptr && advisor->discard_page(page);
}
bool advisor_populate_later(uint64_t page) {
  advisor::Advisor* advisor = g_advisor.load(std::memory_order_acquire);
  return advisor != nullptr && advisor->populate_later(page);
}

}  // namespace

RuntimeApiScope::RuntimeApiScope(AllocApi api)
    : previous_(t_runtime_api), previous_left_(t_left_to_driver) {
  t_runtime_api = static_cast<int>(api);
  t_left_to_driver = false;
}
RuntimeApiScope::~RuntimeApiScope() {
  t_runtime_api = previous_;
  t_left_to_driver = previous_left_;
}
void RuntimeApiScope::note_left_to_driver() {
  t_left_to_driver = true;
}
bool RuntimeApiScope::left_to_driver() const {
  return t_left_to_driver;
}

AllocApi Preload::api_or(AllocApi fallback) {
  return t_runtime_api < 0 ? fallback : static_cast<AllocApi>(t_runtime_api);
}

Preload::Preload() {
  options_ = parse_options(env_get, &option_warnings_);
  set_log_verbosity(options_.verbose);
  // The tracer runs when a trace is asked for, when the advisor needs it, and for the stats of
  // plain managed memory (faults and bytes moved per iteration).
  // Under engine vmm it sees the steps that decide the moves (vmm_observer.h).
  wants_tracer_ = !options_.trace_path.empty() || wants_advisor() ||
                  (redirects(options_.mode) &&
                   (!options_.stats_path.empty() || options_.engine == Engine::vmm));
}

Preload& preload() {
  static Preload* instance = new Preload();  // leaked on purpose: hooks may run during exit
  return *instance;
}

void Preload::load_driver_once() {
  std::call_once(driver_once_, [this] {
    // Warned about here rather than at load: the library is preloaded into every process the
    // program starts (shells, launchers), and only the ones using CUDA should speak.
    for (const auto& w : option_warnings_) log_warning("{}", w);
    const char* reason = nullptr;
    driver_ok_ = load_real_driver(&driver_, &reason);
    if (!driver_ok_) {
      log_warning("no usable CUDA driver ({}); umswap passes every call through", reason);
      return;
    }
    if (options_.verbose >= 1) {
      log_info("umswap {} loaded in pid {}", UMSWAP_VERSION, ::getpid());
      for (const auto& line : describe(options_)) log_info("  {}", line);
    }
  });
}

const RealDriver* Preload::driver() {
  load_driver_once();
  if (!driver_ok_) return nullptr;
  if (wants_tracer_ && tracer_state_.load(std::memory_order_acquire) == 0) {
    start_tracer_once();
  }
  return &driver_;
}

// Started outside every lock and once only: subscribing initializes CUPTI, which resolves the
// driver through dlsym and so re-enters driver() on this thread; it finds the state at 1.
void Preload::start_tracer_once() {
  int expected = 0;
  if (!tracer_state_.compare_exchange_strong(expected, 1)) return;
  if (forked_child_.load()) return;
  tracer::TracerConfig config;
  if (!options_.trace_path.empty()) {
    config.trace_path = expand_stats_path(options_.trace_path, ::getpid());
  }
  config.max_iterations = options_.trace_iterations;
  config.cupti_library = options_.cupti_library;
  config.iteration_marker = options_.iteration_marker;
  config.program = program_invocation_name ? program_invocation_name : "";
  tracer::TracerDriver td;
  td.func_get_param_info = driver_.cuFuncGetParamInfo;
  td.kernel_get_param_info = driver_.cuKernelGetParamInfo;
  td.func_get_name = driver_.cuFuncGetName;
  td.kernel_get_name = driver_.cuKernelGetName;
  td.ctx_get_device = driver_.cuCtxGetDevice;
  td.stream_is_capturing = driver_.cuStreamIsCapturing;
  auto* advisor = wants_advisor() ? new advisor::Advisor(tracer::process_step_log(),
                                                         tracer::process_residency_sink())
                                  : nullptr;
  config.observer = advisor;
  if (!advisor && options_.engine == Engine::vmm && redirects(options_.mode)) {
    VmmObserverDriver vd;
    vd.ctx_synchronize = driver_.cuCtxSynchronize;
    vd.stream_create = driver_.cuStreamCreate;
    if (vd.ctx_synchronize && vd.stream_create) {
      vmm_observer_ = new VmmObserver(vd, [] { return preload().vmm(); });  // never freed
      config.observer = vmm_observer_;
    }
  }
  std::string reason;
  if (tracer::start_tracer(config, td, registry_, &reason)) {
    flight::set_launch_clock(&tracer::logged_steps);
    if (!config.trace_path.empty()) log_info("tracing kernel launches into {}", config.trace_path);
    if (advisor) start_advisor(advisor);
  } else {
    log_warning("tracing is off: {}; {}{}", reason,
                options_.engine == Engine::vmm
                    ? "engine vmm places allocations but cannot see the steps to move them"
                    : "the program runs on plain managed memory",
                config.trace_path.empty() ? "" : " and no trace is written");
  }
  tracer_state_.store(2, std::memory_order_release);
}

void Preload::start_advisor(advisor::Advisor* advisor) {
  advisor::AdvisorConfig config;
  config.mode = options_.mode;
  config.budget = options_.budget;
  config.replay_path = options_.replay_path;
  config.prefetch_wait = options_.prefetch_wait;
  config.evict_wait = options_.evict_wait;
  config.evict_copy = options_.evict_copy;
  config.keep_pages = options_.debug.keep_pages;
  config.verify = options_.verify;
  config.learn_evict = options_.learn_evict;
  config.hang_stacks = options_.debug.hang_stacks;
  config.op_log = options_.debug.op_log;
  config.in_own_code = [] { return ReentryGuard::active(); };
  config.lifetimes = [this] { return planned_discards_.load(); };
  config.program_gpu_bytes = [this] { return program_mappings_.gpu_bytes(); };
  if (options_.placement) {
    config.place = [this](Placement placement) { return allocator_->place(std::move(placement)); };
  }
  if (options_.lifetimes) config.drop_order = drop_order();
  config.sweep = [this](const std::function<bool(uint64_t)>& discard, CUstream stream) {
    return allocator_->sweep_free_pages(discard, stream);
  };
  advisor::AdvisorDriver d;
  d.ctx_get_current = driver_.cuCtxGetCurrent;
  d.ctx_set_current = driver_.cuCtxSetCurrent;
  d.ctx_get_device = driver_.cuCtxGetDevice;
  d.device_total_mem = driver_.cuDeviceTotalMem_v2;
  d.stream_create = driver_.cuStreamCreate;
  d.stream_synchronize = driver_.cuStreamSynchronize;
  d.event_create = driver_.cuEventCreate;
  d.event_record = driver_.cuEventRecord;
  d.stream_wait_event = driver_.cuStreamWaitEvent;
  d.mem_prefetch_async = driver_.cuMemPrefetchAsync_v2;
  d.mem_host_alloc = driver_.cuMemHostAlloc;
  d.mem_host_get_device_pointer = driver_.cuMemHostGetDevicePointer_v2;
  d.stream_wait_value64 = driver_.cuStreamWaitValue64;
  d.stream_write_value64 = driver_.cuStreamWriteValue64;
  d.event_query = driver_.cuEventQuery;
  d.mem_free_host = driver_.cuMemFreeHost;
  d.memcpy_dtoh_async = driver_.cuMemcpyDtoHAsync_v2;
  d.memcpy_htod_async = driver_.cuMemcpyHtoDAsync_v2;
  d.mem_discard_batch_async = driver_.cuMemDiscardBatchAsync;
  d.module_load_data = driver_.cuModuleLoadData;
  d.module_get_function = driver_.cuModuleGetFunction;
  d.launch_kernel = driver_.cuLaunchKernel;
  d.thread_exchange_capture_mode = driver_.cuThreadExchangeStreamCaptureMode;
  std::string reason;
  if (advisor->start(config, d, registry_, &reason)) {
    g_advisor.store(advisor);
  } else {
    log_warning("advisor off: {}; the program runs on plain managed memory", reason);
  }
}

void Preload::create_allocator_once() {
  std::call_once(allocator_once_, [this] {
    check_context_at_exit_once();
    const RealDriver& d = driver_;
    DriverApi api;
    api.mem_alloc_managed = d.cuMemAllocManaged;
    api.mem_free = d.cuMemFree_v2;
    api.mem_alloc_pitch = d.cuMemAllocPitch_v2;
    api.mem_get_info = d.cuMemGetInfo_v2;
    api.mem_get_default_mem_pool = d.cuMemGetDefaultMemPool;
    api.mem_alloc_from_pool_async = d.cuMemAllocFromPoolAsync;
    api.mem_free_async = d.cuMemFreeAsync;
    api.stream_synchronize = d.cuStreamSynchronize;
    api.ctx_get_device = d.cuCtxGetDevice;
    api.device_total_mem = d.cuDeviceTotalMem_v2;
    api.event_create = d.cuEventCreate;
    api.event_record = d.cuEventRecord;
    api.event_query = d.cuEventQuery;
    api.event_synchronize = d.cuEventSynchronize;
    api.event_destroy = d.cuEventDestroy_v2;
    api.ctx_synchronize = d.cuCtxSynchronize;
    api.mem_discard_batch_async = d.cuMemDiscardBatchAsync;
    api.mem_discard_and_prefetch_batch_async = d.cuMemDiscardAndPrefetchBatchAsync;
    api.mem_prefetch_async = d.cuMemPrefetchAsync_v2;
    api.stream_create = d.cuStreamCreate;
    api.thread_exchange_capture_mode = d.cuThreadExchangeStreamCaptureMode;
    if (!api.complete()) {
      log_warning("the CUDA driver lacks functions umswap needs; allocations are not redirected");
      return;
    }
    // A percentage (of the limit or the budget) refers to the memory of the GPU the program is
    // using; 0 when it cannot be read.
    const auto gpu_total = [&d] {
      CUdevice device = 0;
      size_t total = 0;
      if (d.cuCtxGetDevice(&device) != CUDA_SUCCESS && d.cuDeviceGet(&device, 0) != CUDA_SUCCESS) {
        device = 0;
      }
      return d.cuDeviceTotalMem_v2(&total, device) == CUDA_SUCCESS ? total : size_t{0};
    };
    uint64_t limit = options_.managed_limit.bytes;
    if (options_.managed_limit.is_percent) {
      const size_t total = gpu_total();
      if (total == 0) {
        log_warning("cannot read GPU memory size for UMSWAP_MANAGED_LIMIT={}; no cap is applied",
                    options_.managed_limit.to_string());
      }
      limit = options_.managed_limit.resolve(total);
    }
    allocator_ = new ManagedAllocator(api, registry_, limit, options_.async_slabs);
    torch_blocks_ = new TorchBlocks(registry_);
    registry_.set_carved_block_finder(torch_blocks_);
    // cudaMalloc's memory is on the GPU when the program gets it; so is umswap's, within the
    // budget, where the advisor moves memory (not in mode managed, plain unified memory): a
    // kernel that touches it first then takes no page fault, which some kernels' results depend
    // on (managed_allocator.h).
    if (advises(options_.mode)) {
      const uint64_t up_to =
          options_.budget.is_zero() ? UINT64_MAX : options_.budget.resolve(gpu_total());
      allocator_->populate_on_allocation(up_to, [](uint64_t address, uint64_t bytes) {
        tracer::note_residency(address, bytes, true);
      });
    }
    allocator_->set_before_free([](uint64_t base, uint64_t size) {
      if (advisor::Advisor* advisor = g_advisor.load(std::memory_order_acquire)) {
        advisor->before_free(base, size);
      }
    });
    configure_slabs();
    configure_torch_drops();
    if (options_.verbose >= 1 && limit != 0) {
      log_info("managed memory capped at {}", format_bytes(limit));
    }
  });
}

// What slab blocks do beyond allocating: with UMSWAP_LIFETIMES (the default) the tracer logs every
// block's allocation and free, and a free discards the pages the advisor's plan drops.
void Preload::configure_slabs() {
  SlabHooks hooks;
  hooks.residency = tracer::note_residency;
  if (options_.lifetimes) {
    hooks.lifetime = tracer::note_lifetime;
    hooks.discard_page = advisor_discard_page;
    hooks.populate_later = advisor_populate_later;
    hooks.order = drop_order();
  }
  // Discards only where they can be kept apart from the advisor's migrations (drop_order.h).
  if (options_.lifetimes && advises(options_.mode) && hooks.order) {
    hooks.discards = DiscardMode::planned;
  }
  if (allocator_->configure_slabs(hooks)) {
    planned_discards_.store(hooks.discards == DiscardMode::planned);
    return;
  }
  if (hooks.discards == DiscardMode::planned && options_.verbose >= 1) {
    log_info(
        "the driver cannot discard managed memory (cuMemDiscardBatchAsync) or there are no "
        "slabs: the advisor plans without allocation lifetimes");
  }
  hooks.discards = DiscardMode::off;
  hooks.discard_page = nullptr;
  hooks.populate_later = nullptr;
  allocator_->configure_slabs(hooks);
}

DropOrder* Preload::drop_order() {
  std::call_once(drop_order_once_, [this] {
    DropOrder::Driver d;
    d.event_create = driver_.cuEventCreate;
    d.event_record = driver_.cuEventRecord;
    d.event_query = driver_.cuEventQuery;
    d.stream_wait_event = driver_.cuStreamWaitEvent;
    d.stream_is_capturing = driver_.cuStreamIsCapturing;
    if (d.complete()) drop_order_ = new DropOrder(d);  // never freed: hooks may run during exit
  });
  return drop_order_;
}

void Preload::configure_torch_drops() {
  TorchBlocks::Drops drops;
  if (options_.lifetimes) drops.lifetime = tracer::note_lifetime;
  // The same switch as the slabs' planned discards: the advisor plans with lifetimes only then.
  if (planned_discards_.load()) {
    drops.discard_page = advisor_discard_page;
    drops.populate_later = advisor_populate_later;
    drops.residency = tracer::note_residency;
    drops.order = drop_order();
    const auto on = [](uint64_t stream) {
      return discard_stream(reinterpret_cast<CUstream>(stream));
    };
    const auto discard = driver_.cuMemDiscardBatchAsync;
    const auto populate = driver_.cuMemDiscardAndPrefetchBatchAsync;
    const auto get_device = driver_.cuCtxGetDevice;
    drops.discard = [discard, on](std::vector<CUdeviceptr>& starts, std::vector<size_t>& sizes,
                                  uint64_t stream) {
      return discard &&
             discard(starts.data(), sizes.data(), starts.size(), 0, on(stream)) == CUDA_SUCCESS;
    };
    drops.populate = [populate, get_device, on](std::vector<CUdeviceptr>& starts,
                                                std::vector<size_t>& sizes, uint64_t stream) {
      CUdevice device = 0;
      if (!populate || !get_device || get_device(&device) != CUDA_SUCCESS) return false;
      CUmemLocation where{};
      where.type = CU_MEM_LOCATION_TYPE_DEVICE;
      where.id = device;
      size_t where_from = 0;  // the one location applies to every range
      return populate(starts.data(), sizes.data(), starts.size(), &where, &where_from, 1, 0,
                      on(stream)) == CUDA_SUCCESS;
    };
    // A stream that cannot be asked counts as capturing: nothing is dropped on it.
    const auto is_capturing = driver_.cuStreamIsCapturing;
    drops.capturing = [is_capturing, on](uint64_t stream) {
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      return !is_capturing || is_capturing(on(stream), &status) != CUDA_SUCCESS ||
             status != CU_STREAM_CAPTURE_STATUS_NONE;
    };
  }
  torch_blocks_->set_drops(std::move(drops));
}

bool Preload::redirecting() {
  allocated_.store(true, std::memory_order_relaxed);  // every allocation hook asks, in every mode
  if (options_.engine != Engine::um) return false;
  if (!redirects(options_.mode) || forked_child_.load(std::memory_order_relaxed)) return false;
  if (!driver()) return false;
  create_allocator_once();
  return allocator_ != nullptr;
}

ManagedAllocator& Preload::allocator() {
  return *allocator_;
}

VmmAllocator* Preload::vmm() {
  if (options_.engine != Engine::vmm) return nullptr;
  allocated_.store(true, std::memory_order_relaxed);
  if (!redirects(options_.mode) || forked_child_.load(std::memory_order_relaxed)) return nullptr;
  if (!driver()) return nullptr;
  std::call_once(vmm_once_, [this] {
    check_context_at_exit_once();
    vmm_ = make_vmm_allocator(driver_, registry_, options_);
  });
  return vmm_;
}

CallSiteId Preload::call_site() const {
  static const int kAnchor = 0;  // any address inside libumswap.so: its frames are skipped
  return capture_call_site(
      {.depth = options_.callsite_depth, .skip_innermost = 0, .skip_module = &kAnchor});
}

CUresult Preload::context_error() const {
  const RealDriver& d = driver_;
  if (!driver_ok_ || !d.cuStreamCreate || !d.cuStreamDestroy_v2 || !d.cuEventCreate ||
      !d.cuEventRecord || !d.cuEventQuery || !d.cuEventDestroy_v2) {
    return CUDA_SUCCESS;
  }
  // On a stream of its own, so that no capture another thread may have open is disturbed.
  CUstream s = nullptr;
  CUevent e = nullptr;
  CUresult r = d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS) {
    r = d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) {
      r = d.cuEventRecord(e, s);
      if (r == CUDA_SUCCESS) r = d.cuEventQuery(e);
      d.cuEventDestroy_v2(e);
    }
    d.cuStreamDestroy_v2(s);
  }
  switch (r) {  // the errors that stay with a context once its GPU work failed
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_UNKNOWN:
      return r;
    default:
      return CUDA_SUCCESS;  // none, or nothing left to ask (no context, the driver shut down)
  }
}

void Preload::check_context_at_exit_once() {
  // Registered when the allocator is made (the first allocation umswap serves), after the CUDA
  // runtime registered its own exit handler, so it runs before that one tears the context down
  // (atexit's last in, first out); the stats are written later, from the library's destructor.
  std::call_once(exit_check_once_, [] {
    std::atexit([] {
      Preload& p = preload();
      if (p.forked_child_.load() || ::getpid() != g_owner_pid) return;
      p.exit_error_.store(static_cast<int>(p.context_error()), std::memory_order_relaxed);
    });
  });
}

bool Preload::used_cuda() const {
  return allocated_.load() || tracer::tracer_saw_calls();
}

void Preload::write_stats_at_exit() {
  if (forked_child_.load() || ::getpid() != g_owner_pid) return;
  // Only processes that used CUDA through umswap write: a shell or launcher wrapping the real
  // program must not overwrite its stats, nor add its own (torchrun's launcher looks the driver
  // up but allocates nothing and launches nothing).
  if (!driver_ok_ || !used_cuda()) return;
  AllocatorStats stats;
  if (allocator_) stats = allocator_->stats();
  std::optional<VmmAllocatorStats> vmm_stats;
  if (vmm_) {
    vmm_->drain();  // stream-ordered frees still pending: their ranges count as freed
    vmm_stats = vmm_->stats();
    // The allocator section's counts (the managed ones stay 0: no managed memory).
    std::copy(std::begin(vmm_stats->allocations), std::end(vmm_stats->allocations),
              std::begin(stats.allocations));
    stats.frees = vmm_stats->frees;
    stats.live_buffers = vmm_stats->live_buffers;
    stats.escaped = vmm_->escaped();
    stats.captured = vmm_->captured();
    if (options_.verbose >= 1 || vmm_stats->out_of_memory > 0) {
      log(vmm_stats->out_of_memory > 0 ? LogLevel::warning : LogLevel::info,
          "exit: engine vmm: {} allocations, peak {} on the GPU (pool {}), peak {} on the host "
          "(limit {}), {} refused for want of room",
          vmm_stats->total_allocations(), format_bytes(vmm_stats->gpu_bytes_peak),
          format_bytes(vmm_stats->gpu_limit), format_bytes(vmm_stats->host_bytes_peak),
          format_bytes(vmm_stats->host_limit), vmm_stats->out_of_memory);
    }
  } else if (options_.verbose >= 1 || stats.cap_hits > 0) {
    log(stats.cap_hits > 0 ? LogLevel::warning : LogLevel::info,
        "exit: {} allocations, peak managed {}, {} refused by the limit", stats.total_allocations(),
        format_bytes(stats.managed_bytes_peak), stats.cap_hits);
  }
  if (options_.stats_path.empty()) return;
  const tracer::RunSummary* summary = tracer::run_summary();
  // The keys the CLI reads are named by stats_schema.h (docs/stats.md); the others are diagnostics.
  namespace schema = stats_schema;
  nlohmann::json j = {
      {schema::kVersion.path, kStatsFormatVersion},
      {"tracer", tracer::run_summary() != nullptr},
      {"umswap_version", UMSWAP_VERSION},
      {"pid", ::getpid()},
      {schema::kRank.path, rank_json()},
      {"mode", std::string(to_string(options_.mode))},
      {schema::kEngine.path, std::string(to_string(options_.engine))},
      {"options",
       {{"budget", options_.budget.to_string()},
        {"managed_limit", options_.managed_limit.to_string()},
        {"callsite_depth", options_.callsite_depth}}},
      {schema::kAllocator.path, to_json(stats)},
      {schema::kTorchBlocks.path, torch_blocks_json(torch_blocks_)},
      // The GPU memory the program mapped itself (cuMemCreate), counted against the budget.
      {"program_mappings",
       {{"handles", program_mappings_.handles()},
        {"gpu_bytes", program_mappings_.gpu_bytes()},
        {"gpu_bytes_peak", program_mappings_.gpu_bytes_peak()}}},
  };
  if (vmm_stats) {
    j[schema::kVmm.path] = to_json(*vmm_stats);
    nlohmann::json calls = nlohmann::json::object();
    for (const DriverCallTotal& c : vmm_driver_call_totals()) {
      calls[std::string(c.name)] = {{"calls", c.calls},
                                    {"ms", c.ms},
                                    {"window_calls", c.window_calls},
                                    {"window_ms", c.window_ms}};
    }
    j[schema::kVmm.path][schema::vmm::kDriverCalls.name()] = std::move(calls);
    if (vmm_observer_) {
      const VmmWindowStats w = vmm_observer_->stats();
      j[schema::kVmm.path]["windows"] = w.windows;
      j[schema::kVmm.path]["windows_abandoned"] = w.windows_abandoned;
      j[schema::kVmm.path]["drains_failed"] = w.drains_failed;
      j[schema::kVmm.path]["windows_skipped_for_capture"] = w.skipped_for_capture;
      j[schema::kVmm.path][schema::vmm::kGraphLaunches.name()] = w.graph_launches;
      j[schema::kVmm.path]["window_ms"] = w.window_ms;
      j[schema::kVmm.path][schema::vmm::kWindowOpenMs.name()] = w.open_ms;
      j[schema::kVmm.path][schema::vmm::kWindowDrainMs.name()] = w.drain_ms;
      j[schema::kVmm.path]["step_ms"] = w.step_ms;
    }
  }
  if (const std::string yielded = tracer::yielded_cupti_to(); !yielded.empty()) {
    j["tracer_yielded_to"] = yielded;  // a profiler took CUPTI (before or during the run)
  }
  j[schema::kLaunchesInStreamOrder.path] = launches_in_order_.load(std::memory_order_relaxed);
  if (summary) {
    j[schema::kDetection.path] = {
        {schema::detection::kPeriod.name(), summary->trace.detection.period},
        {schema::detection::kConfidence.name(), summary->trace.detection.confidence},
        {schema::detection::kWarmupSteps.name(), summary->trace.detection.warmup_steps},
        {schema::detection::kSource.name(), summary->trace.detection.source},
        {schema::detection::kSteps.name(), summary->trace.steps.size()},
        {schema::detection::kDroppedRecords.name(), summary->trace.dropped_records}};
    j["kernel_layouts"] = {{"read_before_launch", summary->layouts_prepared},
                           {"read_inside_launch", summary->layouts_read_in_callback},
                           {"unknown", summary->layouts_unknown},
                           {"last_error", summary->layout_error},
                           {"first_uses", summary->first_uses}};
    j["captured_calls"] = summary->captured_calls;
    if (summary->has_unified_memory_counters) {
      j["peak_resident_bytes"] = summary->peak_resident;
      // The kernels that took GPU page faults: some compute differently when they do
      // (docs/RELIABILITY.md, "Kernels that a page fault changes").
      const tracer::FaultKernelReport& f = summary->fault_kernels;
      // Those that must find their memory on the GPU (resident_launches.h) are all listed: a
      // fault inside one may have changed the program's results (`umswap run --verify` fails).
      nlohmann::json kernels = nlohmann::json::array(), resident = nlohmann::json::array();
      uint64_t resident_faults = 0;
      const auto& names = summary->trace.names;
      for (const tracer::KernelFaults& k : f.by_kernel) {
        const std::string_view name =
            k.name < names.size() ? std::string_view(names[k.name]) : std::string_view("?");
        // The same fields in both lists (fault_kernels.kernels[], must_be_resident.kernels[]).
        const nlohmann::json entry = {
            {schema::fault_kernels::kernels::kKernel.name(), name.substr(0, 200)},
            {schema::fault_kernels::kernels::kFaults.name(), k.faults}};
        if (kernels.size() < 12) kernels.push_back(entry);
        if (advisor::needs_resident_memory(name)) {
          resident_faults += k.faults;
          resident.push_back(entry);
        }
      }
      namespace fk = schema::fault_kernels;
      j[schema::kFaultKernels.path] = {
          {fk::kFaults.name(), f.faults},
          {fk::kOutsideKernels.name(), f.outside},
          {fk::kKernels.name(), std::move(kernels)},
          {fk::kMustBeResident.name(),
           {{fk::must_be_resident::kFaults.name(), resident_faults},
            {fk::must_be_resident::kKernels.name(), std::move(resident)}}}};
    }
    if (const auto& c = summary->copy_clashes) {
      // UMSWAP_EVICT_COPY's copies against the steps (copy_clashes.h): a diagnostic.
      nlohmann::json first = nlohmann::json::array();
      for (size_t i = 0; i < c->first.size(); ++i) {
        const tracer::CopyClash& x = c->first[i];
        first.push_back(
            {{"step", x.step},
             {"kernel",
              i < summary->copy_clash_names.size() ? summary->copy_clash_names[i] : std::string()},
             {"page", fmt::format("{:#x}", x.page)},
             {"kind", tracer::to_string(x.kind)},
             {"ns_into_span", x.since_ns}});
      }
      j[schema::kCopyCheck.path] = {{"copies", c->copies},
                                    {"pages_checked", c->pages_checked},
                                    {"clashes", c->clashes},
                                    {schema::copy_check::kHarmful.name(), c->harmful},
                                    {"first", std::move(first)}};
      if (const auto& u = summary->unforeseen) {
        nlohmann::json caught = nlohmann::json::array();
        for (size_t i = 0; i < u->first.size(); ++i) {
          const tracer::UnforeseenAccess& a = u->first[i];
          namespace fault = schema::copy_check::unforeseen::first;
          nlohmann::json x = {{fault::kAddress.name(), fmt::format("{:#x}", a.address)},
                              {fault::kAccess.name(), a.access},
                              {"ns_into_window", a.ns_into_window}};
          const auto& bufs = summary->trace.buffers;
          if (a.buffer < bufs.size()) {
            x[fault::kBuffer.name()] = {
                {fault::buffer::kIndex.name(), a.buffer},
                {fault::buffer::kBase.name(), fmt::format("{:#x}", bufs[a.buffer].base)},
                {fault::buffer::kSize.name(), bufs[a.buffer].size}};
          }
          if (i < summary->unforeseen_steps.size())
            x[fault::kStepsRunning.name()] = summary->unforeseen_steps[i];
          caught.push_back(std::move(x));
        }
        nlohmann::json pages = nlohmann::json::array();
        for (uint64_t page : u->outs_before_back_pages) pages.push_back(fmt::format("{:#x}", page));
        namespace unforeseen = schema::copy_check::unforeseen;
        j[schema::kCopyCheck.path][schema::copy_check::kUnforeseen.name()] = {
            {unforeseen::kWindows.name(), u->windows},
            {unforeseen::kFaults.name(), u->faults},
            {unforeseen::kFirst.name(), std::move(caught)},
            {unforeseen::kCopiesOutBeforeCopyBackEnded.name(), u->outs_before_back},
            {"pages", std::move(pages)}};
      }
      if (summary->copy_idle_iteration != UINT64_MAX) {
        // Where neither copy direction ran in one steady iteration: a diagnostic for the time
        // the copies leave on the table (copy_clashes.h, copy_idle_gaps()).
        const auto& its = summary->trace.iterations;
        const uint64_t start = summary->copy_idle_iteration < its.size()
                                   ? its[summary->copy_idle_iteration].start_ns
                                   : 0;
        nlohmann::json gaps = nlohmann::json::array();
        for (const tracer::RunSummary::IdleGap& g : summary->copy_idle_gaps) {
          gaps.push_back({{"at_ms", (g.gap.start_ns - start) / 1e6},
                          {"ms", g.gap.length_ns / 1e6},
                          {"steps_busy_ms", g.gap.step_busy_ns / 1e6},
                          {"first_step", g.first_step == UINT64_MAX ? nlohmann::json()
                                                                    : nlohmann::json(g.first_step)},
                          {"kernel", g.first_name}});
        }
        j[schema::kCopyCheck.path]["idle"] = {{"iteration", summary->copy_idle_iteration},
                                              {"gaps", std::move(gaps)}};
      }
    }
  }
  if (advisor::Advisor* advisor = g_advisor.load()) {
    j.update(advisor->stats(summary));
  } else if (summary) {
    j[schema::kIterations.path] = advisor::iterations_json(*summary);
  }
  // Engine vmm's windows by iteration (what a plan's windows are judged by): the windows carry
  // the tracer's launch count, which numbers the trace's steps only while every step was logged.
  if (summary && vmm_observer_ && j.contains(schema::kIterations.path) &&
      vmm_observer_->launches_seen() == summary->trace.steps.size()) {
    std::vector<uint64_t> first, count;
    for (const trace::Iteration& it : summary->trace.iterations) {
      first.push_back(it.first_step);
      count.push_back(it.step_count);
    }
    const std::vector<WindowRecord> records = vmm_observer_->log().records();
    const std::vector<IterationWindows> by = windows_by_iteration(first, count, records);
    nlohmann::json& its = j[schema::kIterations.path];
    for (size_t i = 0; i < its.size() && i < by.size(); ++i) {
      its[i][schema::iterations::kVmmWindows.name()] = by[i].windows;
      its[i][schema::iterations::kVmmWindowMs.name()] = by[i].ms;
      its[i][schema::iterations::kVmmBytesToGpu.name()] = by[i].bytes_to_gpu;
      its[i][schema::iterations::kVmmBytesToHost.name()] = by[i].bytes_to_host;
    }
    if (const uint64_t dropped = vmm_observer_->log().dropped()) {
      j[schema::kVmm.path][schema::vmm::kWindowsNotLogged.name()] = dropped;
    }
  }
  if (const int error = exit_error_.load(std::memory_order_relaxed); error != CUDA_SUCCESS) {
    // The program's GPU work failed: what umswap did to its memory last, to tell whether it
    // had a part in it.
    const std::vector<flight::Event> events = flight::snapshot();
    nlohmann::json& recorder = j[schema::kFlightRecorder.path];
    recorder = flight::to_json(events);
    recorder["context_error"] = error;
    log_warning(
        "the program's CUDA context holds error {} at exit; umswap's last {} memory operations "
        "are in the stats file (flight_recorder)",
        error, events.size());
  }
  const std::string path = expand_stats_path(options_.stats_path, ::getpid());
  std::string error;
  if (!write_stats_file(path, j, &error)) {
    log_warning("stats not written: {}", error);
  } else if (options_.verbose >= 1) {
    log_info("stats written to {}", path);
  }
}

namespace {

void after_fork_in_child() {
  preload().mark_forked_child();
}

// Runs at load, in every process the library is preloaded into: keep it cheap and CUDA-free.
__attribute__((constructor(101))) void on_load() {
  g_owner_pid = ::getpid();
  preload();
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
}

__attribute__((destructor)) void on_unload() {
  try {
    tracer::finish_tracer(preload().used_cuda());  // normally done by the atexit handler already
    preload().write_stats_at_exit();
  } catch (...) {
    // Exit must never fail because of umswap; the stats are lost, the program's result is not.
    log_warning("stats not written: unexpected error at exit");
  }
}

}  // namespace
}  // namespace umswap

// The public C API (include/umswap/umswap.h).
extern "C" __attribute__((visibility("default"))) void umswap_mark_iteration_v1() {
  umswap::tracer::mark_iteration();
}
