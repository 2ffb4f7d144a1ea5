// Planner: no actions when everything fits, bytes moved equal to a brute-force optimum on small
// cyclic traces (with and without lifetimes), self-consistent plans on random traces (no misses,
// peak under the budget, no eviction of live data, no wasted transfers, no drop of live data),
// dead data dropped rather than moved, coalescing, lookahead limits, unfit steps, bad input, block
// widening, and the simulator's own checks.
#include "umswap/advisor/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
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
  EXPECT_FALSE(sim.drop_of_live);
  EXPECT_EQ(sim.bytes_dropped, plan.bytes_dropped_per_iteration * uint64_t(iterations));
  EXPECT_EQ(sim.bytes_populated, sim.bytes_dropped);
  EXPECT_EQ(sim.bytes_in, plan.bytes_prefetched_per_iteration * uint64_t(iterations));
  EXPECT_EQ(sim.bytes_out, plan.bytes_evicted_per_iteration * uint64_t(iterations));
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, plan.bytes_evicted_per_iteration);
}

// Budget = `fraction` of the footprint, but at least the largest step (footprint and steps from
// plans with an unlimited budget).
void set_budget(PlanInput& in, double fraction) {
  in.budget_bytes = std::numeric_limits<uint64_t>::max() / 8;
  const Plan all = make_plan(in);
  uint64_t largest = 0;
  for (size_t s = 0; s < in.steps.size(); ++s) {
    PlanInput one = in;
    one.steps = {in.steps[s]};
    one.lifetimes.clear();  // positions of the whole iteration: not for one step
    largest = std::max(largest, make_plan(one).footprint_bytes);
  }
  in.budget_bytes = std::max(largest, static_cast<uint64_t>(all.footprint_bytes * fraction));
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
  set_budget(t.in, fraction);
  return t.in;
}

// ---- Brute force ------------------------------------------------------------------------------

