#include "umswap/allocator/vmm_allocator.h"

#include <algorithm>
#include <chrono>

#include "umswap/allocator/stream_tag.h"
#include "umswap/core/stats_schema.h"

namespace umswap {
namespace {

// A range map_program() made for the program's own mapping (its record's api), and not.
bool program_mapping(const BufferRecord& r) {
  return r.api == AllocApi::cuMemMap;
}
bool not_program_mapping(const BufferRecord& r) {
  return r.api != AllocApi::cuMemMap;
}

uint64_t whole_chunks(uint64_t bytes) {
  return bytes / vmm::kChunk * vmm::kChunk;
}

void store_max(std::atomic<uint64_t>& value, uint64_t candidate) {
  uint64_t seen = value.load(std::memory_order_relaxed);
  while (candidate > seen && !value.compare_exchange_weak(seen, candidate)) {
  }
}

// Adds the time from its making to its end to `ns`.
class Timed {
 public:
  explicit Timed(std::atomic<uint64_t>& ns) : ns_(ns), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    ns_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - start_)
                                            .count()),
                  std::memory_order_relaxed);
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::atomic<uint64_t>& ns_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

uint64_t vmm_default_gpu_pool(uint64_t gpu_free, uint64_t gpu_total) {
  const uint64_t margin = std::max<uint64_t>(uint64_t{1} << 30, gpu_total / 20);
  return gpu_free > margin ? whole_chunks(gpu_free - margin) : 0;
}

uint64_t vmm_default_host_limit(uint64_t host_available) {
  return whole_chunks(host_available / 2);
}

nlohmann::json to_json(const VmmAllocatorStats& s) {
  namespace schema = stats_schema::vmm;  // the fields the CLI reads; the others are diagnostics
  nlohmann::json by_api = nlohmann::json::object();
  for (int i = 0; i < kAllocApiCount; ++i) {
    if (s.allocations[i] > 0) by_api[to_string(static_cast<AllocApi>(i))] = s.allocations[i];
  }
  const vmm::ArenaStats& a = s.arena;
  return {
      {schema::kBudgetBytes.name(), s.gpu_limit},
      {schema::kHostLimitBytes.name(), s.host_limit},
      {schema::kGpuBytes.name(), s.gpu_bytes},
      {schema::kGpuBytesPeak.name(), s.gpu_bytes_peak},
      {schema::kHostBytes.name(), s.host_bytes},
      {schema::kHostBytesPeak.name(), s.host_bytes_peak},
      {"requested_bytes", s.requested_bytes},
      {schema::kRequestedBytesPeak.name(), s.requested_bytes_peak},
      {"allocations", s.total_allocations()},
      {"allocations_by_api", std::move(by_api)},
      {"frees", s.frees},
      {"frees_deferred", s.frees_deferred},
      {"frees_synchronized", s.frees_synchronized},
      {schema::kRangesReused.name(), s.ranges_reused},
      {"reused_on_stream", s.reused_on_stream},
      {"ranges_kept", s.ranges_kept},
      {schema::kKeptBytes.name(), s.kept_bytes},
      {"allocate_ms", s.allocate_ms},
      {"free_ms", s.free_ms},
      {"pending_frees", s.pending_frees},
      {"live_buffers", s.live_buffers},
      {schema::kOutOfMemory.name(), s.out_of_memory},
      {"largest_refused", s.largest_refused},
      {"driver_failures", s.driver_failures},
      {"program_mapped", s.program_mapped},
      {schema::kProgramMappedBytes.name(), s.program_mapped_bytes},
      {"program_gpu_bytes", s.program_gpu_bytes},
      {schema::kProgramGpuBytesPeak.name(), s.program_gpu_bytes_peak},
      {schema::kGpuAndProgramBytesPeak.name(), s.gpu_and_program_bytes_peak},
      {"gpu_chunks_made", a.gpu_chunks_made},
      {schema::kBlockBytes.name(), a.block_bytes},
      {"host_chunks_made", a.host_chunks_made},
      {"gpu_create_fallbacks", a.gpu_create_fallbacks},
      {"bytes_allocated_on_host", a.bytes_allocated_on_host},
      {schema::kCopiesToHost.name(), a.copies_to_host},
      {schema::kCopiesToGpu.name(), a.copies_to_gpu},
      {"bytes_to_host", a.bytes_to_host},
      {"bytes_to_gpu", a.bytes_to_gpu},
      {schema::kRemaps.name(), a.remaps},
      {schema::kCopyWaitMs.name(), static_cast<double>(a.copy_wait_ns) / 1e6},
      {schema::kRemapMs.name(), static_cast<double>(a.remap_ns) / 1e6},
      {"arena_failures", a.failures},
      {"holes", a.holes},
      {"small_allocations", s.small_allocations},
      {"slabs", s.slabs},
      {"steps_held", s.residency.steps_held},
      {"steps_left_short", s.residency.steps_left_short},
      {"steps_too_large", s.residency.steps_too_large},
      {"ranges_restored", s.residency.ranges_restored},
      {"ranges_prefetched", s.residency.ranges_prefetched},
      {"ranges_evicted", s.residency.ranges_evicted},
      {schema::kRangesEvictedForRoom.name(), s.residency.ranges_evicted_for_room},
      {"ranges_unwritten", s.residency.ranges_unwritten},
      {"bytes_not_copied", a.bytes_not_copied},
      {"plans", s.residency.plans},
      {"plans_dropped", s.residency.plans_dropped},
      {"own_period", s.residency.own_period},
      {"windows_predicted", s.residency.windows_predicted},
      {"period", s.residency.period},
      {"windows_from_plan", s.residency.windows_from_plan},
      {"plan_moves_skipped", s.residency.plan_moves_skipped},
      {"bytes_short", s.residency.bytes_short},
      {"move_failures", s.residency.move_failures},
  };
}

