// Iteration detector: periods of synthetic launch sequences (exact loops, warm-up, nested loops,
// a change of period, noise, a final partial iteration, no repetition), the streaming path
// against the one-shot one, boundaries, and explicit markers.
#include "umswap/tracer/iteration_detector.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace umswap::tracer {
namespace {

using Keys = std::vector<uint32_t>;

// `period` distinct keys starting at `first`.
Keys distinct(uint32_t period, uint32_t first = 1) {
  Keys k(period);
  for (uint32_t i = 0; i < period; ++i) k[i] = first + i;
  return k;
}

// `period` keys drawn from `alphabet` keys (repeats inside the iteration).
Keys random_keys(size_t count, uint32_t alphabet, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> pick(1, alphabet);
  Keys k(count);
  for (auto& x : k) x = pick(rng);
  return k;
}

void append(Keys& out, const Keys& part, size_t times = 1) {
  for (size_t t = 0; t < times; ++t) out.insert(out.end(), part.begin(), part.end());
}

Keys repeat(const Keys& iteration, size_t times) {
  Keys out;
  append(out, iteration, times);
  return out;
}

trace::Detection stream(const Keys& keys, const DetectorOptions& options = {}) {
  IterationDetector d(options);
  for (uint32_t k : keys) d.push(k);
  EXPECT_EQ(d.steps(), keys.size());
  d.finish();
  return d.current();
}

// The streaming path must reach the same detection as the one-shot one.
void expect_agreement(const Keys& keys, const DetectorOptions& options = {}) {
  const trace::Detection offline = IterationDetector::detect(keys, options);
  const trace::Detection online = stream(keys, options);
  EXPECT_EQ(online.period, offline.period);
  EXPECT_EQ(online.warmup_steps, offline.warmup_steps);
  EXPECT_NEAR(online.confidence, offline.confidence, 1e-12);
  EXPECT_EQ(online.source, offline.source);
}

TEST(IterationDetector, ExactRepeatsOfDistinctKeys) {
  for (uint32_t period : {1u, 2u, 7u, 1000u}) {
    SCOPED_TRACE("period " + std::to_string(period));
    const Keys keys = repeat(distinct(period), std::max<size_t>(6, 200 / period));
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, period);
    EXPECT_EQ(d.warmup_steps, 0u);
    EXPECT_DOUBLE_EQ(d.confidence, 1.0);
    EXPECT_EQ(d.source, "period");
    expect_agreement(keys);
  }
}

TEST(IterationDetector, ExactRepeatsWithKeysRepeatedInsideTheIteration) {
  // Realistic: the same elementwise kernels recur many times within one iteration.
  const Keys iteration = random_keys(1000, 12, 7);
  const Keys keys = repeat(iteration, 5);
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 1000u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_DOUBLE_EQ(d.confidence, 1.0);
  expect_agreement(keys);
}

TEST(IterationDetector, LongPeriod) {
  Keys keys = repeat(random_keys(50000, 4000, 11), 3);
  append(keys, Keys(keys.begin(), keys.begin() + 1234));  // and a partial fourth iteration
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 50000u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_DOUBLE_EQ(d.confidence, 1.0);
  expect_agreement(keys);
}

TEST(IterationDetector, WarmupPrefixOfOtherLaunches) {
  const Keys iteration = distinct(13, 100);
  for (uint32_t prefix : {1u, 5u, 12u, 13u, 14u, 100u, 1000u}) {
    SCOPED_TRACE("prefix " + std::to_string(prefix));
    Keys keys = distinct(prefix, 5000);  // autotuning kernels, never seen again
    append(keys, iteration, 30);
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 13u);
    EXPECT_EQ(d.warmup_steps, prefix);
    EXPECT_DOUBLE_EQ(d.confidence, 1.0);
    expect_agreement(keys);
  }
}

