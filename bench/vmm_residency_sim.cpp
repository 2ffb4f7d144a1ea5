// Engine vmm's moves, simulated on a recorded trace (issue 38): replays every launch of a trace
// that `umswap record` wrote through engine vmm's VmmAllocator (its ChunkArena and VmmResidency)
// over the vmm tests' fake driver (tests/vmm/fake_vmm_driver.h, with no bytes kept), and
// prints per budget the windows, bytes moved each way and bytes left short an iteration (and in
// the last one the bytes allocations got on host chunks, the pool being full, the physical
// memory made on each side, and the driver time its mappings, unmaps, creates and releases would
// take at run 190's per-call costs: copies and waits not included), beside
// what the planner's per-launch plan and plan_windows() (fill 0.6) would move. CPU only: a
// policy is tried here before any GPU time is spent on it.
//
//   vmm_residency_sim [--reuse-addresses] [--repeat N] [--per-iteration] TRACE [SHARES
//                     [CHUNKS_PER_BLOCK]]
//   e.g. vmm_residency_sim --repeat 4 --per-iteration run.umtrace 0.5
//
// SHARES: budgets as shares of the planner's footprint of the trace's replay iteration (as
// window_plan_bench), default 0.25,0.5. CHUNKS_PER_BLOCK: the arena's blocks (default: the
// engine's choice for each budget; 1: every piece a 2 MiB chunk). --reuse-addresses: a freed
// range's address is handed out again to the next range of its size (by default never: on the
// matrix's cnn at 25% that matched run 156's measured bytes, 6.6 GB in an iteration, where reuse
// gave 16.5 with VmmResidency's period found two iterations long). --repeat N: the trace's last
// iteration replayed N more times after it (its steps and the allocations and frees among them; a
// block allocated again where one is still live releases that one first), so that a table of
// windows made late in a short trace is seen in force. --per-iteration: one line per iteration
// (its windows, bytes, ranges made, and the estimated driver time by call and side, and inside
// windows).
//
// Ranges as engine vmm makes them: a block of a slab (a stream-ordered allocation the trace
// lists with lifetimes) is a range from its allocation to its free; any other buffer (PyTorch's
// default allocator's segments, whatever blocks the trace lists in them) is one range for the
// whole trace; either, at most 1 MiB, is a share of a 2 MiB slab range, as the allocator serves
// it. An access to a slab outside its live blocks is
// left out (counted). What a real run has and this does not: launch order across threads, kernels
// reading host chunks over the link, and the time; the bytes and windows are the moves' own.
//
// Exit: 0, 1 when the trace cannot be read or has no iteration, 2 for bad arguments.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/vmm/fake_vmm_driver.h"
#include "share_list.h"
#include "umswap/advisor/planner.h"
#include "umswap/advisor/replay.h"
#include "umswap/advisor/window_plan.h"
#include "umswap/allocator/vmm_allocator.h"
#include "umswap/core/trace_file.h"
#include "umswap/core/trace_iterations.h"
#include "umswap/tracer/iteration_detector.h"
#include "umswap/vmm/chunk_arena.h"

