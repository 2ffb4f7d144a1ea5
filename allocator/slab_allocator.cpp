#include "umswap/allocator/slab_allocator.h"

#include <algorithm>
#include <atomic>

#include "umswap/core/log.h"

namespace umswap {
namespace {

// Tags that name no stream handle (no device address has these bits): per-thread default
// streams (a number per thread; their frees record an event at once) and streams that were
// destroyed (a number per stream; stream_ends() recorded their event).
constexpr uint64_t kPerThreadTag = uint64_t{1} << 63;
constexpr uint64_t kEndedTag = uint64_t{1} << 62;
constexpr uint64_t kNotAHandle = kPerThreadTag | kEndedTag;

uint64_t this_thread_number() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

// The whole 2 MiB pages inside [address, address + size): discarding a page that also holds a
// live neighbour would lose the neighbour's data.
std::pair<uint64_t, uint64_t> whole_pages(uint64_t address, uint64_t size) {
  constexpr uint64_t kPage = uint64_t{2} << 20;
  const uint64_t first = round_up(address, kPage);
  const uint64_t last = (address + size) / kPage * kPage;
  return first < last ? std::pair{first, last - first} : std::pair{uint64_t{0}, uint64_t{0}};
}

// The stream a stream-ordered discard may go on: not the legacy default stream (the API
// refuses it); the per-thread stream is ordered with it.
CUstream discard_stream(CUstream stream) {
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  return handle == 0 || handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY)
             ? CU_STREAM_PER_THREAD
             : stream;
}

}  // namespace

nlohmann::json to_json(const SlabStats& s) {
  return {
      {"slabs", s.slabs},
      {"slab_bytes", s.slab_bytes},
      {"slab_bytes_peak", s.slab_bytes_peak},
      {"slabs_created", s.slabs_created},
      {"slabs_released", s.slabs_released},
      {"blocks_in_use", s.blocks_in_use},
      {"bytes_in_use", s.bytes_in_use},
      {"bytes_in_use_peak", s.bytes_in_use_peak},
      {"events_recorded", s.events_recorded},
      {"pressure_waits", s.pressure_waits},
      {"discarded_bytes", s.discarded_bytes},
      {"populated_bytes", s.populated_bytes},
  };
}

SlabAllocator::SlabAllocator(const DriverApi& driver, SlabSource source)
    : driver_(driver), source_(std::move(source)) {}

SlabAllocator::~SlabAllocator() {
  std::lock_guard lock(mutex_);
  blocks_.clear();  // returns every event to spare_events_
  for (CUevent e : spare_events_) driver_.event_destroy(e);
}

uint64_t SlabAllocator::stream_tag(CUstream stream) const {
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  if (handle == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD)) {
    return kPerThreadTag | this_thread_number();
  }
  if (handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY)) return 0;  // the same as 0
  return handle;
}

SlabAllocator::EventRef SlabAllocator::record_event(CUstream stream) {
  CUevent e = nullptr;
  if (!spare_events_.empty()) {
    e = spare_events_.back();
    spare_events_.pop_back();
  } else if (driver_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return nullptr;
  }
  if (driver_.event_record(e, stream) != CUDA_SUCCESS) {
    spare_events_.push_back(e);
    return nullptr;
  }
  ++stats_.events_recorded;
  // The last block to drop the event hands it back for reuse (under mutex_, as every change).
  return EventRef(e, [this](CUevent done) { spare_events_.push_back(done); });
}

bool SlabAllocator::set_discard_freed(bool on) {
  std::lock_guard lock(mutex_);
  if (on && (!driver_.mem_discard_batch_async || !driver_.mem_discard_and_prefetch_batch_async ||
             !driver_.ctx_get_device)) {
    return false;
  }
  discard_freed_ = on;
  return true;
}

void SlabAllocator::discard(uint64_t address, uint64_t size, CUstream stream) {
  const auto [first, bytes] = whole_pages(address, size);
  if (bytes == 0) return;
  CUdeviceptr ptr = first;
  size_t length = bytes;
  const CUresult r = driver_.mem_discard_batch_async(&ptr, &length, 1, 0, discard_stream(stream));
  if (r != CUDA_SUCCESS) {
    discard_freed_ = false;
    log_warning("cuMemDiscardBatchAsync failed (error {}); freed blocks are no longer discarded",
                static_cast<int>(r));
    return;
  }
  stats_.discarded_bytes += bytes;
  if (source_.residency) source_.residency(first, bytes, false);
}

