// The sweeps that follow a plan's coming into force: at its first launch and at its next two
// iteration boundaries, the free slab pages its plan drops are discarded at once
// (SlabAllocator::sweep_free_pages), which the frees before the plan knew nothing of.
//
// A sweep's discards must not run on the GPU at the same time as the advisor's own migrations of
// the same pages: the driver leaves a discard at the same time as a prefetch of its range
// undefined (cuMemDiscardBatchAsync), and the first sweep comes right after reset_to_start() has
// migrated whole buffers, free space included, on the advisor's stream. So each sweep first
// records a fence on the advisor's stream and runs only once the fence has completed (asked at
// later passes, never waited for: the advisor thread is not held, and the advisor's stream waits
// only for launches already submitted). A fence that cannot be recorded or fails skips that sweep.
//
// Thread: the advisor thread only (set_up, start, tend); the stats read the counts after it
// joined.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "umswap/advisor/advisor.h"

namespace umswap::advisor {

class Sweeps {
 public:
  static constexpr int kSweeps = 3;
  // Creates the fence; false when the driver cannot (the advisor does not start).
  bool set_up(const AdvisorDriver& d);
  // A plan comes into force at launch `applied_from`: three sweeps from there.
  void start(uint64_t applied_from);
  // At launch n of a plan with `period` launches an iteration (advisor thread, after the
  // launches up to n have their actions issued on `advisor_stream`): records the fence of the
  // sweep that is due, or runs `sweep` (returns the bytes it discarded) once the fence has
  // completed.
  void tend(const AdvisorDriver& d, CUstream advisor_stream, uint64_t n, uint64_t period,
            const std::function<uint64_t()>& sweep);
  uint64_t swept_bytes() const { return swept_; }
  // Each sweep: (the launch it ran at, the bytes it discarded, 0 when skipped); the stats'
  // advisor.sweeps.
  const std::vector<std::pair<uint64_t, uint64_t>>& done() const { return done_; }

 private:
  void finish(uint64_t n, uint64_t bytes, uint64_t period);
  CUevent fence_ = nullptr;
  bool fenced_ = false;  // the due sweep's fence is recorded
  int left_ = 0;
  uint64_t at_ = 0;  // the next sweep is due after this launch
  uint64_t swept_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> done_;
};

}  // namespace umswap::advisor