namespace {

using namespace umswap;

using umswap::bench::gb;
using umswap::bench::parse_share_list;

struct Totals {
  uint64_t windows = 0, to_gpu = 0, to_host = 0, short_bytes = 0, too_large = 0, on_host = 0;
  uint64_t ranges_made = 0;  // the arena's allocations: each one mapped and given access
  uint64_t gpu_creates = 0, host_creates = 0;  // physical memory made (cuMemCreate calls)
};

// One replay of the whole trace at one budget; the totals over the trace's iterations after the
// first (the first places everything).
struct Sim {
  Totals per_iteration;  // averages
  Totals last;           // the last iteration's (a table in force by then, if any is made)
  uint64_t iterations = 0;
  uint64_t untracked_accesses = 0;
  uint64_t block_bytes = 0;
  uint64_t allocation_failures = 0;
  uint64_t period = 0;             // the table's, at the end
  uint64_t plans = 0;              // tables made
  uint64_t windows_from_plan = 0;  // of all windows, those the table asked for
  uint64_t windows = 0;
  uint64_t plan_moves_skipped = 0;
  double last_cost_ms = 0;
};

// Driver time estimated from run 190's probe (H200): per mapping made (map and access) GPU 22 us,
// host 20 + 12.5 us/MiB; per unmap GPU 15, host 25 + 2.7 us/MiB; create GPU 10, host 146 at 2 MiB
// to 5,572 at 32 MiB; release GPU 15, host 31 to 596.
double g_cost_us = 0;
// The same estimate by call and side (for --per-iteration), and the part inside windows.
enum Cost { kMapGpu, kMapHost, kUnmapGpu, kUnmapHost, kCreateGpu, kCreateHost, kRelease, kCosts };
double g_cost_by[kCosts] = {};
double g_window_us = 0;
void charge(Cost c, double us) {
  g_cost_us += us;
  g_cost_by[c] += us;
}
double mib_of(uint64_t b) {
  return static_cast<double>(b) / (1 << 20);
}
CUresult CUDAAPI cost_map(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                          unsigned long long f) {
  const auto it = vmm::fake::g_fake->phys.find(h);
  const bool host = it != vmm::fake::g_fake->phys.end() && it->second.host;
  charge(host ? kMapHost : kMapGpu, host ? 20 + 12.5 * mib_of(size) : 22);
  return vmm::fake::fake_map(p, size, off, h, f);
}
CUresult CUDAAPI cost_unmap(CUdeviceptr p, size_t size) {
  for (CUdeviceptr at = p; at < p + size; at += vmm::kChunk) {
    const auto it = vmm::fake::g_fake->slots.find(at);
    if (it == vmm::fake::g_fake->slots.end() || it->second.start != at) continue;
    const bool host = vmm::fake::g_fake->phys.at(it->second.handle).host;
    charge(host ? kUnmapHost : kUnmapGpu, host ? 25 + 2.7 * mib_of(it->second.size) : 15);
  }
  return vmm::fake::fake_unmap(p, size);
}
CUresult CUDAAPI cost_create(CUmemGenericAllocationHandle* h, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long f) {
  const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  charge(host ? kCreateHost : kCreateGpu,
         host ? 146 + (5572.0 - 146) / 30 * (mib_of(size) - 2) : 10);
  return vmm::fake::fake_create(h, size, prop, f);
}
CUresult CUDAAPI cost_release(CUmemGenericAllocationHandle h) {
  const auto it = vmm::fake::g_fake->phys.find(h);
  const bool host = it != vmm::fake::g_fake->phys.end() && it->second.host;
  const double mib = it != vmm::fake::g_fake->phys.end() ? mib_of(it->second.size) : 2;
  charge(kRelease, host ? 31 + (596.0 - 31) / 30 * (mib - 2) : 15);
  return vmm::fake::fake_release(h);
}

// Events and synchronizations for a replay with nothing running: every one has completed.
VmmSyncDriver always_done() {
  VmmSyncDriver d;
  d.event_create = [](CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(uintptr_t{1});
    return CUDA_SUCCESS;
  };
  d.event_record = [](CUevent, CUstream) { return CUDA_SUCCESS; };
  d.event_query = [](CUevent) { return CUDA_SUCCESS; };
  d.event_synchronize = [](CUevent) { return CUDA_SUCCESS; };
  d.event_destroy = [](CUevent) { return CUDA_SUCCESS; };
  d.stream_synchronize = [](CUstream) { return CUDA_SUCCESS; };
  d.ctx_synchronize = [] { return CUDA_SUCCESS; };
  return d;
}

struct Options {
  bool reuse = false;
  uint64_t repeat = 0;
  bool per_iteration = false;
};

Sim simulate(const trace::Trace& t, uint64_t budget, uint32_t chunks_per_block,
             const Options& options) {
  const bool reuse = options.reuse, per_iteration = options.per_iteration;
  const uint64_t repeat = options.repeat;
  vmm::fake::g_fake = std::make_unique<vmm::fake::Fake>();
  vmm::fake::g_fake->no_data = true;
  vmm::fake::g_fake->reuse_addresses = reuse;
  const CUstream stream = reinterpret_cast<CUstream>(uintptr_t{0x5a});
  vmm::fake::g_fake->stream = stream;
  Sim sim;
  {
    // Engine vmm's allocator itself (slabs for small allocations included), over the fake
    // driver and events that have always completed.
    Registry registry;
    vmm::VmmDriver costed = vmm::fake::fake_driver();
    costed.mem_map = cost_map;
    costed.mem_unmap = cost_unmap;
    costed.mem_create = cost_create;
    costed.mem_release = cost_release;
    VmmAllocator allocator(costed, always_done(), registry, vmm::fake::g_fake->device, budget,
                           uint64_t{1} << 40, chunks_per_block);
    VmmResidency& residency = allocator.residency();
    sim.block_bytes = allocator.stats().arena.block_bytes;
    // Live blocks of slabs: buffer -> offset -> (length, range base); whole buffers: range base.
    std::vector<std::map<uint64_t, std::pair<uint64_t, CUdeviceptr>>> blocks(t.buffers.size());
    std::vector<bool> has_lifetimes(t.buffers.size(), false);
    // Only a stream-ordered allocator's blocks are ranges of their own under engine vmm: the
    // lifetimes of a plain allocation's blocks (PyTorch's segments, cut by its caching
    // allocator, which umswap's hooks report) are within one range, the segment.
    for (const trace::Lifetime& l : t.lifetimes) {
      const auto api = static_cast<AllocApi>(t.buffers[l.buffer].api);
      has_lifetimes[l.buffer] = stream_ordered(api);
    }
    std::vector<CUdeviceptr> whole(t.buffers.size(), 0);
    std::vector<bool> refused(t.buffers.size(), false);  // its allocation failed once
    // A buffer freed before the trace was written goes after its last access.
    std::vector<uint64_t> last_access(t.buffers.size(), 0);
    for (uint64_t s = 0; s < t.steps.size(); ++s) {
      const trace::Step& step = t.steps[s];
      for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
        last_access[t.accesses[a].buffer] = s;
      }
    }
    // A stream-ordered allocation (a slab's block, or a whole buffer so allocated) as one
    // (`ordered`), any other as a plain one: engine vmm leaves room for the next allocations only
    // while most were stream-ordered.
    auto allocate = [&](uint64_t bytes, bool ordered) {
      CUdeviceptr p = 0;
      const AllocApi api = ordered ? AllocApi::cudaMallocAsync : AllocApi::cudaMalloc;
      if (allocator.allocate(api, bytes, 0, ordered, &p) != CUDA_SUCCESS) {
        ++sim.allocation_failures;
        return CUdeviceptr{0};
      }
      return p;
    };
    auto release = [&](CUdeviceptr p) { allocator.free(p); };
    tracer::IterationDetector detector;  // as engine vmm's observer finds the iterations
    // The iteration each step is in (none before the first).
    std::vector<int64_t> iteration_of(t.steps.size(), -1);
    for (size_t i = 0; i < t.iterations.size(); ++i) {
      const trace::Iteration& it = t.iterations[i];
      for (uint64_t s = it.first_step; s < it.first_step + it.step_count && s < t.steps.size();
           ++s) {
        iteration_of[s] = static_cast<int64_t>(i);
      }
    }
    Totals counted;
    int64_t current = -1;
    vmm::ArenaStats at_start = allocator.stats().arena;
    ResidencyStats res_start = residency.stats();
    auto creates = [](vmm::fake::Call c) { return uint64_t(vmm::fake::g_fake->calls[c]); };
    uint64_t gpu_creates_start = creates(vmm::fake::kCreateGpu);
    uint64_t host_creates_start = creates(vmm::fake::kCreateHost);
    double cost_start = g_cost_us;
    auto add_iteration = [&] {
      const vmm::ArenaStats a = allocator.stats().arena;
      const ResidencyStats r = residency.stats();
      counted.windows += r.steps_held - res_start.steps_held;
      counted.to_gpu += a.bytes_to_gpu - at_start.bytes_to_gpu;
      counted.to_host += a.bytes_to_host - at_start.bytes_to_host;
      counted.short_bytes += r.bytes_short - res_start.bytes_short;
      counted.too_large += r.steps_too_large - res_start.steps_too_large;
      counted.on_host += a.bytes_allocated_on_host - at_start.bytes_allocated_on_host;
      counted.ranges_made += a.allocations - at_start.allocations;
      const uint64_t gpu_made = creates(vmm::fake::kCreateGpu) - gpu_creates_start;
      const uint64_t host_made = creates(vmm::fake::kCreateHost) - host_creates_start;
      counted.gpu_creates += gpu_made;
      counted.host_creates += host_made;
      sim.last = {r.steps_held - res_start.steps_held,
                  a.bytes_to_gpu - at_start.bytes_to_gpu,
                  a.bytes_to_host - at_start.bytes_to_host,
                  r.bytes_short - res_start.bytes_short,
                  r.steps_too_large - res_start.steps_too_large,
                  a.bytes_allocated_on_host - at_start.bytes_allocated_on_host,
                  a.allocations - at_start.allocations,
                  gpu_made,
                  host_made};
      ++sim.iterations;
      sim.last_cost_ms = (g_cost_us - cost_start) / 1000;
      if (per_iteration) {
        const auto ms = [](Cost c) { return g_cost_by[c] / 1000; };
        std::printf(
            "  iteration %lld: %llu windows (%llu from the table), %.2f GB in, %.2f GB out, %.2f "
            "GB "
            "allocated on host chunks, %llu ranges made; est. driver %.0f ms (%.0f in windows): "
            "map and access GPU %.0f, host %.0f; unmap GPU %.0f, host %.0f; create GPU %.0f, host "
            "%.0f; release %.0f\n",
            static_cast<long long>(current), static_cast<unsigned long long>(sim.last.windows),
            static_cast<unsigned long long>(r.windows_from_plan - res_start.windows_from_plan),
            gb(sim.last.to_gpu), gb(sim.last.to_host), gb(sim.last.on_host),
            static_cast<unsigned long long>(sim.last.ranges_made), sim.last_cost_ms,
            g_window_us / 1000, ms(kMapGpu), ms(kMapHost), ms(kUnmapGpu), ms(kUnmapHost),
            ms(kCreateGpu), ms(kCreateHost), ms(kRelease));
      }
      for (double& c : g_cost_by) c = 0;
      g_window_us = 0;
    };
    std::vector<CUdeviceptr> bases;
    // The last iteration's steps and the lifetimes among them, replayed `repeat` more times
    // after the trace (a block allocated again at an offset still live releases the old one
    // first: the program would have freed it by then).
    const trace::Iteration& tail = t.iterations.back();
    const uint64_t tail_end = std::min<uint64_t>(tail.first_step + tail.step_count, t.steps.size());
    const uint64_t tail_steps = tail_end - tail.first_step;
    const size_t tail_lifetime =
        static_cast<size_t>(std::partition_point(t.lifetimes.begin(), t.lifetimes.end(),
                                                 [&](const trace::Lifetime& l) {
                                                   return l.before_step < tail.first_step;
                                                 }) -
                            t.lifetimes.begin());
    const uint64_t total = t.steps.size() + repeat * tail_steps;
    size_t next_lifetime = 0;
    for (uint64_t n = 0; n < total; ++n) {
      const bool again = n >= t.steps.size();
      const uint64_t s = again ? tail.first_step + (n - t.steps.size()) % tail_steps : n;
      const int64_t label = again ? int64_t(t.iterations.size() + (n - t.steps.size()) / tail_steps)
                                  : iteration_of[s];
      if (again && s == tail.first_step) next_lifetime = tail_lifetime;
      for (; next_lifetime < t.lifetimes.size() && t.lifetimes[next_lifetime].before_step <= s &&
             (!again || t.lifetimes[next_lifetime].before_step < tail_end);
           ++next_lifetime) {
        const trace::Lifetime& l = t.lifetimes[next_lifetime];
        if (!has_lifetimes[l.buffer]) continue;  // a block inside a plain allocation's range
        auto& live = blocks[l.buffer];
        if (!l.freed) {
          if (const auto old = live.find(l.offset); old != live.end()) {
            release(old->second.second);
            live.erase(old);
          }
          if (const CUdeviceptr p = allocate(l.length, true)) live[l.offset] = {l.length, p};
        } else if (const auto it = live.find(l.offset); it != live.end()) {
          release(it->second.second);
          live.erase(it);
        }
      }
      // Iteration boundaries: the totals of the one that ended (the first is left out).
      if (label != current) {
        if (current > 0) add_iteration();
        current = label;
        at_start = allocator.stats().arena;
        res_start = residency.stats();
        gpu_creates_start = creates(vmm::fake::kCreateGpu);
        host_creates_start = creates(vmm::fake::kCreateHost);
        cost_start = g_cost_us;
      }
      const trace::Step& step = t.steps[s];
      bases.clear();
      for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
        const trace::Access& access = t.accesses[a];
        CUdeviceptr base = 0;
        if (has_lifetimes[access.buffer]) {
          const auto& live = blocks[access.buffer];
          auto it = live.upper_bound(access.offset);
          if (it != live.begin() &&
              access.offset < std::prev(it)->first + std::prev(it)->second.first) {
            base = std::prev(it)->second.second;
          }
        } else {
          if (!whole[access.buffer] && !refused[access.buffer]) {
            const auto api = static_cast<AllocApi>(t.buffers[access.buffer].api);
            whole[access.buffer] = allocate(t.buffers[access.buffer].size, stream_ordered(api));
            refused[access.buffer] = whole[access.buffer] == 0;
          }
          base = whole[access.buffer];
        }
        if (!base) {
          ++sim.untracked_accesses;
          continue;
        }
        if (std::find(bases.begin(), bases.end(), base) == bases.end()) bases.push_back(base);
      }
      const bool begins = detector.push(step.name);
      if (residency.touch(step.name, bases, begins)) {
        const double before = g_cost_us;
        residency.make_resident(bases, stream);
        g_window_us += g_cost_us - before;
      }
      for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
        const uint32_t b = t.accesses[a].buffer;
        if (t.buffers[b].freed && last_access[b] == s && whole[b]) {
          release(whole[b]);
          whole[b] = 0;
          refused[b] = true;  // not made again
        }
      }
    }
    if (current > 0) add_iteration();
    const ResidencyStats r = residency.stats();
    sim.period = r.period;
    sim.plans = r.plans;
    sim.windows_from_plan = r.windows_from_plan;
    sim.windows = r.steps_held;
    sim.plan_moves_skipped = r.plan_moves_skipped;
    const uint64_t n = std::max<uint64_t>(sim.iterations, 1);
    sim.per_iteration = {
        counted.windows / n,     counted.to_gpu / n,      counted.to_host / n,
        counted.short_bytes / n, counted.too_large / n,   counted.on_host / n,
        counted.ranges_made / n, counted.gpu_creates / n, counted.host_creates / n};
  }
  vmm::fake::g_fake.reset();
  return sim;
}

