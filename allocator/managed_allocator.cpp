#include "umswap/allocator/managed_allocator.h"

#include "umswap/core/log.h"
#include "umswap/core/options.h"
#include "umswap/core/stats_schema.h"

namespace umswap {
namespace {

// Used when the probe of the real cuMemAllocPitch fails; what current GPUs report.
constexpr size_t kFallbackPitchAlignment = 512;

void atomic_max(std::atomic<uint64_t>& target, uint64_t value) {
  uint64_t seen = target.load(std::memory_order_relaxed);
  while (seen < value && !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

nlohmann::json to_json(const AllocatorStats& s) {
  nlohmann::json by_api = nlohmann::json::object();
  for (int i = 0; i < kAllocApiCount; ++i) {
    by_api[to_string(static_cast<AllocApi>(i))] = s.allocations[i];
  }
  return {
      {"allocations", s.total_allocations()},
      {stats_schema::allocator::kAllocationsByApi.name(), by_api},
      {"frees", s.frees},
      {"live_buffers", s.live_buffers},
      {"managed_bytes", s.managed_bytes},
      {stats_schema::allocator::kManagedBytesPeak.name(), s.managed_bytes_peak},
      {"managed_limit_bytes", s.managed_limit},
      {"cap_hits", s.cap_hits},
      {"largest_refused_bytes", s.largest_refused},
      {"driver_allocation_failures", s.driver_failures},
      {stats_schema::allocator::kUnmanagedVmmAllocations.name(), s.unmanaged_vmm},
      {"escaped_allocations", s.escaped},
      {"captured_allocations", s.captured},
      {"async_pool_fallback", s.pool_fallback},
      {"async_slabs", s.slabs ? to_json(*s.slabs) : nlohmann::json(nullptr)},
      {"populated_on_allocation",
       {{"allocations", s.populated},
        {"bytes", s.populated_bytes},
        {"skipped_past_budget", s.populate_skipped},
        {"failures", s.populate_failures}}},
  };
}

ManagedAllocator::ManagedAllocator(const DriverApi& driver, Registry& registry,
                                   uint64_t managed_limit, bool slabs)
    : driver_(driver), registry_(registry), limit_(managed_limit) {
  if (!slabs) return;
  if (!driver.has_slab_functions()) {
    log_warning(
        "the CUDA driver lacks event functions; stream-ordered allocations use the "
        "managed memory pool, not slabs");
    return;
  }
  slabs_ = std::make_unique<SlabAllocator>(
      driver,
      SlabSource{
          .create = [this](uint64_t bytes, uint64_t site,
                           CUdeviceptr* out) { return create_slab(bytes, site, out); },
          .destroy = [this](CUdeviceptr base) { destroy_slab(base); },
          .residency =
              [this](uint64_t address, uint64_t bytes, bool on_gpu) {
                if (hooks_.residency) hooks_.residency(address, bytes, on_gpu);
              },
          .lifetime =
              [this](uint64_t address, uint64_t bytes, bool freed) {
                if (hooks_.lifetime) hooks_.lifetime(address, bytes, freed);
              },
          .discard_page =
              [this](uint64_t page) { return hooks_.discard_page && hooks_.discard_page(page); },
          .populate_later =
              [this](uint64_t page) {
                return hooks_.populate_later && hooks_.populate_later(page);
              }});
  registry_.set_block_finder(slabs_.get());
}

bool ManagedAllocator::configure_slabs(SlabHooks hooks) {
  if (!slabs_ || !slabs_->set_discard_mode(hooks.discards, hooks.order)) return false;
  hooks_ = std::move(hooks);
  return true;
}

bool ManagedAllocator::place(Placement placement) {
  return slabs_ && slabs_->set_placement(std::move(placement), [] { return kArenaSite; });
}

ManagedAllocator::~ManagedAllocator() {
  if (slabs_) registry_.set_block_finder(nullptr);
}

CUresult ManagedAllocator::create_slab(uint64_t bytes, CallSiteId site, CUdeviceptr* out) {
  return managed(AllocApi::cudaMallocAsync, bytes, CU_MEM_ATTACH_GLOBAL, site, out, true);
}

void ManagedAllocator::destroy_slab(CUdeviceptr base) {
  auto record = registry_.remove(base);
  if (!record) return;
  if (driver_.mem_free(base) != CUDA_SUCCESS) {
    registry_.insert(*record);  // still allocated: keep tracking it
    return;
  }
  release(record->size);
}

bool ManagedAllocator::reserve(size_t bytes) {
  uint64_t current = managed_bytes_.load(std::memory_order_relaxed);
  do {
    if (limit_ != 0 && (bytes > limit_ || current > limit_ - bytes)) {
      cap_hits_.fetch_add(1, std::memory_order_relaxed);
      atomic_max(largest_refused_, bytes);
      static OnceFlag once;
      if (once.first()) {
        log_warning(
            "refused an allocation of {}: managed memory would exceed UMSWAP_MANAGED_LIMIT={} "
            "({} in use); the program sees out-of-memory (later refusals are only counted)",
            format_bytes(bytes), format_bytes(limit_), format_bytes(current));
      }
      return false;
    }
  } while (
      !managed_bytes_.compare_exchange_weak(current, current + bytes, std::memory_order_relaxed));
  atomic_max(managed_bytes_peak_, current + bytes);
  return true;
}

void ManagedAllocator::release(size_t bytes) {
  managed_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

CUresult ManagedAllocator::finish(CUresult status, AllocApi api, size_t bytes, CallSiteId site,
                                  CUdeviceptr ptr, bool from_pool, bool app_managed,
                                  CUdeviceptr* out, bool slab) {
  if (status != CUDA_SUCCESS) {
    release(bytes);
    driver_failures_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  BufferRecord record{.base = ptr,
                      .size = bytes,
                      .id = next_id_.fetch_add(1, std::memory_order_relaxed),
                      .call_site = site,
                      .api = api,
                      .from_pool = from_pool,
                      .app_managed = app_managed,
                      .slab = slab};
  if (!registry_.insert(record)) {
    // The driver handed out a range that overlaps live records: the registry missed a free
    // (memory released behind umswap's back). Drop every stale record in the range, so lookups
    // stay truthful and the cap does not leak, then register the new buffer.
    static OnceFlag once;
    if (once.first()) log_warning("registry out of step with the driver at {:#x}", ptr);
    const auto snapshot = registry_.snapshot();
    for (const BufferRecord& stale : snapshot->records()) {
      if (stale.base < ptr + bytes && ptr < stale.end() && registry_.remove(stale.base)) {
        release(stale.size);
      }
    }
    if (!registry_.insert(record)) log_warning("cannot register buffer at {:#x}", ptr);
  }
  // A slab is umswap's, not the program's allocation: its blocks are counted instead.
  if (!slab) allocations_[static_cast<int>(api)].fetch_add(1, std::memory_order_relaxed);
  *out = ptr;
  return CUDA_SUCCESS;
}

CUresult ManagedAllocator::allocate(AllocApi api, size_t bytes, CallSiteId site, CUdeviceptr* out) {
  return allocate_managed(api, bytes, CU_MEM_ATTACH_GLOBAL, site, out);
}

CUresult ManagedAllocator::allocate_managed(AllocApi api, size_t bytes, unsigned flags,
                                            CallSiteId site, CUdeviceptr* out) {
  return managed(api, bytes, flags, site, out, false);
}

CUresult ManagedAllocator::managed(AllocApi api, size_t bytes, unsigned flags, CallSiteId site,
                                   CUdeviceptr* out, bool slab) {
  if (!reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr ptr = 0;
  const CUresult status = driver_.mem_alloc_managed(&ptr, bytes, flags);
  const bool app_managed = api == AllocApi::cudaMallocManaged || api == AllocApi::cuMemAllocManaged;
  const CUresult result = finish(status, api, bytes, site, ptr, false, app_managed, out, slab);
  if (result == CUDA_SUCCESS && !app_managed && populate_up_to_ != 0) populate(ptr, bytes);
  return result;
}

void ManagedAllocator::populate(CUdeviceptr ptr, size_t bytes) {
  if (managed_bytes_.load(std::memory_order_relaxed) > populate_up_to_) {
    populate_skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::call_once(populate_stream_once_, [this] {
    if (!driver_.mem_prefetch_async || !driver_.stream_create ||
        driver_.stream_create(&populate_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      populate_stream_ = nullptr;
      log_warning(
          "cannot populate new allocations on the GPU (no prefetch or stream); kernels populate "
          "them by page faults");
    }
  });
  CUdevice device = 0;
  const bool on_device = populate_stream_ && driver_.ctx_get_device(&device) == CUDA_SUCCESS;
  CUmemLocation gpu{};
  gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
  gpu.id = device;
  // The program's thread may be capturing a graph (as for the advisor's thread,
  // relax_capture_mode()).
  bool done = false;
  if (on_device) {
    const RelaxedCaptureScope relaxed(driver_.thread_exchange_capture_mode);
    done = driver_.mem_prefetch_async(ptr, bytes, gpu, 0, populate_stream_) == CUDA_SUCCESS &&
           driver_.stream_synchronize(populate_stream_) == CUDA_SUCCESS;
  }
  if (!done) {
    populate_failures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  populated_.fetch_add(1, std::memory_order_relaxed);
  populated_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (populated_hook_) populated_hook_(ptr, bytes);
}

size_t ManagedAllocator::pitch_alignment() {
  size_t alignment = pitch_alignment_.load(std::memory_order_relaxed);
  if (alignment != 0) return alignment;
  // Ask the real allocator once: a 1-byte-wide row gets a pitch of exactly the alignment.
  CUdeviceptr probe = 0;
  size_t pitch = 0;
  if (driver_.mem_alloc_pitch(&probe, &pitch, 1, 1, 4) == CUDA_SUCCESS && pitch > 0) {
    driver_.mem_free(probe);
    alignment = pitch;
  } else {
    alignment = kFallbackPitchAlignment;
  }
  pitch_alignment_.store(alignment, std::memory_order_relaxed);
  return alignment;
}

CUresult ManagedAllocator::allocate_pitch(AllocApi api, size_t width, size_t height,
                                          CallSiteId site, CUdeviceptr* out, size_t* pitch) {
  const size_t alignment = pitch_alignment();
  const size_t row = (width + alignment - 1) / alignment * alignment;
  if (row < width || (height != 0 && row > SIZE_MAX / height)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult status = allocate(api, row * height, site, out);
  if (status == CUDA_SUCCESS) *pitch = row;
  return status;
}

CUmemoryPool ManagedAllocator::managed_pool() {
  std::call_once(pool_once_, [this] {
    CUmemLocation location{};
    location.type = CU_MEM_LOCATION_TYPE_NONE;  // no preferred location: a managed pool
    location.id = 0;
    CUmemoryPool pool = nullptr;
    const CUresult status =
        driver_.mem_get_default_mem_pool(&pool, &location, CU_MEM_ALLOCATION_TYPE_MANAGED);
    if (status == CUDA_SUCCESS && pool) {
      pool_.store(pool, std::memory_order_release);
    } else {
      log_warning(
          "the driver has no managed memory pool (error {}); stream-ordered allocations use "
          "plain managed memory and their frees synchronize the stream",
          static_cast<int>(status));
    }
  });
  return pool_.load(std::memory_order_acquire);
}

CUresult ManagedAllocator::allocate_async(AllocApi api, size_t bytes, CUstream stream,
                                          const std::function<CallSiteId()>& site,
                                          CUdeviceptr* out) {
  if (slabs_) {
    const CUresult status = slabs_->allocate(bytes, stream, out, site);
    if (status == CUDA_SUCCESS) {
      allocations_[static_cast<int>(api)].fetch_add(1, std::memory_order_relaxed);
    }
    return status;
  }
  CUmemoryPool pool = managed_pool();
  if (!pool) return allocate(api, bytes, site(), out);
  if (!reserve(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr ptr = 0;
  const CUresult status = driver_.mem_alloc_from_pool_async(&ptr, bytes, pool, stream);
  return finish(status, api, bytes, site(), ptr, true, false, out);
}

std::optional<CUresult> ManagedAllocator::free(CUdeviceptr ptr) {
  if (slabs_ && slabs_->owns(ptr)) {
    // Inside a slab but not a block in use: a double free, or a pointer into a block.
    const auto status = slabs_->free_sync(ptr).value_or(CUDA_ERROR_INVALID_VALUE);
    if (status == CUDA_SUCCESS) frees_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  auto record = registry_.remove(ptr);
  if (!record) return std::nullopt;
  if (before_free_) before_free_(record->base, record->size);
  const CUresult status = driver_.mem_free(ptr);
  if (status != CUDA_SUCCESS) {
    registry_.insert(*record);  // still allocated: keep tracking it
    return status;
  }
  release(record->size);
  frees_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

std::optional<CUresult> ManagedAllocator::free_async(CUdeviceptr ptr, CUstream stream) {
  if (slabs_ && slabs_->owns(ptr)) {
    const auto status = slabs_->free(ptr, stream).value_or(CUDA_ERROR_INVALID_VALUE);
    if (status == CUDA_SUCCESS) frees_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  auto record = registry_.remove(ptr);
  if (!record) return std::nullopt;
  if (before_free_) before_free_(record->base, record->size);
  CUresult status = CUDA_SUCCESS;
  if (record->from_pool) {
    status = driver_.mem_free_async(ptr, stream);
  } else {
    // Plain managed memory has no stream-ordered free: wait for the stream's work first.
    status = driver_.stream_synchronize(stream);
    if (status == CUDA_SUCCESS) status = driver_.mem_free(ptr);
  }
  if (status != CUDA_SUCCESS) {
    registry_.insert(*record);
    return status;
  }
  release(record->size);
  frees_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

CUresult ManagedAllocator::mem_get_info(size_t* free, size_t* total) {
  const CUresult status = driver_.mem_get_info(free, total);
  if (status != CUDA_SUCCESS || limit_ == 0) return status;
  const uint64_t used = managed_bytes_.load(std::memory_order_relaxed);
  *total = static_cast<size_t>(limit_);
  *free = static_cast<size_t>(used >= limit_ ? 0 : limit_ - used);
  return status;
}

AllocatorStats ManagedAllocator::stats() const {
  AllocatorStats s;
  for (int i = 0; i < kAllocApiCount; ++i) {
    s.allocations[i] = allocations_[i].load(std::memory_order_relaxed);
  }
  s.frees = frees_.load(std::memory_order_relaxed);
  s.managed_bytes = managed_bytes_.load(std::memory_order_relaxed);
  s.managed_bytes_peak = managed_bytes_peak_.load(std::memory_order_relaxed);
  s.managed_limit = limit_;
  s.cap_hits = cap_hits_.load(std::memory_order_relaxed);
  s.largest_refused = largest_refused_.load(std::memory_order_relaxed);
  s.live_buffers = registry_.size();
  s.driver_failures = driver_failures_.load(std::memory_order_relaxed);
  s.unmanaged_vmm = unmanaged_vmm_.load(std::memory_order_relaxed);
  s.escaped = escaped_.load(std::memory_order_relaxed);
  s.captured = captured_.load(std::memory_order_relaxed);
  s.populated = populated_.load(std::memory_order_relaxed);
  s.populated_bytes = populated_bytes_.load(std::memory_order_relaxed);
  s.populate_skipped = populate_skipped_.load(std::memory_order_relaxed);
  s.populate_failures = populate_failures_.load(std::memory_order_relaxed);
  s.pool_fallback = pool_.load(std::memory_order_acquire) == nullptr &&
                    managed_bytes_peak_.load() > 0 &&
                    allocations_[static_cast<int>(AllocApi::cudaMallocAsync)].load() +
                            allocations_[static_cast<int>(AllocApi::cuMemAllocAsync)].load() >
                        0;
  if (slabs_) {
    s.slabs = slabs_->stats();
    s.live_buffers = s.live_buffers - s.slabs->slabs + s.slabs->blocks_in_use;
  }
  return s;
}

}  // namespace umswap
