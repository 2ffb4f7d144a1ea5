// Stream tags: a number per CUDA stream for stream-ordered reuse of freed memory (an allocation
// on a stream may take what a free on the same stream gave back, with no wait: the stream runs
// the two in order). The legacy default stream (0 or CU_STREAM_LEGACY) is 0; a per-thread default
// stream (CU_STREAM_PER_THREAD, one handle naming a different stream on every thread) is
// kPerThreadTag with the calling thread's number; any other stream is its handle. A stream
// destroyed gets kEndedTag with a number of its own, which no handle matches (its handle may come
// back for a new stream). No device address or handle has these two bits.
// Thread safety: stream_tag() may be called from any thread.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace umswap {

inline constexpr uint64_t kPerThreadTag = uint64_t{1} << 63;
inline constexpr uint64_t kEndedTag = uint64_t{1} << 62;
inline constexpr uint64_t kNotAHandle = kPerThreadTag | kEndedTag;

// A number for the calling thread, from 1, the same for its whole life.
inline uint64_t this_thread_number() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

inline uint64_t stream_tag(CUstream stream) {
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  if (handle == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD)) {
    return kPerThreadTag | this_thread_number();
  }
  if (handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY)) return 0;  // the same as 0
  return handle;
}

// Whether the stream tagged `tag` can be destroyed: not a default stream (legacy or per-thread),
// nor one that ended already.
inline bool stream_can_end(uint64_t tag) {
  return tag != 0 && (tag & kNotAHandle) == 0;
}

// A tag for a stream that ended: never equal to a live stream's, nor to another ended one's.
inline uint64_t ended_stream_tag() {
  static std::atomic<uint64_t> next{1};
  return kEndedTag | next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace umswap
