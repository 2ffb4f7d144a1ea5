// Counted residency: the GPU-resident bytes of managed memory, replayed in time order from what
// the tracer saw, independently of the advisor's plan.
//
// What arrives on the GPU: transfers to it (CUPTI), the 2 MiB chunk around a GPU fault, umswap's
// populating prefetches, and every byte range a launched step's parameters point at (its access
// extents), from the step's GPU start: a kernel runs with what it touches on the GPU, whether it
// got there by a prefetch, a fault, or first touch (which CUPTI reports as one fault record per
// group of faults, so counting faults alone undercounts by an order of magnitude). What leaves:
// transfers to the host (CUPTI) and umswap's discards.
//
// The count can be too high where an extent is longer than what the kernel reads (a view at the
// start of its block), and too low where a kernel reaches memory through a pointer its
// parameters do not hold.
//
// At each window's peak it also says how much of what was resident lay outside every live block
// (freed memory not yet discarded or evicted), given the blocks' allocations and frees.
// Pure; reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

namespace umswap::tracer {

// Disjoint byte ranges and their total.
class ResidentSet {
 public:
  void add(uint64_t lo, uint64_t hi);
  void remove(uint64_t lo, uint64_t hi);
  uint64_t bytes() const { return bytes_; }
  size_t ranges() const { return ranges_.size(); }
  // Bytes of this set that lie in no range of `other`.
  uint64_t bytes_outside(const ResidentSet& other) const;
  // Bytes of this set within [lo, hi).
  uint64_t bytes_within(uint64_t lo, uint64_t hi) const;
  // The ranges within [lo, hi), clipped to it, at most `most` of them.
  std::vector<std::pair<uint64_t, uint64_t>> ranges_within(uint64_t lo, uint64_t hi,
                                                           size_t most) const;

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end
  uint64_t bytes_ = 0;
};

struct ResidencyEvent {
  uint64_t when = 0;  // ns
  uint64_t lo = 0, hi = 0;
  bool on_gpu = true;  // arrives (true) or leaves (false); a block: allocated or freed
  bool block = false;  // a live block's allocation or free, not a residency change
};

struct ResidencyPeaks {
  uint64_t overall = 0;
  std::vector<uint64_t> by_window;       // one per window
  std::vector<uint64_t> free_by_window;  // of by_window[w], the bytes in no live block
  std::vector<uint64_t> when_by_window;  // the time of the event that reached it (0: none did)
};

// Applies `events` in order of `when` (stable: equal times keep their order) and returns the
// largest total overall and within each window [start, end] (ns, sorted, disjoint). A window's
// peak includes what was resident when it began and, for a window no event falls in, what was
// resident through it. Its free bytes are taken at the first moment it reached its peak.
// `at_peak`, when given, sees each window's resident and live sets at that moment.
using PeakVisitor =
    std::function<void(size_t window, const ResidentSet& resident, const ResidentSet& live)>;
ResidencyPeaks count_residency(std::vector<ResidencyEvent> events,
                               std::span<const std::pair<uint64_t, uint64_t>> windows,
                               const PeakVisitor& at_peak = {});

// A launched step's GPU times; 0 = not known.
struct StepTime {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// When one of umswap's own records, noted while `before` steps had been launched, takes effect on
// the GPU. The allocator's discards and populates go on the program's stream between the step
// launched before them and the next one. A discard counts from the end of the step before: it
// runs as soon as that step is done, and a prefetch that waited for the next launch to be reached
// comes after it (counted from the next step's start, a freed 6 GiB block stayed resident beside
// such a prefetch). A populate counts from the start of the step after. Where that time is not
// known, the other one; where neither is, `noted` (the host clock when it was noted).
uint64_t own_record_time(std::span<const StepTime> steps, uint64_t before, bool discard,
                         uint64_t noted);

// The `before` that own_record_time() takes for a record noted while `logged` steps were in the
// log (UINT64_MAX: the log is not recording; the record then falls back to the host clock).
// Between launches (the allocator's discards and populates at a free or an allocation), the
// steps logged so far. From the launch path, which runs once its step is logged (the advisor's
// populates of dropped pages at their next user), that step: counted from the next step's start
// instead, a block the step writes and frees right after was counted resident again once its
// discard had run, until the next discard of its pages (VGG-16 at 50%: 13.17 GB counted at the
// end of the backward pass against a 10.50 GB plan, H200, 2026-11-26).
enum class NotedAt : uint8_t { between_launches, launching_step };
uint64_t noted_before(NotedAt at, uint64_t logged);

}  // namespace umswap::tracer
