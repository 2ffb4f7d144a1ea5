#include "umswap/advisor/online_learning.h"

#include <algorithm>
#include <vector>

#include "umswap/tracer/iteration_detector.h"
#include "umswap/tracer/step_data.h"

namespace umswap::advisor {

std::optional<LearnChoice> OnlineLearning::choose(std::span<const uint32_t> keys,
                                                  std::span<const uint64_t> buffers) const {
  const std::optional<LearnChoice> inner = choose_by(keys, keys);
  if (!inner || buffers.size() != keys.size()) return inner;
  const uint64_t p = inner->period;
  // first >= p: the region holds two periods.
  if (static_cast<double>(tracer::steps_with_other_data(buffers, inner->first, p)) <=
      tracer::kInnerDiffers * static_cast<double>(p)) {
    return inner;
  }
  // Kernels repeat, data does not: look for the loop in which both repeat.
  const std::vector<uint32_t> both = tracer::keys_with_data(keys, buffers);
  if (const std::optional<LearnChoice> outer = choose_by(both, keys); outer && outer->period > p) {
    return outer;
  }
  const uint64_t region = keys.size() - inner->region_start;
  const uint64_t wait = std::min(std::max(kOuterWaitPeriods * p, kOuterWaitLeast), kOuterWaitMost);
  if (region < wait) return std::nullopt;
  return inner;
}

std::optional<LearnChoice> OnlineLearning::choose_by(std::span<const uint32_t> detect_on,
                                                     std::span<const uint32_t> keys) const {
  const trace::Detection det = tracer::IterationDetector::detect(detect_on);
  if (det.period == 0 || det.confidence < kMinConfidence) return std::nullopt;
  const uint64_t e = det.warmup_steps;
  const uint64_t end = keys.size();
  if (e >= end) return std::nullopt;
  const uint64_t complete = (end - e) / det.period;
  // A steady region must be long, and most of what was seen: a run of identical launches inside
  // the first iteration (one optimizer kernel per parameter) repeats too, with period 1.
  const uint64_t region = end - e;
  if (complete < 2 || region < kMinLearnSteps || region * 4 < end) return std::nullopt;
  const LearnChoice choice{e, e + (complete - 1) * det.period, det.period};
  if (det.period <= longest_diverged_) {
    std::unordered_set<uint32_t> own(
        keys.begin() + static_cast<ptrdiff_t>(choice.first),
        keys.begin() + static_cast<ptrdiff_t>(choice.first + det.period));
    for (uint32_t k : diverged_keys_) {
      if (!own.contains(k)) return std::nullopt;  // an inner loop of what diverged
    }
  }
  return choice;
}

std::optional<LearnChoice> OnlineLearning::placed_iteration(std::span<const uint32_t> keys,
                                                            uint64_t period) {
  if (period == 0 || keys.size() < 2 * period) return std::nullopt;
  if (!std::equal(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(period),
                  keys.begin() + static_cast<ptrdiff_t>(period))) {
    return std::nullopt;
  }
  return LearnChoice{period, period, period};
}

void OnlineLearning::diverged(std::span<const uint32_t> plan_keys) {
  longest_diverged_ = std::max<uint64_t>(longest_diverged_, plan_keys.size());
  diverged_keys_.insert(plan_keys.begin(), plan_keys.end());
}

}  // namespace umswap::advisor
