// Online learning's choice of the iteration to plan from, as a pure decision over the launch keys
// seen since learning (re)started, with a memory of the online plans that diverged.
//
// The iteration is the period of the steady region that IterationDetector::detect() finds, once
// that region spans two periods, kMinLearnSteps steps and a quarter of the keys seen, with
// confidence kMinConfidence. A stack of identical layers (ResNet's bottlenecks, a transformer's
// blocks) is such a region long before the training loop's first iteration ends: a plan made
// from it covers one layer and diverges at the end of the stack. So a diverged plan is
// remembered: afterwards a period no longer than the longest diverged one is planned from only if
// its iteration contains every key of every diverged plan (the outer loop that holds those
// layers does; a layer does not). A longer period is always accepted. A training loop's period
// that diverged because the program changed regime (an evaluation loop) is accepted again when it
// comes back, since its keys contain what diverged; a shorter new regime whose keys lack those
// of the diverged plans is not planned (the program runs on plain managed memory there).
//
// Keys name kernels, not data (tracer/step_data.h): a loop of identical layers that each hold their
// own weights (a CuPy chain of matmul and tanh, nothing else in its iteration) repeats its keys
// with one layer's period for good, and a plan of one layer moves one layer's buffers at every
// layer. So when each step's buffers are given too (a signature of the pointers it was launched
// with) and most steps of the keys' period are launched with other buffers than the same step one
// period before, the outer loop is preferred: the period of keys and buffers together (kernel and
// data both repeat), once it shows. It is waited for while the region is shorter than
// kOuterWaitPeriods of the inner period, at least kOuterWaitLeast steps and at most kOuterWaitMost;
// after that the inner period is planned as before (buffers that differ at every repeat, with no
// outer loop to find).
//
// Pointers tell layers apart only until umswap's placement (placement_hand_off.h) lays out the
// iteration's blocks: it may give a layer's activations the addresses the layer before had, and a
// layer then looks like its own loop. So once a placement made for an iteration of P launches has
// been handed over, nothing is detected: the first placed iteration is planned with period P, if
// its keys are those of the iteration before it (placed_iteration()).
//
// Thread safety: none; one instance per advisor thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_set>

namespace umswap::advisor {

inline constexpr double kMinConfidence = 0.8;    // of the period detection, to plan from it
inline constexpr uint64_t kMinLearnSteps = 256;  // shortest steady region planned from
inline constexpr uint64_t kOuterWaitPeriods = 64;
inline constexpr uint64_t kOuterWaitLeast = 4096;
inline constexpr uint64_t kOuterWaitMost = 16384;

struct LearnChoice {
  uint64_t region_start = 0;  // index (in the keys given) of the steady region's first step
  uint64_t first = 0;         // index of the first step of the iteration to plan from
  uint64_t period = 0;        // steps per iteration
};

class OnlineLearning {
 public:
  // `keys`: the step keys since learning (re)started; `buffers`: for each of them, a signature of
  // the pointers it was launched with (tracer::step_signature()), or empty when not known. The last
  // complete iteration of the steady region to plan from, or nothing yet.
  std::optional<LearnChoice> choose(std::span<const uint32_t> keys,
                                    std::span<const uint64_t> buffers = {}) const;
  // An online plan made from one iteration with these keys diverged from the launches.
  void diverged(std::span<const uint32_t> plan_keys);
  uint64_t longest_diverged_period() const { return longest_diverged_; }

  // After a placement of an iteration of `period` launches: `keys` from the first launch of the
  // iteration before the first placed one. The first placed one (first = period), once it is all
  // logged and its keys repeat the one before's; nothing while it is not all there, or when they
  // differ.
  static std::optional<LearnChoice> placed_iteration(std::span<const uint32_t> keys,
                                                     uint64_t period);

 private:
  // The choice by `detect_on` (keys, or keys and buffers together), judged by `keys`.
  std::optional<LearnChoice> choose_by(std::span<const uint32_t> detect_on,
                                       std::span<const uint32_t> keys) const;

  uint64_t longest_diverged_ = 0;
  std::unordered_set<uint32_t> diverged_keys_;
};

}  // namespace umswap::advisor
