// The advisor's managed-memory calls (prefetches, discards) that may still wait on the GPU, for
// UMSWAP_MANAGED_OPS_CAP. The CUDA driver lets about 57 such calls of a context wait behind GPU
// work and blocks the next one until one has run (tests/gpu/deferred_prefetch_probe.cu; one per
// call, whatever its size or number of ranges; copies and stream memory operations do not
// count). Blocked there, the advisor thread writes no more of the words launches wait for.
//
// Calls are counted per stream as they are issued; mark() puts an event after each stream's
// calls since its last mark; retire() drops the marks whose events are done. Calls not yet
// marked, and marks not yet seen done, are waiting. Pure: the events come from the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace umswap::advisor {

class PendingOps {
 public:
  using Stream = void*;  // a CUstream
  using Event = void*;

  explicit PendingOps(uint32_t cap) : cap_(cap) {}

  uint32_t cap() const { return cap_; }
  uint32_t waiting() const;
  uint32_t most_waiting() const { return most_; }
  // True when another call would pass the cap (never with cap 0): the caller marks, retires
  // and waits until it is false.
  bool full() const { return cap_ != 0 && waiting() >= cap_; }

  // One call issued on `s`.
  void issued(Stream s);
  // An event after the calls on each stream since its last mark: record(stream) records one
  // there; null (none could be) counts those calls as run.
  void mark(const std::function<Event(Stream)>& record);
  // Drops the marks whose event done(event) says has run, handing each event to release().
  void retire(const std::function<bool(Event)>& done, const std::function<void(Event)>& release);

 private:
  struct Mark {
    Event event;
    uint32_t calls;
  };
  uint32_t cap_;
  std::vector<Mark> marks_;                                      // a few: one per stream per mark
  std::vector<std::pair<Stream, uint32_t>> unmarked_by_stream_;  // a few: the advisor's streams
  uint32_t most_ = 0;
};

}  // namespace umswap::advisor
