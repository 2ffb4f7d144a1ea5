#include "umswap/allocator/torch_blocks.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <functional>
#include <iterator>
#include <string_view>
#include <vector>

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
constexpr size_t kSizeOffset = 40;    // size_t

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
             field<uint64_t>(e, kSizeOffset));
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

void TorchBlocks::on_event(int32_t action, uint64_t address, uint64_t bytes) noexcept {
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
        auto it = blocks_.lower_bound(address);
        while (it != blocks_.end() && it->first < address + bytes) it = blocks_.erase(it);
        break;
      }
      case kAlloc: {
        auto seg = segments_.upper_bound(address);
        if (seg == segments_.begin() || std::prev(seg)->first + std::prev(seg)->second <= address) {
          ++ignored_;
          break;
        }
        blocks_[address] = bytes;
        ++blocks_made_;
        break;
      }
      case kFreeRequested:
        blocks_.erase(address);
        break;
      default:
        break;
    }
  } catch (...) {
    // Nothing may unwind into PyTorch's allocator (std::bad_alloc from a map node).
  }
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
  switch (state_.load(std::memory_order_acquire)) {
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
  return s;
}

}  // namespace umswap