// Fewest block loads per iteration of a cyclic schedule: the GPU holds at most `capacity` blocks,
// step t needs the blocks of mask need[t], a block is loaded only when a step needs it and may be
// dropped at any time, and the iteration ends with the blocks it started with. Exhaustive: every
// start set, every set of blocks kept after every step. With lifetimes, fresh[t] = the blocks
// whose use at step t ends a dead gap: loading those costs nothing (populated, not transferred).
int brute_force_loads_dead(const std::vector<uint32_t>& need, const std::vector<uint32_t>& fresh,
                           int blocks, int capacity) {
  const uint32_t all = (1u << blocks) - 1;
  constexpr int kInf = 1 << 20;
  int best = kInf;
  for (uint32_t start = 0; start <= all; ++start) {
    if (std::popcount(start) > capacity) continue;
    std::vector<int> cost(all + 1, kInf);
    cost[start] = 0;
    for (size_t t = 0; t < need.size(); ++t) {
      const uint32_t r = need[t];
      std::vector<int> next(all + 1, kInf);
      for (uint32_t x = 0; x <= all; ++x) {
        if (cost[x] == kInf) continue;
        const int loads = cost[x] + std::popcount(r & ~x & ~fresh[t]);
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

// Steps for the brute-force comparisons: each uses 1 or 2 (at most `capacity`) distinct random
// blocks of `blocks`, block b given by range_of(b). Returns the blocks each step needs, as masks.
std::vector<uint32_t> random_steps(std::mt19937& rng, Builder& t, int steps, int blocks,
                                   int capacity, const std::function<PlanRange(int)>& range_of) {
  std::vector<uint32_t> need(steps);
  for (int s = 0; s < steps; ++s) {
    const int per_step = std::uniform_int_distribution<int>(1, std::min(2, capacity))(rng);
    std::vector<PlanRange> ranges;
    while (std::popcount(need[s]) < per_step) {
      const int b = static_cast<int>(rng() % blocks);
      if (need[s] & (1u << b)) continue;
      need[s] |= 1u << b;
      ranges.push_back(range_of(b));
    }
    t.step(ranges);
  }
  return need;
}

int brute_force_loads(const std::vector<uint32_t>& need, int blocks, int capacity) {
  return brute_force_loads_dead(need, std::vector<uint32_t>(need.size(), 0), blocks, capacity);
}

// A trace with a stream-ordered allocator: `persistent` buffers used at random, plus one slab in
// which tensors are allocated just before their first use (which writes them), used at random
// steps of their life and freed after their last use, at addresses no tensor alive at the same
// time holds. Budget = `fraction` of the footprint, at least the largest step. With `late_free`,
// a tensor is freed up to that many steps after its last use (as a program frees a tensor when it
// goes out of scope, launches after the kernel that read it last).
PlanInput random_lifetime_trace(uint32_t seed, int steps, int persistent, int slab_blocks,
                                double fraction, int late_free = 0) {
  std::mt19937 rng(seed);
  Builder t;
  for (int b = 0; b < persistent; ++b) {
    t.buffer(std::uniform_int_distribution<uint64_t>(1, 3)(rng) * kBlock);
  }
  const uint32_t slab = t.buffer(slab_blocks * kBlock);
  struct Tensor {
    int born, dies;  // allocated after step born, freed after step dies (born < dies)
    uint64_t offset, length;
  };
  std::vector<Tensor> tensors;
  for (int tries = 0; tries < steps * 4; ++tries) {
    const int born = static_cast<int>(rng() % (steps - 1));
    const int dies = born + 1 + static_cast<int>(rng() % std::min(steps - 1 - born, 8));
    const uint64_t length =
        std::uniform_int_distribution<uint64_t>(kBlock / 4, 3 * kBlock)(rng) / 512 * 512;
    const uint64_t offset = (rng() % (slab_blocks * kBlock - length)) / 512 * 512;
    bool clash = false;
    for (const Tensor& o : tensors) {
      clash |= o.born < dies && born < o.dies && o.offset < offset + length &&
               offset < o.offset + o.length;
    }
    if (!clash) tensors.push_back({born, dies, offset, length});
  }
  std::vector<std::vector<PlanRange>> uses(steps);
  for (const Tensor& x : tensors) {
    const int late = late_free > 0 ? static_cast<int>(rng() % (late_free + 1)) : 0;
    const int last = std::max(x.born + 1, x.dies - late);
    uses[x.born + 1].push_back({slab, x.offset, x.length});
    for (int s = x.born + 2; s <= last; ++s) {
      if (rng() % 3 == 0 || s == last) uses[s].push_back({slab, x.offset, x.length});
    }
  }
  for (int s = 0; s < steps; ++s) {
    if (rng() % 2 == 0) {
      const auto b = static_cast<uint32_t>(rng() % persistent);
      uses[s].push_back(whole(t.in, b));
    }
    t.step(uses[s], (rng() % 4) * 1e-4);
  }
  for (int s = 0; s < steps; ++s) {
    for (const Tensor& x : tensors) {
      if (x.born == s)
        t.in.lifetimes.push_back({static_cast<uint32_t>(s), false, {slab, x.offset, x.length}});
      if (x.dies == s)
        t.in.lifetimes.push_back({static_cast<uint32_t>(s), true, {slab, x.offset, x.length}});
    }
  }
  set_budget(t.in, fraction);
  return t.in;
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
    const std::vector<uint32_t> need =
        random_steps(rng, t, steps, blocks, capacity, [&](int b) { return block_range[b]; });
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
  EXPECT_EQ(plan.largest_step_bytes, 16 * MiB);
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

namespace umswap::advisor {
namespace {

// Weights W (one block) are used at steps 0 and 3; tensors X, Y and Z (one slab block each) live
// from just before their first use to just after their last: X at steps 0-1, Y at 1-2, Z at 2-3.
// Room for three blocks of the four. Without lifetimes every block looks live all along and
// something must move; with them each tensor's block is dead between its lives, so nothing crosses
// the link.
TEST(PlannerLifetimes, DeadDataIsDroppedNotMoved) {
  Builder t;
  const uint32_t w = t.buffer(kBlock);
  const uint32_t slab = t.buffer(3 * kBlock);
  const PlanRange x{slab, 0, kBlock}, y{slab, kBlock, kBlock}, z{slab, 2 * kBlock, kBlock};
  t.step({whole(t.in, w), x}).step({x, y}).step({y, z}).step({whole(t.in, w), z});
  t.in.budget_bytes = 3 * kBlock;
  const Plan blind = make_plan(t.in);
  EXPECT_GT(blind.bytes_prefetched_per_iteration, 0u);
  expect_clean(t.in, blind, 3);
  EXPECT_TRUE(blind.drops.empty());

  t.in.lifetimes = {{0, false, y}, {1, true, x}, {1, false, z},
                    {2, true, y},  {3, true, z}, {3, false, x}};
  const Plan plan = make_plan(t.in);
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, 0u);
  EXPECT_EQ(plan.bytes_evicted_per_iteration, 0u);
  EXPECT_EQ(plan.dead_gap_bytes, 3 * kBlock);
  ASSERT_FALSE(plan.drops.empty());
  EXPECT_LE(plan.peak_resident_bytes, t.in.budget_bytes);
  expect_clean(t.in, plan, 4);
  const Simulation sim = simulate(t.in, plan, 4);
  EXPECT_GT(sim.bytes_populated, 0u);
  EXPECT_EQ(sim.bytes_in, 0u);

  // With room for everything, dead gaps are kept: nothing is dropped either.
  t.in.budget_bytes = 4 * kBlock;
  const Plan roomy = make_plan(t.in);
  EXPECT_TRUE(roomy.drops.empty());
  EXPECT_TRUE(roomy.actions.empty());
  expect_clean(t.in, roomy, 2);
}

// A block holding two tensors is dead only once both are freed; a byte no lifetime names (the
// rest of the block) keeps it live.
// W is used at every step, X at steps 0 and 2, Z at 1 and 3; room for two blocks. X is freed
// (and allocated again) only after step 1, though step 0 was its last use: the plan drops it
// from step 1 and gives its room to Z there, but the allocator can discard it only at step 2.
TEST(PlannerLifetimes, PeakAtFreesCountsBlocksUntilTheirFree) {
  Builder t;
  const uint32_t w = t.buffer(kBlock);
  const uint32_t slab = t.buffer(2 * kBlock);
  const PlanRange x{slab, 0, kBlock}, z{slab, kBlock, kBlock};
  t.step({whole(t.in, w), x}).step({whole(t.in, w), z}).step({whole(t.in, w), x});
  t.step({whole(t.in, w), z});
  t.in.budget_bytes = 2 * kBlock;
  t.in.lifetimes = {{1, true, x}, {1, false, x}};
  t.in.hold_until_free = false;  // held (the default), step 1 would need three blocks
  const Plan plan = make_plan(t.in);
  ASSERT_FALSE(plan.drops.empty());
  EXPECT_EQ(plan.drops[0].last_use, 0u);
  EXPECT_EQ(plan.drops[0].next_use, 2u);
  EXPECT_EQ(plan.drops[0].room_at, 2u);  // the launch after the free
  EXPECT_LE(plan.peak_resident_bytes, t.in.budget_bytes);
  expect_clean(t.in, plan, 3);
  EXPECT_EQ(plan.peak_resident_at_frees_bytes, 3 * kBlock);  // W, X and Z at step 1
  EXPECT_EQ(simulate(t.in, plan, 2, true).peak_resident_bytes, 3 * kBlock);

  // Freed right after its last use: the two peaks agree.
  t.in.lifetimes = {{0, true, x}, {1, false, x}};
  const Plan early = make_plan(t.in);
  ASSERT_FALSE(early.drops.empty());
  EXPECT_EQ(early.drops[0].room_at, 1u);
  EXPECT_EQ(early.peak_resident_at_frees_bytes, early.peak_resident_bytes);

  // Held until the free (the default): step 1 holds W, X and Z, more than the budget, and the
  // plan says so instead of counting X's room free.
  t.in.lifetimes = {{1, true, x}, {1, false, x}};
  t.in.hold_until_free = true;
  t.in.budget_bytes = 3 * kBlock;
  const Plan held = make_plan(t.in);
  EXPECT_EQ(held.peak_resident_bytes, 3 * kBlock);
  EXPECT_EQ(held.peak_resident_at_frees_bytes, held.peak_resident_bytes);
  t.in.budget_bytes = 2 * kBlock;
  EXPECT_EQ(make_plan(t.in).unfit_steps, std::vector<uint32_t>{1});
  // A budget of the largest step's blocks leaves no step unfit.
  t.in.budget_bytes = make_plan(t.in).largest_step_bytes;
  EXPECT_TRUE(make_plan(t.in).unfit_steps.empty());
}

TEST(PlannerLifetimes, BlockIsDeadOnlyWhenWhollyUnallocated) {
  Builder t;
  const uint32_t w = t.buffer(kBlock);
  const uint32_t slab = t.buffer(kBlock);
  const PlanRange a{slab, 0, kBlock / 2}, b{slab, kBlock / 2, kBlock / 2};
  t.step({a, b}).step({whole(t.in, w)}).step({whole(t.in, w)}).step({a});
  t.in.budget_bytes = kBlock;  // W always moves; the slab block only when its data is live
  // a and b freed after step 0, a allocated again after step 2: dead gap 0 -> 3.
  t.in.lifetimes = {{0, true, a}, {0, true, b}, {2, false, a}, {3, false, b}};
  Plan plan = make_plan(t.in);
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, kBlock);
  EXPECT_EQ(plan.bytes_dropped_per_iteration, kBlock);
  expect_clean(t.in, plan, 3);

  // Only a is freed: b's bytes stay live, so the slab block moves.
  t.in.lifetimes = {{0, true, a}, {2, false, a}};
  plan = make_plan(t.in);
  EXPECT_EQ(plan.bytes_dropped_per_iteration, 0u);
  EXPECT_EQ(plan.bytes_prefetched_per_iteration, 2 * kBlock);
  expect_clean(t.in, plan, 3);

  // a is freed and allocated again before b is freed: never wholly unallocated.
  t.in.lifetimes = {{0, true, a}, {1, false, a}, {1, true, b}, {2, false, b}};
  plan = make_plan(t.in);
  EXPECT_EQ(plan.bytes_dropped_per_iteration, 0u);
  expect_clean(t.in, plan, 3);

  // The same block, but free space (never named) in its second half: not dead either.
  t.in.lifetimes = {{0, true, a}, {2, false, a}};
  t.in.ranges[1] = a;  // step 0 touches only a
  plan = make_plan(t.in);
  EXPECT_EQ(plan.bytes_dropped_per_iteration, 0u);
}

TEST(PlannerLifetimes, MatchesBruteForceOptimum) {
  std::mt19937 rng(77);
  int cases_with_dead = 0, cases_with_moves = 0;
  for (int c = 0; c < 150; ++c) {
    const int blocks = std::uniform_int_distribution<int>(4, 6)(rng);
    const int steps = std::uniform_int_distribution<int>(6, 10)(rng);
    const int capacity = std::uniform_int_distribution<int>(2, std::min(4, blocks - 1))(rng);
    Builder t;
    const uint32_t slab = t.buffer(blocks * kBlock);  // one block per "buffer" of the brute force
    const std::vector<uint32_t> need = random_steps(rng, t, steps, blocks, capacity, [&](int b) {
      return PlanRange{slab, b * kBlock, kBlock};
    });
    std::vector<uint32_t> fresh(steps, 0);
    // Some blocks are freed after a use and allocated again before their next use.
    for (int s = 0; s < steps; ++s) {
      for (int b = 0; b < blocks; ++b) {
        if (!(need[s] & (1u << b)) || rng() % 3 != 0) continue;
        int next = s + 1;
        while (!(need[next % steps] & (1u << b))) ++next;
        const uint32_t realloc = static_cast<uint32_t>((next - 1) % steps);
        t.in.lifetimes.push_back({static_cast<uint32_t>(s), true, {slab, b * kBlock, kBlock}});
        t.in.lifetimes.push_back({realloc, false, {slab, b * kBlock, kBlock}});
        fresh[next % steps] |= 1u << b;
      }
    }
    // A block freed twice without an allocation in between cannot happen: keep the first life.
    std::stable_sort(
        t.in.lifetimes.begin(), t.in.lifetimes.end(),
        [](const PlanLifetime& a, const PlanLifetime& b) { return a.after_step < b.after_step; });
    t.in.budget_bytes = capacity * kBlock + kBlock / 2;
    SCOPED_TRACE("case " + std::to_string(c));
    const Plan plan = make_plan(t.in);
    const int optimum = brute_force_loads_dead(need, fresh, blocks, capacity);
    EXPECT_EQ(plan.bytes_prefetched_per_iteration, optimum * kBlock);
    expect_clean(t.in, plan, 3);
    cases_with_dead += plan.dead_gap_bytes > 0;
    cases_with_moves += optimum > 0;
  }
  EXPECT_GT(cases_with_dead, 100);
  EXPECT_GT(cases_with_moves, 50);
}

TEST(PlannerLifetimes, RandomTracesReplayCleanlyAndMoveLess) {
  uint64_t with = 0, without = 0, dropped = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    for (const double fraction : {0.3, 0.6, 0.9}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " fraction " + std::to_string(fraction));
      PlanInput in = random_lifetime_trace(seed, 200, 6, 24, fraction);
      in.lookahead_seconds = seed % 4 == 0 ? 5e-4 : 0.0;
      const Plan plan = make_plan(in);
      ASSERT_TRUE(plan.unfit_steps.empty());
      expect_clean(in, plan, 4);
      PlanInput blind_in = in;
      blind_in.lifetimes.clear();
      const Plan blind = make_plan(blind_in);
      EXPECT_LE(plan.bytes_prefetched_per_iteration, blind.bytes_prefetched_per_iteration);
      with += plan.bytes_prefetched_per_iteration;
      without += blind.bytes_prefetched_per_iteration;
      dropped += plan.bytes_dropped_per_iteration;
    }
  }
  EXPECT_LT(with * 2, without);  // dead data was most of what moved
  EXPECT_GT(dropped, 0u);
}

// A free discards a dropped block only inside its window [last_use, next_use), cyclically.
TEST(PlannerLifetimes, AFreeDiscardsOnlyInsideTheWindow) {
  const Drop d{{}, 3, 9, Drop::kAfterLastUse};  // window [3, 9) of 12
  EXPECT_FALSE(d.covers(2));
  EXPECT_TRUE(d.covers(3));
  EXPECT_TRUE(d.covers(8));
  EXPECT_FALSE(d.covers(9));
  const Drop across{{}, 10, 4, Drop::kAfterLastUse};  // window [10, 4)
  EXPECT_TRUE(across.covers(11));
  EXPECT_TRUE(across.covers(0));
  EXPECT_TRUE(across.covers(3));
  EXPECT_FALSE(across.covers(4));
  EXPECT_FALSE(across.covers(9));
  const Drop whole{{}, 5, 5, Drop::kAfterLastUse};  // any free
  EXPECT_TRUE(whole.covers(5));
  EXPECT_TRUE(whole.covers(4));
}

// Freed launches after their last use: the plan holds each block until its free, so its budget
// holds where the allocator drops (at the free); planned without the holds it does not.
TEST(PlannerLifetimes, BlocksHeldUntilTheirFreeKeepTheBudgetAtTheFrees) {
  int checked = 0, over_without = 0, moved_more = 0;
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    for (const double fraction : {0.4, 0.7}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " fraction " + std::to_string(fraction));
      PlanInput in = random_lifetime_trace(seed, 120, 4, 24, fraction, 4);
      const Plan plan = make_plan(in);
      PlanInput blind_in = in;
      blind_in.hold_until_free = false;
      const Plan blind = make_plan(blind_in);
      over_without += blind.peak_resident_at_frees_bytes > in.budget_bytes;
      if (!plan.unfit_steps.empty()) continue;  // a held block made a step too big: it faults
      ++checked;
      expect_clean(in, plan, 4);
      EXPECT_EQ(plan.peak_resident_at_frees_bytes, plan.peak_resident_bytes);
      EXPECT_EQ(simulate(in, plan, 3, true).peak_resident_bytes, plan.peak_resident_bytes);
      const auto S = static_cast<uint32_t>(in.steps.size());
      for (const Drop& d : plan.drops) EXPECT_EQ(d.room_at, (d.last_use + 1) % S);
      moved_more += plan.bytes_prefetched_per_iteration > blind.bytes_prefetched_per_iteration;
    }
  }
  EXPECT_GT(checked, 10);
  EXPECT_GT(over_without, 5);  // the holds matter on these traces
  EXPECT_GT(moved_more, 0);    // and cost transfers where room was counted too early
}

// UMSWAP_EVICT_WAIT waits only where an eviction's room is taken by something that does not
// queue behind it on the advisor's stream.
TEST(PlannerRoomWaits, OnlyWhereAStepsOwnDataTakesAnEvictionsRoom) {
  {
    // A B C round robin with room for two: each launch evicts one block and prefetches the
    // next; the prefetch runs after the eviction, so no launch needs to wait.
    Builder t;
    const uint32_t a = t.buffer(kBlock), b = t.buffer(kBlock), c = t.buffer(kBlock);
    t.step({whole(t.in, a)}).step({whole(t.in, b)}).step({whole(t.in, c)});
    t.in.budget_bytes = 2 * kBlock;
    const Plan plan = make_plan(t.in);
    expect_clean(t.in, plan, 3);
    ASSERT_GT(plan.bytes_evicted_per_iteration, 0u);
    EXPECT_EQ(plan.room_wait_back, std::vector<uint32_t>(3, Plan::kNoRoomWait));
  }
  {
    // P and Q at steps 0 and 2; step 1 writes X, a new block (allocated after step 0, freed after
    // step 1, populated by its launch). Room for two: step 1 evicts P or Q for X, which arrives
    // with the launch, not behind the eviction: step 1 waits for its own evictions.
    Builder t;
    const uint32_t pb = t.buffer(kBlock), qb = t.buffer(kBlock), slab = t.buffer(kBlock);
    const PlanRange x{slab, 0, kBlock};
    t.step({whole(t.in, pb), whole(t.in, qb)}).step({x}).step({whole(t.in, pb), whole(t.in, qb)});
    t.in.lifetimes = {{0, false, x}, {1, true, x}};
    t.in.budget_bytes = 2 * kBlock;
    const Plan plan = make_plan(t.in);
    expect_clean(t.in, plan, 3);
    ASSERT_EQ(plan.bytes_evicted_per_iteration, kBlock);
    ASSERT_EQ(plan.bytes_dropped_per_iteration, kBlock);
    EXPECT_EQ(plan.room_wait_back,
              (std::vector<uint32_t>{Plan::kNoRoomWait, 0, Plan::kNoRoomWait}));
    // With room for three nothing moves, and nothing waits.
    t.in.budget_bytes = 3 * kBlock;
    EXPECT_EQ(make_plan(t.in).room_wait_back, std::vector<uint32_t>(3, Plan::kNoRoomWait));
  }
}

// Random traces and their plans for the room-wait tests, with the bytes each step evicts and
// prefetches and the room left at each step: the budget less what the plan's own simulation of
// a steady iteration holds there (none where the plan itself is over: a held block made a step
// unfit).
struct RoomCase {
  std::string name;
  Plan plan;
  std::vector<int64_t> out_at, in_at, left;
};

std::vector<RoomCase> room_cases() {
  std::vector<RoomCase> cases;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    for (const double fraction : {0.3, 0.6}) {
      const PlanInput in = random_lifetime_trace(seed, 150, 5, 20, fraction, 3);
      RoomCase c{"seed " + std::to_string(seed) + " fraction " + std::to_string(fraction),
                 make_plan(in),
                 {},
                 {},
                 {}};
      const auto S = in.steps.size();
      c.out_at.assign(S, 0);
      c.in_at.assign(S, 0);
      for (const Action& a : c.plan.actions) {
        (a.kind == ActionKind::evict ? c.out_at : c.in_at)[a.at_step] +=
            static_cast<int64_t>(a.range.length);
      }
      const Simulation sim = simulate(in, c.plan, 2);
      EXPECT_EQ(sim.resident_by_step.size(), S);
      for (size_t t = 0; t < S; ++t) {
        c.left.push_back(std::max<int64_t>(0, static_cast<int64_t>(in.budget_bytes) -
                                                  static_cast<int64_t>(sim.resident_by_step[t])));
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// Walks launch t's own and earlier launches' actions back over one iteration, newest first,
// adding what would still be pending (evictions' bytes in; prefetches' bytes out: they queue
// behind the evictions): the first eviction at which that exceeds the room left at t is the one
// to wait for (launches back; kNoRoomWait: none).
uint32_t direct_room_scan(const RoomCase& c, uint32_t t) {
  const auto S = static_cast<uint32_t>(c.out_at.size());
  int64_t pending = 0;
  for (uint32_t back = 0; back < S; ++back) {
    const uint32_t k = (t + S - back) % S;
    pending += c.out_at[k] - c.in_at[k];
    if (c.out_at[k] > 0 && pending > c.left[t]) return back;
  }
  return Plan::kNoRoomWait;
}

// The launches' room waits (the advisor's stream runs each launch's evictions, then its
// prefetches) against the direct scan.
TEST(PlannerRoomWaits, MatchADirectScanOnRandomTraces) {
  int waits = 0, free_launches = 0;
  for (const RoomCase& c : room_cases()) {
    SCOPED_TRACE(c.name);
    const auto S = static_cast<uint32_t>(c.out_at.size());
    ASSERT_EQ(c.plan.room_wait_back.size(), S);
    for (uint32_t t = 0; t < S; ++t) {
      const uint32_t expected = direct_room_scan(c, t);
      EXPECT_EQ(c.plan.room_wait_back[t], expected) << "launch " << t;
      waits += expected != Plan::kNoRoomWait;
      free_launches += expected == Plan::kNoRoomWait;
    }
  }
  EXPECT_GT(waits, 100);
  EXPECT_GT(free_launches, 100);
}

TEST(PlannerLifetimes, BadLifetimesThrowNamingTheProblem) {
  Builder t;
  t.buffer(8 * MiB);
  t.step({{0, 0, MiB}}).step({{0, 0, MiB}});
  t.in.budget_bytes = 4 * MiB;
  t.in.lifetimes = {{0, true, {0, 0, MiB}}, {1, false, {0, 0, MiB}}};
  ASSERT_NO_THROW(make_plan(t.in));
  {
    PlanInput in = t.in;
    in.lifetimes[1].after_step = 2;
    expect_invalid(in, "lifetime 1 is after step 2, but the iteration has 2 steps");
  }
  {
    PlanInput in = t.in;
    std::swap(in.lifetimes[0], in.lifetimes[1]);
    expect_invalid(in, "lifetime 1 is out of order");
  }
  {
    PlanInput in = t.in;
    in.lifetimes[0].range.buffer = 4;
    expect_invalid(in, "lifetime 0 names buffer 4");
  }
  {
    PlanInput in = t.in;
    in.lifetimes[0].range = {0, 7 * MiB, 2 * MiB};
    expect_invalid(in, "lifetime 0 [7340032, +2097152) is empty or outside buffer 0");
  }
  {
    PlanInput in = t.in;
    in.lifetimes[0].range.length = 0;
    expect_invalid(in, "is empty or outside");
  }
}

TEST(PlannerLifetimes, DropWindowsAreCyclic) {
  const Drop inside{{}, 3, 7};
  EXPECT_FALSE(inside.covers(2));
  EXPECT_TRUE(inside.covers(3));  // a free right after the last use
  EXPECT_TRUE(inside.covers(6));
  EXPECT_FALSE(inside.covers(7));  // after the next use's launch: too late
  const Drop across{{}, 8, 2};     // from step 8 over the iteration boundary to step 2
  EXPECT_TRUE(across.covers(9));
  EXPECT_TRUE(across.covers(0));
  EXPECT_TRUE(across.covers(1));
  EXPECT_FALSE(across.covers(2));
  EXPECT_FALSE(across.covers(5));
  EXPECT_TRUE((Drop{{}, 4, 4}).covers(123));  // the block's only use: the whole iteration
}

TEST(Simulate, FlagsDropOfLiveData) {
  Builder t;
  const uint32_t a = t.buffer(kBlock);
  t.step({whole(t.in, a)}).step({}).step({whole(t.in, a)});
  t.in.budget_bytes = kBlock;
  Plan plan;
  plan.resident_at_start = {whole(t.in, a)};
  plan.drops.push_back({whole(t.in, a), 0, 2});  // no lifetime says a is ever free
  const Simulation sim = simulate(t.in, plan, 2);
  EXPECT_TRUE(sim.drop_of_live);
}

}  // namespace
}  // namespace umswap::advisor
