#include "umswap/cli/run_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "umswap/cli/compare.h"
#include "umswap/core/stats_schema.h"

namespace umswap::cli {
namespace {

namespace schema = stats_schema;
using json = nlohmann::json;

// Below it a detected period is not planned from online (advisor/online_learning.h's
// kMinConfidence): the summary says the iterations are doubtful.
constexpr double kWeakConfidence = 0.8;

// "(P%)" of the budget, with ": over it" past 102%.
std::string share_of_budget(uint64_t bytes, uint64_t budget) {
  const double share = static_cast<double>(bytes) / static_cast<double>(budget);
  return fmt::format("({:.0f}%{})", share * 100, share <= 1.02 ? "" : ": over it");
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

// GiB, or MiB below one GiB (a steady iteration's few moves would read 0.00 GiB).
std::string gib_or_mib(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) return gib(bytes);
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024));
}

// The memory path: managed memory (engine um), and how the program allocated.
std::string memory_line(const json& stats) {
  const std::optional<uint64_t> vmm =
      u64_of(schema::find(stats, schema::allocator::kUnmanagedVmmAllocations));
  uint64_t all = 0, ordered = 0;
  if (const json* by = schema::find(stats, schema::allocator::kAllocationsByApi);
      by && by->is_object()) {
    for (const auto& [api, v] : by->items()) {
      const uint64_t n = u64_of(&v).value_or(0);
      all += n;
      if (api == "cudaMallocAsync" || api == "cuMemAllocAsync") ordered += n;
    }
  }
  const json* state = schema::find(stats, schema::torch_blocks::kState);
  const std::string torch_state = state && state->is_string() ? state->get<std::string>() : "";
  std::string line = fmt::format("managed memory (engine um); {} allocations", all);
  if (all == 0) {
    line += " through umswap";
  } else if (ordered == all) {
    line += ", all stream-ordered (plans follow each block exactly)";
  } else if (ordered > 0) {
    line += fmt::format(", {} of them stream-ordered", ordered);
  } else if (torch_state == "checked") {
    line += fmt::format(
        ", none stream-ordered; PyTorch's caching allocator's blocks followed in {} segments "
        "(plans follow each tensor)",
        u64_of(schema::find(stats, schema::torch_blocks::kSegments)).value_or(0));
  } else if (torch_state == "not PyTorch") {
    line += ", none stream-ordered (plans follow whole allocations)";
  } else {
    // PyTorch's blocks not followed (said why), or a stats file from before they were.
    line += ", none stream-ordered (plans follow whole allocations";
    if (!torch_state.empty())
      line += fmt::format("; PyTorch's blocks not followed: {}", torch_state);
    line +=
        "; a PyTorch program plans more exactly with "
        "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, docs/pytorch.md)";
  }
  if (vmm && *vmm > 0) {
    line += fmt::format(
        "; {} mapped with cuMemMap, not managed (what is on this GPU counts against the budget)",
        *vmm);
  }
  return line;
}

// The engine the stats file names; a file without the field is from engine um.
std::string engine_of(const json& stats) {
  const json* engine = schema::find(stats, schema::kEngine);
  return engine && engine->is_string() ? engine->get<std::string>() : std::string("um");
}

