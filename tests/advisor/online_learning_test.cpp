// Online learning's choice of the iteration to plan from (advisor/online_learning.h), driven as the
// advisor drives it: checks at its cadence over the keys since learning (re)started, a chosen
// plan followed until a launch's key differs from the plan's, then learning again from there.
#include "umswap/advisor/online_learning.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "umswap/tracer/step_data.h"

namespace umswap::advisor {
namespace {

// One iteration of a deep network: an embedding, `layers` identical blocks forward, a head,
// `layers` identical blocks backward, an optimizer; keys offset by `base` (another program part).
std::vector<uint32_t> deep_iteration(int layers, int forward, int backward, uint32_t base = 0) {
  std::vector<uint32_t> k;
  for (uint32_t i = 0; i < 5; ++i) k.push_back(base + 1000 + i);
  for (int l = 0; l < layers; ++l) {
    for (int j = 0; j < forward; ++j) k.push_back(base + 2000 + static_cast<uint32_t>(j));
  }
  for (uint32_t i = 0; i < 7; ++i) k.push_back(base + 3000 + i);
  for (int l = 0; l < layers; ++l) {
    for (int j = 0; j < backward; ++j) k.push_back(base + 4000 + static_cast<uint32_t>(j));
  }
  for (uint32_t i = 0; i < 40; ++i) k.push_back(base + 5000 + i % 3);
  return k;
}

void append(std::vector<uint32_t>& keys, const std::vector<uint32_t>& part, int times) {
  for (int i = 0; i < times; ++i) keys.insert(keys.end(), part.begin(), part.end());
}

struct Plan {
  uint64_t from;  // first launch the plan was in force (an iteration boundary)
  uint64_t period;
  uint64_t until;  // the launch whose key differed, or the end
};

// The advisor's learning loop over a whole key sequence (20 warm-up launches first): every plan
// made, in order.
std::vector<Plan> drive(const std::vector<uint32_t>& loop, OnlineLearning& learning) {
  std::vector<uint32_t> keys;
  for (uint32_t i = 0; i < 20; ++i) keys.push_back(9000 + i);
  keys.insert(keys.end(), loop.begin(), loop.end());
  std::vector<Plan> plans;
  uint64_t learn_from = 0, next_check = 0;
  for (uint64_t logged = 1; logged <= keys.size(); ++logged) {
    if (logged < learn_from + 64 || logged < next_check) continue;
    next_check = logged + std::max<uint64_t>(64, (logged - learn_from) / 4);
    const std::span<const uint32_t> seen(keys.data() + learn_from, logged - learn_from);
    const auto choice = learning.choose(seen);
    if (!choice) continue;
    const uint64_t first = learn_from + choice->first;
    const std::vector<uint32_t> plan_keys(
        keys.begin() + static_cast<ptrdiff_t>(first),
        keys.begin() + static_cast<ptrdiff_t>(first + choice->period));
    // In force from the next iteration boundary; followed while the keys repeat.
    const uint64_t start = first + ((logged - first) / choice->period + 1) * choice->period;
    uint64_t g = start;
    while (g < keys.size() && keys[g] == plan_keys[(g - first) % choice->period]) ++g;
    plans.push_back({start, choice->period, g});
    if (g == keys.size()) break;
    learning.diverged(plan_keys);
    learn_from = g;
    next_check = 0;
    logged = g;
  }
  return plans;
}

TEST(OnlineLearning, AShallowLoopIsLearnedFromItsWholeIteration) {
  const auto iteration = deep_iteration(4, 30, 50);  // 372 launches
  std::vector<uint32_t> loop;
  append(loop, iteration, 8);
  OnlineLearning learning;
  const auto plans = drive(loop, learning);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].period, iteration.size());
  EXPECT_EQ(plans[0].until, 20 + loop.size());  // held to the end
}

// A stack of 24 identical layers repeats long before the first iteration ends, and is taken for
// the iteration; its plan diverges at the end of the stack. After the forward and the backward
// stack have each diverged, only the whole iteration is planned from, and that plan holds.
TEST(OnlineLearning, ADeepLoopEndsWithThePlanOfItsWholeIteration) {
  const auto iteration = deep_iteration(24, 30, 50);  // 1,972 launches
  std::vector<uint32_t> loop;
  append(loop, iteration, 8);
  OnlineLearning learning;
  const auto plans = drive(loop, learning);
  ASSERT_GE(plans.size(), 2u);
  EXPECT_EQ(plans.front().period, 30u);  // the forward layer, as before the fix
  EXPECT_EQ(plans.back().period, iteration.size());
  EXPECT_EQ(plans.back().until, 20 + loop.size());
  // No more than the two layer plans came before it, and it was in force within 4 iterations.
  EXPECT_LE(plans.size(), 3u);
  EXPECT_LE(plans.back().from, 20 + 4 * iteration.size());
}