void SlabAllocator::populate(uint64_t address, uint64_t size, CUstream stream) {
  const auto [first, bytes] = whole_pages(address, size);
  if (bytes == 0) return;
  CUdevice device = 0;
  if (driver_.ctx_get_device(&device) != CUDA_SUCCESS) return;
  CUmemLocation where{};
  where.type = CU_MEM_LOCATION_TYPE_DEVICE;
  where.id = device;
  CUdeviceptr ptr = first;
  size_t length = bytes;
  size_t where_from = 0;
  const CUresult r = driver_.mem_discard_and_prefetch_batch_async(
      &ptr, &length, 1, &where, &where_from, 1, 0, discard_stream(stream));
  if (r != CUDA_SUCCESS) {
    discard_freed_ = false;
    log_warning(
        "cuMemDiscardAndPrefetchBatchAsync failed (error {}); freed blocks are no longer "
        "discarded",
        static_cast<int>(r));
    return;
  }
  stats_.populated_bytes += bytes;
  if (source_.residency) source_.residency(first, bytes, true);
}

void SlabAllocator::index_free(uint64_t address, const Block& b) {
  free_by_size_[slabs_.at(b.slab).small ? 1 : 0].emplace(b.size, address);
  if (b.event) pending_.insert(address);
}

void SlabAllocator::unindex_free(uint64_t address, const Block& b) {
  free_by_size_[slabs_.at(b.slab).small ? 1 : 0].erase({b.size, address});
  if (b.event) pending_.erase(address);
}

bool SlabAllocator::merge_into(Block& into, const Block& other) const {
  // `into` and `other` are adjacent free blocks of one slab; `into` takes the union's ownership.
  if (into.stream == other.stream) {
    if (other.seq > into.seq) {
      into.seq = other.seq;
      into.event = other.event;  // the later free's event covers the earlier one's work
    }
    return true;
  }
  if (other.stream == kAnyStream) return true;
  if (into.stream == kAnyStream) {
    into.stream = other.stream;
    into.seq = other.seq;
    into.event = other.event;
    return true;
  }
  return false;  // two different streams: reuse conditions differ, keep them apart
}

bool SlabAllocator::absorb(std::map<uint64_t, Block>::iterator left,
                           std::map<uint64_t, Block>::iterator right) {
  if (!left->second.free || !right->second.free || left->second.slab != right->second.slab) {
    return false;
  }
  Block merged = left->second;
  if (!merge_into(merged, right->second)) return false;
  unindex_free(left->first, left->second);
  unindex_free(right->first, right->second);
  merged.size += right->second.size;
  blocks_.erase(right);
  left->second = std::move(merged);
  index_free(left->first, left->second);
  return true;
}

std::map<uint64_t, SlabAllocator::Block>::iterator SlabAllocator::coalesce(
    std::map<uint64_t, Block>::iterator it) {
  if (auto next = std::next(it); next != blocks_.end()) absorb(it, next);
  if (it != blocks_.begin()) {
    if (auto prev = std::prev(it); absorb(prev, it)) return prev;
  }
  return it;
}

void SlabAllocator::mark_free(std::map<uint64_t, Block>::iterator it) {
  it->second.free = true;
  index_free(it->first, it->second);
  coalesce(it);
}

void SlabAllocator::settle_events() {
  if (pending_.empty()) return;
  // Merging changes pending_: walk a copy, skipping blocks merged away meanwhile.
  const std::vector<uint64_t> addresses(pending_.begin(), pending_.end());
  for (const uint64_t address : addresses) {
    if (!pending_.contains(address)) continue;
    const auto it = blocks_.find(address);
    Block& b = it->second;
    if (driver_.event_query(b.event.get()) != CUDA_SUCCESS) continue;
    unindex_free(it->first, b);
    b.event.reset();
    b.stream = kAnyStream;
    index_free(it->first, b);
    coalesce(it);
  }
}