VmmAllocator::VmmAllocator(const vmm::VmmDriver& arena_driver, const VmmSyncDriver& sync,
                           Registry& registry, CUdevice device, uint64_t gpu_limit_bytes,
                           uint64_t host_limit_bytes, uint32_t chunks_per_block)
    : sync_(sync),
      registry_(registry),
      device_(device),
      arena_(arena_driver, device, gpu_limit_bytes, host_limit_bytes,
             chunks_per_block ? chunks_per_block
                              : vmm::ChunkArena::chunks_per_block_for(gpu_limit_bytes)) {
  residency_.set_reclaim([this] { return release_oldest_kept_on_gpu(); });
  residency_.set_mostly_ordered([this] {
    uint64_t ordered = 0, all = 0;
    for (int i = 0; i < kAllocApiCount; ++i) {
      const uint64_t n = allocations_[i].load(std::memory_order_relaxed);
      all += n;
      if (stream_ordered(static_cast<AllocApi>(i))) ordered += n;
    }
    return ordered > all - ordered;
  });
  residency_.set_spare([this] {
    std::lock_guard lock(kept_mutex_);
    return kept_gpu_bytes_;
  });
}

VmmAllocator::~VmmAllocator() {
  drain();
  release_kept();
}

CUresult VmmAllocator::allocate(AllocApi api, size_t bytes, CallSiteId site, bool from_pool,
                                CUdeviceptr* out, CUstream stream) {
  const Timed timed(allocate_ns_);
  poll();
  CUdeviceptr ptr = 0;
  const bool small = SmallSlabs::small(bytes);
  const std::optional<uint64_t> tag =
      from_pool ? std::optional<uint64_t>(stream_tag(stream)) : std::nullopt;
  CUresult status = small ? allocate_small(bytes, &ptr) : allocate_range(bytes, &ptr, tag);
  if (status != CUDA_SUCCESS) {
    count_refused(status, bytes);
    return status;
  }
  BufferRecord record;
  record.base = ptr;
  record.size = bytes;
  record.id = next_id_.fetch_add(1, std::memory_order_relaxed);
  record.call_site = site;
  record.api = api;
  record.from_pool = from_pool;
  if (!registry_.insert(record)) {
    // A fresh range overlapping a registered one: the registry holds a record of memory that is
    // not umswap's any more. Refuse rather than hand out memory the tracer would misattribute.
    release_memory(ptr, false);
    driver_failures_.fetch_add(1, std::memory_order_relaxed);
    return CUDA_ERROR_UNKNOWN;
  }
  if (small) small_allocations_.fetch_add(1, std::memory_order_relaxed);
  count_allocated(api, bytes);
  *out = ptr;
  return CUDA_SUCCESS;
}

