#include "umswap/advisor/learn_path.h"

namespace umswap::advisor {

// UMSWAP_LEARN_EVICT, on the launch path while no plan is in force. The launch's pointers touch
// their extents (a slab block's pointer to its block's end, another pointer to its buffer's end).
// Before it runs, on its own stream: the least recently used blocks go to the host until what is
// counted on the GPU, its own blocks included, fits in the budget, then its blocks not counted
// there are prefetched. Stream order makes each eviction wait for the earlier launches on that
// stream (on another stream a launch that still uses a block faults it back: slower, never
// wrong), and the launch wait for its room and its data: the GPU runs at the link's pace rather
// than fault in the whole footprint. Memory a launch reaches without a pointer in its parameters
// is not counted.
void LearnPath::step(uint64_t index, CUstream s, const std::vector<tracer::PointerHit>* hits,
                     Registry& registry) {
  std::lock_guard lock(mutex_);
  if (off_) return;
  if (!evictor_) {
    size_t total = 0;
    if (d_.ctx_get_device(&device_) != CUDA_SUCCESS ||
        d_.device_total_mem(&total, device_) != CUDA_SUCCESS) {
      off_ = true;
      log_warning(
          "UMSWAP_LEARN_EVICT: no device for the launch; nothing is evicted while learning");
      return;
    }
    budget_ = config_.budget.is_zero() ? total : config_.budget.resolve(total);
    evictor_ = std::make_unique<LearningEvictor>(budget_);
  }
  if (stale_.exchange(false, std::memory_order_acq_rel)) evictor_->clear();
  fresh_.clear();
  if (hits) {
    for (const tracer::PointerHit& hit : *hits) {
      const uint64_t end = hit.reach_end();
      evictor_->touch(index, hit.pointer, end, hit.base, hit.base + hit.size, &fresh_);
    }
  }
  if (fresh_.empty()) return;  // nothing new on the GPU: what is counted did not grow
  const Timed timed(call_s_);
  // The program's own GPU memory counts against the budget (asked only when evictions may come).
  if (config_.program_gpu_bytes) {
    evictor_->set_budget(managed_budget(budget_, config_.program_gpu_bytes()));
  }
  const std::vector<LearningEvictor::Range> out = evictor_->take_evictions(index);
  if (!out.empty()) ++launches_evicting_;
  const std::shared_ptr<const Registry::Snapshot> snap = registry.snapshot();
  const auto issue = [&](const LearningEvictor::Range& r, bool to_gpu) {
    // The allocation may have been freed since the block was counted.
    const BufferRecord* rec = snap->find(r.address);
    if (!rec || r.address + r.length > rec->end()) {
      ++skipped_;
      return;
    }
    CUmemLocation where{};
    where.type = to_gpu ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
    where.id = to_gpu ? device_ : 0;
    const CUresult res = d_.mem_prefetch_async(r.address, r.length, where, 0, s);
    if (res != CUDA_SUCCESS) {
      ++failed_calls_;
      if (warned_failure_.first()) {
        log_warning("advisor: a prefetch while learning of {} at {:#x} failed (error {}); skipped",
                    format_bytes(r.length), r.address, static_cast<int>(res));
      }
      return;
    }
    (to_gpu ? prefetched_ : evicted_).push_back({index, r.length});
  };
  moved_.store(true, std::memory_order_relaxed);
  for (const LearningEvictor::Range& r : out) issue(r, false);
  for (const LearningEvictor::Range& r : fresh_) issue(r, true);
}

std::pair<uint64_t, uint64_t> LearnPath::sum(uint64_t first, uint64_t last) const {
  std::lock_guard lock(mutex_);  // the launch path may still be learning
  return {sum_in(prefetched_, first, last), sum_in(evicted_, first, last)};
}

nlohmann::json LearnPath::stats_json() const {
  const auto [in, out] = sum(0, UINT64_MAX);
  std::lock_guard lock(mutex_);
  return {{"on", config_.learn_evict && !off_},
          {"launches_evicting", launches_evicting_},
          {"evict_calls", evicted_.size()},
          {"evicted_bytes", out},
          {"prefetch_calls", prefetched_.size()},
          {"prefetched_bytes", in},
          {"failed_calls", failed_calls_},
          {"skipped_ranges", skipped_},
          {"call_seconds", call_s_}};
}

}  // namespace umswap::advisor