int report(const trace::Trace& t, size_t iteration, const std::vector<double>& shares,
           uint32_t chunks_per_block, const Options& options, const char* path) {
  advisor::PlanInput in = advisor::plan_input_from_trace(t, iteration, uint64_t{1} << 61, false);
  const uint64_t footprint = advisor::make_plan(in).footprint_bytes;
  std::printf("%s: %zu launches, %zu iterations, footprint %.2f GB (iteration %zu)\n", path,
              t.steps.size(), t.iterations.size(), gb(footprint), iteration);
  for (const double share : shares) {
    const uint64_t budget = uint64_t(share * double(footprint));
    in = advisor::plan_input_from_trace(t, iteration, budget);
    const advisor::Plan per_launch = advisor::make_plan(in);
    const advisor::WindowPlan from_plan = advisor::plan_windows(in, {0.6});
    const Sim sim = simulate(t, budget, chunks_per_block, options);
    const Totals& p = sim.per_iteration;
    std::printf(
        "budget %.0f%% (%.2f GB), blocks of %llu MiB: an iteration (mean of %llu) %llu windows, "
        "%.2f GB in, %.2f GB out, %.2f GB short, %llu steps too large; the last %llu windows, "
        "%.2f GB in, %.2f GB out, %.2f GB allocated on host chunks, %llu ranges made, %llu GPU and "
        "%llu host creates (mean %llu and %llu), est. driver %.0f ms | plan per "
        "launch %.2f GB "
        "in at %u launches | windows from the plan (fill 0.6) %.2f GB in, %u windows | %llu "
        "accesses untracked, %llu allocations refused | %llu plans, period %llu, %llu of %llu "
        "windows from the plan, %llu planned moves skipped\n",
        share * 100, gb(budget), static_cast<unsigned long long>(sim.block_bytes >> 20),
        static_cast<unsigned long long>(sim.iterations), static_cast<unsigned long long>(p.windows),
        gb(p.to_gpu), gb(p.to_host), gb(p.short_bytes),
        static_cast<unsigned long long>(p.too_large),
        static_cast<unsigned long long>(sim.last.windows), gb(sim.last.to_gpu),
        gb(sim.last.to_host), gb(sim.last.on_host),
        static_cast<unsigned long long>(sim.last.ranges_made),
        static_cast<unsigned long long>(sim.last.gpu_creates),
        static_cast<unsigned long long>(sim.last.host_creates),
        static_cast<unsigned long long>(p.gpu_creates),
        static_cast<unsigned long long>(p.host_creates), sim.last_cost_ms,
        gb(per_launch.bytes_prefetched_per_iteration), advisor::steps_with_actions(per_launch),
        gb(from_plan.plan.bytes_prefetched_per_iteration), from_plan.windows,
        static_cast<unsigned long long>(sim.untracked_accesses),
        static_cast<unsigned long long>(sim.allocation_failures),
        static_cast<unsigned long long>(sim.plans), static_cast<unsigned long long>(sim.period),
        static_cast<unsigned long long>(sim.windows_from_plan),
        static_cast<unsigned long long>(sim.windows),
        static_cast<unsigned long long>(sim.plan_moves_skipped));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: vmm_residency_sim [--reuse-addresses] [--repeat N] [--per-iteration] TRACE [SHARES "
      "[CHUNKS_PER_BLOCK]]\n";
  Options options;
  while (argc > 1 && std::string(argv[1]).rfind("--", 0) == 0) {
    const std::string flag = argv[1];
    if (flag == "--reuse-addresses") {
      options.reuse = true;
    } else if (flag == "--per-iteration") {
      options.per_iteration = true;
    } else if (flag == "--repeat" && argc > 2) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(argv[2], &end, 10);
      if (*argv[2] == '\0' || *end != '\0' || n > 1000) {
        std::fprintf(stderr, "vmm_residency_sim: --repeat takes a count from 0 to 1000\n");
        return 2;
      }
      options.repeat = n;
      --argc;
      ++argv;
    } else {
      std::fputs(usage, stderr);
      return 2;
    }
    --argc;
    ++argv;
  }
  if (argc < 2 || argc > 4) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::vector<double> shares;
  if (!parse_share_list(argc > 2 ? argv[2] : "0.25,0.5", &shares)) {
    std::fprintf(stderr, "vmm_residency_sim: SHARES are numbers in (0, 1], commas\n");
    return 2;
  }
  uint32_t per = 0;
  if (argc > 3) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(argv[3], &end, 10);
    if (*end != '\0' || v == 0 || v > 32 || (v & (v - 1)) != 0) {
      std::fprintf(stderr, "vmm_residency_sim: CHUNKS_PER_BLOCK is 1, 2, 4, 8, 16 or 32\n");
      return 2;
    }
    per = static_cast<uint32_t>(v);
  }
  std::string error;
  std::optional<trace::Trace> t = read_trace_file(argv[1], &error);
  if (!t) {
    std::fprintf(stderr, "vmm_residency_sim: %s: %s\n", argv[1], error.c_str());
    return 1;
  }
  const std::optional<size_t> iteration = trace::replay_iteration(*t);
  if (!iteration || t->iterations.size() < 2) {
    std::fprintf(stderr,
                 "vmm_residency_sim: %s: fewer than two iterations (the first is not counted)\n",
                 argv[1]);
    return 1;
  }
  try {
    return report(*t, *iteration, shares, per, options, argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vmm_residency_sim: %s: %s\n", argv[1], e.what());
    return 1;
  }
}