TEST(IterationDetector, WarmupIterationsWithExtraLaunches) {
  const Keys iteration = distinct(20, 100);
  {
    // Autotuning launches before the first two iterations' own launches.
    Keys keys = {9001, 9002, 9003};
    append(keys, iteration);
    append(keys, Keys{9004, 9005});
    append(keys, iteration);
    append(keys, iteration, 20);
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 20u);
    EXPECT_EQ(d.warmup_steps, 3u + 20 + 2);
    EXPECT_DOUBLE_EQ(d.confidence, 1.0);
    expect_agreement(keys);
  }
  {
    // Extra launches in the middle of the first iteration: the region starts after the last of
    // them (a rotation of the loop; see the header).
    Keys keys(iteration.begin(), iteration.begin() + 4);
    append(keys, Keys{9001, 9002});
    append(keys, Keys(iteration.begin() + 4, iteration.begin() + 9));
    append(keys, Keys{9003});
    const uint64_t after_last_extra = keys.size();
    append(keys, Keys(iteration.begin() + 9, iteration.end()));
    append(keys, iteration, 20);
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 20u);
    EXPECT_EQ(d.warmup_steps, after_last_extra);
    EXPECT_DOUBLE_EQ(d.confidence, 1.0);
    expect_agreement(keys);
  }
}

// [a, (b c d) x 24, e, f]: 75 launches, of which 72 are an inner loop of period 3.
Keys nested_iteration() {
  Keys it = {1};
  for (int l = 0; l < 24; ++l) append(it, Keys{2, 3, 4});
  append(it, Keys{5, 6});
  return it;
}

TEST(IterationDetector, NestedLoopsGiveTheOuterPeriod) {
  const Keys keys = repeat(nested_iteration(), 10);
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 75u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_DOUBLE_EQ(d.confidence, 1.0);
  expect_agreement(keys);
}

TEST(IterationDetector, NestedLoopsEndingInsideTheInnerLoop) {
  for (size_t iterations : {2u, 3u, 10u}) {
    SCOPED_TRACE("iterations " + std::to_string(iterations));
    Keys keys = repeat(nested_iteration(), iterations);
    const Keys it = nested_iteration();
    append(keys, Keys(it.begin(), it.begin() + 50));  // stops in the middle of the layers
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 75u);
    EXPECT_EQ(d.warmup_steps, 0u);
    EXPECT_DOUBLE_EQ(d.confidence, 1.0);
    expect_agreement(keys);
  }
}

TEST(IterationDetector, ForwardAndBackwardLayerLoops) {
  // embedding, 24 forward layers of 3 kernels, loss, 24 backward layers of 4, optimizer (2).
  Keys it = {1};
  for (int l = 0; l < 24; ++l) append(it, Keys{10, 11, 12});
  append(it, Keys{2});
  for (int l = 0; l < 24; ++l) append(it, Keys{20, 21, 22, 23});
  append(it, Keys{3, 4});
  ASSERT_EQ(it.size(), 172u);
  Keys keys = distinct(9, 9000);  // set-up launches
  append(keys, it, 8);
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 172u);
  EXPECT_EQ(d.warmup_steps, 9u);
  EXPECT_DOUBLE_EQ(d.confidence, 1.0);
  expect_agreement(keys);
}

TEST(IterationDetector, ChangeOfPeriodReportsTheMostRecent) {
  {
    Keys keys = repeat(distinct(13, 100), 40);  // training
    append(keys, distinct(7, 500), 30);         // evaluation
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 7u);
    EXPECT_EQ(d.warmup_steps, 13u * 40);
    EXPECT_DOUBLE_EQ(d.confidence, 1.0);
    expect_agreement(keys);
  }
  {
    // Evaluation runs the forward part of the training iteration only.
    const Keys train = distinct(13, 100);
    Keys keys = repeat(train, 40);
    append(keys, Keys(train.begin(), train.begin() + 7), 30);
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 7u);
    EXPECT_EQ(d.warmup_steps, 13u * 40);
    expect_agreement(keys);
  }
  {
    // From a short period to a longer one, with shared kernels.
    Keys keys = repeat(random_keys(9, 5, 3), 50);
    append(keys, random_keys(40, 5, 4), 10);
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 40u);
    EXPECT_GE(d.warmup_steps, 9u * 50 - 9);
    EXPECT_LE(d.warmup_steps, 9u * 50);
    expect_agreement(keys);
  }
}

// `iterations` copies of `iteration`, with `extra` launched after position `at` of every
// `every`-th one (1-based: iterations every-1, 2*every-1, ...).
Keys with_extra(const Keys& iteration, size_t iterations, size_t every, size_t at, uint32_t extra) {
  Keys keys;
  for (size_t i = 0; i < iterations; ++i) {
    append(keys, Keys(iteration.begin(), iteration.begin() + at));
    if (i % every == every - 1) keys.push_back(extra);
    append(keys, Keys(iteration.begin() + at, iteration.end()));
  }
  return keys;
}

