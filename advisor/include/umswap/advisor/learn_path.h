// UMSWAP_LEARN_EVICT (the default), on the launch path while no plan is in force: the blocks the
// launches touch, least recently used out to the host past the budget, each launch's own blocks
// in before it runs, all on the launch's stream (learning_evictor.h does the counting). So the
// learning iterations run at the link's pace within the budget instead of faulting the whole
// footprint in.
//
// Threads: step() on the launching threads (any of them, serialized by mutex_); mark_stale() on
// the launch path; take_moved() on the advisor thread; sum() and stats_json() after join (sum()
// takes mutex_). The evictor is made at the first launch, on the launching thread, whose context
// gives the device (the program's first launches may come before the advisor thread is set up).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "umswap/advisor/advisor.h"
#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/learning_evictor.h"
#include "umswap/allocator/registry.h"
#include "umswap/core/log.h"
#include "umswap/tracer/tracer.h"

namespace umswap::advisor {

class LearnPath {
 public:
  LearnPath(const AdvisorConfig& config, const AdvisorDriver& d) : config_(config), d_(d) {}
  LearnPath(const LearnPath&) = delete;
  LearnPath& operator=(const LearnPath&) = delete;

  // Launch `index` on stream `s`, reaching `hits` (null: not scanned): the evictions that make
  // room for its blocks not counted on the GPU, then those blocks in, on `s`. Buffers are
  // checked in `registry` (freed since counted: skipped).
  void step(uint64_t index, CUstream s, const std::vector<tracer::PointerHit>* hits,
            Registry& registry);
  // A plan was in force: its actions moved blocks the evictor does not know of, so it starts
  // again from nothing at the next step().
  void mark_stale() {
    if (!stale_.load(std::memory_order_relaxed)) stale_.store(true, std::memory_order_relaxed);
  }
  // Whether step() issued a call since the last time this was asked (a plan learned then was
  // learned while evicting).
  bool take_moved() { return moved_.exchange(false, std::memory_order_relaxed); }
  // Bytes prefetched and evicted for launches in [first, last).
  std::pair<uint64_t, uint64_t> sum(uint64_t first, uint64_t last) const;
  // The stats' advisor.learn_evict.
  nlohmann::json stats_json() const;

 private:
  const AdvisorConfig& config_;
  const AdvisorDriver& d_;
  mutable std::mutex mutex_;  // everything below but the atomics
  std::unique_ptr<LearningEvictor> evictor_;
  uint64_t budget_ = 0;  // the whole budget; the evictor's is managed_budget() of it
  CUdevice device_ = 0;
  bool off_ = false;  // no device for the evictor: nothing is done while learning
  std::atomic<bool> stale_{false};
  std::atomic<bool> moved_{false};
  std::vector<LearningEvictor::Range> fresh_;
  std::vector<Transfer> prefetched_, evicted_;  // one entry per call that went through
  uint64_t failed_calls_ = 0, skipped_ = 0, launches_evicting_ = 0;
  double call_s_ = 0;
  OnceFlag warned_failure_;
};

}  // namespace umswap::advisor
