// Planner: no actions when everything fits, bytes moved equal to a brute-force optimum on small
// cyclic traces, self-consistent plans on random traces (no misses, peak under the budget, no
// eviction of live data, no wasted transfers), coalescing, lookahead limits, unfit steps, bad
// input, block widening, and the simulator's own checks.
#include "umswap/advisor/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace umswap::advisor {
namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;
constexpr uint64_t kBlock = 2 * MiB;

// Builds a PlanInput step by step.
struct Builder {
  PlanInput in;

  Builder() { in.granularity = kBlock; }
  uint32_t buffer(uint64_t size) {
    in.buffer_sizes.push_back(size);
    return static_cast<uint32_t>(in.buffer_sizes.size() - 1);
  }
  Builder& step(std::vector<PlanRange> ranges, double seconds = 0.0) {
    PlanStep s;
    s.first_range = in.ranges.size();
    s.range_count = static_cast<uint32_t>(ranges.size());
    s.seconds = seconds;
    in.ranges.insert(in.ranges.end(), ranges.begin(), ranges.end());
    in.steps.push_back(s);
    return *this;
  }
};

PlanRange whole(const PlanInput& in, uint32_t buffer) {
  return {buffer, 0, in.buffer_sizes[buffer]};
}

uint64_t total(const std::vector<PlanRange>& ranges) {
  uint64_t bytes = 0;
  for (const PlanRange& r : ranges) bytes += r.length;
  return bytes;
}

// Structural checks every plan must pass.
void expect_well_formed(const PlanInput& in, const Plan& plan) {
  const auto S = static_cast<uint32_t>(in.steps.size());
  for (size_t i = 0; i < plan.actions.size(); ++i) {
    const Action& a = plan.actions[i];
    ASSERT_LT(a.at_step, S);
    EXPECT_EQ(a.range.offset % in.granularity, 0u);
    EXPECT_TRUE(a.range.offset + a.range.length == in.buffer_sizes[a.range.buffer] ||
                a.range.length % in.granularity == 0);
    if (a.kind == ActionKind::evict) {
      EXPECT_GE(a.wait_back, 1u);
      EXPECT_LE(a.wait_back, S);
      EXPECT_EQ(a.use_ahead, 0u);
    } else {
      EXPECT_EQ(a.wait_back, 0u);
      EXPECT_LT(a.use_ahead, S);
    }
    if (i == 0) continue;
    const Action& p = plan.actions[i - 1];
    ASSERT_LE(p.at_step, a.at_step);
    if (p.at_step != a.at_step) continue;
    EXPECT_FALSE(p.kind == ActionKind::prefetch && a.kind == ActionKind::evict);
  }
  // Coalesced: no two actions of one step and kind that touch end to end in one buffer.
  for (const Action& a : plan.actions) {
    for (const Action& b : plan.actions) {
      if (&a == &b || a.at_step != b.at_step || a.kind != b.kind) continue;
      if (a.range.buffer == b.range.buffer) {
        EXPECT_NE(a.range.offset + a.range.length, b.range.offset) << "not coalesced";
      }
    }
  }
  uint64_t in_bytes = 0, out_bytes = 0, prefetches = 0, evictions = 0;
  for (const Action& a : plan.actions) {
    (a.kind == ActionKind::prefetch ? in_bytes : out_bytes) += a.range.length;
    ++(a.kind == ActionKind::prefetch ? prefetches : evictions);
  }
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, in_bytes);
  EXPECT_EQ(plan.bytes_evicted_per_iteration, out_bytes);
  EXPECT_EQ(plan.prefetch_calls, prefetches);
  EXPECT_EQ(plan.evict_calls, evictions);
}