CUresult VmmAllocator::allocate_range(uint64_t bytes, CUdeviceptr* out,
                                      std::optional<uint64_t> stream, bool slab) {
  // A pending free of this stream wholly on the GPU; else a kept range (kept ones give their
  // GPU chunks back first where a new range would not fit on the GPU); else a pending free of
  // this stream not wholly on the GPU, where a new range would get no GPU memory at all.
  auto pending = [&](bool on_gpu_only) {
    if (!stream || (*out = take_pending(arena_.reserved_for(bytes), *stream, on_gpu_only)) == 0) {
      return false;
    }
    reused_on_stream_.fetch_add(1, std::memory_order_relaxed);
    residency_.allocated(*out, slab);
    return true;
  };
  if (pending(true)) return CUDA_SUCCESS;
  if ((*out = reuse(bytes)) != 0) {
    ranges_reused_.fetch_add(1, std::memory_order_relaxed);
    residency_.allocated(*out, slab);
    return CUDA_SUCCESS;
  }
  if (pending(false)) return CUDA_SUCCESS;
  CUresult status = arena_.allocate(bytes, out);
  // Room that frees in flight will give back: wait for them rather than fail (a stream-ordered
  // allocator's program expects its earlier frees to count).
  if (status == CUDA_ERROR_OUT_OF_MEMORY && drain() > 0) status = arena_.allocate(bytes, out);
  // The empty slab kept for small allocations holds a chunk this one may need.
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    CUdeviceptr kept = 0;
    {
      std::lock_guard lock(small_mutex_);
      kept = small_.drop_empty();
    }
    if (kept != 0) {
      residency_.forget(kept);  // first: an allocation at its address may follow the release
      release_to_arena(kept);
      status = arena_.allocate(bytes, out);
    }
  }
  // Ranges kept for reuse hold chunks on either side: given back before an out-of-memory answer.
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    release_kept();
    status = arena_.allocate(bytes, out);
  }
  // Ranges, slabs included, are what the plan names (a small allocation is its slab's).
  if (status == CUDA_SUCCESS) residency_.allocated(*out, slab);
  return status;
}

CUresult VmmAllocator::allocate_small(uint64_t bytes, CUdeviceptr* out) {
  auto take = [&] {
    std::lock_guard lock(small_mutex_);
    const CUdeviceptr p = small_.take(bytes);
    if (p != 0) residency_.alias(p, *small_.slab_of(p));
    return p;
  };
  if ((*out = take()) != 0) return CUDA_SUCCESS;
  // A new slab, made outside the lock (drain() releases, which takes it).
  CUdeviceptr slab = 0;
  const CUresult status = allocate_range(SmallSlabs::kSlab, &slab, std::nullopt, true);
  if (status != CUDA_SUCCESS) {
    // No room for a slab, but the frees drain() waited for may have made room in one.
    if (status == CUDA_ERROR_OUT_OF_MEMORY && (*out = take()) != 0) return CUDA_SUCCESS;
    return status;
  }
  std::lock_guard lock(small_mutex_);
  small_.add_slab(slab);
  const CUdeviceptr p = small_.take(bytes);  // the new slab has room for any small allocation
  residency_.alias(p, slab);
  *out = p;
  return CUDA_SUCCESS;
}

