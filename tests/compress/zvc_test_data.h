// Inputs the ZVC codec's CPU test (tests/compress/zvc_test.cpp) and GPU test
// (tests/gpu/zvc_gpu_test.cu) share, so that both hold the codec to the same data.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "umswap/compress/zvc_format.h"

namespace umswap::compress::zvc::test_data {

inline constexpr Word kWords[] = {Word::bits16, Word::bits32};

// `bytes` bytes of words that are zero with probability `zero_fraction`, else random and never
// zero; a tail past the last whole word is random.
inline std::vector<uint8_t> make_input(uint64_t bytes, Word w, double zero_fraction,
                                       std::mt19937_64& rng) {
  std::vector<uint8_t> v(bytes);
  const uint32_t wb = word_bytes(w);
  std::bernoulli_distribution zero(zero_fraction);
  for (uint64_t i = 0; i + wb <= bytes; i += wb) {
    if (zero(rng)) continue;  // already zero
    uint32_t x;
    do {
      x = static_cast<uint32_t>(rng());
    } while ((wb == 2 ? (x & 0xFFFF) : x) == 0);
    std::memcpy(v.data() + i, &x, wb);
  }
  for (uint64_t i = bytes / wb * wb; i < bytes; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

// Special values repeated `repeats` times, as 4-byte words (fp32: -0.0, +Inf, -Inf, quiet and
// signalling NaN, NaN with payload, the smallest denormal, 0, 1.0) or 2-byte words (bf16 / fp16:
// -0.0, Inf, NaN of both, denormal, 0, 1.0).
inline std::vector<uint8_t> special_values(Word w, int repeats) {
  static constexpr uint32_t kF32[] = {0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
                                      0xFFFFFFFF, 0x00000001, 0,          0x3F800000};
  static constexpr uint16_t kF16[] = {0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7E00,
                                      0xFFFF, 0x0001, 0,      0x3F80};
  std::vector<uint8_t> out;
  for (int r = 0; r < repeats; ++r) {
    if (w == Word::bits32) {
      for (uint32_t x : kF32) {
        const auto* p = reinterpret_cast<const uint8_t*>(&x);
        out.insert(out.end(), p, p + 4);
      }
    } else {
      for (uint16_t x : kF16) {
        const auto* p = reinterpret_cast<const uint8_t*>(&x);
        out.insert(out.end(), p, p + 2);
      }
    }
  }
  return out;
}

}  // namespace umswap::compress::zvc::test_data