// Replays `iterations` and expects a clean steady state: no misses, under the budget, nothing
// evicted early, nothing moved for nothing, the plan's own figures.
void expect_clean(const PlanInput& in, const Plan& plan, int iterations) {
  expect_well_formed(in, plan);
  EXPECT_TRUE(plan.unfit_steps.empty());
  const Simulation sim = simulate(in, plan, iterations);
  EXPECT_EQ(sim.misses, 0u);
  EXPECT_LE(sim.peak_resident_bytes, in.budget_bytes);
  EXPECT_EQ(sim.peak_resident_bytes, plan.peak_resident_bytes);
  EXPECT_FALSE(sim.eviction_before_last_use);
  EXPECT_FALSE(sim.prefetch_of_resident);
  EXPECT_FALSE(sim.evict_of_absent);
  EXPECT_EQ(sim.bytes_in, plan.bytes_prefetched_per_iteration * uint64_t(iterations));
  EXPECT_EQ(sim.bytes_out, plan.bytes_evicted_per_iteration * uint64_t(iterations));
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, plan.bytes_evicted_per_iteration);
}

// Random trace: `buffers` buffers of 1..max_blocks blocks (some with a short last block), steps
// touching 1..max_ranges random ranges, budget = `fraction` of the footprint but at least the
// largest step.
PlanInput random_trace(uint32_t seed, int steps, int buffers, int max_blocks, int max_ranges,
                       double fraction) {
  std::mt19937 rng(seed);
  Builder t;
  for (int b = 0; b < buffers; ++b) {
    const uint64_t blocks = std::uniform_int_distribution<uint64_t>(1, max_blocks)(rng);
    const uint64_t tail =
        rng() % 3 == 0 ? std::uniform_int_distribution<uint64_t>(1, kBlock)(rng) : kBlock;
    t.buffer((blocks - 1) * kBlock + tail);
  }
  for (int s = 0; s < steps; ++s) {
    std::vector<PlanRange> ranges;
    const int n = std::uniform_int_distribution<int>(1, max_ranges)(rng);
    for (int r = 0; r < n; ++r) {
      const auto b = static_cast<uint32_t>(rng() % buffers);
      const uint64_t size = t.in.buffer_sizes[b];
      const uint64_t offset = rng() % size;
      const uint64_t length = 1 + rng() % std::min<uint64_t>(size - offset, 3 * kBlock);
      ranges.push_back({b, offset, length});
    }
    t.step(ranges, (rng() % 4) * 1e-4);
  }
  // Footprint and largest step, from a plan with an unlimited budget.
  t.in.budget_bytes = std::numeric_limits<uint64_t>::max() / 8;
  const Plan all = make_plan(t.in);
  uint64_t largest = 0;
  for (size_t s = 0; s < t.in.steps.size(); ++s) {
    PlanInput one = t.in;
    one.steps = {t.in.steps[s]};
    largest = std::max(largest, make_plan(one).footprint_bytes);
  }
  t.in.budget_bytes = std::max(largest, static_cast<uint64_t>(all.footprint_bytes * fraction));
  return t.in;
}

// ---- Brute force ------------------------------------------------------------------------------

// Fewest block loads per iteration of a cyclic schedule: the GPU holds at most `capacity` blocks,
// step t needs the blocks of mask need[t], a block is loaded only when a step needs it and may be
// dropped at any time, and the iteration ends with the blocks it started with. Exhaustive: every
// start set, every set of blocks kept after every step.
int brute_force_loads(const std::vector<uint32_t>& need, int blocks, int capacity) {
  const uint32_t all = (1u << blocks) - 1;
  constexpr int kInf = 1 << 20;
  int best = kInf;
  for (uint32_t start = 0; start <= all; ++start) {
    if (std::popcount(start) > capacity) continue;
    std::vector<int> cost(all + 1, kInf);
    cost[start] = 0;
    for (uint32_t r : need) {
      std::vector<int> next(all + 1, kInf);
      for (uint32_t x = 0; x <= all; ++x) {
        if (cost[x] == kInf) continue;
        const int loads = cost[x] + std::popcount(r & ~x);
        // Keep r plus any subset of what was there.
        const uint32_t optional = x & ~r;
        for (uint32_t keep = optional;; keep = (keep - 1) & optional) {
          const uint32_t y = r | keep;
          if (std::popcount(y) <= capacity) next[y] = std::min(next[y], loads);
          if (keep == 0) break;
        }
      }
      cost.swap(next);
    }
    for (uint32_t x = 0; x <= all; ++x) {
      if ((x & start) == start) best = std::min(best, cost[x]);
    }
  }
  return best;
}

