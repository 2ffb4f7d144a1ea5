#include "umswap/advisor/online_learning.h"

#include "umswap/tracer/iteration_detector.h"

namespace umswap::advisor {

std::optional<LearnChoice> OnlineLearning::choose(std::span<const uint32_t> keys) const {
  const trace::Detection det = tracer::IterationDetector::detect(keys);
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

void OnlineLearning::diverged(std::span<const uint32_t> plan_keys) {
  longest_diverged_ = std::max<uint64_t>(longest_diverged_, plan_keys.size());
  diverged_keys_.insert(plan_keys.begin(), plan_keys.end());
}

}  // namespace umswap::advisor