void VmmAllocator::release_memory(CUdeviceptr ptr, bool may_keep) {
  std::optional<SmallSlabs::Given> given;
  {
    // Under the lock: an allocation taking the same address next aliases it after this.
    std::lock_guard lock(small_mutex_);
    given = small_.give(ptr);
    if (given) residency_.unalias(ptr);
  }
  if (given) {
    if (!given->release_slab) return;
    ptr = given->slab;
  }
  // Forgotten first: another thread's allocation may take the address as soon as it is kept.
  residency_.forget(ptr);
  if (may_keep) {
    keep(ptr);
  } else {
    release_to_arena(ptr);
  }
}

void VmmAllocator::release_to_arena(CUdeviceptr base) {
  if (arena_.release(base) != CUDA_SUCCESS) {
    driver_failures_.fetch_add(1, std::memory_order_relaxed);
  }
}

void VmmAllocator::keep(CUdeviceptr base) {
  const std::optional<vmm::RangeInfo> info = arena_.range(base);
  const uint64_t gpu_limit = arena_.gpu_limit_bytes(), gpu_in_use = arena_.gpu_bytes_in_use();
  const uint64_t host_limit = arena_.host_limit_bytes(), host_in_use = arena_.host_bytes_in_use();
  {
    std::lock_guard lock(kept_mutex_);
    // On the GPU, kept whatever room it holds: an allocation or a window that needs the room takes
    // it back (reuse(), set_reclaim()) at the cost releasing it now would have, and one of its size
    // takes it with no driver call. Kept only within half the room live ranges leave, ViT-L/16 at
    // 50% under PyTorch's async backend reserved 4,795-4,809 ranges in a run; kept so, 4,234, and
    // GPT-2 small 2,059 against 4,157-4,236, 0.74x its time (run 218, cuMemAddressReserve). Not
    // while the pool is past its limit (lowered under it): its free chunks are to be released.
    // On the host, within half the room live ranges leave there, as before: nothing takes host
    // room back from kept ranges, and evictions need it.
    const uint64_t host_kept = kept_bytes_ - kept_gpu_bytes_, more = info ? info->reserved : 0;
    const uint64_t host_more = info ? info->reserved - info->gpu_bytes : 0;
    const uint64_t host_live = host_in_use - std::min(host_in_use, host_kept + host_more);
    if (info && info->base == base && info->unmapped_bytes == 0 && gpu_in_use <= gpu_limit &&
        2 * (host_kept + host_more) <= (host_limit > host_live ? host_limit - host_live : 0)) {
      kept_.push_back({base, more, info->gpu_bytes});
      kept_bytes_ += more;
      kept_gpu_bytes_ += info->gpu_bytes;
      if (kept_.size() <= kMostKept) return;
      base = take_kept_at(0).base;
    }
  }
  // Not a whole range of the arena, one with a hole (never handed out again), one in a GPU pool
  // past its limit or past the host's room for kept ones, or the oldest past the most kept.
  release_to_arena(base);
}

VmmAllocator::KeptRange VmmAllocator::take_kept_at(size_t i) {
  const KeptRange k = kept_[i];
  kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
  kept_bytes_ -= k.reserved;
  kept_gpu_bytes_ -= k.gpu_bytes;
  return k;
}

std::optional<VmmAllocator::KeptRange> VmmAllocator::take_kept(uint64_t reserved, bool on_gpu) {
  std::lock_guard lock(kept_mutex_);
  // The most recently kept first.
  for (size_t i = kept_.size(); i-- > 0;) {
    const KeptRange& k = kept_[i];
    if (k.reserved == reserved && (!on_gpu || k.gpu_bytes == k.reserved)) return take_kept_at(i);
  }
  return std::nullopt;
}

CUdeviceptr VmmAllocator::reuse(uint64_t bytes) {
  const uint64_t reserved = arena_.reserved_for(bytes);
  {
    std::lock_guard lock(kept_mutex_);
    if (kept_.empty()) return 0;
  }
  if (const std::optional<KeptRange> k = take_kept(reserved, true)) return k->base;
  // Where a new range would be wholly on the GPU, it is made there: a kept one of its size on the
  // host would put it where no fresh range goes. Where it would not, kept ranges give their GPU
  // chunks back first, oldest first, as released ones would have been there to take. A kept one
  // not wholly on the GPU serves it only where a new one would get no GPU memory at all.
  while (!arena_.fits_new_on_gpu(reserved) && release_oldest_kept_on_gpu()) {
  }
  if (arena_.fits_new_on_gpu(std::min(reserved, arena_.block_bytes()))) return 0;
  const std::optional<KeptRange> k = take_kept(reserved, false);
  return k ? k->base : 0;
}

