// The launches' data beside their keys (tracer/step_data.h): signatures, and the trace's
// detection that takes a chain of layers with their own data for one iteration, but not two or
// three iterations that an allocator's reused addresses make repeat together.
#include "umswap/tracer/step_data.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "umswap/core/trace_file.h"

namespace umswap::tracer {
namespace {

TEST(StepData, SignaturesFollowPointersAndTheirOrder) {
  EXPECT_EQ(step_signature({}), 0u);
  const std::vector<uint64_t> ab = {1, 2}, ba = {2, 1}, a = {1};
  EXPECT_EQ(step_signature(ab), step_signature(std::vector<uint64_t>{1, 2}));
  EXPECT_NE(step_signature(ab), step_signature(ba));
  EXPECT_NE(step_signature(ab), step_signature(a));
}

TEST(StepData, StepsWithOtherDataCountsAgainstOnePeriodBefore) {
  const std::vector<uint64_t> s = {1, 2, 3, 1, 9, 3, 1, 9, 8};
  EXPECT_EQ(steps_with_other_data(s, 3, 3), 1u);
  EXPECT_EQ(steps_with_other_data(s, 6, 3), 1u);
  EXPECT_EQ(steps_with_other_data(s, 3, 2), 2u);  // 1 vs 2, 9 vs 3
}

struct Steps {
  std::vector<uint32_t> keys;
  std::vector<uint64_t> signatures;
  void add(uint32_t key, std::vector<uint64_t> pointers) {
    keys.push_back(key);
    signatures.push_back(step_signature(pointers));
  }
};

// `iterations` passes of a chain of `layers` layers (two kernels each) with their own weights and
// two activations used in turn; `warmup` other launches first.
Steps chain(int layers, int iterations, int warmup = 20) {
  Steps s;
  for (int i = 0; i < warmup; ++i) s.add(static_cast<uint32_t>(100 + i), {});
  for (int it = 0; it < iterations; ++it) {
    for (int l = 0; l < layers; ++l) {
      const uint64_t w = 0x7f0000000000 + static_cast<uint64_t>(l) * (256 << 20);
      const uint64_t x = 0x7e0000000000 + static_cast<uint64_t>(l % 2) * (64 << 20);
      const uint64_t y = 0x7e0000000000 + static_cast<uint64_t>((l + 1) % 2) * (64 << 20);
      s.add(11, {x, w, y});
      s.add(12, {y, y});
    }
  }
  return s;
}

TEST(StepData, AChainOfLayersWithTheirOwnDataIsOneIteration) {
  const Steps s = chain(24, 8);
  EXPECT_EQ(detect_with_data(s.keys, {}).period, 2u) << "keys alone: one layer";
  const trace::Detection d = detect_with_data(s.keys, s.signatures);
  EXPECT_EQ(d.period, 48u);
  EXPECT_EQ(d.source, "period");
  EXPECT_GE(d.confidence, kLeastConfidence);
  EXPECT_EQ((d.warmup_steps - 20) % 2, 0u) << "starts at a layer";
}

TEST(StepData, AddressesReusedEveryOtherIterationLeaveTheIteration) {
  // A 40-launch iteration whose every launch gets one of two addresses, alternating by
  // iteration (an allocator's pool handing blocks back in turn): keys and data together repeat
  // every two iterations, which is not a loop of layers.
  Steps s;
  for (int it = 0; it < 12; ++it) {
    for (uint32_t k = 0; k < 40; ++k) {
      s.add(k % 7 == 0 ? 500 : 600 + k,
            {0x7f0000000000ULL + static_cast<uint64_t>(it % 2) * 0x100000 + k * 256});
    }
  }
  const trace::Detection d = detect_with_data(s.keys, s.signatures);
  EXPECT_EQ(d.period, 40u);
  // The same with three addresses in turn.
  Steps t;
  for (int it = 0; it < 12; ++it) {
    for (uint32_t k = 0; k < 40; ++k)
      t.add(600 + k, {0x7f0000000000ULL + static_cast<uint64_t>(it % 3) * 0x100000 + k});
  }
  EXPECT_EQ(detect_with_data(t.keys, t.signatures).period, 40u);
}

TEST(StepData, AnIterationWithTheSameDataEachTimeIsTheKeysPeriod) {
  Steps s;
  for (int it = 0; it < 10; ++it) {
    for (uint32_t k = 0; k < 30; ++k) s.add(700 + k % 10, {0x7f0000000000ULL + k * 4096});
  }
  // Keys repeat every 10, data every 30, and the 30 is 3 repeats: below kLeastRepeats.
  EXPECT_EQ(detect_with_data(s.keys, s.signatures).period, 10u);
  // Fresh data at every launch (no repeat at all): the keys' period.
  Steps f;
  for (int i = 0; i < 400; ++i) f.add(800 + i % 8, {0x7f0000000000 + static_cast<uint64_t>(i)});
  EXPECT_EQ(detect_with_data(f.keys, f.signatures).period, 8u);
}

TEST(StepData, ARecordedCupyChainIsOneIterationOfTheChain) {
  // bench/cupy_chain.py --iterations 8 (24 layers of matmul and tanh, each layer its own weights)
  // recorded with `umswap record` on an H200 before the detection used the data: its trace says
  // one layer (2 launches). Each step's signature from its accesses (buffer base + offset).
  std::string error;
  const std::optional<trace::Trace> t =
      read_trace_file(std::string(UMSWAP_TRACER_TEST_DATA) + "/cupy_chain_h200.umtrace", &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->detection.period, 2u);
  Steps s;
  for (const trace::Step& step : t->steps) {
    std::vector<uint64_t> pointers;
    for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
      pointers.push_back(t->buffers[t->accesses[a].buffer].base + t->accesses[a].offset);
    }
    s.add(step.name, pointers);
  }
  const trace::Detection d = detect_with_data(s.keys, s.signatures);
  EXPECT_EQ(d.period, 48u);
  EXPECT_GE(d.confidence, kLeastConfidence);
}

}  // namespace
}  // namespace umswap::tracer