// Without the memory of diverged plans (a fresh learner at each divergence) the layer periods
// come back in every iteration: this is what the memory is for.
TEST(OnlineLearning, WithoutMemoryTheLayersAreLearnedAgainInEveryIteration) {
  const auto iteration = deep_iteration(24, 30, 50);
  std::vector<uint32_t> loop;
  append(loop, iteration, 4);
  std::vector<uint32_t> keys(20, 0);
  for (uint32_t i = 0; i < 20; ++i) keys[i] = 9000 + i;
  keys.insert(keys.end(), loop.begin(), loop.end());
  // Learn from the start of the third iteration's forward stack with no memory.
  const uint64_t third = 20 + 2 * iteration.size();
  OnlineLearning fresh;
  const std::span<const uint32_t> seen(keys.data() + third, 5 + 30 * 12);
  const auto choice = fresh.choose(seen);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->period, 30u);
}

// A training loop interrupted by an evaluation loop (other kernels, shorter): the training plan
// diverges at the evaluation, which is not planned (its keys lack the training ones), and the
// training period is planned again when training comes back.
TEST(OnlineLearning, TrainingIsPlannedAgainAfterAnEvaluationLoop) {
  const auto train = deep_iteration(4, 30, 50);  // 372
  std::vector<uint32_t> eval;
  for (int i = 0; i < 4; ++i) {
    for (uint32_t j = 0; j < 25; ++j) eval.push_back(7000 + j);  // forward only: 100
  }
  std::vector<uint32_t> loop;
  append(loop, train, 6);
  append(loop, eval, 12);
  append(loop, train, 8);
  OnlineLearning learning;
  const auto plans = drive(loop, learning);
  ASSERT_GE(plans.size(), 2u);
  EXPECT_EQ(plans.front().period, train.size());
  for (const Plan& p : plans) EXPECT_NE(p.period, eval.size()) << "the evaluation was planned";
  EXPECT_EQ(plans.back().period, train.size());
  EXPECT_EQ(plans.back().until, 20 + loop.size());
}

TEST(OnlineLearning, ALongerPeriodIsAlwaysAccepted) {
  OnlineLearning learning;
  learning.diverged(std::vector<uint32_t>(30, 1));
  EXPECT_EQ(learning.longest_diverged_period(), 30u);
  std::vector<uint32_t> keys;
  for (int rep = 0; rep < 4; ++rep) {
    for (uint32_t j = 0; j < 100; ++j) keys.push_back(500 + j);  // none of the diverged keys
  }
  const auto choice = learning.choose(keys);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->period, 100u);
}

// A chain of identical layers, each with its own weights, and nothing else in the iteration (a
// CuPy loop of matmul and tanh): kernel keys repeat with one layer's period, data with the whole
// chain's. `iterations` of it, each step's key and buffer signature.
struct Steps {
  std::vector<uint32_t> keys;
  std::vector<uint64_t> buffers;
};
Steps layer_chain(int layers, int iterations) {
  Steps s;
  for (int it = 0; it < iterations; ++it) {
    for (int l = 0; l < layers; ++l) {
      const uint64_t weights = 0x7f0000000000 + static_cast<uint64_t>(l) * (256 << 20);
      const uint64_t x = 0x7e0000000000 + static_cast<uint64_t>(l % 2) * (64 << 20);
      const uint64_t y = 0x7e0000000000 + static_cast<uint64_t>((l + 1) % 2) * (64 << 20);
      const std::vector<uint64_t> matmul = {x, weights, y}, tanh = {y, y};
      s.keys.push_back(11);
      s.buffers.push_back(tracer::step_signature(matmul));
      s.keys.push_back(12);
      s.buffers.push_back(tracer::step_signature(tanh));
    }
  }
  return s;
}

TEST(OnlineLearning, AChainOfLayersWithTheirOwnDataIsPlannedWhole) {
  const Steps s = layer_chain(24, 8);  // 48 steps an iteration, 384 in all
  OnlineLearning learning;
  // By keys alone: one layer (today's choice without buffers).
  const auto by_keys = learning.choose(s.keys);
  ASSERT_TRUE(by_keys);
  EXPECT_EQ(by_keys->period, 2u);
  // With the buffers: the chain.
  const auto whole = learning.choose(s.keys, s.buffers);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->period, 48u);
  EXPECT_EQ((whole->first - whole->region_start) % 48, 0u);
  EXPECT_GE(whole->first + 48, s.keys.size() - 48) << "the last complete iteration";
  EXPECT_LE(whole->first + 48, s.keys.size());
}

TEST(OnlineLearning, TheChainIsWaitedForBeforeItRepeats) {
  // One pass of a 300-step chain: steady by keys, no repeat of the chain yet.
  Steps s = layer_chain(150, 1);
  OnlineLearning learning;
  ASSERT_TRUE(learning.choose(s.keys));
  EXPECT_FALSE(learning.choose(s.keys, s.buffers)) << "the inner period is not planned yet";
  s = layer_chain(150, 3);  // it repeats
  const auto whole = learning.choose(s.keys, s.buffers);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->period, 300u);
}