TEST(IterationDetector, OccasionalExtraLaunchKeepsThePeriod) {
  for (uint32_t period : {7u, 20u, 300u}) {
    for (size_t at : {size_t{0}, size_t{period / 2}, size_t{period}}) {
      SCOPED_TRACE("period " + std::to_string(period) + " extra at " + std::to_string(at));
      const Keys keys = with_extra(distinct(period, 100), 60, 10, at, 99999);
      const trace::Detection d = IterationDetector::detect(keys);
      EXPECT_EQ(d.period, period);
      EXPECT_EQ(d.warmup_steps, 0u);
      EXPECT_LT(d.confidence, 1.0);
      EXPECT_GT(d.confidence, 0.95);
      // Each extra launch is one step that matches nothing.
      EXPECT_NEAR(d.confidence, 1.0 - 6.0 / static_cast<double>(keys.size() - period), 1e-9);
      expect_agreement(keys);
    }
  }
}

TEST(IterationDetector, NoiseInTheLastIteration) {
  const Keys iteration = random_keys(50, 30, 5);
  // Extra launches in iterations 9, 19, 29, then a clean iteration, then one with an extra
  // launch just before its last launch, which ends the data.
  Keys keys = with_extra(iteration, 30, 10, 25, 99999);
  append(keys, iteration);
  append(keys, Keys(iteration.begin(), iteration.begin() + 49));
  keys.push_back(77777);
  keys.push_back(iteration.back());
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 50u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_LT(d.confidence, 1.0);
  EXPECT_GT(d.confidence, 0.99);
  expect_agreement(keys);
}

TEST(IterationDetector, ExtraLaunchesInTwoConsecutiveIterations) {
  // The second extra comes before the first one's counterpart has passed: the lag moves twice.
  const Keys iteration = distinct(60, 100);
  Keys keys = repeat(iteration, 10);
  append(keys, Keys(iteration.begin(), iteration.begin() + 50));
  keys.push_back(99999);
  append(keys, Keys(iteration.begin() + 50, iteration.end()));
  append(keys, Keys(iteration.begin(), iteration.begin() + 20));
  keys.push_back(88888);
  append(keys, Keys(iteration.begin() + 20, iteration.end()));
  append(keys, iteration, 10);
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 60u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_NEAR(d.confidence, 1.0 - 2.0 / static_cast<double>(keys.size() - 60), 1e-9);
  expect_agreement(keys);
}

TEST(IterationDetector, IrregularNoiseAndMissingLaunches) {
  const Keys iteration = random_keys(64, 40, 8);
  std::mt19937 rng(3);
  Keys keys;
  for (int i = 0; i < 80; ++i) {
    const int event = static_cast<int>(rng() % 12);
    const size_t at = 1 + rng() % 60;
    for (size_t s = 0; s < iteration.size(); ++s) {
      if (s == at && event == 0) keys.push_back(4242);  // an extra launch
      if (s == at && event == 1) continue;              // a launch left out
      if (s == at && event == 2) {
        keys.push_back(4343);  // a launch replaced by another
        continue;
      }
      keys.push_back(iteration[s]);
    }
  }
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 64u);
  EXPECT_LT(d.confidence, 1.0);
  EXPECT_GT(d.confidence, 0.95);
  expect_agreement(keys);
}

TEST(IterationDetector, TwoExtraLaunchesInOneIterationEndTheRegion) {
  const Keys iteration = distinct(30, 100);
  Keys keys = repeat(iteration, 10);
  append(keys, Keys(iteration.begin(), iteration.begin() + 10));
  append(keys, Keys{9001, 9002});
  append(keys, Keys(iteration.begin() + 10, iteration.end()));
  const uint64_t after = keys.size() - 20;  // the region restarts after the extras
  append(keys, iteration, 10);
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 30u);
  EXPECT_EQ(d.warmup_steps, after);
  EXPECT_DOUBLE_EQ(d.confidence, 1.0);
  expect_agreement(keys);
}

