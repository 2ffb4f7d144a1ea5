#include "umswap/allocator/slab_allocator.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "umswap/allocator/discard_pages.h"
#include "umswap/allocator/stream_tag.h"
#include "umswap/core/flight_recorder.h"
#include "umswap/core/log.h"

namespace umswap {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

constexpr uint64_t kPage = kDiscardPage;

// The whole 2 MiB pages inside [address, address + size): discarding a page that also holds a
// live neighbour would lose the neighbour's data.
std::pair<uint64_t, uint64_t> whole_pages(uint64_t address, uint64_t size) {
  const uint64_t first = round_up(address, kPage);
  const uint64_t last = (address + size) / kPage * kPage;
  return first < last ? std::pair{first, last - first} : std::pair{uint64_t{0}, uint64_t{0}};
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
      {"discard_calls", s.discard_calls},
      {"swept_bytes", s.swept_bytes},
      {"populate_calls", s.populate_calls},
      {"populate_deferred_bytes", s.populate_deferred_bytes},
      {"discard_call_seconds", s.discard_call_seconds},
      {"populate_call_seconds", s.populate_call_seconds},
      {"arena_bytes", s.arena_bytes},
      {"placed", s.placed},
      {"placement_taken", s.placement_taken},
      {"placement_unmatched", s.placement_unmatched},
  };
}

SlabAllocator::SlabAllocator(const DriverApi& driver, SlabSource source)
    : driver_(driver), source_(std::move(source)) {}

