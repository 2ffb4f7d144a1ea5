// Planner cost: make_plan() on synthetic training iterations.
//
//   planner_bench                                  both sizes, without and with lifetimes
//   planner_bench --benchmark_filter=MakePlan/50000
//
// The iteration is a forward pass over the buffers in order and a backward pass in reverse: each
// step touches 4 ranges of buffers near its position and 1 anywhere (embeddings, optimizer
// state); ranges are 1 to 3 blocks of 2 MiB. The budget is half the footprint. Arguments: steps,
// buffers (10 blocks each on average). Counters: block_uses (after widening), moved (bytes
// prefetched per iteration / footprint), calls (prefetch + evict actions per iteration), blocks
// (footprint / 2 MiB), dropped (bytes dropped per iteration / footprint). With lifetimes, every
// other buffer is a tensor allocated just before its first use and freed just after its last.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "umswap/advisor/planner.h"

namespace {

using umswap::advisor::make_plan;
using umswap::advisor::Plan;
using umswap::advisor::PlanInput;
using umswap::advisor::PlanStep;

constexpr uint64_t kBlock = uint64_t{2} << 20;

PlanInput training_iteration(uint32_t steps, uint32_t buffers) {
  std::mt19937_64 rng(steps * 31 + buffers);
  PlanInput in;
  in.granularity = kBlock;
  uint64_t blocks = 0;
  for (uint32_t b = 0; b < buffers; ++b) {
    const uint64_t n = 1 + rng() % 19;  // 10 on average
    blocks += n;
    in.buffer_sizes.push_back(n * kBlock - (rng() % 4 == 0 ? kBlock / 2 : 0));
  }
  const uint32_t half = steps / 2;
  for (uint32_t s = 0; s < steps; ++s) {
    // Position in the pass: forward 0 -> 1, backward 1 -> 0.
    const double x = s < half ? double(s) / half : 1.0 - double(s - half) / (steps - half);
    PlanStep step;
    step.first_range = in.ranges.size();
    step.range_count = 5;
    step.seconds = 1e-5 * double(1 + rng() % 100);
    for (int r = 0; r < 5; ++r) {
      int64_t b = r < 4 ? int64_t(x * (buffers - 1)) + int64_t(rng() % 41) - 20 : rng() % buffers;
      b = std::clamp<int64_t>(b, 0, buffers - 1);
      const uint64_t size = in.buffer_sizes[b];
      const uint64_t offset = rng() % size;
      const uint64_t length = std::min(size - offset, (1 + rng() % 3) * kBlock - rng() % kBlock);
      in.ranges.push_back({static_cast<uint32_t>(b), offset, length});
    }
    in.steps.push_back(step);
  }
  in.budget_bytes = blocks * kBlock / 2;
  return in;
}

// Every other buffer lives from just before its first use to just after its last.
void add_lifetimes(PlanInput& in) {
  const auto S = static_cast<uint32_t>(in.steps.size());
  std::vector<uint32_t> first(in.buffer_sizes.size(), UINT32_MAX), last(in.buffer_sizes.size(), 0);
  for (uint32_t s = 0; s < S; ++s) {
    const PlanStep& step = in.steps[s];
    for (uint64_t r = step.first_range; r < step.first_range + step.range_count; ++r) {
      const uint32_t b = in.ranges[r].buffer;
      first[b] = std::min(first[b], s);
      last[b] = std::max(last[b], s);
    }
  }
  for (uint32_t b = 1; b < in.buffer_sizes.size(); b += 2) {
    if (first[b] == UINT32_MAX || first[b] == last[b]) continue;
    const umswap::advisor::PlanRange whole{b, 0, in.buffer_sizes[b]};
    in.lifetimes.push_back({first[b] == 0 ? S - 1 : first[b] - 1, false, whole});
    in.lifetimes.push_back({last[b], true, whole});
  }
  std::stable_sort(in.lifetimes.begin(), in.lifetimes.end(),
                   [](const auto& x, const auto& y) { return x.after_step < y.after_step; });
}

const PlanInput& input_for(uint32_t steps, uint32_t buffers, bool lifetimes) {
  static std::mutex mutex;
  static std::map<std::tuple<uint32_t, uint32_t, bool>, std::unique_ptr<PlanInput>> inputs;
  std::lock_guard lock(mutex);
  auto& in = inputs[{steps, buffers, lifetimes}];
  if (!in) {
    in = std::make_unique<PlanInput>(training_iteration(steps, buffers));
    if (lifetimes) add_lifetimes(*in);
  }
  return *in;
}

void BM_MakePlan(benchmark::State& state) {
  const PlanInput& in = input_for(static_cast<uint32_t>(state.range(0)),
                                  static_cast<uint32_t>(state.range(1)), state.range(2) != 0);
  Plan plan;
  for (auto _ : state) {
    plan = make_plan(in);
    benchmark::DoNotOptimize(plan);
  }
  // Block-uses after widening (before removing a step's duplicates).
  uint64_t uses = 0;
  for (const auto& r : in.ranges)
    uses += (r.offset + r.length - 1) / kBlock - r.offset / kBlock + 1;
  state.counters["block_uses"] = double(uses);
  state.counters["blocks"] = double(plan.footprint_bytes) / double(kBlock);
  state.counters["moved"] =
      double(plan.bytes_prefetched_per_iteration) / double(plan.footprint_bytes);
  state.counters["calls"] = double(plan.prefetch_calls + plan.evict_calls);
  state.counters["dropped"] =
      double(plan.bytes_dropped_per_iteration) / double(plan.footprint_bytes);
}

}  // namespace

BENCHMARK(BM_MakePlan)
    ->Args({5000, 300, 0})
    ->Args({50000, 3000, 0})
    ->Args({5000, 300, 1})
    ->Args({50000, 3000, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
