// UMSWAP_EVICT_COPY's own copies checked after the run against the program's steps, on the GPU's
// clock (CUPTI's times): a diagnostic for launches that ran while a range they reach was being
// copied out, was discarded, or was being copied back. Pure C++ (no CUDA).
//
// Per 2 MiB page (the unit umswap copies and discards), each copy out [start, end] is followed,
// up to the start of the next copy back of that page, by the page being discarded (the discard
// runs right behind the copy out on the same stream), then by the copy back [start, end]. A copy
// out with no later copy back of the page is left unchecked (its copy back's record may be
// missing). A step access (a byte range and the step's GPU start and end) that overlaps such a
// span in time clashes:
//   during_copy_out:  it ran while the page was being copied out (harmless for a read; a write
//                     could be lost);
//   discarded:        the page held nothing on the GPU (a read finds garbage or faults; a write is
//                     lost to the copy back);
//   during_copy_back: the page was populated but its bytes not yet all back.
// Extents are the tracer's (a whole slab block): a step that reads only part of its block can
// be reported for a page it does not touch.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace umswap::tracer {

struct OwnCopySpan {
  uint64_t address = 0, length = 0;  // managed memory
  bool to_gpu = false;               // a copy back (else a copy out)
  uint64_t start_ns = 0, end_ns = 0;
};

struct StepAccessSpan {
  uint64_t step = 0;  // launch index
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t lo = 0, hi = 0;  // bytes [lo, hi)
};

enum class CopyClashKind : uint8_t { during_copy_out, discarded, during_copy_back };
const char* to_string(CopyClashKind kind);

struct CopyClash {
  uint64_t step = 0;
  uint64_t page = 0;  // the 2 MiB page's address
  CopyClashKind kind = CopyClashKind::discarded;
  uint64_t since_ns = 0;  // how long after the span's start the step started (0: before)
};

struct CopyClashReport {
  uint64_t copies = 0;           // copies given (with times)
  uint64_t pages_checked = 0;    // page spans from a copy out to a copy back
  uint64_t clashes = 0;          // (step, page, kind) found, all kinds
  uint64_t harmful = 0;          // of them, discarded or during_copy_back
  std::vector<CopyClash> first;  // the first `keep` harmful ones by step, then the others
};

CopyClashReport find_copy_clashes(std::span<const OwnCopySpan> copies,
                                  std::span<const StepAccessSpan> accesses, size_t keep = 16);

// A GPU page fault on a page while it was discarded (after its copy out ended and before its copy
// back began): an access that neither the plan nor the launch path's guard saw (a pointer the
// parameter scan cannot see, such as one stored in a pointer table in device memory). The data
// it read was not the program's, or what it wrote is lost to the copy back: such a fault means
// the program's results may have changed. Only a copy out followed directly by a copy back of
// the same page forms a window (a copy out whose range was freed is not copied back).
struct FaultAt {
  uint64_t time_ns = 0;  // when the driver began to serve it (CUPTI)
  uint64_t address = 0;
  uint8_t access = 0;            // CUPTI's access type: 1 read, 2 write, 3 atomic, 4 prefetch
  uint32_t buffer = UINT32_MAX;  // the caller's buffer index, passed through
};
struct UnforeseenAccess {
  uint64_t address = 0, page = 0, time_ns = 0;
  uint8_t access = 0;
  uint32_t buffer = UINT32_MAX;  // FaultAt::buffer
  uint64_t ns_into_window = 0;   // how long after the copy out ended
};
struct UnforeseenReport {
  uint64_t windows = 0;                 // page windows from a copy out to its copy back
  uint64_t faults = 0;                  // faults inside a window
  std::vector<UnforeseenAccess> first;  // the first `keep` of them, by time
  // Copies out of a page that began before the copy back just before them ended: they read pages
  // not filled yet and saved them to the host (a race fixed on 2026-11-28,
  // HostCopies::copy_back_pending()); the first `keep` pages.
  uint64_t outs_before_back = 0;
  std::vector<uint64_t> outs_before_back_pages;
};
UnforeseenReport find_unforeseen_faults(std::span<const OwnCopySpan> copies,
                                        std::span<const FaultAt> faults, size_t keep = 16);

// How long umswap's copies kept the link busy within a window of the GPU's clock (an
// iteration): the union of the copies out's spans, of the copies back's, and of their overlap,
// each clipped to the window. Out and in both high with little overlap: the two directions took
// turns; both low: the copies waited (for last uses, room, populates) rather than moved.
struct CopyBusy {
  uint64_t out_ns = 0, in_ns = 0, both_ns = 0;
};
// `windows`: [start, end) pairs in ns. One CopyBusy per window, in order.
std::vector<CopyBusy> copy_busy(std::span<const OwnCopySpan> copies,
                                std::span<const std::pair<uint64_t, uint64_t>> windows);

// The longest stretches of [lo, hi) in which no copy of umswap's ran either way, longest first
// (`keep` of them), each with how long the program's steps kept the GPU busy in it
// (`steps`: [start, end) spans on the same clock, any order). A gap the steps fill is compute
// the copies did not overlap; an empty one is the GPU waiting.
struct CopyIdleGap {
  uint64_t start_ns = 0, length_ns = 0;
  uint64_t step_busy_ns = 0;  // the union of the steps' spans within the gap
};
std::vector<CopyIdleGap> copy_idle_gaps(std::span<const OwnCopySpan> copies,
                                        std::span<const std::pair<uint64_t, uint64_t>> steps,
                                        uint64_t lo, uint64_t hi, size_t keep);

}  // namespace umswap::tracer