bool VmmAllocator::release_oldest_kept_on_gpu() {
  CUdeviceptr base = 0;
  {
    std::lock_guard lock(kept_mutex_);
    const auto it = std::find_if(kept_.begin(), kept_.end(),
                                 [](const KeptRange& k) { return k.gpu_bytes > 0; });
    if (it == kept_.end()) return false;
    base = take_kept_at(static_cast<size_t>(it - kept_.begin())).base;
  }
  release_to_arena(base);
  return true;
}

void VmmAllocator::release_kept() {
  std::vector<KeptRange> kept;
  {
    std::lock_guard lock(kept_mutex_);
    kept.swap(kept_);
    kept_bytes_ = 0;
    kept_gpu_bytes_ = 0;
  }
  for (const KeptRange& k : kept) release_to_arena(k.base);
}

CUresult VmmAllocator::allocate_pitch(AllocApi api, size_t width, size_t height, size_t alignment,
                                      CallSiteId site, CUdeviceptr* out, size_t* pitch) {
  const size_t row = (width + alignment - 1) / alignment * alignment;
  if (row < width || row > SIZE_MAX / height) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult status = allocate(api, row * height, site, false, out);
  if (status == CUDA_SUCCESS) *pitch = row;
  return status;
}

void VmmAllocator::count_refused(CUresult status, uint64_t bytes) {
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    out_of_memory_.fetch_add(1, std::memory_order_relaxed);
    store_max(largest_refused_, bytes);
  } else {
    driver_failures_.fetch_add(1, std::memory_order_relaxed);
  }
}

void VmmAllocator::count_allocated(AllocApi api, uint64_t bytes) {
  allocations_[static_cast<int>(api)].fetch_add(1, std::memory_order_relaxed);
  live_buffers_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(peaks_mutex_);
    requested_bytes_ += bytes;
    requested_bytes_peak_ = std::max(requested_bytes_peak_, requested_bytes_);
  }
  note_peaks();
}

CUresult VmmAllocator::map_program(CUdeviceptr ptr, size_t bytes, CallSiteId site) {
  const Timed timed(allocate_ns_);
  poll();
  CUresult status = arena_.allocate_at(ptr, bytes);
  if (status == CUDA_ERROR_OUT_OF_MEMORY && drain() > 0) status = arena_.allocate_at(ptr, bytes);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    release_kept();
    status = arena_.allocate_at(ptr, bytes);
  }
  if (status != CUDA_SUCCESS) {
    count_refused(status, bytes);
    return status;
  }
  residency_.allocated(ptr);
  BufferRecord record;
  record.base = ptr;
  record.size = bytes;
  record.id = next_id_.fetch_add(1, std::memory_order_relaxed);
  record.call_site = site;
  record.api = AllocApi::cuMemMap;
  if (!registry_.insert(record)) {
    residency_.forget(ptr);
    release_to_arena(ptr);
    driver_failures_.fetch_add(1, std::memory_order_relaxed);
    return CUDA_ERROR_UNKNOWN;
  }
  count_allocated(AllocApi::cuMemMap, bytes);
  return CUDA_SUCCESS;
}

uint64_t VmmAllocator::bytes_available() {
  uint64_t kept = 0;
  {
    std::lock_guard lock(kept_mutex_);
    kept = kept_bytes_;
  }
  return arena_.bytes_available() + kept;
}

std::optional<CUresult> VmmAllocator::unmap_program(CUdeviceptr ptr) {
  const Timed timed(free_ns_);
  const std::optional<BufferRecord> record = registry_.remove(ptr, program_mapping);
  if (!record) return std::nullopt;
  const CUresult synced = sync_.ctx_synchronize();
  residency_.forget(ptr);
  release_to_arena(ptr);
  count_free(record->size);
  return synced;
}