// Engine vmm's lines: where its chunks were, against the pool, its moves (in all, and each way
// in a steady iteration: what the link carried), and its allocations.
void add_vmm_lines(std::string& out, const std::string& pad, const json& stats,
                   const StatsFigures& s) {
  const auto figure = [&](const schema::Field& f) { return u64_of(schema::find(stats, f)); };
  std::string r;
  if (const std::optional<uint64_t> gpu = figure(schema::vmm::kGpuBytesPeak)) {
    r = fmt::format("peak on GPU chunks {}", gib(*gpu));
    if (const std::optional<uint64_t> pool = figure(schema::vmm::kBudgetBytes); pool && *pool) {
      const double ratio = static_cast<double>(*gpu) / static_cast<double>(*pool);
      r += fmt::format(" for a pool of {} ({:.0f}%)", gib(*pool), ratio * 100);
    }
  }
  if (const std::optional<uint64_t> host = figure(schema::vmm::kHostBytesPeak)) {
    r += fmt::format("{}peak on host chunks {}", r.empty() ? "" : ", ", gib(*host));
  }
  if (!r.empty()) out += pad + r + "\n";
  // The moves: windows, ranges and bytes, in all (no advisor runs under this engine).
  const std::optional<uint64_t> windows = figure(schema::vmm::kWindows);
  if (windows && *windows > 0) {
    const auto ms = schema::find(stats, schema::vmm::kWindowMs);
    std::string moves = fmt::format(
        "moves: {} windows held the program {:.0f} ms in all; {} ranges in for their step, {} "
        "ahead, {} out; {} to the GPU, {} to the host",
        *windows, ms && ms->is_number() ? ms->get<double>() : 0.0,
        figure(schema::vmm::kRangesRestored).value_or(0),
        figure(schema::vmm::kRangesPrefetched).value_or(0),
        figure(schema::vmm::kRangesEvicted).value_or(0),
        gib(figure(schema::vmm::kBytesToGpu).value_or(0)),
        gib(figure(schema::vmm::kBytesToHost).value_or(0)));
    // Each way in a steady iteration: the mean over at least kFewSteadyIterations of them, and
    // only when the window log kept every window (else the iterations' figures fall short).
    const auto [first, end] = planned_steady_range(s.iterations.size(), &s);
    size_t with = 0;
    for (size_t i = first; i < end; ++i) with += s.iterations[i].vmm_bytes_to_gpu ? 1 : 0;
    const std::optional<double> in =
        steady_mean(s, [](const StatsIteration& i) { return i.vmm_bytes_to_gpu; });
    const std::optional<double> away =
        steady_mean(s, [](const StatsIteration& i) { return i.vmm_bytes_to_host; });
    if (in && away && with >= kFewSteadyIterations &&
        figure(schema::vmm::kWindowsNotLogged).value_or(0) == 0) {
      moves += fmt::format(" ({} in and {} out a steady iteration)",
                           gib_or_mib(static_cast<uint64_t>(*in)),
                           gib_or_mib(static_cast<uint64_t>(*away)));
    }
    out += pad + moves + "\n";
  } else {
    out += pad + "moves: none (every step found its ranges on the GPU, or none was traced)\n";
  }
  // CUDA graphs' kernels are not seen: no window brings what they reach in.
  if (const std::optional<uint64_t> graphs = figure(schema::vmm::kGraphLaunches);
      graphs && *graphs > 0) {
    out += pad + fmt::format(
                     "{} ran kernels umswap cannot see into: no window brings what they reach to "
                     "the GPU, and what is on host chunks is read over the link (docs/jax.md)\n",
                     graph_launches_text(*graphs));
  }
  // All allocations, and those that were the program's own mappings (JAX's allocators).
  uint64_t all = 0, own = 0;
  if (const json* by = schema::find(stats, schema::allocator::kAllocationsByApi);
      by && by->is_object()) {
    for (const auto& [api, v] : by->items()) {
      const uint64_t n = u64_of(&v).value_or(0);
      all += n;
      if (api == "cuMemMap") own = n;
    }
  }
  // Large ranges in whole blocks when the stats name a block larger than a chunk.
  const uint64_t block = figure(schema::vmm::kBlockBytes).value_or(0);
  std::string line =
      block > (uint64_t{2} << 20)
          ? fmt::format("engine vmm: {} allocations in {} MiB blocks and 2 MiB chunks", all,
                        block >> 20)
          : fmt::format("engine vmm: {} allocations in 2 MiB chunks", all);
  if (own > 0) {
    line += fmt::format(
        ", {} of them the program's own mappings (cuMemMap, as JAX's allocators make them)", own);
  }
  if (const std::optional<uint64_t> reused = figure(schema::vmm::kRangesReused);
      reused && *reused) {
    line += fmt::format(", {} of them in released ranges kept mapped ({} kept at exit)", *reused,
                        gib(figure(schema::vmm::kKeptBytes).value_or(0)));
  }
  if (const std::optional<uint64_t> refused = figure(schema::vmm::kOutOfMemory);
      refused && *refused) {
    line +=
        fmt::format(", {} refused for want of room (past the pool and the host limit)", *refused);
  }
  out += pad + line + "\n";
}