SlabAllocator::~SlabAllocator() {
  std::lock_guard lock(mutex_);
  blocks_.clear();  // returns every event to spare_events_
  for (CUevent e : spare_events_) driver_.event_destroy(e);
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

bool SlabAllocator::set_discard_mode(DiscardMode mode, DropOrder* order) {
  std::lock_guard lock(mutex_);
  if (mode != DiscardMode::off &&
      (!driver_.mem_discard_batch_async || !driver_.mem_discard_and_prefetch_batch_async ||
       !driver_.ctx_get_device)) {
    return false;
  }
  discard_mode_ = mode;
  order_ = order;
  if (mode == DiscardMode::off) discarded_.clear();  // the driver populates them on first touch
  return true;
}

void SlabAllocator::stop_discarding(const char* call, CUresult status) {
  discard_mode_ = DiscardMode::off;
  // Safe to forget: a discarded page nobody populates is populated by the driver when it is
  // first touched, like any managed memory.
  discarded_.clear();
  log_warning("{} failed (error {}); freed blocks are no longer discarded", call,
              static_cast<int>(status));
}

void SlabAllocator::discard_dead_pages(uint64_t address, uint64_t size,
                                       std::map<uint64_t, Block>::iterator merged,
                                       CUstream stream) {
  const auto [inside, inside_bytes] = whole_pages(merged->first, merged->second.size);
  const uint64_t first = std::max(inside, address / kPage * kPage);
  const uint64_t last = std::min(inside + inside_bytes, round_up(address + size, kPage));
  range_starts_.clear();
  range_sizes_.clear();
  std::unique_lock<std::mutex> order;
  DropOrder::Wait wait;
  wait.stream = discard_stream(stream);
  // None of these pages is in discarded_: the freed block overlaps each, and its allocation
  // populated and forgot every discarded page it overlapped.
  for (uint64_t page = first; page < last; page += kPage) {
    if (!(source_.discard_page && source_.discard_page(page)) || !may_discard(page, order, &wait)) {
      continue;
    }
    add_page(range_starts_, range_sizes_, page);
  }
  // After the prefetch the order names (drop_order.h), or not at all.
  if (order_ && !range_starts_.empty() && !order_->wait_for(wait)) return;
  discard_ranges(wait.stream, false, std::move(order));
}

uint64_t SlabAllocator::discard_ranges(CUstream stream, bool synchronize,
                                       std::unique_lock<std::mutex> order) {
  if (range_starts_.empty()) return 0;
  const auto start = std::chrono::steady_clock::now();
  CUresult r = driver_.mem_discard_batch_async(range_starts_.data(), range_sizes_.data(),
                                               range_starts_.size(), 0, stream);
  stats_.discard_call_seconds += seconds_since(start);
  if (r == CUDA_SUCCESS && order_) order_->discarded(range_starts_, range_sizes_, stream);
  if (order.owns_lock()) order.unlock();
  if (r == CUDA_SUCCESS && synchronize && driver_.stream_synchronize) {
    r = driver_.stream_synchronize(stream);
  }
  if (r != CUDA_SUCCESS) {
    stop_discarding("cuMemDiscardBatchAsync", r);
    return 0;
  }
  ++stats_.discard_calls;
  uint64_t bytes = 0;
  for (size_t i = 0; i < range_starts_.size(); ++i) {
    flight::record(flight::Kind::discard, range_starts_[i], range_sizes_[i], stream);
    // No remembered page lies inside the range: each one goes just before the next remembered.
    const auto next = discarded_.lower_bound(range_starts_[i]);
    for (uint64_t page = range_starts_[i]; page < range_starts_[i] + range_sizes_[i];
         page += kPage) {
      discarded_.insert(next, page);
    }
    bytes += range_sizes_[i];
    if (source_.residency) source_.residency(range_starts_[i], range_sizes_[i], false);
  }
  stats_.discarded_bytes += bytes;
  return bytes;
}

uint64_t SlabAllocator::sweep_free_pages(const std::function<bool(uint64_t page)>& discard,
                                         CUstream stream) {
  std::lock_guard lock(mutex_);
  if (discard_mode_ == DiscardMode::off) return 0;
  settle_events();
  record_events_for_other_streams(kAnyStream);
  range_starts_.clear();
  range_sizes_.clear();
  std::unique_lock<std::mutex> order;
  for (const auto& [address, b] : blocks_) {
    if (!b.free || b.stream != kAnyStream) continue;
    const auto [first, bytes] = whole_pages(address, b.size);
    // A range never runs into the next block: two slabs can be adjacent, and a range over two
    // allocations is refused (the likely cause of a CUDA_ERROR_INVALID_VALUE seen on GPT-2).
    bool first_in_block = true;
    for (uint64_t page = first; page < first + bytes; page += kPage) {
      if (discarded_.contains(page) || !discard(page) || !may_discard(page, order)) continue;
      add_page(range_starts_, range_sizes_, page, !first_in_block);
      first_in_block = false;
    }
  }
  const uint64_t swept = discard_ranges(stream, true, std::move(order));
  stats_.swept_bytes += swept;
  return swept;
}

void SlabAllocator::populate_discarded(uint64_t address, uint64_t size, CUstream stream) {
  // Every page that overlaps the block, the partly covered edge pages too.
  const auto from = discarded_.lower_bound(address / kPage * kPage);
  const auto to = discarded_.lower_bound(address + size);
  if (from == to) return;
  range_starts_.clear();
  range_sizes_.clear();
  const bool planned = discard_mode_ == DiscardMode::planned && source_.populate_later;
  for (auto page = from; page != to; ++page) {
    if (planned && source_.populate_later(*page)) {
      stats_.populate_deferred_bytes += kPage;
      continue;
    }
    add_page(range_starts_, range_sizes_, *page);
  }
  // Forgotten whatever happens next: once a live block overlaps a page, discarding-and-
  // prefetching it again would destroy that block's data.
  discarded_.erase(from, to);
  if (discard_mode_ == DiscardMode::off || range_starts_.empty()) return;
  CUdevice device = 0;
  CUresult r = driver_.ctx_get_device(&device);
  if (r != CUDA_SUCCESS) {
    stop_discarding("cuCtxGetDevice", r);
    return;
  }
  CUmemLocation where{};
  where.type = CU_MEM_LOCATION_TYPE_DEVICE;
  where.id = device;
  size_t where_from = 0;  // the one location applies to every range
  const CUstream on = discard_stream(stream);
  const auto start = std::chrono::steady_clock::now();
  r = driver_.mem_discard_and_prefetch_batch_async(range_starts_.data(), range_sizes_.data(),
                                                   range_starts_.size(), &where, &where_from, 1, 0,
                                                   on);
  stats_.populate_call_seconds += seconds_since(start);
  if (r != CUDA_SUCCESS) {
    stop_discarding("cuMemDiscardAndPrefetchBatchAsync", r);
    return;
  }
  ++stats_.populate_calls;
  for (size_t i = 0; i < range_starts_.size(); ++i) {
    flight::record(flight::Kind::populate, range_starts_[i], range_sizes_[i], on);
    stats_.populated_bytes += range_sizes_[i];
    if (source_.residency) source_.residency(range_starts_[i], range_sizes_[i], true);
  }
}

void SlabAllocator::index_free(uint64_t address, const Block& b) {
  const Slab& slab = slabs_.at(b.slab);
  if (!slab.arena) free_by_size_[slab.small ? 1 : 0].emplace(b.size, address);
  if (b.event) pending_.insert(address);
}

void SlabAllocator::unindex_free(uint64_t address, const Block& b) {
  const Slab& slab = slabs_.at(b.slab);
  if (!slab.arena) free_by_size_[slab.small ? 1 : 0].erase({b.size, address});
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

std::map<uint64_t, SlabAllocator::Block>::iterator SlabAllocator::mark_free(
    std::map<uint64_t, Block>::iterator it) {
  it->second.free = true;
  index_free(it->first, it->second);
  return coalesce(it);
}

void SlabAllocator::settle_events() {
  // Merging changes pending_: walk a copy, skipping blocks merged away meanwhile. A block free
  // for all that merges with a pending neighbour takes the neighbour's event (and address), so
  // walk again while anything settled.
  for (bool settled = true; settled && !pending_.empty();) {
    settled = false;
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
      settled = true;
    }
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

std::map<uint64_t, SlabAllocator::Block>::iterator SlabAllocator::placed_fit(uint64_t size,
                                                                             uint64_t tag) {
  const size_t entries = placement_.sizes.size();
  for (size_t look = 0; look < std::min(entries, kPlacementLookahead); ++look) {
    const size_t j = (next_entry_ + look) % entries;
    if (placement_.sizes[j] != size) continue;
    next_entry_ = (j + 1) % entries;
    const uint64_t offset = placement_.offsets[j];
    const uint64_t address = arena_ + offset;
    auto it = blocks_.upper_bound(address);
    if (offset == Placement::kUnplaced || it == blocks_.begin()) {
      ++stats_.placement_taken;
      return blocks_.end();
    }
    --it;
    Block& b = it->second;
    if (!b.free || b.slab != arena_ || it->first + b.size < address + size ||
        (b.stream != kAnyStream && b.stream != tag)) {
      ++stats_.placement_taken;
      return blocks_.end();
    }
    if (address > it->first) {  // split off the free space in front
      unindex_free(it->first, b);
      Block back = b;
      back.size = it->first + b.size - address;
      b.size = address - it->first;
      index_free(it->first, b);
      it = blocks_.emplace(address, std::move(back)).first;
      index_free(it->first, it->second);
    }
    ++stats_.placed;
    return it;
  }
  ++stats_.placement_unmatched;
  return blocks_.end();
}

bool SlabAllocator::set_placement(Placement placement, const Context& context) {
  std::lock_guard lock(mutex_);
  if (placement.arena_bytes == 0 || placement.sizes.empty() ||
      placement.offsets.size() != placement.sizes.size()) {
    return false;
  }
  const uint64_t bytes = round_up(placement.arena_bytes, kSlabGranule);
  CUdeviceptr base = 0;
  const uint64_t site = context ? context() : 0;
  if (source_.create(bytes, site, &base) != CUDA_SUCCESS) {
    wait_for_all_events();
    release_free_slabs();
    if (source_.create(bytes, site, &base) != CUDA_SUCCESS) return false;
  }
  // Every large slab, a replaced arena too (it takes no new blocks: still an arena, no longer
  // the one placed_fit() serves).
  for (const auto& [slab_base, slab] : slabs_) {
    if (!slab.small) retiring_.insert(slab_base);
  }
  add_slab(base, Slab{.size = bytes, .small = false, .arena = true});
  stats_.arena_bytes = bytes;
  arena_ = base;
  placement_ = std::move(placement);
  next_entry_ = 0;
  return true;
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
  add_slab(base, Slab{.size = got, .small = small});
  return CUDA_SUCCESS;
}

void SlabAllocator::add_slab(uint64_t base, Slab slab) {
  const uint64_t bytes = slab.size;
  flight::record(slab.arena ? flight::Kind::arena : flight::Kind::slab_create, base, bytes);
  slabs_.emplace(base, slab);
  Block b{.size = bytes, .slab = base, .free = true, .stream = kAnyStream, .seq = 0, .event = {}};
  blocks_.emplace(base, b);
  index_free(base, b);
  ++stats_.slabs;
  ++stats_.slabs_created;
  stats_.slab_bytes += bytes;
  stats_.slab_bytes_peak = std::max(stats_.slab_bytes_peak, stats_.slab_bytes);
}

// True when the slab was one free block free for every stream, and is given back now.
bool SlabAllocator::give_back_if_free(std::map<uint64_t, Slab>::iterator s) {
  const auto it = blocks_.find(s->first);
  if (s->first == arena_ || it == blocks_.end() || !it->second.free ||
      it->second.size != s->second.size || it->second.stream != kAnyStream) {
    return false;
  }
  unindex_free(it->first, it->second);
  blocks_.erase(it);
  discarded_.erase(discarded_.lower_bound(s->first),
                   discarded_.lower_bound(s->first + s->second.size));
  flight::record(flight::Kind::slab_free, s->first, s->second.size);
  source_.destroy(s->first);
  // Freed memory holds no GPU pages any more.
  if (source_.residency) source_.residency(s->first, s->second.size, false);
  --stats_.slabs;
  ++stats_.slabs_released;
  stats_.slab_bytes -= s->second.size;
  slabs_.erase(s);
  return true;
}

void SlabAllocator::release_free_slabs() {
  for (auto s = slabs_.begin(); s != slabs_.end();) {
    const auto next = std::next(s);
    give_back_if_free(s);
    s = next;
  }
}

void SlabAllocator::retire_replaced_slabs() {
  for (auto r = retiring_.begin(); r != retiring_.end();) {
    const auto s = slabs_.find(*r);
    if (s == slabs_.end()) {  // given back under pressure meanwhile
      r = retiring_.erase(r);
      continue;
    }
    const uint64_t end = s->first + s->second.size;
    bool all_free = true;
    for (auto b = blocks_.find(s->first); all_free && b != blocks_.end() && b->first < end; ++b) {
      all_free = b->second.free;
    }
    if (!all_free) {
      ++r;
      continue;
    }
    if (give_back_if_free(s)) {
      r = retiring_.erase(r);
      continue;
    }
    // Wholly free, but parts still answer to the streams that freed them: an event on each such
    // stream; once they complete, settle_events() merges the parts and the slab goes.
    for (auto b = blocks_.find(s->first); b != blocks_.end() && b->first < end; ++b) {
      Block& block = b->second;
      if (block.event || block.stream == kAnyStream || (block.stream & kNotAHandle) != 0) continue;
      if (EventRef event = record_event(reinterpret_cast<CUstream>(block.stream))) {
        unindex_free(b->first, block);
        block.event = std::move(event);
        index_free(b->first, block);
      }
    }
    ++r;
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
  // With a placement, the large slabs it replaced go once they are wholly free and idle.
  if (!retiring_.empty()) retire_replaced_slabs();
  auto it = !small && arena_ != 0 ? placed_fit(size, tag) : blocks_.end();
  if (it == blocks_.end()) it = find_fit(size, small, tag);
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
  flight::record(flight::Kind::block_alloc, it->first, it->second.size, stream);
  if (source_.lifetime) source_.lifetime(it->first, it->second.size, false);
  populate_discarded(it->first, it->second.size, stream);
  return CUDA_SUCCESS;
}

std::optional<CUresult> SlabAllocator::release(CUdeviceptr ptr, uint64_t tag, CUstream stream,
                                               bool record_now) {
  std::lock_guard lock(mutex_);
  const auto it = blocks_.find(ptr);
  if (it == blocks_.end() || it->second.free) return std::nullopt;
  const uint64_t size = it->second.size;
  // The legacy stream as the program named it (0), not as free() passes it on.
  flight::record(flight::Kind::block_free, ptr, size,
                 stream == CU_STREAM_LEGACY ? nullptr : stream);
  if (source_.lifetime) source_.lifetime(ptr, size, true);
  --stats_.blocks_in_use;
  stats_.bytes_in_use -= size;
  it->second.stream = tag;
  it->second.seq = ++seq_;
  // After a stream-ordered free the merged block carries this free's stream, order and (still
  // no) event: it is the latest free of its stream, and merging only joins blocks of the same
  // stream or free for all.
  const auto merged = mark_free(it);
  // Before any event: an event recorded after the free must cover the discard too.
  if (discard_mode_ != DiscardMode::off && stream != nullptr) {
    discard_dead_pages(ptr, size, merged, stream);
  }
  if (record_now) {
    // Without an event (record failed) only the freeing thread's stream may take it again.
    if (EventRef event = record_event(CU_STREAM_PER_THREAD)) {
      unindex_free(merged->first, merged->second);
      merged->second.event = std::move(event);
      index_free(merged->first, merged->second);
    }
  }
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
  if (!stream_can_end(tag)) return;
  std::lock_guard lock(mutex_);
  EventRef event;
  bool recorded = false;
  const uint64_t ended = ended_stream_tag();
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