TEST(OnlineLearning, BuffersThatAlwaysDifferFallBackToTheKeysPeriodLater) {
  // Fresh pointers at every step, no outer loop: planned by keys once kOuterWaitPeriods pass.
  std::vector<uint32_t> keys;
  std::vector<uint64_t> buffers;
  const auto add = [&](size_t n) {
    while (keys.size() < n) {
      keys.push_back(static_cast<uint32_t>(20 + keys.size() % 8));
      buffers.push_back(0x1000 + keys.size());
    }
  };
  OnlineLearning learning;
  add(kOuterWaitLeast - 8);
  EXPECT_FALSE(learning.choose(keys, buffers));
  add(kOuterWaitLeast + 64);
  const auto choice = learning.choose(keys, buffers);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->period, 8u);
}

TEST(OnlineLearning, ATrainingLoopWithTheSameBuffersEachIterationChoosesAsBefore) {
  const std::vector<uint32_t> iteration = deep_iteration(12, 6, 9);
  std::vector<uint32_t> keys;
  append(keys, iteration, 5);
  std::vector<uint64_t> buffers;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t at = i % iteration.size();  // each step's data the same every iteration
    buffers.push_back(tracer::step_signature(std::vector<uint64_t>{0x7f0000000000 + at * 4096}));
  }
  OnlineLearning learning;
  const auto by_keys = learning.choose(keys);
  const auto with_buffers = learning.choose(keys, buffers);
  ASSERT_TRUE(by_keys);
  ASSERT_TRUE(with_buffers);
  EXPECT_EQ(with_buffers->period, by_keys->period);
  EXPECT_EQ(with_buffers->first, by_keys->first);
  EXPECT_EQ(by_keys->period, iteration.size());
}

// A deep network's iteration after umswap's placement: each layer's steps launched with its own
// weights on a few steps (1 in 6) and, on the others, activations the placement put at the same
// addresses for every layer (as the 1-billion-parameter decoder's 105-launch layers looked after
// their placement, H200, 2026-11-30).
Steps placed_deep_iterations(int layers, int per_layer, int iterations) {
  Steps s;
  const std::vector<uint32_t> iteration = deep_iteration(layers, per_layer, per_layer);
  for (int it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < iteration.size(); ++i) {
      const uint32_t k = iteration[i];
      const bool in_layer = (k >= 2000 && k < 3000) || (k >= 4000 && k < 5000);
      const uint64_t layer = in_layer ? (i - 5) / static_cast<uint64_t>(per_layer) : 0;
      const uint64_t activation = 0x7e0000000000 + (k % 1000) * 4096;  // placed: every layer's
      const bool weighted = in_layer && k % 6 == 0;
      const std::vector<uint64_t> pointers =
          weighted ? std::vector<uint64_t>{activation, 0x7f0000000000 + layer * (64 << 20) + k}
                   : std::vector<uint64_t>{activation};
      s.keys.push_back(k);
      s.buffers.push_back(tracer::step_signature(pointers));
    }
  }
  return s;
}

TEST(OnlineLearning, AfterPlacementPointersNoLongerTellALayerFromTheIteration) {
  // The keys of a little over one iteration past the placed one's: one layer repeats (16 of them)
  // and its placed activations are the layer before's, so the pointers take it for a loop.
  const Steps s = placed_deep_iterations(16, 30, 2);
  const uint64_t period = s.keys.size() / 2;
  const std::span<const uint32_t> early(s.keys.data(), 5 + 30 * 12);
  const std::span<const uint64_t> early_buffers(s.buffers.data(), early.size());
  OnlineLearning learning;
  const auto fooled = learning.choose(early, early_buffers);
  ASSERT_TRUE(fooled);
  EXPECT_EQ(fooled->period, 30u) << "a layer";
  // What the advisor asks instead after a placement: the placed period, once it is all logged.
  EXPECT_FALSE(OnlineLearning::placed_iteration(early, period));
  const auto placed = OnlineLearning::placed_iteration(s.keys, period);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->period, period);
  EXPECT_EQ(placed->first, period);
  EXPECT_EQ(placed->region_start, period);
}

TEST(OnlineLearning, APlacedIterationWhoseNextDiffersIsNotPlanned) {
  std::vector<uint32_t> keys = deep_iteration(4, 10, 10);
  const uint64_t period = keys.size();
  append(keys, deep_iteration(4, 10, 10), 1);
  EXPECT_TRUE(OnlineLearning::placed_iteration(keys, period));
  keys[period + 7] = 77777;  // the next iteration launched something else
  EXPECT_FALSE(OnlineLearning::placed_iteration(keys, period));
  EXPECT_FALSE(OnlineLearning::placed_iteration(keys, 0));
  keys.resize(2 * period - 1);
  EXPECT_FALSE(OnlineLearning::placed_iteration(keys, period)) << "not all logged yet";
}

}  // namespace
}  // namespace umswap::advisor