std::optional<CUresult> VmmAllocator::free(CUdeviceptr ptr) {
  const Timed timed(free_ns_);
  poll();
  const std::optional<BufferRecord> record = registry_.remove(ptr, not_program_mapping);
  if (!record) return std::nullopt;
  // cudaFree and cuMemFree wait for the device: no kernel may still be using the range when its
  // chunks are unmapped. An error here is the context's (an earlier launch failed): the real
  // free would report it too, and nothing runs on the range any more either way.
  const CUresult synced = sync_.ctx_synchronize();
  release(record->base, record->size);
  return synced;
}

std::optional<CUresult> VmmAllocator::free_async(CUdeviceptr ptr, CUstream stream) {
  const Timed timed(free_ns_);
  poll();
  const std::optional<BufferRecord> record = registry_.remove(ptr, not_program_mapping);
  if (!record) return std::nullopt;
  CUevent event = nullptr;
  if (sync_.event_create(&event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
    // Recorded under the lock: a stream's pending frees are in the order of their events.
    std::unique_lock lock(pending_mutex_);
    if (sync_.event_record(event, stream) == CUDA_SUCCESS) {
      // A small allocation is a share of a slab, not a range to hand out by stream order.
      const uint64_t reserved =
          SmallSlabs::small(record->size) ? 0 : arena_.reserved_for(record->size);
      pending_.push_back({record->base, record->size, event, stream_tag(stream), reserved});
      return CUDA_SUCCESS;
    }
    lock.unlock();
    sync_.event_destroy(event);
  }
  // No event: wait for the stream itself, then release.
  const CUresult synced = sync_.stream_synchronize(stream);
  frees_synchronized_.fetch_add(1, std::memory_order_relaxed);
  release(record->base, record->size);
  return synced;
}

size_t VmmAllocator::poll() {
  std::vector<PendingFree> done;
  {
    std::lock_guard lock(pending_mutex_);
    if (pending_.empty()) return 0;
    // A stream's events complete in the order they were recorded, which is their order here: the
    // latest complete one says that every earlier one of its stream is. Found from the newest
    // (all done when it is), else by halving: a few queries a stream, not one a free.
    poll_streams_.clear();
    for (const PendingFree& p : pending_) {
      if (std::find(poll_streams_.begin(), poll_streams_.end(), p.stream) == poll_streams_.end()) {
        poll_streams_.push_back(p.stream);
      }
    }
    poll_done_.assign(pending_.size(), 0);
    for (const uint64_t stream : poll_streams_) {
      poll_order_.clear();
      for (size_t i = 0; i < pending_.size(); ++i) {
        if (pending_[i].stream == stream) poll_order_.push_back(i);
      }
      // Only a completed event speaks for the earlier ones. Any other answer but "not yet" (an
      // error of the context, after which nothing runs on the range) ends its own wait alone:
      // then each of the stream's events is asked.
      bool error = false;
      auto ended = [&](size_t k) {
        const CUresult status = sync_.event_query(pending_[poll_order_[k]].event);
        error = error || (status != CUDA_SUCCESS && status != CUDA_ERROR_NOT_READY);
        return status == CUDA_SUCCESS;
      };
      size_t complete = 0;  // poll_order_[0, complete) have completed
      const size_t n = poll_order_.size();
      if (ended(n - 1)) {
        complete = n;
      } else if (n > 1 && !error && ended(0)) {
        size_t yes = 0, no = n - 1;
        while (no - yes > 1 && !error) {
          const size_t mid = yes + (no - yes) / 2;
          (ended(mid) ? yes : no) = mid;
        }
        complete = yes + 1;
      }
      if (error) {
        for (const size_t i : poll_order_) {
          poll_done_[i] = sync_.event_query(pending_[i].event) != CUDA_ERROR_NOT_READY;
        }
        continue;
      }
      for (size_t k = 0; k < complete; ++k) poll_done_[poll_order_[k]] = 1;
    }
    done.reserve(pending_.size());  // no throw past this point, with entries half moved
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (poll_done_[i]) {
        done.push_back(pending_[i]);
      } else {
        pending_[kept++] = pending_[i];
      }
    }
    pending_.resize(kept);
  }
  for (const PendingFree& p : done) {
    sync_.event_destroy(p.event);
    frees_deferred_.fetch_add(1, std::memory_order_relaxed);
    release(p.base, p.size);
  }
  return done.size();
}

