// `umswap compare`: each run's figures as a row, results checked against native's, and the
// verdicts against the baselines. Pure.
#include "umswap/cli/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "compare_fields.h"

namespace umswap::cli {
using namespace detail;

namespace {

struct Timing {
  std::optional<double> steady_median_ms;
  std::optional<double> first_ms;
  size_t steady_iterations = 0;
  std::string source;
};

// Program iter lines first (synchronized timings), then the program's summary, then umswap's
// stats (wall time between iteration boundaries).
Timing timing_of(const ModeOutcome& outcome) {
  Timing t;
  const std::vector<IterationLine>& lines = outcome.output.iterations;
  if (!lines.empty()) {
    const auto [first, end] =
        planned_steady_range(lines.size(), outcome.stats ? &*outcome.stats : nullptr);
    std::vector<double> steady;
    for (size_t i = first; i < end; ++i) steady.push_back(lines[i].ms);
    t.steady_median_ms = median(steady);
    t.first_ms = lines.front().ms;
    t.steady_iterations = steady.size();
    t.source = "program";
    return t;
  }
  const json& summary = outcome.output.summary;
  t.steady_median_ms = get_double(summary, "steady_median_ms");
  t.first_ms = get_double(summary, "first_ms");
  if (t.steady_median_ms || t.first_ms) {
    t.source = "summary";
    return t;
  }
  if (outcome.stats) {
    const std::vector<StatsIteration>& its = outcome.stats->iterations;
    const auto [first, end] = planned_steady_range(its.size(), &*outcome.stats);
    std::vector<double> steady;
    for (size_t i = first; i < end; ++i) {
      if (its[i].wall_ms) steady.push_back(*its[i].wall_ms);
    }
    t.steady_median_ms = median(steady);
    t.steady_iterations = steady.size();
    if (!its.empty()) t.first_ms = its.front().wall_ms;
    if (t.steady_median_ms || t.first_ms) t.source = "stats";
  }
  return t;
}

std::optional<double> ratio(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

std::string ms_text(std::optional<double> ms) {
  return ms ? fmt::format("{:.1f} ms", *ms) : std::string("unknown");
}

// The native run that finished, of `rank` (a torchrun run's share) or without one.
const ModeOutcome* ok_native(const std::vector<ModeOutcome>& outcomes, std::optional<int> rank) {
  const ModeOutcome* native = nullptr;
  for (const ModeOutcome& o : outcomes) {
    if (o.mode == CompareMode::native && !o.baseline && o.status == ModeStatus::ok &&
        o.rank == rank) {
      native = &o;
    }
  }
  return native;
}

std::optional<double> native_median_ms(const ModeOutcome* native) {
  return native ? timing_of(*native).steady_median_ms : std::nullopt;
}

// The native run of `rank` that ran a second time, if it finished.
const ModeOutcome* ok_native_again(const std::vector<ModeOutcome>& natives_again,
                                   std::optional<int> rank) {
  for (const ModeOutcome& o : natives_again) {
    if (o.status == ModeStatus::ok && o.rank == rank) return &o;
  }
  return nullptr;
}

// The losses a run printed, by iteration, as numbers (texts such as `nan` left out).
std::map<uint64_t, double> numeric_losses(const ProgramOutput& output) {
  std::map<uint64_t, double> losses;
  for (const IterationLine& x : output.iterations) {
    const std::optional<double> v = x.loss.empty() ? std::nullopt : parse_number<double>(x.loss);
    if (v && std::isfinite(*v)) losses[x.index] = *v;
  }
  return losses;
}

double relative_difference(double u, double v) {
  const double scale = std::max(std::abs(u), std::abs(v));
  return scale > 0 ? std::abs(u - v) / scale : 0.0;
}

// The result check of `row` (the run `o`) against the native run: equal checksums when both
// printed one, else the losses of every iteration both printed within `tolerance` (relative; the
// largest difference and its iteration are kept), else nothing. A one-iteration spike is a wrong
// result even when the last loss agrees. With native's second run (`again`), an iteration whose
// loss is past the tolerance still passes when it lies within kNativeSpreadFactor x the largest
// difference of the two natives' losses up to that iteration: the program is not deterministic,
// and a difference that size is its own.
void check_result(ModeRow& row, const ModeOutcome& native, const ModeOutcome& o, double tolerance,
                  const ModeOutcome* again = nullptr) {
  const ProgramOutput& a = native.output;
  const ProgramOutput& b = o.output;
  if (!a.checksum.empty() && !b.checksum.empty()) {
    row.result_basis = "checksum";
    row.same_result = a.checksum == b.checksum;
    return;
  }
  std::map<uint64_t, const std::string*> native_loss;
  for (const IterationLine& x : a.iterations) {
    if (!x.loss.empty()) native_loss[x.index] = &x.loss;
  }
  // The natives' largest difference up to each iteration (iterations both printed as numbers).
  std::map<uint64_t, double> spread_to;
  if (again) {
    const std::map<uint64_t, double> first = numeric_losses(a),
                                     second = numeric_losses(again->output);
    double largest = 0;
    for (const auto& [index, u] : first) {
      const auto it = second.find(index);
      if (it == second.end()) continue;
      largest = std::max(largest, relative_difference(u, it->second));
      spread_to[index] = largest;
    }
    if (!spread_to.empty()) row.loss_native_spread = largest;
  }
  auto spread_up_to = [&](uint64_t index) {
    const auto it = spread_to.upper_bound(index);
    return it == spread_to.begin() ? 0.0 : std::prev(it)->second;
  };
  auto allowed_at = [&](uint64_t index) {
    return std::max(tolerance, kNativeSpreadFactor * spread_up_to(index));
  };
  bool compared = false, text_differs = false, needed_spread = false;
  std::optional<uint64_t> past_at;
  double past_difference = 0;
  std::optional<double> worst;
  std::optional<uint64_t> worst_at, text_at;
  for (const IterationLine& y : b.iterations) {
    const auto it = native_loss.find(y.index);
    if (y.loss.empty() || it == native_loss.end()) continue;
    compared = true;
    const std::string& x = *it->second;
    const std::optional<double> u = parse_number<double>(x), v = parse_number<double>(y.loss);
    if (!u || !v || !std::isfinite(*u) || !std::isfinite(*v)) {
      // `nan` or text: only the same text is the same.
      if (x != y.loss && !text_differs) {
        text_differs = true;
        text_at = y.index;
      }
      continue;
    }
    const double d = relative_difference(*u, *v);
    if (d > tolerance) {
      if (d > allowed_at(y.index)) {
        if (!past_at) {
          past_at = y.index;
          past_difference = d;
        }
      } else {
        needed_spread = true;
      }
    }
    if (!worst || d > *worst) {
      worst = d;
      worst_at = y.index;
    }
  }
  if (!compared) return;
  row.result_basis = "loss";
  row.loss_tolerance = tolerance;
  row.loss_relative_difference = worst;
  row.same_result = !text_differs && !past_at;
  row.within_native_spread = *row.same_result && needed_spread;
  if (!spread_to.empty()) {
    if (past_at) {
      row.loss_past_iteration = past_at;
      row.loss_past_difference = past_difference;
    }
    if (const std::optional<uint64_t> named = past_at ? past_at : worst_at) {
      row.loss_native_spread_at = spread_up_to(*named);
    }
  }
  // The iteration the note names: the largest difference when it is past the tolerance (the note
  // gives its figure), else the first whose texts differ.
  row.loss_worst_iteration = text_differs && !(worst && *worst > tolerance) ? text_at : worst_at;
}

// How `a_ms` compares with `b_ms`: "1.25× faster than", "1.25× slower than", or "about as fast
// as" when the factor would print as 1.00.
std::string faster_or_slower(double a_ms, double b_ms) {
  const double factor = std::max(a_ms, b_ms) / std::min(a_ms, b_ms);
  if (factor < 1.005) return "about as fast as";
  return fmt::format("{:.2f}× {} than", factor, a_ms < b_ms ? "faster" : "slower");
}

}  // namespace

std::optional<double> link_limit_ms(std::optional<double> native_ms, std::optional<double> bytes_in,
                                    std::optional<double> bytes_out, const LinkRates& rates) {
  if (!native_ms || !bytes_in || !bytes_out) return std::nullopt;
  const std::optional<double> in_rate = rates.htod_bytes_per_s, out_rate = rates.dtoh_bytes_per_s;
  if (!in_rate || !out_rate || *in_rate <= 0 || *out_rate <= 0) return std::nullopt;
  return std::max({*native_ms, *bytes_in / *in_rate * 1e3, *bytes_out / *out_rate * 1e3});
}

std::optional<double> driver_limit_ms(std::optional<double> native_ms,
                                      std::optional<double> bytes_in,
                                      std::optional<double> bytes_out, const LinkRates& rates) {
  if (!native_ms || !bytes_in || !bytes_out) return std::nullopt;
  const std::optional<double> in_rate = rates.prefetch_bytes_per_s;
  const std::optional<double> out_rate = rates.evict_bytes_per_s;
  if (!in_rate || !out_rate || *in_rate <= 0 || *out_rate <= 0) return std::nullopt;
  return std::max(*native_ms, (*bytes_in / *in_rate + *bytes_out / *out_rate) * 1e3);
}

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::pair<size_t, size_t> steady_range(size_t count) {
  if (count == 0) return {0, 0};
  if (count <= 2) return {count - 1, count};
  return {2, count};
}

std::optional<uint64_t> steady_from_launch(const StatsFigures& stats) {
  return stats.first_plan_known ? stats.first_plan_applied_from : stats.plan_applied_from;
}

std::optional<size_t> iteration_from(const std::vector<StatsIteration>& iterations,
                                     uint64_t launch) {
  for (size_t i = 0; i < iterations.size(); ++i) {
    if (iterations[i].first_step && *iterations[i].first_step >= launch) return i;
  }
  return std::nullopt;
}

std::pair<size_t, size_t> planned_steady_range(size_t count, const StatsFigures* stats) {
  const std::pair<size_t, size_t> plain = steady_range(count);
  const std::optional<uint64_t> from = stats ? steady_from_launch(*stats) : std::nullopt;
  if (!from) return plain;
  const std::vector<StatsIteration>& its = stats->iterations;
  // The first iteration that began under a plan.
  const size_t planned = iteration_from(its, *from).value_or(its.size());
  if (planned + 1 >= its.size() || count < its.size()) return plain;
  const size_t first = planned + 1 + (count - its.size());
  return {std::max(first, plain.first), count};
}

namespace {

// A row's fields that a mode and a baseline share: which run it is, how it ended, and, when it
// ran to its end, its timing against native's and the program's own peak.
ModeRow timed_row(const ModeOutcome& o, std::optional<double> native_ms) {
  ModeRow row;
  row.mode = o.mode;
  row.baseline = o.baseline;
  row.rank = o.rank;
  row.status = o.status;
  row.reason = o.reason;
  if (o.status != ModeStatus::ok) return row;
  const Timing t = timing_of(o);
  row.steady_median_ms = t.steady_median_ms;
  row.first_ms = t.first_ms;
  row.steady_iterations = t.steady_iterations;
  row.timing_source = t.source;
  row.ratio_to_native = ratio(row.steady_median_ms, native_ms);
  row.peak_allocated_bytes = get_u64(o.output.summary, "peak_allocated_bytes");
  return row;
}

}  // namespace

std::vector<ModeRow> compute_rows(const std::vector<ModeOutcome>& outcomes, const LinkRates& rates,
                                  double loss_tolerance,
                                  const std::vector<ModeOutcome>& natives_again) {
  std::vector<ModeRow> rows;
  for (const ModeOutcome& o : outcomes) {
    const ModeOutcome* native = ok_native(outcomes, o.rank);
    const std::optional<double> native_ms = native_median_ms(native);
    ModeRow row = timed_row(o, native_ms);
    if (o.status != ModeStatus::ok) {
      rows.push_back(std::move(row));
      continue;
    }
    if (o.stats) {
      const std::vector<StatsIteration>& its = o.stats->iterations;
      row.faults_per_iteration =
          steady_mean(*o.stats, [](const auto& i) { return i.gpu_page_faults; });
      row.bytes_in_per_iteration =
          steady_mean(*o.stats, [](const auto& i) { return i.bytes_htod; });
      row.bytes_out_per_iteration =
          steady_mean(*o.stats, [](const auto& i) { return i.bytes_dtoh; });
      // Over the steady iterations: the learning ones hold the whole footprint on purpose.
      row.peak_resident_bytes =
          steady_max(*o.stats, [](const auto& i) { return i.peak_resident_bytes; });
      if (!row.peak_resident_bytes) row.peak_resident_bytes = o.stats->peak_resident_bytes;
      if (o.mode == CompareMode::vmm) {
        // Engine vmm: its chunks and the program's own GPU memory, exact (no managed memory,
        // nothing for CUPTI to count); its moves' bytes in all, per iteration traced.
        row.peak_resident_bytes = o.stats->vmm_gpu_peak;
        const double n = static_cast<double>(its.size());
        auto per_iteration = [n](std::optional<uint64_t> total) {
          return total && n > 0 ? std::optional<double>(static_cast<double>(*total) / n)
                                : std::nullopt;
        };
        row.bytes_in_per_iteration = per_iteration(o.stats->vmm_bytes_to_gpu);
        row.bytes_out_per_iteration = per_iteration(o.stats->vmm_bytes_to_host);
      }
    }
    // Passthrough moves no managed memory: unknown counts as none for the limits (only).
    const bool is_native = o.mode == CompareMode::native;
    const std::optional<double> in =
        is_native ? row.bytes_in_per_iteration.value_or(0) : row.bytes_in_per_iteration;
    const std::optional<double> out =
        is_native ? row.bytes_out_per_iteration.value_or(0) : row.bytes_out_per_iteration;
    row.link_limit_ms = link_limit_ms(native_ms, in, out, rates);
    row.ratio_to_link_limit = ratio(row.steady_median_ms, row.link_limit_ms);
    row.driver_limit_ms = driver_limit_ms(native_ms, in, out, rates);
    row.ratio_to_driver_limit = ratio(row.steady_median_ms, row.driver_limit_ms);

    if (has_budget(o.mode)) {
      row.budget_bytes = o.budget_bytes;
      if (!row.budget_bytes && o.stats) row.budget_bytes = o.stats->budget_bytes;
      // Under engine um a CUDA graph's kernels touch memory the count leaves out: a count within
      // the budget is no answer, one over it still is. (Engine vmm's pool bounds its GPU chunks
      // whatever reaches them.)
      if (o.mode != CompareMode::vmm && o.stats && o.stats->graph_launches.value_or(0) > 0) {
        row.graph_launches = o.stats->graph_launches;
      }
      if (row.budget_bytes && row.peak_resident_bytes) {
        const bool within = static_cast<double>(*row.peak_resident_bytes) <=
                            static_cast<double>(*row.budget_bytes) * kBudgetTolerance;
        if (!within || !row.graph_launches) row.budget_held = within;
      }
    }

    row.checksum = o.output.checksum;
    if (native && !is_native) {
      check_result(row, *native, o, loss_tolerance, ok_native_again(natives_again, o.rank));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<ModeRow> compute_baseline_rows(const std::vector<ModeOutcome>& baselines,
                                           const std::vector<ModeOutcome>& outcomes,
                                           double loss_tolerance,
                                           const std::vector<ModeOutcome>& natives_again) {
  std::vector<ModeRow> rows;
  for (const ModeOutcome& o : baselines) {
    const ModeOutcome* native = ok_native(outcomes, o.rank);
    ModeRow row = timed_row(o, native_median_ms(native));
    if (o.status == ModeStatus::ok) {
      // What save_on_cpu copied each way per iteration, where the script counts it (the bundled
      // samples do, samples/pytorch/common.py).
      auto bytes = [&](std::string_view key) {
        const std::optional<double> v = get_double(o.output.summary, key);
        return v && *v >= 0 ? v : std::nullopt;
      };
      row.bytes_in_per_iteration = bytes("offload_bytes_in_per_iteration");
      row.bytes_out_per_iteration = bytes("offload_bytes_out_per_iteration");
      row.checksum = o.output.checksum;
      if (native) {
        check_result(row, *native, o, loss_tolerance, ok_native_again(natives_again, o.rank));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

bool needs_native_again(const std::vector<ModeRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const ModeRow& r) {
    return r.result_basis == "loss" && !r.loss_native_spread && r.loss_relative_difference &&
           r.loss_tolerance && *r.loss_tolerance > 0 &&
           *r.loss_relative_difference > *r.loss_tolerance;
  });
}

std::vector<BaselineVerdict> baseline_verdicts(const std::vector<ModeRow>& rows,
                                               const std::vector<ModeRow>& baseline_rows) {
  // umswap's rows that can be compared with a baseline of `rank`: online or replay, run, timed.
  auto umswap_rows = [&](std::optional<int> rank) {
    std::vector<const ModeRow*> umswap;
    for (const ModeRow& r : rows) {
      if (!r.baseline && has_budget(r.mode) && r.status == ModeStatus::ok && r.steady_median_ms &&
          *r.steady_median_ms > 0 && r.rank == rank) {
        umswap.push_back(&r);
      }
    }
    return umswap;
  };
  auto fastest = [](const std::vector<const ModeRow*>& of) -> const ModeRow* {
    const ModeRow* best = nullptr;
    for (const ModeRow* r : of) {
      if (!best || *r->steady_median_ms < *best->steady_median_ms) best = r;
    }
    return best;
  };

  std::vector<BaselineVerdict> verdicts;
  for (const ModeRow& b : baseline_rows) {
    if (!b.baseline) continue;
    BaselineVerdict v;
    v.baseline = *b.baseline;
    v.baseline_ms = b.steady_median_ms;
    v.baseline_peak_bytes = b.peak_allocated_bytes;
    const std::string_view name = compare_baseline_name(v.baseline);
    const bool offload = v.baseline == CompareBaseline::offload;
    const std::vector<const ModeRow*> umswap = umswap_rows(b.rank);
    v.rank = b.rank;
    const std::string head = fmt::format(
        "umswap vs {}{}: ", offload ? "save_on_cpu (offload)" : "checkpointing (checkpoint)",
        b.rank ? fmt::format(", rank {}", *b.rank) : std::string());
    if (b.status != ModeStatus::ok || !b.steady_median_ms || *b.steady_median_ms <= 0) {
      v.text = head + fmt::format("nothing to compare: the {} run {}", name,
                                  b.status != ModeStatus::ok
                                      ? fmt::format("{} (see its row)", mode_status_name(b.status))
                                      : std::string("printed no iteration times"));
      verdicts.push_back(std::move(v));
      continue;
    }
    if (umswap.empty()) {
      v.text = head + "nothing to compare: no online or replay run finished with iteration times";
      verdicts.push_back(std::move(v));
      continue;
    }

    // The row to compare with, and whether it is at equal or lower memory.
    const ModeRow* u = nullptr;
    std::vector<const ModeRow*> at_or_below;
    for (const ModeRow* r : umswap) {
      if (r->peak_resident_bytes && v.baseline_peak_bytes && !r->graph_launches &&
          *r->peak_resident_bytes <= *v.baseline_peak_bytes) {
        at_or_below.push_back(r);
      }
    }
    if (offload && !at_or_below.empty()) {
      u = fastest(at_or_below);
    } else if (offload) {
      // None at equal memory: the one closest to it, to say by how much.
      for (const ModeRow* r : umswap) {
        if (r->peak_resident_bytes &&
            (!u || !u->peak_resident_bytes || *r->peak_resident_bytes < *u->peak_resident_bytes)) {
          u = r;
        }
      }
      if (!u) u = fastest(umswap);
    } else {
      u = fastest(umswap);
    }
    v.umswap_mode = u->mode;
    v.umswap_ms = u->steady_median_ms;
    v.umswap_peak_bytes = u->peak_resident_bytes;
    if (v.umswap_peak_bytes && v.baseline_peak_bytes) {
      const bool below = *v.umswap_peak_bytes <= *v.baseline_peak_bytes;
      // A peak that leaves the graphs' memory out proves only that it is above.
      if (!below || !u->graph_launches) v.at_equal_memory = below;
    }
    const std::string_view mode = compare_mode_name(u->mode);
    const std::string figures = fmt::format("{} {}, {} GPU-resident; {} {}, {} allocated", mode,
                                            ms_text(v.umswap_ms), gib(v.umswap_peak_bytes), name,
                                            ms_text(v.baseline_ms), gib(v.baseline_peak_bytes));

    if (!offload) {
      v.speedup = *v.baseline_ms / *v.umswap_ms;
      v.text = head + fmt::format("checkpointing is {} umswap {} ({})",
                                  faster_or_slower(*v.baseline_ms, *v.umswap_ms), mode, figures);
    } else if (v.at_equal_memory == true) {
      v.speedup = *v.baseline_ms / *v.umswap_ms;
      v.text = head + fmt::format(
                          "umswap {} is {} save_on_cpu at equal or lower peak "
                          "memory ({})",
                          mode, faster_or_slower(*v.umswap_ms, *v.baseline_ms), figures);
    } else if (v.at_equal_memory == false) {
      v.text = head + fmt::format(
                          "not at equal memory, so no speed-up is claimed: umswap's lowest peak is "
                          "above save_on_cpu's ({})",
                          figures);
    } else {
      v.text = head + fmt::format(
                          "peak memory not known ({}), so no speed-up at equal memory is claimed "
                          "({})",
                          !v.baseline_peak_bytes ? "the offload run printed no peak_allocated_bytes"
                          : u->graph_launches    ? "umswap's count leaves out the memory of the "
                                                   "kernels in CUDA graphs"
                                                 : "umswap counted no GPU-resident bytes",
                          figures);
    }
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

}  // namespace umswap::cli