// ---- Tests ------------------------------------------------------------------------------------

TEST(Planner, FitsInBudgetNeedsNoActions) {
  PlanInput in = random_trace(7, 200, 20, 6, 4, 1.0);
  const Plan sized = make_plan(in);
  in.budget_bytes = sized.footprint_bytes;
  const Plan plan = make_plan(in);
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_EQ(total(plan.resident_at_start), plan.footprint_bytes);
  EXPECT_EQ(plan.peak_resident_bytes, plan.footprint_bytes);
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, 0u);
  expect_clean(in, plan, 3);
  const Simulation sim = simulate(in, plan, 3);
  EXPECT_EQ(sim.bytes_in, 0u);
  EXPECT_EQ(sim.bytes_out, 0u);

  // One byte less and something has to move.
  in.budget_bytes -= 1;
  const Plan tight = make_plan(in);
  EXPECT_GT(tight.bytes_prefetched_per_iteration, 0u);
  expect_clean(in, tight, 3);
}

// Where MIN alternates between iterations the planner's fallback is a heuristic; 10% of these
// cases take that path (in 38,000 such cases it always found the optimum).
TEST(Planner, MatchesBruteForceOptimumOnSmallCyclicTraces) {
  std::mt19937 rng(2024);
  int cases_with_moves = 0;
  for (int c = 0; c < 200; ++c) {
    const int blocks = std::uniform_int_distribution<int>(4, 6)(rng);
    const int steps = std::uniform_int_distribution<int>(6, 10)(rng);
    const int capacity = std::uniform_int_distribution<int>(2, std::min(4, blocks - 1))(rng);
    Builder t;
    // Blocks are whole buffers or blocks of a two-block buffer: both must count the same.
    std::vector<PlanRange> block_range;
    for (int b = 0; b < blocks; ++b) {
      if (b + 1 < blocks && rng() % 3 == 0) {
        const uint32_t id = t.buffer(2 * kBlock);
        block_range.push_back({id, 0, kBlock});
        block_range.push_back({id, kBlock + 5, 100});  // widens to the second block
        ++b;
      } else {
        block_range.push_back({t.buffer(kBlock), 0, kBlock});
      }
    }
    std::vector<uint32_t> need(steps);
    for (int s = 0; s < steps; ++s) {
      const int per_step = std::uniform_int_distribution<int>(1, std::min(2, capacity))(rng);
      std::vector<PlanRange> ranges;
      while (std::popcount(need[s]) < per_step) {
        const int b = static_cast<int>(rng() % blocks);
        if (need[s] & (1u << b)) continue;
        need[s] |= 1u << b;
        ranges.push_back(block_range[b]);
      }
      t.step(ranges);
    }
    t.in.budget_bytes = capacity * kBlock + kBlock / 2;  // a half block more fits nothing more
    SCOPED_TRACE("case " + std::to_string(c));
    const Plan plan = make_plan(t.in);
    const int optimum = brute_force_loads(need, blocks, capacity);
    EXPECT_EQ(plan.bytes_prefetched_per_iteration, optimum * kBlock);
    EXPECT_EQ(plan.bytes_evicted_per_iteration, optimum * kBlock);
    expect_clean(t.in, plan, 3);
    cases_with_moves += optimum > 0;
  }
  EXPECT_GT(cases_with_moves, 150);  // the cases exercise the budget
}

// MIN on the repeating sequence A B C with room for two cycles over two iterations (1 and 2 loads);
// a one-iteration plan needs 2 loads.
TEST(Planner, SettlesOnOneIterationWhenMinCyclesOverTwo) {
  Builder t;
  for (int i = 0; i < 3; ++i) t.buffer(kBlock);
  t.step({whole(t.in, 0)}).step({whole(t.in, 1)}).step({whole(t.in, 2)});
  t.in.budget_bytes = 2 * kBlock;
  const Plan plan = make_plan(t.in);
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, 2 * kBlock);
  expect_clean(t.in, plan, 4);
}

