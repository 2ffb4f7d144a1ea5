// The data each launch ran with, beside its key: what tells a loop of identical layers that each
// hold their own data from one layer (docs/advisor.md, "Layers with their own data"). Keys name
// kernels, so a chain of identical layers with nothing else in its iteration (CuPy's matmul and
// tanh, 24 times) repeats its keys with one layer's period; the pointers it was launched with
// repeat only with the whole chain's.
//
// Online learning (advisor/online_learning.h) and the trace's iterations at exit
// (StepRecorder::stop) both use these. Pure functions: any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "umswap/core/trace.h"
#include "umswap/tracer/param_scanner.h"

namespace umswap::tracer {

// Steps of a period launched with other data than one period before, past which the period is
// taken for an inner loop whose repeats hold different data.
inline constexpr double kInnerDiffers = 0.5;

// A step's signature: a hash of the pointers it was launched with, in the order scanned (0 for a
// step with none).
uint64_t step_signature(std::span<const uint64_t> pointers);
// step_signature() of a logged step's hits (their pointers).
uint64_t hits_signature(std::span<const PointerHit> hits);

// Each step's key and signature hashed together: they repeat where kernel and data both do.
std::vector<uint32_t> keys_with_data(std::span<const uint32_t> keys,
                                     std::span<const uint64_t> signatures);

// How many of the steps [first, first + period) ran with another signature than the step one
// period before (first >= period).
uint64_t steps_with_other_data(std::span<const uint64_t> signatures, uint64_t first,
                               uint64_t period);

// The trace's detection (no marks): IterationDetector::detect(keys), or, when most steps of its
// last whole period ran with other data than one period before, and keys and data together repeat
// with a period of at least kLeastRepeats of it (confidence kLeastConfidence), that one. Fewer
// repeats are not taken: an allocator that hands out the same addresses every second or third
// iteration makes keys and data repeat with two or three iterations (BERT, ResNet-50 and an LSTM
// with PyTorch's async backend did, 2026-11-30), while a chain repeats its layer many times.
// `signatures` empty or of another length: the keys' detection.
inline constexpr uint64_t kLeastRepeats = 4;
inline constexpr double kLeastConfidence = 0.8;
trace::Detection detect_with_data(std::span<const uint32_t> keys,
                                  std::span<const uint64_t> signatures);

}  // namespace umswap::tracer
