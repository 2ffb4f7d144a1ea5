// The C++ half of bench/allocator_trace_probe.py: attaches a trace tracker to PyTorch's CUDA
// caching allocator (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker) and keeps
// every block and segment event in a buffer the probe owns. Issue 39; the route it tests is
// docs/lab/2026-11-30-default-allocator-hooks.md's.
//
// Built by the probe on the GPU machine against the installed PyTorch's headers and libraries
// (not by CMake: the development machine has no PyTorch). Nothing here is part of libumswap.so.
//
// The tracker runs inside the allocator, under its per-device lock, on whichever thread
// allocates or frees (the GIL possibly held): it only writes one record and counts, never
// allocates, throws, takes a lock or calls CUDA.
#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

// One event, as the probe reads it (numpy dtype in allocator_trace_probe.py: keep in step).
struct Event {
  uint64_t ns;      // steady clock
  uint64_t addr;    // block or segment address
  uint64_t size;    // bytes (ALLOC: as requested)
  uint64_t stream;  // cudaStream_t as an integer
  uint64_t pool0;   // MempoolId_t: {0, 0} for the default pool
  uint64_t pool1;
  int32_t action;  // kAlloc ... kOther below
  int32_t device;
  int32_t thread;  // 1, 2, ...: the order in which threads first reported an event
  int32_t unused;
};
static_assert(sizeof(Event) == 64);

enum : int32_t {
  kAlloc = 0,
  kFreeRequested = 1,
  kFreeCompleted = 2,
  kSegmentAlloc = 3,
  kSegmentFree = 4,
  kSegmentMap = 5,
  kSegmentUnmap = 6,
  kOther = 9,
};

Event* g_events = nullptr;
uint64_t g_capacity = 0;
std::atomic<uint64_t> g_count{0};      // events seen (may exceed the capacity: kept is the min)
std::atomic<uint64_t> g_inside_ns{0};  // time spent inside the tracker
std::atomic<int32_t> g_threads{0};

int32_t code(alloc::TraceEntry::Action a) {
  switch (a) {
    case alloc::TraceEntry::ALLOC:
      return kAlloc;
    case alloc::TraceEntry::FREE_REQUESTED:
      return kFreeRequested;
    case alloc::TraceEntry::FREE_COMPLETED:
      return kFreeCompleted;
    case alloc::TraceEntry::SEGMENT_ALLOC:
      return kSegmentAlloc;
    case alloc::TraceEntry::SEGMENT_FREE:
      return kSegmentFree;
    case alloc::TraceEntry::SEGMENT_MAP:
      return kSegmentMap;
    case alloc::TraceEntry::SEGMENT_UNMAP:
      return kSegmentUnmap;
    default:
      return kOther;
  }
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void track(const alloc::TraceEntry& e) noexcept {
  const uint64_t start = now_ns();
  thread_local int32_t thread = 0;
  if (thread == 0) thread = g_threads.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (i < g_capacity) {
    Event& out = g_events[i];
    out.ns = start;
    out.addr = static_cast<uint64_t>(e.addr_);
    out.size = static_cast<uint64_t>(e.size_);
    out.stream = reinterpret_cast<uint64_t>(e.stream_);
    out.pool0 = static_cast<uint64_t>(e.mempool_.first);
    out.pool1 = static_cast<uint64_t>(e.mempool_.second);
    out.action = code(e.action_);
    out.device = static_cast<int32_t>(e.device_);
    out.thread = thread;
    out.unused = 0;
  }
  g_inside_ns.fetch_add(now_ns() - start, std::memory_order_relaxed);
}

}  // namespace

extern "C" {

// Attaches the tracker, writing into `buffer` (`capacity` events of 64 bytes). Call after CUDA's
// lazy initialization (the allocator drops a tracker attached before it knows its devices) and
// before the tensors whose events are wanted. 0: attached; 1: the allocator refused (message on
// stderr); 2: no allocator.
int umswap_probe_attach(void* buffer, uint64_t capacity) {
  g_events = static_cast<Event*>(buffer);
  g_capacity = capacity;
  alloc::CUDAAllocator* a = alloc::get();
  if (!a) return 2;
  try {
    a->attachAllocatorTraceTracker(&track);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe: attachAllocatorTraceTracker: %s\n", e.what());
    return 1;
  }
  return 0;
}

uint64_t umswap_probe_count() {
  return g_count.load();
}

uint64_t umswap_probe_inside_ns() {
  return g_inside_ns.load();
}

int32_t umswap_probe_threads() {
  return g_threads.load();
}

// The facts the route depends on, as one line: the allocator's name and TraceEntry's layout.
int umswap_probe_layout(char* out, uint64_t n) {
  alloc::CUDAAllocator* a = alloc::get();
  const std::string name = a ? a->name() : std::string("none");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
  return std::snprintf(out, n,
                       "allocator %s; sizeof(TraceEntry) %zu; offsets: action_ %zu, device_ %zu, "
                       "addr_ %zu, stream_ %zu, size_ %zu, mempool_ %zu",
                       name.c_str(), sizeof(alloc::TraceEntry),
                       offsetof(alloc::TraceEntry, action_), offsetof(alloc::TraceEntry, device_),
                       offsetof(alloc::TraceEntry, addr_), offsetof(alloc::TraceEntry, stream_),
                       offsetof(alloc::TraceEntry, size_), offsetof(alloc::TraceEntry, mempool_));
#pragma GCC diagnostic pop
}

}  // extern "C"