TEST(Planner, RandomTracesReplayCleanly) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    for (const double fraction : {0.3, 0.6, 0.9}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " fraction " + std::to_string(fraction));
      PlanInput in = random_trace(seed, 300, 30, 8, 5, fraction);
      in.lookahead_bytes = seed % 3 == 0 ? 8 * MiB : 0;
      in.lookahead_seconds = seed % 4 == 0 ? 5e-4 : 0.0;
      const Plan plan = make_plan(in);
      ASSERT_TRUE(plan.unfit_steps.empty());
      expect_clean(in, plan, 5);
      EXPECT_GT(plan.bytes_prefetched_per_iteration, 0u);
    }
  }
}

TEST(Planner, OneRangeIsOnePrefetch) {
  Builder t;
  const uint32_t a = t.buffer(64 * MiB);  // 32 blocks
  const uint32_t b = t.buffer(64 * MiB);
  const uint32_t x = t.buffer(kBlock);
  t.step({whole(t.in, a)})
      .step({whole(t.in, x)})
      .step({whole(t.in, x)})
      .step({whole(t.in, b)})
      .step({whole(t.in, x)});
  t.in.budget_bytes = 66 * MiB;
  const Plan plan = make_plan(t.in);
  expect_clean(t.in, plan, 3);
  ASSERT_EQ(plan.prefetch_calls, 2u);
  ASSERT_EQ(plan.evict_calls, 2u);
  for (const Action& act : plan.actions) EXPECT_EQ(act.range.length, 64 * MiB);
  // B comes in as soon as A has left (step 1), A as soon as B has left (step 4).
  const Action* b_in = nullptr;
  for (const Action& act : plan.actions) {
    if (act.kind == ActionKind::prefetch && act.range.buffer == b) b_in = &act;
  }
  ASSERT_NE(b_in, nullptr);
  EXPECT_EQ(b_in->at_step, 1u);
  EXPECT_EQ(b_in->use_ahead, 2u);
}

TEST(Planner, LookaheadLimitsHowEarly) {
  // Two steps that each fill the budget (0 and 12) leave no gap to keep; between them every step
  // touches a buffer of its own, and there is room to prefetch far ahead.
  Builder t;
  const uint32_t z1 = t.buffer(16 * MiB), z2 = t.buffer(16 * MiB);
  for (int s = 0; s < 24; ++s) {
    const uint32_t b = s == 0 ? z1 : s == 12 ? z2 : t.buffer(kBlock);
    t.step({whole(t.in, b)}, s % 5 == 0 ? 0.0 : 1e-3);
  }
  t.in.budget_bytes = 16 * MiB;
  auto furthest = [&](const Plan& plan) {
    double seconds = 0;
    const size_t S = t.in.steps.size();
    for (const Action& a : plan.actions) {
      if (a.kind != ActionKind::prefetch) continue;
      double ahead = 0;
      for (uint32_t k = 0; k < a.use_ahead; ++k) {
        const double s = t.in.steps[(a.at_step + k) % S].seconds;
        ahead += s > 0 ? s : 10e-6;
      }
      seconds = std::max(seconds, ahead);
    }
    return seconds;
  };
  const Plan free_plan = make_plan(t.in);
  expect_clean(t.in, free_plan, 3);
  EXPECT_GT(furthest(free_plan), 3e-3);

  t.in.lookahead_seconds = 2.5e-3;
  const Plan limited = make_plan(t.in);
  expect_clean(t.in, limited, 3);
  EXPECT_LE(furthest(limited), 2.5e-3 * (1 + 1e-9));
  EXPECT_GT(furthest(limited), 1.5e-3);  // as far as allowed, not less
  EXPECT_EQ(limited.bytes_prefetched_per_iteration, free_plan.bytes_prefetched_per_iteration);

  // Bytes in flight ahead of use: at most lookahead_bytes at every step.
  t.in.lookahead_seconds = 0;
  t.in.lookahead_bytes = 2 * kBlock;
  const Plan narrow = make_plan(t.in);
  expect_clean(t.in, narrow, 3);
  std::vector<uint64_t> in_flight(t.in.steps.size(), 0);
  uint64_t prefetched_ahead = 0;
  for (const Action& a : narrow.actions) {
    if (a.kind != ActionKind::prefetch) continue;
    for (uint32_t k = 0; k < a.use_ahead; ++k) {
      in_flight[(a.at_step + k) % t.in.steps.size()] += a.range.length;
    }
    prefetched_ahead += a.use_ahead > 0;
  }
  EXPECT_GT(prefetched_ahead, 0u);
  EXPECT_LE(*std::max_element(in_flight.begin(), in_flight.end()), 2 * kBlock);
}

