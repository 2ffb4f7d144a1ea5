// Parameter scanning: which registered buffers a kernel launch points into.
//
// A launch passes its parameters either as kernelParams (one pointer per parameter, to that
// parameter's value) or as one packed buffer (the `extra` CU_LAUNCH_PARAM_BUFFER_POINTER form).
// cuFuncGetParamInfo gives each parameter's offset and size; the tracer caches that layout, with
// the function's step key, per function (ParamLayoutCache) and hands it to the scan functions.
//
// The scan reads every parameter of 8 bytes or more as 8-byte values at every 4-byte-aligned
// offset inside it (device pointers packed inside struct parameters, also at offsets that are not
// multiples of 8 in packed structs), with memcpy (no alignment assumed), and looks each value up
// in a registry snapshot. A value inside [base, base + size) of a registered buffer is a hit.
// Hits are deduplicated per launch (one per buffer and pointer value) and come out sorted by
// (buffer base, pointer).
//
// Known imprecision: an integer that happens to equal an address inside a buffer is a hit (false
// positive); a pointer the kernel computes or loads from memory (pointer arrays, linked
// structures) is not seen. Parameters smaller than 8 bytes are not scanned.
//
// Cost: one snapshot lookup (a range check, then a binary search over the buffers) per 4 bytes
// of parameters 8 bytes or larger, and a sort of the hits. The output vector is cleared and
// reused: no allocation per launch once it has grown to the largest hit count.
//
// Thread safety: the scan functions are pure and reentrant. ParamLayoutCache: find() is
// lock-free and may run concurrently with everything; insert() serializes on a mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "umswap/allocator/registry.h"

namespace umswap::tracer {

// One kernel parameter as cuFuncGetParamInfo reports it.
struct ParamSlot {
  uint32_t offset = 0;  // in the packed parameter buffer
  uint32_t size = 0;    // bytes

  friend bool operator==(const ParamSlot&, const ParamSlot&) = default;
};

// A function's parameters, and the step key its launches get (the tracer's interned name).
struct FunctionLayout {
  std::vector<ParamSlot> params;
  uint32_t key = 0;

  friend bool operator==(const FunctionLayout&, const FunctionLayout&) = default;
};

// A parameter value that points into a registered buffer.
struct PointerHit {
  BufferId buffer = 0;
  uint64_t base = 0;     // the buffer's base address
  uint64_t size = 0;     // the buffer's size in bytes
  uint64_t pointer = 0;  // the value found: base <= pointer < base + size
  // Inside a slab of sub-allocated memory: the end of the program's live block around `pointer`
  // (Registry::Snapshot::allocation_end). 0 for any other buffer (its end is base + size).
  uint64_t limit = 0;

  // The end of what the pointer may reach: its block's (limit) or its buffer's.
  uint64_t reach_end() const { return limit ? limit : base + size; }

  friend bool operator==(const PointerHit&, const PointerHit&) = default;
};

// kernelParams form: params[k] points to parameter k's value (layout[k].size bytes). A null
// `params` or params[k] is skipped. Replaces the contents of `hits`.
void scan_kernel_params(std::span<const ParamSlot> layout, const void* const* params,
                        const Registry::Snapshot& snapshot, std::vector<PointerHit>& hits);

// Packed form: parameter k occupies buffer[layout[k].offset, + layout[k].size); the part of a
// parameter past the end of `buffer` is not read. Replaces the contents of `hits`.
void scan_param_buffer(std::span<const ParamSlot> layout, std::span<const std::byte> buffer,
                       const Registry::Snapshot& snapshot, std::vector<PointerHit>& hits);

// Function layouts per function (the CUfunction handle's value), bounded in size: the launch
// path's per-function cache, read without a lock. A stored layout is never freed or changed while
// the cache lives, so a pointer find() returned stays valid; insert() for a function already
// present (a module unloaded and another loaded at the same handle) stores a new layout that
// later finds return.
class ParamLayoutCache {
 public:
  // Holds up to `capacity` functions (at least 16); the table has twice as many slots.
  explicit ParamLayoutCache(size_t capacity = 4096);
  ~ParamLayoutCache();
  ParamLayoutCache(const ParamLayoutCache&) = delete;
  ParamLayoutCache& operator=(const ParamLayoutCache&) = delete;

  // The layout stored for `function`, or nullptr. Lock-free.
  const FunctionLayout* find(uint64_t function) const;
  // Stores a copy of `params` and `key` for `function` and returns it; nullptr when the cache is
  // full (capacity functions, or capacity replaced layouts) or function is 0: the caller then
  // uses its own copy for this launch.
  const FunctionLayout* insert(uint64_t function, std::span<const ParamSlot> params, uint32_t key);
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  size_t capacity() const { return capacity_; }

 private:
  struct Slot {
    std::atomic<uint64_t> function{0};  // 0 = empty; never changes once set
    std::atomic<const FunctionLayout*> layout{nullptr};
  };

  const size_t capacity_;
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<size_t> size_{0};
  std::mutex write_mutex_;
  std::vector<std::unique_ptr<const FunctionLayout>> owned_;  // guarded by write_mutex_
  size_t replaced_ = 0;                                       // guarded by write_mutex_
};

}  // namespace umswap::tracer
