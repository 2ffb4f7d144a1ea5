// The launch log: every step the tracer logged (a kernel launch, memcpy or memset), with the
// pointer hits that say which buffers it touches, readable while launches keep appending.
//
// Layout: two append-only arrays, steps and hits, each a fixed table of chunk pointers to chunks
// of 2^chunk_log2 elements (64 Ki by default: 2 MiB of steps or of hits per chunk). A chunk is
// allocated when the first element that falls in it is appended and is never moved or freed
// while the log lives, so appending allocates once per chunk (amortized) and never copies.
// A step's hits lie inside one chunk (a step whose hits would cross a chunk boundary starts its
// hits at the next chunk), so they can be handed out as one span.
//
// Publication: append() writes the step's hits and the step itself, then stores the new step
// count with release ordering. A reader loads the count with acquire ordering and reads only
// steps below it, and their hits: everything it reads was written before the release store it
// synchronized with, and is never written again (the writer only writes past the published
// count). So readers need no lock and never see a partly written step, and the order of steps is
// the order of append().
//
// Bounds: at most max_steps steps and max_hits hits (defaults: 16 Mi steps and 64 Mi hits, at most
// 512 MiB + 2 GiB); an append past either, or one that cannot allocate its chunk, changes nothing
// and returns false (the tracer counts it as dropped). The whole run is kept: the advisor only
// reads recent steps, but the trace written at exit holds them all.
//
// Thread safety: append() is for one writer at a time (callers serialize it); size(), step(),
// hits(), copy_keys() and copy_steps() may run on any thread at any time, concurrently with
// append().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <vector>

#include "umswap/core/trace.h"
#include "umswap/tracer/param_scanner.h"

namespace umswap::tracer {

// One logged launch or copy.
struct LoggedStep {
  uint64_t stream = 0;
  uint64_t first_hit = 0;    // index of its first hit in the log's hits (set by append())
  uint32_t key = 0;          // interned name (kernel name, "memcpy HtoD", ...)
  uint32_t correlation = 0;  // CUPTI correlation id: matches the activity record's times
  uint32_t hit_count = 0;    // set by append()
  trace::StepKind kind = trace::StepKind::kernel;
};

// Steps [first, first + count) of the log, copied for the advisor thread.
struct StepLog {
  std::vector<uint32_t> keys;
  std::vector<uint64_t> streams;
  std::vector<PointerHit> hits;     // all steps' hits, in step order
  std::vector<uint64_t> first_hit;  // step i's hits: [first_hit[i], first_hit[i + 1])
};

namespace detail {

// Append-only storage in chunks that never move. Not synchronized itself: LaunchLog publishes.
template <class T>
class ChunkedArray {
 public:
  ChunkedArray(uint32_t chunk_log2, uint64_t capacity)
      : chunk_log2_(chunk_log2),
        chunk_mask_((uint64_t{1} << chunk_log2) - 1),
        chunk_count_((capacity + chunk_mask_) >> chunk_log2),
        chunks_(std::make_unique<std::atomic<T*>[]>(chunk_count_)) {}
  ~ChunkedArray() {
    for (uint64_t c = 0; c < chunk_count_; ++c) ::operator delete(chunks_[c].load());
  }
  ChunkedArray(const ChunkedArray&) = delete;
  ChunkedArray& operator=(const ChunkedArray&) = delete;

  uint64_t chunk_size() const { return chunk_mask_ + 1; }
  uint64_t capacity() const { return chunk_count_ << chunk_log2_; }
  // Writer: makes sure the chunk holding element i exists. False when i is past the capacity or
  // the chunk cannot be allocated.
  bool ensure(uint64_t i) {
    const uint64_t c = i >> chunk_log2_;
    if (c >= chunk_count_) return false;
    if (chunks_[c].load(std::memory_order_relaxed)) return true;
    void* chunk = ::operator new(sizeof(T) << chunk_log2_, std::nothrow);
    if (!chunk) return false;
    chunks_[c].store(static_cast<T*>(chunk), std::memory_order_release);
    return true;
  }
  // Element i of a chunk that exists (writer: to construct it; reader: below the published count).
  T* at(uint64_t i) const {
    return chunks_[i >> chunk_log2_].load(std::memory_order_acquire) + (i & chunk_mask_);
  }

 private:
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  const uint32_t chunk_log2_;
  const uint64_t chunk_mask_;
  const uint64_t chunk_count_;
  std::unique_ptr<std::atomic<T*>[]> chunks_;
};

}  // namespace detail

class LaunchLog {
 public:
  struct Limits {
    uint32_t chunk_log2 = 16;  // elements per chunk: 2^chunk_log2 (4..24)
    uint64_t max_steps = uint64_t{1} << 24;
    uint64_t max_hits = uint64_t{1} << 26;
  };

  explicit LaunchLog(const Limits& limits);
  LaunchLog() : LaunchLog(Limits{}) {}
  LaunchLog(const LaunchLog&) = delete;
  LaunchLog& operator=(const LaunchLog&) = delete;

  // Writer: appends `step` (its first_hit and hit_count are set here) with `hits`, and publishes
  // it. False (nothing appended) when the log is full, the hits do not fit in one chunk, or a
  // chunk cannot be allocated.
  bool append(const LoggedStep& step, std::span<const PointerHit> hits);

  // Readers.
  // Steps published so far.
  uint64_t size() const { return published_.load(std::memory_order_acquire); }
  // Step i < size().
  const LoggedStep& step(uint64_t i) const { return *steps_.at(i); }
  // The hits of a step read from this log.
  std::span<const PointerHit> hits(const LoggedStep& step) const {
    return step.hit_count == 0
               ? std::span<const PointerHit>()
               : std::span<const PointerHit>(hits_.at(step.first_hit), step.hit_count);
  }
  // Keys of steps [first, ...) published so far, at most `max` of them.
  std::vector<uint32_t> copy_keys(uint64_t first, uint64_t max = UINT64_MAX) const;
  // Steps [first, first + count) into `out` (replaced); false (out untouched) if they are not all
  // published.
  bool copy_steps(uint64_t first, uint64_t count, StepLog* out) const;

 private:
  detail::ChunkedArray<LoggedStep> steps_;
  detail::ChunkedArray<PointerHit> hits_;
  const uint64_t max_steps_;
  const uint64_t max_hits_;
  uint64_t hit_end_ = 0;  // writer only: where the next step's hits go
  std::atomic<uint64_t> published_{0};
};

}  // namespace umswap::tracer