TEST(Planner, UnfitStepIsReportedAndFaults) {
  Builder t;
  const uint32_t big = t.buffer(16 * MiB);  // 8 blocks, more than the budget
  std::vector<uint32_t> small;
  for (int i = 0; i < 6; ++i) small.push_back(t.buffer(kBlock));
  for (int s = 0; s < 12; ++s) t.step({whole(t.in, small[s % 6])});
  t.step({whole(t.in, big)});
  for (int s = 0; s < 6; ++s) t.step({whole(t.in, small[(s * 5) % 6])});
  t.in.budget_bytes = 10 * MiB;
  const Plan plan = make_plan(t.in);
  EXPECT_EQ(plan.unfit_steps, std::vector<uint32_t>{12});
  expect_well_formed(t.in, plan);
  const Simulation sim = simulate(t.in, plan, 4);
  EXPECT_GT(sim.misses, 0u);
  EXPECT_FALSE(sim.eviction_before_last_use);
  EXPECT_FALSE(sim.prefetch_of_resident);
  EXPECT_FALSE(sim.evict_of_absent);
  EXPECT_EQ(sim.peak_resident_bytes, 16 * MiB);  // the unfit step alone, nothing beside it
  EXPECT_EQ(plan.peak_resident_bytes, 16 * MiB);
  // No prefetch takes the GPU past the budget: before the unfit step the budget's 5 blocks hold
  // step 11's buffer and 4 blocks of the big one; its other 4 blocks fault, every iteration.
  EXPECT_EQ(sim.misses, 4u * 4);
}