void SlabAllocator::record_events_for_other_streams(uint64_t tag) {
  // One event per stream covers every block that stream freed so far.
  std::map<uint64_t, EventRef> recorded;
  for (auto& [address, b] : blocks_) {
    if (!b.free || b.event || b.stream == kAnyStream || b.stream == tag) continue;
    if ((b.stream & kNotAHandle) != 0) continue;  // recorded at the free or when it ended
    auto [slot, fresh] = recorded.try_emplace(b.stream);
    if (fresh) slot->second = record_event(reinterpret_cast<CUstream>(b.stream));
    if (!slot->second) continue;
    unindex_free(address, b);
    b.event = slot->second;
    index_free(address, b);
  }
}

void SlabAllocator::wait_for_all_events() {
  record_events_for_other_streams(kAnyStream);
  std::set<CUevent> waited;
  for (auto& [address, b] : blocks_) {
    if (b.free && b.event && waited.insert(b.event.get()).second) {
      driver_.event_synchronize(b.event.get());
    }
  }
  settle_events();
}

std::map<uint64_t, SlabAllocator::Block>::iterator SlabAllocator::find_fit(uint64_t size,
                                                                           bool small,
                                                                           uint64_t tag) {
  auto& index = free_by_size_[small ? 1 : 0];
  for (auto c = index.lower_bound({size, 0}); c != index.end(); ++c) {
    auto it = blocks_.find(c->second);
    const Block& b = it->second;
    if (b.stream == kAnyStream || b.stream == tag) return it;
  }
  return blocks_.end();
}

void SlabAllocator::place(std::map<uint64_t, Block>::iterator it, uint64_t size) {
  Block& b = it->second;
  unindex_free(it->first, b);
  if (b.size - size >= kAlignment) {
    Block rest = b;  // same stream, order and event: the remainder was freed with it
    rest.size = b.size - size;
    const uint64_t rest_address = it->first + size;
    blocks_.emplace(rest_address, rest);
    index_free(rest_address, rest);
    b.size = size;
  }
  b.free = false;
  b.stream = 0;
  b.seq = 0;
  b.event.reset();
  ++stats_.blocks_in_use;
  stats_.bytes_in_use += b.size;
  stats_.bytes_in_use_peak = std::max(stats_.bytes_in_use_peak, stats_.bytes_in_use);
}

CUresult SlabAllocator::new_slab(uint64_t size, bool small, const Context& context) {
  const uint64_t site = context ? context() : 0;
  const uint64_t exact = round_up(size, kSlabGranule);
  const uint64_t preferred = small ? kSmallSlab : std::max(kLargeSlab, exact);
  CUdeviceptr base = 0;
  uint64_t got = preferred;
  CUresult status = source_.create(preferred, site, &base);
  if (status != CUDA_SUCCESS && exact < preferred) {
    got = exact;
    status = source_.create(exact, site, &base);
  }
  if (status != CUDA_SUCCESS) return status;
  slabs_.emplace(base, Slab{.size = got, .small = small});
  Block b{.size = got, .slab = base, .free = true, .stream = kAnyStream, .seq = 0, .event = {}};
  blocks_.emplace(base, b);
  index_free(base, b);
  ++stats_.slabs;
  ++stats_.slabs_created;
  stats_.slab_bytes += got;
  stats_.slab_bytes_peak = std::max(stats_.slab_bytes_peak, stats_.slab_bytes);
  return CUDA_SUCCESS;
}

void SlabAllocator::release_free_slabs() {
  for (auto s = slabs_.begin(); s != slabs_.end();) {
    const auto it = blocks_.find(s->first);
    if (it != blocks_.end() && it->second.free && it->second.size == s->second.size &&
        it->second.stream == kAnyStream) {
      unindex_free(it->first, it->second);
      blocks_.erase(it);
      source_.destroy(s->first);
      --stats_.slabs;
      ++stats_.slabs_released;
      stats_.slab_bytes -= s->second.size;
      s = slabs_.erase(s);
    } else {
      ++s;
    }
  }
}

