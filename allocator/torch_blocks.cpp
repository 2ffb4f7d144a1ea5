#include "umswap/allocator/torch_blocks.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <string_view>
#include <vector>

#include "umswap/allocator/discard_pages.h"
#include "umswap/core/elf_symbols.h"
#include "umswap/core/log.h"

namespace umswap {
namespace {

// The symbols, as PyTorch 2.11's libc10_cuda.so names them (the method's argument type moved to
// c10::CachingDeviceAllocator::TraceEntry in 2.9-era code; older names are not matched).
constexpr std::string_view kAllocatorSymbol = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
constexpr std::string_view kNativeVtable =
    "_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE";
constexpr std::string_view kAttachMethod =
    "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocatorTraceTracker"
    "ESt8functionIFvRKNS_22CachingDeviceAllocator10TraceEntryEEE";

// TraceEntry's fields umswap reads, at their offsets (the same from PyTorch 2.1 to 2.11; checked
// on 2.11 by bench/allocator_trace_probe.py, H200, 2026-11-30, and by the self-check at run time).
constexpr size_t kActionOffset = 0;   // int32 enum
constexpr size_t kAddressOffset = 8;  // size_t
constexpr size_t kStreamOffset = 32;  // cudaStream_t (void* in c10's generic TraceEntry)
constexpr size_t kSizeOffset = 40;    // size_t

constexpr uint64_t kPage = kDiscardPage;

// The tracker's argument: the entry, only ever read through the offsets above.
struct OpaqueTraceEntry;
using Tracker = std::function<void(const OpaqueTraceEntry&)>;
// A member function taking a std::function by value: under the Itanium C++ ABI the argument is a
// temporary the caller owns and destroys, passed by its address.
using AttachMethod = void (*)(void* self, Tracker* by_value);

bool is_c10_cuda(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return file == "libc10_cuda.so";
}

template <typename T>
T field(const OpaqueTraceEntry& e, size_t offset) {
  T v;
  std::memcpy(&v, reinterpret_cast<const std::byte*>(&e) + offset, sizeof v);
  return v;
}

}  // namespace

void TorchBlocks::before_segment_malloc(const char* library_path) {
  if (state_.load(std::memory_order_acquire) != State::idle || !library_path ||
      !is_c10_cuda(library_path)) {
    return;
  }
  State expected = State::idle;
  // One thread attaches; another (a second device's first segment) does not wait for it.
  if (!state_.compare_exchange_strong(expected, State::attaching)) return;
  const std::string why = attach(library_path);
  if (!why.empty()) {
    fail(why);
    log_info("PyTorch's caching allocator: {}; plans follow its segments, not its tensors", why);
    return;
  }
  state_.store(State::attached, std::memory_order_release);
  log_info("PyTorch's caching allocator: following its blocks ({})", library_path);
}

void TorchBlocks::after_segment_malloc(bool succeeded, uint64_t pointer, uint64_t bytes) {
  if (!succeeded || state_.load(std::memory_order_acquire) != State::attached) return;
  expect_pointer_.store(pointer, std::memory_order_relaxed);
  expect_bytes_.store(bytes, std::memory_order_relaxed);
  expect_set_.store(true, std::memory_order_release);
}

std::string TorchBlocks::attach(const std::string& library_path) {
  std::string error;
  const std::vector<WantedSymbol> wanted = {
      {std::string(kAllocatorSymbol)}, {std::string(kNativeVtable)}, {std::string(kAttachMethod)}};
  const std::map<std::string, uint64_t> found = read_symtab(library_path, wanted, &error);
  if (!error.empty()) return "cannot read its symbols (" + error + ")";
  for (const WantedSymbol& w : wanted) {
    if (!found.contains(w.name))
      return "its library lacks " + w.name + " (another PyTorch version)";
  }
  void* handle = dlopen(library_path.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (!handle) return "libc10_cuda.so is not loaded";
  link_map* map = nullptr;
  const bool mapped = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map;
  const uintptr_t load = mapped ? map->l_addr : 0;
  dlclose(handle);  // RTLD_NOLOAD took a reference; the library stays loaded
  if (!mapped) return "cannot find where libc10_cuda.so is loaded";
  // c10::cuda::CUDACachingAllocator::allocator, a std::atomic<CUDAAllocator*>.
  void* const* slot =
      reinterpret_cast<void* const*>(load + found.at(std::string(kAllocatorSymbol)));
  void* object = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!object) return "its allocator is not set up yet";
  // Itanium ABI: the vtable pointer points two words past the vtable symbol.
  const uintptr_t vptr = *reinterpret_cast<const uintptr_t*>(object);
  if (vptr != load + found.at(std::string(kNativeVtable)) + 2 * sizeof(void*)) {
    return "it is not the native caching allocator (another backend)";
  }
  auto method = reinterpret_cast<AttachMethod>(load + found.at(std::string(kAttachMethod)));
  Tracker tracker = [this](const OpaqueTraceEntry& e) {
    on_event(field<int32_t>(e, kActionOffset), field<uint64_t>(e, kAddressOffset),
             field<uint64_t>(e, kSizeOffset), field<uint64_t>(e, kStreamOffset));
  };
  method(object, &tracker);
  return {};
}

// Only before any segment is marked (attaching, or the first segment's check): nothing to undo.
void TorchBlocks::fail(std::string why) {
  std::lock_guard lock(mutex_);
  why_ = std::move(why);
  state_.store(State::failed, std::memory_order_release);
}

void TorchBlocks::set_drops(Drops drops) {
  std::lock_guard lock(mutex_);
  drops_ = std::move(drops);
  drops_on_ = drops_.discard && drops_.populate;
  drops_stopped_.clear();
  discarded_.clear();
}

void TorchBlocks::on_event(int32_t action, uint64_t address, uint64_t bytes,
                           uint64_t stream) noexcept {
  try {
    const State state = state_.load(std::memory_order_acquire);
    if (state != State::attached && state != State::checked) return;
    if (state == State::attached) {
      if (action != kSegmentAlloc) return;  // nothing before the first segment matters
      const bool match = expect_set_.load(std::memory_order_acquire) &&
                         expect_pointer_.load(std::memory_order_relaxed) == address &&
                         expect_bytes_.load(std::memory_order_relaxed) == bytes;
      if (!match) {
        const char* why = "its first segment event did not match umswap's cudaMalloc";
        fail(why);
        log_info("PyTorch's caching allocator: {}; plans follow its segments, not its tensors",
                 why);
        return;
      }
      State expected = State::attached;
      state_.compare_exchange_strong(expected, State::checked);
    }
    std::lock_guard lock(mutex_);
    ++events_;
    switch (action) {
      case kSegmentAlloc:
        if (registry_.mark_carved(address)) {
          segments_[address] = bytes;
          ++segments_made_;
        }
        break;
      case kSegmentFree: {
        segments_.erase(address);
        for (auto* m : {&blocks_, &pending_}) {
          auto it = m->lower_bound(address);
          while (it != m->end() && it->first < address + bytes) it = m->erase(it);
        }
        discarded_.erase(discarded_.lower_bound(address), discarded_.lower_bound(address + bytes));
        break;
      }
      case kAlloc: {
        if (segment_of(address) == segments_.end()) {
          ++ignored_;
          break;
        }
        blocks_[address] = bytes;
        ++blocks_made_;
        if (drops_.lifetime) drops_.lifetime(address, bytes, false);
        populate_discarded(address, bytes, stream);
        break;
      }
      case kFreeRequested:
        if (blocks_.erase(address) > 0) {
          pending_[address] = bytes;
          if (drops_.lifetime) drops_.lifetime(address, bytes, true);
        }
        break;
      case kFreeCompleted:
        if (pending_.erase(address) > 0) discard_free_pages(address, bytes, stream);
        break;
      default:
        break;
    }
  } catch (...) {
    // Nothing may unwind into PyTorch's allocator (std::bad_alloc from a map node).
  }
}

std::map<uint64_t, uint64_t>::const_iterator TorchBlocks::segment_of(uint64_t address) const {
  auto seg = segments_.upper_bound(address);
  if (seg == segments_.begin()) return segments_.end();
  --seg;
  return address - seg->first < seg->second ? seg : segments_.end();
}

void TorchBlocks::discard_free_pages(uint64_t address, uint64_t bytes, uint64_t stream) {
  if (!drops_on_ || !drops_.discard_page || bytes == 0) return;
  if (drops_.capturing && drops_.capturing(stream)) return;
  const auto seg = segment_of(address);
  if (seg == segments_.end()) return;
  // The free space around the block: up to the nearest live or not yet completed block each side.
  uint64_t lo = seg->first, hi = seg->first + seg->second;
  for (const auto* m : {&blocks_, &pending_}) {
    auto next = m->lower_bound(address);
    if (next != m->end()) hi = std::min(hi, next->first);
    if (next != m->begin()) lo = std::max(lo, std::prev(next)->first + std::prev(next)->second);
  }
  const uint64_t first = std::max((lo + kPage - 1) / kPage, address / kPage) * kPage;
  const uint64_t end = std::min(hi, (address + bytes + kPage - 1) / kPage * kPage);
  starts_.clear();
  sizes_.clear();
  std::unique_lock<std::mutex> order;  // drops_.order's, from the first page it is asked about
  DropOrder::Wait wait;
  wait.stream = discard_stream(reinterpret_cast<CUstream>(stream));
  for (uint64_t page = first; page + kPage <= end; page += kPage) {
    if (discarded_.contains(page) || !drops_.discard_page(page)) continue;
    if (drops_.order && !drops_.order->may_discard(page, order, &wait)) continue;
    add_page(starts_, sizes_, page);
  }
  if (starts_.empty()) return;
  // After the prefetch the order names (drop_order.h), or not at all.
  if (drops_.order && !drops_.order->wait_for(wait)) return;
  if (!drops_.discard(starts_, sizes_, stream)) {
    stop_drops("cuMemDiscardBatchAsync");
    return;
  }
  if (drops_.order) {
    drops_.order->discarded(starts_, sizes_, wait.stream);
    order.unlock();
  }
  for (size_t i = 0; i < starts_.size(); ++i) {
    for (uint64_t page = starts_[i]; page < starts_[i] + sizes_[i]; page += kPage) {
      discarded_.insert(page);
    }
    discarded_bytes_ += sizes_[i];
    if (drops_.residency) drops_.residency(starts_[i], sizes_[i], false);
  }
}

void TorchBlocks::populate_discarded(uint64_t address, uint64_t bytes, uint64_t stream) {
  // Every page the block overlaps, edge pages too: forgotten whatever happens next (once a live
  // block overlaps a page, discarding-and-populating it again would destroy that block's data).
  const auto from = discarded_.lower_bound(address / kPage * kPage);
  const auto to = discarded_.lower_bound(address + std::max<uint64_t>(bytes, 1));
  if (from == to) return;
  // Not on a stream being captured: the driver populates them at the first touch.
  const bool populate = drops_on_ && !(drops_.capturing && drops_.capturing(stream));
  starts_.clear();
  sizes_.clear();
  for (auto page = from; populate && page != to; ++page) {
    if (drops_.populate_later && drops_.populate_later(*page)) {
      deferred_bytes_ += kPage;
      continue;
    }
    add_page(starts_, sizes_, *page);
  }
  discarded_.erase(from, to);
  if (starts_.empty()) return;
  if (!drops_.populate(starts_, sizes_, stream)) {
    stop_drops("cuMemDiscardAndPrefetchBatchAsync");
    return;
  }
  for (size_t i = 0; i < starts_.size(); ++i) {
    populated_bytes_ += sizes_[i];
    if (drops_.residency) drops_.residency(starts_[i], sizes_[i], true);
  }
}

// A page forgotten is populated by the driver at its first touch, as managed memory always is.
void TorchBlocks::stop_drops(const char* call) {
  drops_on_ = false;
  discarded_.clear();
  drops_stopped_ = std::string(call) + " failed";
  log_warning("{} failed; PyTorch's dead blocks are no longer dropped", call);
}

// Asked only for addresses in segments marked carved (the registry's dispatch), whose blocks are
// all here and in no other segment: the block before the address is the only candidate.
std::optional<std::pair<uint64_t, uint64_t>> TorchBlocks::live_block(uint64_t address) const {
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  // A block of size 0 (an empty tensor) holds no address.
  if (address - it->first >= it->second) return std::nullopt;
  return std::pair<uint64_t, uint64_t>(it->first, it->first + it->second);
}

TorchBlocks::Stats TorchBlocks::stats() const {
  std::lock_guard lock(mutex_);
  Stats s;
  const State state = state_.load(std::memory_order_acquire);
  switch (state) {
    case State::idle:
      s.state = "not PyTorch";
      break;
    case State::attaching:
      s.state = "attaching";
      break;
    case State::attached:
      s.state = "attached, no segment yet";
      break;
    case State::checked:
      s.state = "checked";
      break;
    case State::failed:
      s.state = why_;
      break;
  }
  s.events = events_;
  s.segments = segments_made_;
  s.blocks = blocks_made_;
  s.live_blocks = blocks_.size();
  s.ignored = ignored_;
  s.discarded_bytes = discarded_bytes_;
  s.populated_bytes = populated_bytes_;
  s.populate_deferred_bytes = deferred_bytes_;
  // Nothing is dropped while no block is followed (another backend, not PyTorch, failed).
  const bool following = state == State::attached || state == State::checked;
  s.drops = !drops_stopped_.empty() ? drops_stopped_ : drops_on_ && following ? "on" : "off";
  return s;
}

}  // namespace umswap