TEST(IterationDetector, FinalPartialIteration) {
  const Keys iteration = distinct(31, 100);
  Keys keys = repeat(iteration, 20);
  append(keys, Keys(iteration.begin(), iteration.begin() + 17));
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 31u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_DOUBLE_EQ(d.confidence, 1.0);
  expect_agreement(keys);
}

TEST(IterationDetector, TrailingLaunchesThatDoNotRepeat) {
  const Keys iteration = distinct(31, 100);
  Keys keys = repeat(iteration, 20);
  append(keys, distinct(40, 7000));  // checkpoint saving at exit
  const trace::Detection d = IterationDetector::detect(keys);
  EXPECT_EQ(d.period, 31u);
  EXPECT_EQ(d.warmup_steps, 0u);
  EXPECT_NEAR(d.confidence, 19.0 * 31 / (keys.size() - 31), 1e-9);
  expect_agreement(keys);
}

TEST(IterationDetector, NoRepetition) {
  for (uint32_t alphabet : {4u, 1000000u}) {
    SCOPED_TRACE("alphabet " + std::to_string(alphabet));
    const Keys keys = random_keys(5000, alphabet, 99);
    const trace::Detection d = IterationDetector::detect(keys);
    EXPECT_EQ(d.period, 0u);
    EXPECT_EQ(d.confidence, 0.0);
    EXPECT_EQ(d.source, "none");
    expect_agreement(keys);
  }
  EXPECT_EQ(IterationDetector::detect(Keys{}).period, 0u);
  EXPECT_EQ(IterationDetector::detect(Keys{1, 2, 1, 2, 1, 2}).period, 0u);  // too short
}

TEST(IterationDetector, StreamingReportsBoundaries) {
  const Keys iteration = distinct(13, 100);
  Keys keys = distinct(7, 5000);
  append(keys, iteration, 40);
  IterationDetector d;
  std::vector<uint64_t> reported;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (d.push(keys[i])) reported.push_back(i);
  }
  ASSERT_TRUE(d.locked());
  ASSERT_FALSE(reported.empty());
  for (uint64_t r : reported) EXPECT_EQ((r - 7) % 13, 0u) << r;
  EXPECT_EQ(reported.back(), 7u + 13 * 39);
  // Once locked, boundaries are known for the whole region, including before the lock.
  for (uint64_t s = 0; s < keys.size(); ++s) {
    EXPECT_EQ(d.boundary_at(s), s >= 7 && (s - 7) % 13 == 0) << s;
  }
  EXPECT_EQ(d.last_boundary(), std::optional<uint64_t>(7 + 13 * 39));
  EXPECT_FALSE(d.boundary_at(keys.size()));
}

TEST(IterationDetector, StreamingBoundariesFollowAnExtraLaunch) {
  const Keys iteration = distinct(20, 100);
  const Keys keys = with_extra(iteration, 30, 10, 20, 99999);  // extra at the iteration's end
  IterationDetector d;
  for (uint32_t k : keys) d.push(k);
  ASSERT_TRUE(d.locked());
  // Iteration i starts at 20 * i + (number of extras before it).
  for (uint64_t i = 1; i < 30; ++i) {
    const uint64_t start = 20 * i + i / 10;
    EXPECT_TRUE(d.boundary_at(start)) << i;
    EXPECT_FALSE(d.boundary_at(start - 1)) << i;
  }
}

TEST(IterationDetector, StreamingFollowsAChangeOfPeriod) {
  IterationDetector d;
  Keys keys = repeat(distinct(13, 100), 40);
  for (uint32_t k : keys) d.push(k);
  EXPECT_EQ(d.current().period, 13u);
  const Keys eval = distinct(7, 500);
  for (int i = 0; i < 100; ++i) {
    for (uint32_t k : eval) d.push(k);
  }
  EXPECT_TRUE(d.locked());
  EXPECT_EQ(d.current().period, 7u);
  EXPECT_EQ(d.current().warmup_steps, 13u * 40);
  EXPECT_EQ(d.last_boundary(), std::optional<uint64_t>(13 * 40 + 7 * 99));
}

TEST(IterationDetector, StreamingKeepsReportingAfterTheLoopEnds) {
  IterationDetector d;
  for (uint32_t k : repeat(distinct(13, 100), 40)) d.push(k);
  ASSERT_TRUE(d.locked());
  for (uint32_t k : random_keys(200, 1000000, 5)) d.push(k);
  EXPECT_FALSE(d.locked());
  EXPECT_EQ(d.current().period, 13u);
  EXPECT_LT(d.current().confidence, 1.0);
}

