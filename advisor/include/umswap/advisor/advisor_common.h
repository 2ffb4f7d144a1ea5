// What the advisor's parts share (advisor.cpp, copy_evictor.cpp): the counter's values, the 2 MiB
// page, the iteration boundaries, the transfer log's entry and the advisor thread's time
// accounting. Internal to the advisor; nothing here talks to CUDA.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "umswap/advisor/copy_kernel.h"

namespace umswap::advisor {

// The prefetch-wait counter's "nobody waits" value. cuStreamWaitValue64's GEQ is a cyclic
// comparison, (int64_t)(*addr - value) >= 0, so UINT64_MAX would release nothing (it hung
// cudnn_vgg16); 2^62 is ahead of every launch index and within the comparison's half range.
inline constexpr uint64_t kReleased = uint64_t{1} << 62;

inline constexpr uint64_t kPage = uint64_t{2} << 20;  // the slab allocator's discard unit
static_assert(kPage == kPageBytes, "whole_pages() gives the pages the hash kernel hashes");
// The whole 2 MiB pages inside [address, address + length), as [lo, hi) (empty: hi <= lo).
constexpr std::pair<uint64_t, uint64_t> whole_pages(uint64_t address, uint64_t length) {
  return {(address + kPage - 1) / kPage * kPage, (address + length) / kPage * kPage};
}

// The first launch at or after `n` that begins an iteration (base + k period).
inline uint64_t boundary_at_or_after(uint64_t base, uint64_t period, uint64_t n) {
  return n <= base ? base : base + (n - base + period - 1) / period * period;
}

// highest_restore_wait: the restored value in the low 48 bits, its word's epoch above.
inline constexpr uint64_t kRestoreWaitMask = (uint64_t{1} << 48) - 1;

inline void sleep_us(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One prefetch, eviction or copy that went through: the launch it was issued at, its bytes.
struct Transfer {
  uint64_t launch;
  uint64_t bytes;
};

// The bytes of the transfers of `log` issued at launches in [first, last).
inline uint64_t sum_in(const std::vector<Transfer>& log, uint64_t first, uint64_t last) {
  uint64_t bytes = 0;
  for (const Transfer& t : log) {
    if (t.launch >= first && t.launch < last) bytes += t.bytes;
  }
  return bytes;
}

// The advisor thread's host time (seconds; advisor thread only, read after join: the stats).
struct CallTimes {
  // Inside cuMemPrefetchAsync (prefetch_call_s, evict_call_s; a copy out counts as an eviction),
  // and the longest such call.
  double prefetch_call_s = 0, evict_call_s = 0, longest_call_s = 0;
  // While a plan is in force: in all (planned_s), applying launches' actions (apply_s: issuing
  // prefetches, evictions and copies) and tending copies (tend_copies_s). apply_s near planned_s:
  // the thread, not the GPU, paces the plan.
  double planned_s = 0, apply_s = 0, tend_copies_s = 0;
  // Of apply_s: waiting for a launch's event to be recorded and placing the wait (event_wait_s),
  // scanning the launches since an eviction's last use, the copies' lock included (scan_s),
  // taking host space for a copy out (take_s: allocating pinned blocks until they are cached),
  // issuing discards and populates (managed_call_s) and copies (copy_call_s).
  double event_wait_s = 0, scan_s = 0, take_s = 0, managed_call_s = 0, copy_call_s = 0;
};

// Adds the time from its construction to its end to `total`.
class Timed {
 public:
  explicit Timed(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace umswap::advisor