size_t VmmAllocator::drain() {
  std::vector<PendingFree> all;
  {
    std::lock_guard lock(pending_mutex_);
    all.swap(pending_);
  }
  for (const PendingFree& p : all) {
    sync_.event_synchronize(p.event);
    sync_.event_destroy(p.event);
    frees_deferred_.fetch_add(1, std::memory_order_relaxed);
    release(p.base, p.size);
  }
  return all.size();
}

CUdeviceptr VmmAllocator::take_pending(uint64_t reserved, uint64_t stream, bool on_gpu_only) {
  // The candidates, most recently freed first, found under the lock; the arena asked outside it
  // (its lock is held through a window's copies, which no poll should wait for).
  std::vector<CUdeviceptr> candidates;
  {
    std::lock_guard lock(pending_mutex_);
    for (size_t i = pending_.size(); i-- > 0;) {
      const PendingFree& p = pending_[i];
      if (p.reserved == reserved && p.stream == stream) candidates.push_back(p.base);
    }
  }
  if (candidates.empty()) return 0;
  CUdeviceptr pick = 0, elsewhere = 0;
  for (const CUdeviceptr base : candidates) {
    const std::optional<vmm::RangeInfo> info = arena_.range(base);
    if (!info || info->base != base || info->reserved != reserved || info->unmapped_bytes != 0) {
      continue;
    }
    if (info->gpu_bytes == info->reserved) {
      pick = base;
      break;
    }
    if (elsewhere == 0) elsewhere = base;
  }
  // Not wholly on the GPU: only where a new range would get no GPU memory at all.
  if (pick == 0 && !on_gpu_only && elsewhere != 0 &&
      !arena_.fits_new_on_gpu(std::min(reserved, arena_.block_bytes()))) {
    pick = elsewhere;
  }
  if (pick == 0) return 0;
  PendingFree taken;
  {
    std::lock_guard lock(pending_mutex_);
    const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const PendingFree& p) {
      return p.base == pick && p.reserved == reserved && p.stream == stream;
    });
    if (it == pending_.end()) return 0;  // released meanwhile (kept, for reuse() to find)
    taken = *it;
    pending_.erase(it);
  }
  sync_.event_destroy(taken.event);
  // A new allocation of the residency's: the old one is forgotten first, as at a release.
  residency_.forget(taken.base);
  count_free(taken.size);
  return taken.base;
}

void VmmAllocator::stream_ends(CUstream stream) {
  const uint64_t tag = stream_tag(stream);
  if (!stream_can_end(tag)) return;
  const uint64_t ended = ended_stream_tag();
  std::lock_guard lock(pending_mutex_);
  for (PendingFree& p : pending_) {
    if (p.stream == tag) p.stream = ended;
  }
}

void VmmAllocator::release(CUdeviceptr base, uint64_t size) {
  release_memory(base);
  count_free(size);
}

void VmmAllocator::count_free(uint64_t size) {
  frees_.fetch_add(1, std::memory_order_relaxed);
  live_buffers_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard lock(peaks_mutex_);
  requested_bytes_ -= std::min(requested_bytes_, size);
}

void VmmAllocator::note_peaks() {
  const uint64_t gpu = arena_.gpu_bytes_in_use();
  const uint64_t host = arena_.host_bytes_in_use();
  std::lock_guard lock(peaks_mutex_);
  gpu_bytes_peak_ = std::max(gpu_bytes_peak_, gpu);
  host_bytes_peak_ = std::max(host_bytes_peak_, host);
  gpu_and_program_bytes_peak_ = std::max(gpu_and_program_bytes_peak_, gpu + program_gpu_bytes_);
}