TEST(IterationDetector, SmallWindow) {
  DetectorOptions options;
  options.window_log2 = 10;  // 1024 keys
  IterationDetector d(options);
  const Keys iteration = random_keys(300, 50, 21);
  for (int i = 0; i < 20; ++i) {
    for (uint32_t k : iteration) d.push(k);
  }
  EXPECT_TRUE(d.locked());
  EXPECT_EQ(d.current().period, 300u);
  EXPECT_DOUBLE_EQ(d.current().confidence, 1.0);
  EXPECT_FALSE(d.boundary_at(0));        // out of the window now
  EXPECT_TRUE(d.boundary_at(300 * 19));  // in it
  // A period longer than half the window is not found.
  IterationDetector small(options);
  for (int i = 0; i < 4; ++i) {
    for (uint32_t k : distinct(600, 100)) small.push(k);
  }
  EXPECT_EQ(small.current().period, 0u);
}

TEST(IterationDetector, MarkersOverrideDetection) {
  IterationDetector d;
  const Keys iteration = distinct(13, 100);
  for (uint32_t k : repeat(iteration, 10)) d.push(k);  // detected by period first
  EXPECT_EQ(d.current().source, "period");
  std::vector<uint64_t> reported;
  const Keys warm = {1, 2, 3};
  for (int i = 0; i < 5; ++i) {
    d.mark("nvtx:train_step");
    Keys it = iteration;
    if (i == 0) it.insert(it.begin() + 5, warm.begin(), warm.end());
    for (uint32_t k : it) {
      if (d.push(k)) reported.push_back(d.steps() - 1);
    }
  }
  const uint64_t first = 130;
  EXPECT_EQ(reported,
            (std::vector<uint64_t>{first, first + 16, first + 29, first + 42, first + 55}));
  const trace::Detection det = d.current();
  EXPECT_EQ(det.source, "nvtx:train_step");
  EXPECT_EQ(det.period, 13u);
  EXPECT_EQ(det.warmup_steps, first);
  EXPECT_LT(det.confidence, 1.0);  // the first marked iteration differs
  EXPECT_TRUE(d.locked());
  EXPECT_TRUE(d.boundary_at(first + 16));
  EXPECT_FALSE(d.boundary_at(first + 17));
  EXPECT_EQ(d.last_boundary(), std::optional<uint64_t>(first + 55));
}

TEST(IterationDetector, ApiMarkersFromTheStart) {
  IterationDetector d;
  EXPECT_EQ(d.current().period, 0u);
  for (int i = 0; i < 4; ++i) {
    d.mark();
    for (uint32_t k : distinct(9, 100)) d.push(k);
  }
  const trace::Detection det = d.current();
  EXPECT_EQ(det.source, "api");
  EXPECT_EQ(det.period, 9u);
  EXPECT_EQ(det.warmup_steps, 0u);
  EXPECT_DOUBLE_EQ(det.confidence, 1.0);
}

}  // namespace
}  // namespace umswap::tracer

namespace umswap::tracer {
namespace {

// A trainer's loop ending in one optimizer kernel per parameter (40 identical launches), and a
// program that copies its weights back one tensor at a time after the loop: neither run of
// identical launches is a new regime of period 1 (seen on cudnn_vgg16 before the fix).
TEST(IterationDetector, RunsOfIdenticalLaunchesAreNotANewPeriod) {
  Keys iteration = distinct(300);
  append(iteration, Keys(40, 9999));
  Keys keys = repeat(iteration, 3);
  Keys partial(keys.begin(), keys.begin() + 300 + 35);  // ends inside the optimizer run
  Keys inside = keys;
  append(inside, partial);
  EXPECT_EQ(IterationDetector::detect(inside).period, 340u);
  Keys tail = keys;
  append(tail, Keys(64, 7777));  // memcpy DtoH per weight tensor after the loop
  const trace::Detection d = IterationDetector::detect(tail);
  EXPECT_EQ(d.period, 340u);
  EXPECT_EQ(d.warmup_steps, 0u);
}

}  // namespace
}  // namespace umswap::tracer
