#include "umswap/tracer/step_data.h"

#include "umswap/tracer/iteration_detector.h"

namespace umswap::tracer {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

uint64_t step_signature(std::span<const uint64_t> pointers) {
  uint64_t h = 0;
  for (uint64_t p : pointers) h = mix(h, p);
  return h;
}

uint64_t hits_signature(std::span<const PointerHit> hits) {
  uint64_t h = 0;
  for (const PointerHit& hit : hits) h = mix(h, hit.pointer);
  return h;
}

std::vector<uint32_t> keys_with_data(std::span<const uint32_t> keys,
                                     std::span<const uint64_t> signatures) {
  std::vector<uint32_t> both(keys.size());
  for (size_t i = 0; i < keys.size() && i < signatures.size(); ++i) {
    const uint64_t h = mix(mix(0, keys[i]), signatures[i]);
    both[i] = static_cast<uint32_t>(h ^ (h >> 32));
  }
  return both;
}

uint64_t steps_with_other_data(std::span<const uint64_t> signatures, uint64_t first,
                               uint64_t period) {
  uint64_t differ = 0;
  for (uint64_t i = first; i < first + period && i < signatures.size(); ++i) {
    differ += signatures[i] != signatures[i - period];
  }
  return differ;
}

trace::Detection detect_with_data(std::span<const uint32_t> keys,
                                  std::span<const uint64_t> signatures) {
  trace::Detection d = IterationDetector::detect(keys);
  const uint64_t p = d.period;
  if (p == 0 || signatures.size() != keys.size() || keys.size() < d.warmup_steps + 2 * p) {
    return d;
  }
  const uint64_t last = d.warmup_steps + ((keys.size() - d.warmup_steps) / p - 1) * p;
  if (static_cast<double>(steps_with_other_data(signatures, last, p)) <=
      kInnerDiffers * static_cast<double>(p)) {
    return d;
  }
  trace::Detection outer = IterationDetector::detect(keys_with_data(keys, signatures));
  if (outer.period % p != 0 || outer.period / p < kLeastRepeats ||
      outer.confidence < kLeastConfidence) {
    return d;
  }
  outer.source = d.source;
  return outer;
}

}  // namespace umswap::tracer