void VmmAllocator::set_program_gpu_bytes(const ProgramMappings& mappings) {
  release_kept();  // dead ranges first, before the pool shrinks under live ones
  std::lock_guard program(program_mutex_);
  const uint64_t bytes = mappings.gpu_bytes(), peak = mappings.gpu_bytes_peak(),
                 handles = mappings.handles(), created = mappings.created_bytes();
  {
    std::lock_guard lock(peaks_mutex_);
    program_gpu_bytes_ = bytes;
    program_gpu_bytes_peak_ = peak;
    program_mapped_ = handles;
    program_mapped_bytes_ = created;
  }
  const uint64_t outside = (bytes + vmm::kChunk - 1) / vmm::kChunk * vmm::kChunk;
  const uint64_t budget = arena_.gpu_capacity_bytes();
  arena_.set_gpu_limit_bytes(budget > outside ? budget - outside : 0);
  residency_.trim_to_pool();
  note_peaks();
}

CUresult VmmAllocator::mem_get_info(size_t* free, size_t* total) {
  poll();
  const uint64_t all = arena_.gpu_limit_bytes() + arena_.host_limit_bytes();
  // Kept ranges count as free: an allocation that needs their room gets it.
  uint64_t used = arena_.gpu_bytes_in_use() + arena_.host_bytes_in_use();
  {
    std::lock_guard lock(kept_mutex_);
    used -= std::min(used, kept_bytes_);
  }
  *total = all;
  *free = all > used ? all - used : 0;
  return CUDA_SUCCESS;
}

std::pair<uint64_t, uint64_t> VmmAllocator::bytes_moved() const {
  return arena_.bytes_moved();
}

VmmAllocatorStats VmmAllocator::stats() const {
  VmmAllocatorStats s;
  for (int i = 0; i < kAllocApiCount; ++i) s.allocations[i] = allocations_[i].load();
  s.frees = frees_.load();
  s.frees_deferred = frees_deferred_.load();
  s.ranges_reused = ranges_reused_.load();
  s.reused_on_stream = reused_on_stream_.load();
  {
    std::lock_guard lock(kept_mutex_);
    s.ranges_kept = kept_.size();
    s.kept_bytes = kept_bytes_;
  }
  s.allocate_ms = static_cast<double>(allocate_ns_.load()) / 1e6;
  s.free_ms = static_cast<double>(free_ns_.load()) / 1e6;
  s.frees_synchronized = frees_synchronized_.load();
  {
    std::lock_guard lock(pending_mutex_);
    s.pending_frees = pending_.size();
  }
  s.out_of_memory = out_of_memory_.load();
  s.largest_refused = largest_refused_.load();
  s.driver_failures = driver_failures_.load();
  s.live_buffers = live_buffers_.load();
  s.gpu_limit = arena_.gpu_capacity_bytes();
  s.host_limit = arena_.host_limit_bytes();
  s.gpu_bytes = arena_.gpu_bytes_in_use();
  s.host_bytes = arena_.host_bytes_in_use();
  s.arena = arena_.stats();
  s.residency = residency_.stats();
  s.small_allocations = small_allocations_.load();
  {
    std::lock_guard lock(small_mutex_);
    s.slabs = small_.slabs();
  }
  std::lock_guard lock(peaks_mutex_);
  s.requested_bytes = requested_bytes_;
  s.requested_bytes_peak = requested_bytes_peak_;
  s.gpu_bytes_peak = gpu_bytes_peak_;
  s.program_gpu_bytes = program_gpu_bytes_;
  s.program_gpu_bytes_peak = program_gpu_bytes_peak_;
  s.program_mapped = program_mapped_;
  s.program_mapped_bytes = program_mapped_bytes_;
  s.gpu_and_program_bytes_peak = gpu_and_program_bytes_peak_;
  s.host_bytes_peak = host_bytes_peak_;
  return s;
}

}  // namespace umswap