CUresult SlabAllocator::allocate(uint64_t bytes, CUstream stream, CUdeviceptr* out,
                                 const Context& context) {
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), kAlignment);
  if (size < bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const bool small = size <= kSmallLimit;
  const uint64_t tag = stream_tag(stream);
  std::lock_guard lock(mutex_);
  settle_events();
  auto it = find_fit(size, small, tag);
  if (it == blocks_.end()) {
    // Blocks other streams freed become usable once those streams pass the free.
    record_events_for_other_streams(tag);
    settle_events();
    it = find_fit(size, small, tag);
  }
  if (it == blocks_.end()) {
    CUresult status = new_slab(size, small, context);
    if (status != CUDA_SUCCESS) {
      ++stats_.pressure_waits;
      wait_for_all_events();
      it = find_fit(size, small, tag);
      if (it == blocks_.end()) {
        release_free_slabs();
        status = new_slab(size, small, context);
        if (status != CUDA_SUCCESS) return status;
      }
    }
    if (it == blocks_.end()) it = find_fit(size, small, tag);
  }
  if (it == blocks_.end()) return CUDA_ERROR_OUT_OF_MEMORY;  // a fresh slab always fits
  place(it, size);
  *out = it->first;
  if (discard_freed_) populate(it->first, size, stream);
  return CUDA_SUCCESS;
}

std::optional<CUresult> SlabAllocator::release(CUdeviceptr ptr, uint64_t tag, CUstream stream,
                                               bool record_now) {
  std::lock_guard lock(mutex_);
  const auto it = blocks_.find(ptr);
  if (it == blocks_.end() || it->second.free) return std::nullopt;
  Block& b = it->second;
  // Before any event: an event recorded after the free must cover the discard too.
  if (discard_freed_ && stream != nullptr) discard(it->first, b.size, stream);
  // Without an event (record failed) only the freeing thread's stream may take it again.
  if (record_now) b.event = record_event(CU_STREAM_PER_THREAD);
  --stats_.blocks_in_use;
  stats_.bytes_in_use -= b.size;
  b.stream = tag;
  b.seq = ++seq_;
  mark_free(it);
  return CUDA_SUCCESS;
}

std::optional<CUresult> SlabAllocator::free(CUdeviceptr ptr, CUstream stream) {
  const uint64_t tag = stream_tag(stream);
  // The legacy stream is passed as CU_STREAM_LEGACY so that "no stream" (free_sync) stays null.
  return release(ptr, tag, stream ? stream : CU_STREAM_LEGACY, (tag & kPerThreadTag) != 0);
}

std::optional<CUresult> SlabAllocator::free_sync(CUdeviceptr ptr) {
  if (!owns(ptr)) return std::nullopt;
  // cudaFree of stream-ordered memory: the program expects its work to be finished.
  const CUresult status = driver_.ctx_synchronize();
  if (status != CUDA_SUCCESS) {
    std::lock_guard lock(mutex_);
    const auto it = blocks_.find(ptr);
    if (it == blocks_.end() || it->second.free) return std::nullopt;
    return status;
  }
  return release(ptr, kAnyStream, nullptr, false);
}

void SlabAllocator::stream_ends(CUstream stream) {
  const uint64_t tag = stream_tag(stream);
  if ((tag & kNotAHandle) != 0 || tag == 0) return;  // the default streams never end
  std::lock_guard lock(mutex_);
  EventRef event;
  bool recorded = false;
  const uint64_t ended = kEndedTag | ++retired_;
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    Block& b = it->second;
    if (!b.free || b.stream != tag) continue;
    if (!recorded) {
      event = record_event(stream);
      // Without an event, wait for everything: then the blocks are free for every stream.
      if (!event) driver_.ctx_synchronize();
      recorded = true;
    }
    unindex_free(it->first, b);
    if (!b.event) b.event = event;
    b.stream = b.event ? ended : kAnyStream;
    index_free(it->first, b);
  }
  settle_events();
}

std::optional<std::pair<uint64_t, uint64_t>> SlabAllocator::live_block(uint64_t address) const {
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  if (it->second.free || address - it->first >= it->second.size) return std::nullopt;
  return std::pair{it->first, it->first + it->second.size};
}

bool SlabAllocator::owns(uint64_t address) const {
  std::lock_guard lock(mutex_);
  auto it = slabs_.upper_bound(address);
  if (it == slabs_.begin()) return false;
  --it;
  return address - it->first < it->second.size;
}

SlabStats SlabAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace umswap