void expect_invalid(const PlanInput& in, const std::string& words) {
  try {
    make_plan(in);
    ADD_FAILURE() << "no exception; expected one naming: " << words;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Planner, BadInputThrowsNamingTheProblem) {
  Builder t;
  t.buffer(8 * MiB);
  t.step({{0, 0, MiB}});
  t.in.budget_bytes = 4 * MiB;
  ASSERT_NO_THROW(make_plan(t.in));
  {
    PlanInput in = t.in;
    in.budget_bytes = 0;
    expect_invalid(in, "budget_bytes is 0");
  }
  {
    PlanInput in = t.in;
    in.granularity = 0;
    expect_invalid(in, "granularity is 0");
  }
  {
    PlanInput in = t.in;
    in.ranges[0] = {0, 7 * MiB, 2 * MiB};
    expect_invalid(in, "is outside buffer 0");
  }
  {
    PlanInput in = t.in;
    in.ranges[0] = {0, ~uint64_t{0} - 10, 100};  // offset + length wraps around
    expect_invalid(in, "is outside buffer 0");
  }
  {
    PlanInput in = t.in;
    in.ranges[0].buffer = 3;
    expect_invalid(in, "names buffer 3");
  }
  {
    PlanInput in = t.in;
    in.steps[0].range_count = 2;
    expect_invalid(in, "step 0 names ranges");
  }
  {
    PlanInput in = t.in;
    in.steps[0].first_range = 5;
    expect_invalid(in, "step 0 names ranges");
  }
  {
    PlanInput in = t.in;
    in.steps.clear();
    expect_invalid(in, "steps is empty");
  }
  {
    PlanInput in = t.in;
    in.steps[0].seconds = -1;
    expect_invalid(in, "seconds");
  }
  {
    Plan plan;
    plan.actions.push_back({5, ActionKind::prefetch, 0, 0, {0, 0, kBlock}});
    EXPECT_THROW(simulate(t.in, plan, 1), std::invalid_argument);
  }
}

TEST(Planner, AccessesWidenToAlignedBlocks) {
  Builder t;
  const uint32_t a = t.buffer(8 * MiB);
  const uint32_t b = t.buffer(5 * MiB);  // blocks of 2, 2 and 1 MiB
  const uint32_t c = t.buffer(8 * MiB);
  t.step({{a, 3 * MiB, 100}});
  t.step({{b, 4 * MiB + MiB / 2, 10}});
  t.step({{c, 0, 6 * MiB}});
  t.in.budget_bytes = 64 * MiB;
  const Plan fits = make_plan(t.in);
  EXPECT_EQ(fits.footprint_bytes, 2 * MiB + 1 * MiB + 6 * MiB);
  EXPECT_EQ(fits.resident_at_start, (std::vector<PlanRange>{
                                        {a, 2 * MiB, 2 * MiB},
                                        {b, 4 * MiB, 1 * MiB},
                                        {c, 0, 6 * MiB},
                                    }));
  // With room for one step at a time, the same blocks move.
  t.in.budget_bytes = 6 * MiB;
  const Plan moves = make_plan(t.in);
  expect_clean(t.in, moves, 3);
  bool saw_a = false, saw_b = false;
  for (const Action& act : moves.actions) {
    if (act.range.buffer == a) {
      EXPECT_EQ(act.range, (PlanRange{a, 2 * MiB, 2 * MiB}));
    }
    if (act.range.buffer == b) {
      EXPECT_EQ(act.range, (PlanRange{b, 4 * MiB, 1 * MiB}));
    }
    saw_a |= act.range.buffer == a;
    saw_b |= act.range.buffer == b;
  }
  EXPECT_TRUE(saw_a && saw_b);
}

TEST(Simulate, FlagsBrokenPlans) {
  Builder t;
  const uint32_t a = t.buffer(kBlock);
  const uint32_t b = t.buffer(kBlock);
  t.step({whole(t.in, a)}).step({whole(t.in, b)}).step({whole(t.in, b)});
  t.in.budget_bytes = kBlock;
  const Plan good = make_plan(t.in);
  expect_clean(t.in, good, 3);

  {  // Evicting B at step 2 while step 2 uses it.
    Plan bad = good;
    for (Action& act : bad.actions) {
      if (act.kind == ActionKind::evict && act.range.buffer == b) {
        act.at_step = 2;
        act.wait_back = 1;
      }
    }
    EXPECT_TRUE(simulate(t.in, bad, 2).eviction_before_last_use);
  }
  {  // Evicting B at step 0 must wait for step 2 of the last iteration (wait_back 1); a
     // wait_back of 2 awaits step 1, before B's last use.
    Plan bad = good;
    for (Action& act : bad.actions) {
      if (act.kind == ActionKind::evict && act.range.buffer == b) act.wait_back = 2;
    }
    const Simulation sim = simulate(t.in, bad, 2);
    EXPECT_TRUE(sim.eviction_before_last_use);
  }
  {  // A resident at the start as well: its prefetch at step 0 is wasted, the budget exceeded.
    Plan bad = good;
    bad.resident_at_start.push_back(whole(t.in, a));
    const Simulation sim = simulate(t.in, bad, 1);
    EXPECT_TRUE(sim.prefetch_of_resident);
    EXPECT_EQ(sim.peak_resident_bytes, 2 * kBlock);
  }
  {
    Plan bad = good;
    bad.actions.insert(bad.actions.begin(), {0, ActionKind::evict, 1, 0, whole(t.in, b)});
    EXPECT_TRUE(simulate(t.in, bad, 1).evict_of_absent);
  }
  {
    Plan bad = good;
    bad.actions.clear();
    const Simulation sim = simulate(t.in, bad, 2);
    EXPECT_EQ(sim.misses, 1u);  // A at the first step, then everything stays
  }
}

}  // namespace
}  // namespace umswap::advisor