void add_process(std::string& out, const SummaryInput& p, bool named, bool budget_given) {
  const StatsFigures s = parse_stats_figures(p.stats);
  const std::string head = named ? fmt::format("umswap: {}: ", p.name) : std::string("umswap: ");
  const std::string pad(head.size(), ' ');
  const std::vector<StatsIteration>& its = s.iterations;

  // Iterations and time.
  const auto [first, end] = planned_steady_range(its.size(), &s);
  std::vector<double> ms;
  for (size_t i = first; i < end; ++i) {
    if (its[i].wall_ms) ms.push_back(*its[i].wall_ms);
  }
  const std::optional<uint64_t> from = steady_from_launch(s);
  const bool planned = from.has_value();
  std::string line = fmt::format("{} iterations", its.size());
  if (const std::optional<double> m = median(ms)) {
    line += fmt::format(", median {:.1f} ms over {} {}", *m, ms.size(),
                        planned ? "iterations under the plan" : "steady iterations");
  }
  // A plan relearned later, in force before the end: the first iteration that began at or after
  // its first launch (none: its.size()).
  size_t relearned = its.size();
  if (from && s.plan_applied_from && *s.plan_applied_from > *from) {
    relearned = iteration_from(its, *s.plan_applied_from).value_or(its.size());
  }
  if (const std::optional<size_t> first_planned =
          from ? iteration_from(its, *from) : std::nullopt) {
    line += fmt::format("; the plan in force from iteration {}", *first_planned);
    if (relearned < its.size()) line += fmt::format(", relearned from iteration {}", relearned);
  }
  out += head + line + "\n";
  // Iterations found by the period only weakly (below online learning's confidence, or over the
  // last quarter of the run or less): say so, since their figures are then not the loop's.
  if (s.detection_source == "period" && s.detection_period.value_or(0) > 0 &&
      s.detection_confidence && s.detection_steps.value_or(0) > 0 && s.detection_warmup_steps &&
      *s.detection_warmup_steps < *s.detection_steps) {
    const double covered = static_cast<double>(*s.detection_steps - *s.detection_warmup_steps) /
                           static_cast<double>(*s.detection_steps);
    if (*s.detection_confidence < kWeakConfidence || covered < 0.25) {
      out += pad + fmt::format(
                       "(those iterations are a period of {} launches found over the last {:.0f}% "
                       "of the run's {} launches, confidence {:.2f}: probably not the program's "
                       "loop)\n",
                       *s.detection_period, std::max(1.0, covered * 100), *s.detection_steps,
                       *s.detection_confidence);
    }
  }
  if (engine_of(p.stats) == "vmm") {
    add_vmm_lines(out, pad, p.stats, s);
    return;
  }

  // What moved, and faults.
  const auto in = steady_mean(s, [](const StatsIteration& i) { return i.bytes_htod; });
  const auto moved_out = steady_mean(s, [](const StatsIteration& i) { return i.bytes_dtoh; });
  const auto faults = steady_mean(s, [](const StatsIteration& i) { return i.gpu_page_faults; });
  if (in || moved_out || faults) {
    out += pad + fmt::format(
                     "per iteration: {:.2f} GB to the GPU, {:.2f} GB to the host, {:.0f} "
                     "GPU page faults\n",
                     in.value_or(0) / 1e9, moved_out.value_or(0) / 1e9, faults.value_or(0));
  }

  // Residency against the budget: under the plan (the iterations timed above), which is what the
  // plan holds, with the whole run's peak beside it when learning went higher.
  const std::optional<uint64_t> planned_peak =
      planned ? steady_max(s, [](const StatsIteration& i) { return i.peak_resident_bytes; })
              : std::nullopt;
  if (s.peak_resident_bytes || planned_peak) {
    const uint64_t peak = planned_peak.value_or(s.peak_resident_bytes.value_or(0));
    std::string r =
        fmt::format("peak GPU-resident {}{}", gib(peak), planned_peak ? " under the plan" : "");
    if (budget_given && s.budget_bytes && *s.budget_bytes > 0) {
      r += fmt::format(" for a budget of {} {}", gib(*s.budget_bytes),
                       share_of_budget(peak, *s.budget_bytes));
    } else {
      r += " (no budget)";
    }
    if (planned_peak && s.peak_resident_bytes && *s.peak_resident_bytes > *planned_peak) {
      r += fmt::format("; {} in the whole run, learning included", gib(*s.peak_resident_bytes));
    }
    // Under the relearned plan alone (from the iteration after the first one that began under it,
    // as the steady iterations are counted), when lower: the plan the run ended with.
    const size_t after = relearned + 1;
    uint64_t last_peak = 0;
    for (size_t i = after; i < its.size(); ++i) {
      last_peak = std::max(last_peak, its[i].peak_resident_bytes.value_or(0));
    }
    if (planned_peak.has_value() && last_peak > 0 && last_peak < peak) {
      r += fmt::format("; {}", gib(last_peak));
      if (budget_given && s.budget_bytes.value_or(0) > 0) {
        r += " " + share_of_budget(last_peak, *s.budget_bytes);
      }
      r += fmt::format(" from iteration {} on, under the relearned plan", after);
    }
    out += pad + r + "\n";
    // Launches whose own data is over the plan's budget (the budget less the program's own GPU
    // memory): no plan holds it there (planner.h). Their largest is a floor, not a promise.
    if (budget_given && s.plan_unfit_steps && *s.plan_unfit_steps > 0 &&
        s.plan_largest_step_bytes) {
      out += pad + fmt::format(
                       "{} launch{} of the iteration touch{} more managed memory than the budget "
                       "leaves for it (one touches {}): no plan holds the budget there, and what "
                       "does not fit faults in; no budget below that can be held\n",
                       *s.plan_unfit_steps, *s.plan_unfit_steps == 1 ? "" : "es",
                       *s.plan_unfit_steps == 1 ? "es" : "", gib(*s.plan_largest_step_bytes));
    }
    // A byte comes to the GPU once from where it began, then only after it left: more in than
    // out by more than all managed memory means CUPTI's records of moves are incomplete (seen
    // under heavy faulting, both ways: docs/lab/2026-11-30-link-and-waits.md), and the count
    // above, made from them, is not to be trusted.
    uint64_t all_in = 0, all_out = 0;
    for (const StatsIteration& i : its) {
      all_in += i.bytes_htod.value_or(0);
      all_out += i.bytes_dtoh.value_or(0);
    }
    if (s.managed_bytes_peak && all_in > all_out + *s.managed_bytes_peak) {
      out += pad + fmt::format(
                       "(that count is unreliable: {} more came to the GPU than left it, past "
                       "the {} of managed memory, so CUPTI's records of moves are incomplete)\n",
                       gib(all_in - all_out), gib(*s.managed_bytes_peak));
    }
  }

  // CUDA graphs run kernels the tracer cannot see into: what they touch is neither planned nor
  // counted, so the figures above leave it out and the budget does not bound it.
  if (s.graph_launches.value_or(0) > 0) {
    out += pad + fmt::format(
                     "{} ran kernels umswap cannot see into: the memory they touch is neither "
                     "planned nor counted, so the figures above leave it out{} (docs/jax.md)\n",
                     graph_launches_text(*s.graph_launches),
                     budget_given ? " and the budget does not bound it" : "");
  }

  // Where the advisor ended.
  std::string a =
      fmt::format("advisor {}, {}", s.advisor_mode.value_or("?"), s.advisor_state.value_or("?"));
  if (s.advisor_fallback) a += fmt::format(": {}", *s.advisor_fallback);
  out += pad + a + "\n";
  // Online, under a budget, still learning at the end and no plan ever made (none started, none
  // staged): say why that usually is, since the budget was then kept only by the learning path's
  // evictions.
  if (budget_given && s.advisor_mode == "online" && s.advisor_state == "learning" &&
      s.first_plan_known && !s.first_plan_applied_from && !s.plan_applied_from) {
    out += pad +
           "no plan was made: the launches never repeated as one iteration for long enough (a "
           "run of a few iterations, or a loop whose kernels change from step to step, as with a "
           "sequence length per batch or a mixture of experts' routing: docs/advisor.md, \"What "
           "does not work yet\")\n";
  }
  out += pad + memory_line(p.stats) + "\n";
}

}  // namespace

std::string run_summary_text(const std::vector<SummaryInput>& processes, bool budget_given,
                             size_t max_processes) {
  std::vector<const SummaryInput*> shown;
  for (const SummaryInput& p : processes) {
    if (schema::find(p.stats, schema::advisor::kMode) || engine_of(p.stats) == "vmm") {
      shown.push_back(&p);
    }
  }
  std::string out;
  const bool named = shown.size() > 1;
  for (size_t i = 0; i < shown.size() && i < max_processes; ++i) {
    add_process(out, *shown[i], named, budget_given);
  }
  if (shown.size() > max_processes) {
    out += fmt::format("umswap: and {} more processes (their stats files hold the figures)\n",
                       shown.size() - max_processes);
  }
  return out;
}

std::optional<bool> run_made_a_plan(const std::vector<SummaryInput>& processes) {
  std::optional<bool> made;
  for (const SummaryInput& p : processes) {
    const StatsFigures s = parse_stats_figures(p.stats);
    if (s.first_plan_applied_from || s.plan_applied_from) return true;
    if (s.first_plan_known) made = false;
  }
  return made;
}

}  // namespace umswap::cli
