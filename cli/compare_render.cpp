// `umswap compare`: the rows as a table, its notes and verdicts, and the report as JSON. Pure.
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

json stats_json(const StatsFigures& s) {
  json iterations = json::array();
  for (const StatsIteration& it : s.iterations) {
    iterations.push_back({{"index", opt(it.index)},
                          {"first_step", opt(it.first_step)},
                          {"wall_ms", opt(it.wall_ms)},
                          {"gpu_page_faults", opt(it.gpu_page_faults)},
                          {"bytes_htod", opt(it.bytes_htod)},
                          {"bytes_dtoh", opt(it.bytes_dtoh)},
                          {"prefetched_bytes", opt(it.prefetched_bytes)},
                          {"evicted_bytes", opt(it.evicted_bytes)},
                          {"peak_resident_bytes", opt(it.peak_resident_bytes)}});
  }
  return {{"managed_bytes_peak", opt(s.managed_bytes_peak)},
          {"advisor",
           {{"mode", opt(s.advisor_mode)},
            {"state", opt(s.advisor_state)},
            {"fallback", opt(s.advisor_fallback)},
            {"budget_bytes", opt(s.budget_bytes)},
            {"prefetched_bytes", opt(s.prefetched_bytes)},
            {"evicted_bytes", opt(s.evicted_bytes)},
            {"peak_resident_bytes", opt(s.peak_resident_bytes)},
            {"peak_resident_plan_bytes", opt(s.peak_resident_plan_bytes)},
            {"plan_applied_from_launch", opt(s.plan_applied_from)},
            {"first_plan_applied_from_launch", opt(s.first_plan_applied_from)}}},
          {"iterations", std::move(iterations)}};
}

std::string gb_per_s(std::optional<double> rate) {
  return rate ? fmt::format("{:.1f} GB/s", *rate / kGB) : std::string("-");
}

// The name a row goes by: its baseline's, else its mode's; a rank's row with ` r<rank>` after it.
std::string row_name(const ModeRow& row) {
  const std::string_view name =
      row.baseline ? compare_baseline_name(*row.baseline) : compare_mode_name(row.mode);
  return row.rank ? fmt::format("{} r{}", name, *row.rank) : std::string(name);
}

// The result cell: `same` (checksums), `≈ native (loss within 0.01)`, `DIFFERS` or `-`.
std::string result_text(const ModeRow& row) {
  if (!row.same_result) return "-";
  if (!*row.same_result) return "DIFFERS";
  if (row.within_native_spread) return "≈ native (natives differ)";
  if (row.result_basis == "loss" && row.loss_tolerance) {
    return fmt::format("≈ native (loss within {:g})", *row.loss_tolerance);
  }
  return "same";
}

json result_match_json(const ModeRow& row) {
  if (!row.same_result) return nullptr;
  if (!*row.same_result) return "differs";
  if (row.within_native_spread) return "within_native_spread";
  return row.result_basis == "loss" ? "within_tolerance" : "same";
}

// The fields a mode's entry and a baseline's share in the JSON report: how the run went, its
// timing, its transfers, its result against native, and its raw iterations.
json outcome_json(const ModeOutcome& o, const ModeRow& r) {
  json iter_ms = json::array(), losses = json::array();
  for (const IterationLine& it : o.output.iterations) {
    iter_ms.push_back(it.ms);
    losses.push_back(text_or_null(it.loss));
  }
  return {
      {"rank", opt(o.rank)},
      {"status", mode_status_name(o.status)},
      {"reason", text_or_null(o.reason)},
      {"exit_code", opt(o.exit_code)},
      {"wall_s", opt(o.wall_s)},
      {"steady_median_ms", opt(r.steady_median_ms)},
      {"timing_source", text_or_null(r.timing_source)},
      {"steady_iterations", r.steady_iterations},
      {"first_ms", opt(r.first_ms)},
      {"ratio_to_native", opt(r.ratio_to_native)},
      {"bytes_in_per_iteration", opt(r.bytes_in_per_iteration)},
      {"bytes_out_per_iteration", opt(r.bytes_out_per_iteration)},
      {"peak_allocated_bytes", opt(r.peak_allocated_bytes)},
      {"checksum", text_or_null(r.checksum)},
      {"result_match", result_match_json(r)},
      {"result_basis", text_or_null(r.result_basis)},
      {"loss_relative_difference", opt(r.loss_relative_difference)},
      {"loss_worst_iteration", opt(r.loss_worst_iteration)},
      {"loss_native_spread", opt(r.loss_native_spread)},
      {"loss_past_iteration", opt(r.loss_past_iteration)},
      {"raw",
       {{"iter_ms", std::move(iter_ms)},
        {"loss", std::move(losses)},
        {"summary", o.output.summary}}},
  };
}

}  // namespace

std::string render_table(const std::vector<ModeRow>& rows) {
  struct Column {
    std::string_view header;
    size_t width;
  };
  static constexpr Column kColumns[] = {
      {"steady ms", 9}, {"x native", 8},  {"x link", 6},   {"x driver", 8},
      {"first ms", 9},  {"faults/it", 9}, {"GB in/it", 8}, {"GB out/it", 9},
      {"peak GiB", 8},  {"budget", 6},    {"result", 7},
  };
  size_t name_width = 8;  // "managed", or a longer baseline's name
  for (const ModeRow& row : rows) name_width = std::max(name_width, row_name(row).size());
  auto fixed = [](std::optional<double> v, int digits) {
    return v ? fmt::format("{:.{}f}", *v, digits) : std::string("-");
  };
  std::string out = fmt::format("{:<{}}", "mode", name_width);
  for (const Column& c : kColumns) out += fmt::format("  {:>{}}", c.header, c.width);
  out += "\n";
  for (const ModeRow& row : rows) {
    std::string line = fmt::format("{:<{}}", row_name(row), name_width);
    if (row.status != ModeStatus::ok) {
      line += fmt::format("  {}: {}", mode_status_name(row.status), row.reason);
      out += line + "\n";
      continue;
    }
    auto gb = [](std::optional<double> bytes) {
      return bytes ? std::optional<double>(*bytes / kGB) : std::nullopt;
    };
    // umswap's modes: GPU-resident bytes it counted; a baseline: what PyTorch allocated.
    const std::optional<uint64_t> peak =
        row.baseline ? row.peak_allocated_bytes : row.peak_resident_bytes;
    const std::optional<double> peak_gib =
        peak ? std::optional<double>(static_cast<double>(*peak) / kGiB) : std::nullopt;
    const std::string cells[] = {
        fixed(row.steady_median_ms, 1),
        fixed(row.ratio_to_native, 2),
        fixed(row.ratio_to_link_limit, 2),
        fixed(row.ratio_to_driver_limit, 2),
        fixed(row.first_ms, 1),
        fixed(row.faults_per_iteration, 1),
        fixed(gb(row.bytes_in_per_iteration), 2),
        fixed(gb(row.bytes_out_per_iteration), 2),
        fixed(peak_gib, 2),
        row.budget_held ? (*row.budget_held ? "yes" : "no") : "-",
        result_text(row),
    };
    for (size_t i = 0; i < std::size(kColumns); ++i) {
      line += fmt::format("  {:>{}}", cells[i], kColumns[i].width);
    }
    out += line + "\n";
  }
  return out;
}

std::string graph_launches_text(uint64_t launches) {
  return fmt::format(
      "{} CUDA graph launch{} (XLA's command buffers, torch.compile's "
      "reduce-overhead mode)",
      launches, launches == 1 ? "" : "es");
}

std::string render_notes(const CompareReport& report) {
  std::string out;
  if (report.probe.probe) {
    const LinkProbe& p = *report.probe.probe;
    out += fmt::format(
        "link{}: host->device {}, device->host {} (pinned copies); managed prefetch to the GPU "
        "{}, to the host {}\n",
        p.device_name.empty() ? "" : fmt::format(" ({})", p.device_name),
        gb_per_s(p.rates.htod_bytes_per_s), gb_per_s(p.rates.dtoh_bytes_per_s),
        gb_per_s(p.rates.prefetch_bytes_per_s), gb_per_s(p.rates.evict_bytes_per_s));
    for (const std::string& note : p.notes) out += fmt::format("note: {}\n", note);
  } else {
    out += fmt::format("link: not measured ({}); x link and x driver are -\n", report.probe.error);
  }
  const bool budgeted = std::any_of(report.outcomes.begin(), report.outcomes.end(),
                                    [](const ModeOutcome& o) { return has_budget(o.mode); });
  if (budgeted) {
    out += report.budget.bytes ? fmt::format("budget: {}\n", report.budget.description)
                               : fmt::format("budget: {}\n", report.budget.error);
  }
  std::vector<const ModeRow*> all;
  for (const auto* rows : {&report.rows, &report.baseline_rows}) {
    for (const ModeRow& row : *rows) all.push_back(&row);
  }
  bool by_loss = false;
  for (const ModeRow* row : all) {
    if (row->timing_source == "stats") {
      out += fmt::format(
          "note: {} printed no iteration times; its times are umswap's (stats wall_ms)\n",
          row_name(*row));
    }
    // Online learning plans late (GPT-2 medium: its tenth iteration): with few steps the steady
    // figure is the first planned iterations, which still move what learning left behind.
    if (!row->baseline && row->status == ModeStatus::ok &&
        (row->mode == CompareMode::online || row->mode == CompareMode::replay) &&
        row->steady_median_ms && row->steady_iterations < kFewSteadyIterations) {
      out += fmt::format(
          "note: {}'s steady ms is the median of {} iteration{} after its plan took effect; run "
          "more steps for a steadier figure\n",
          row_name(*row), row->steady_iterations, row->steady_iterations == 1 ? "" : "s");
    }
    by_loss = by_loss || row->result_basis == "loss";
    const uint64_t at = row->loss_worst_iteration.value_or(0);
    const double tolerance = row->loss_tolerance.value_or(0);
    if (row->within_native_spread) {
      out += fmt::format(
          "note: {}'s loss at iteration {} is {:.2g} off native's (relative), more than "
          "--loss-tolerance {:g} but within {:g}x what two native runs differ by up to there "
          "({:.2g}; native ran twice to tell): the program is not deterministic, so a change to "
          "its results smaller than that cannot be seen here; with deterministic algorithms and "
          "a `checksum` in its summary line the runs are compared bit for bit (docs/cli.md)\n",
          row_name(*row), at, row->loss_relative_difference.value_or(0), tolerance,
          kNativeSpreadFactor, row->loss_native_spread_at.value_or(0));
    } else if (row->same_result == false && row->result_basis == "loss") {
      if (row->loss_past_iteration) {
        out += fmt::format(
            "note: {}'s loss at iteration {} is {:.2g} off native's (relative), more than "
            "--loss-tolerance {:g} and more than {:g}x what two native runs differ by up to there "
            "({:.2g})\n",
            row_name(*row), *row->loss_past_iteration, row->loss_past_difference.value_or(0),
            tolerance, kNativeSpreadFactor, row->loss_native_spread_at.value_or(0));
      } else if (!row->loss_native_spread && row->loss_relative_difference &&
                 *row->loss_relative_difference > tolerance) {
        out += fmt::format(
            "note: {}'s loss at iteration {} is {:.2g} off native's (relative), more than "
            "--loss-tolerance {:g}\n",
            row_name(*row), at, *row->loss_relative_difference, tolerance);
      } else {
        out += fmt::format("note: {}'s loss at iteration {} is not a number equal to native's\n",
                           row_name(*row), at);
      }
    }
  }
  // Native's second run, where one was made and it could not serve: the losses were judged by
  // the tolerance alone.
  for (const ModeOutcome& again : report.natives_again) {
    const std::string name =
        again.rank ? fmt::format("native r{}", *again.rank) : std::string("native");
    if (again.status != ModeStatus::ok) {
      out += fmt::format(
          "note: {}'s second run {} ({}): the losses were judged by --loss-tolerance alone\n", name,
          again.status == ModeStatus::failed ? "failed" : "was skipped", again.reason);
    } else if (std::none_of(all.begin(), all.end(), [&](const ModeRow* r) {
                 return r->rank == again.rank && r->loss_native_spread;
               })) {
      out += fmt::format(
          "note: {}'s second run printed no losses in the iterations its first did: the losses "
          "were judged by --loss-tolerance alone\n",
          name);
    }
  }
  // Kernels in CUDA graphs: the peak leaves their memory out, so one within the budget is no
  // answer (compute_rows leaves budget_held unset); one over it stays "no", with its note below.
  for (const ModeRow& row : report.rows) {
    if (row.baseline || !row.graph_launches) continue;
    out += fmt::format(
        "note: {} ran {}, whose kernels umswap cannot see into: its peak counts only what it "
        "saw{} (docs/jax.md)\n",
        row_name(row), graph_launches_text(*row.graph_launches),
        row.budget_held == false ? "" : ", so whether the budget held is not known");
  }
  // A budget not held: why, where the stats say (docs/advisor.md).
  for (const ModeRow& row : report.rows) {
    if (row.baseline || row.budget_held != false) continue;
    const auto o =
        std::find_if(report.outcomes.begin(), report.outcomes.end(), [&](const ModeOutcome& x) {
          return !x.baseline && x.mode == row.mode && x.rank == row.rank;
        });
    const StatsFigures* s = o != report.outcomes.end() && o->stats ? &*o->stats : nullptr;
    std::string why = "see docs/advisor.md, \"What does not work yet\"";
    if (row.mode == CompareMode::vmm) {
      why =
          "engine vmm's peak is its GPU chunks and the program's own GPU memory together: the "
          "program mapped more than the budget itself, or chunks in use when it mapped its own "
          "stayed until a window moved them (docs/cli.md, \"--engine vmm\")";
    } else if (s && s->kept_reached_evictions.value_or(0) > 0) {
      why = fmt::format(
          "{} evictions ({} in the run) were left on the GPU because the program had already "
          "submitted the next use of their range before the advisor came to them (docs/advisor.md, "
          "\"A range a submitted launch reaches is left on the GPU\")",
          *s->kept_reached_evictions, gib(s->kept_reached_bytes));
    } else if (s && s->wait_stalls.value_or(0) > 0) {
      why =
          "the watchdog released launches that waited for the advisor and turned the waits "
          "off, so late prefetches faulted in beside evictions (docs/advisor.md)";
    } else if (s && s->prefetch_wait == false) {
      why =
          "UMSWAP_PREFETCH_WAIT=0: a launch does not wait for a prefetch that is late, so its "
          "data faults in while evictions are still on their way out (docs/advisor.md)";
    } else if (s && s->evict_wait == false) {
      why =
          "launches do not wait for evictions still on their way out; UMSWAP_EVICT_WAIT=1 "
          "(experimental) makes them wait, at a cost in time (docs/advisor.md)";
    }
    out += fmt::format("note: {} counted {} GPU-resident at its peak, over its budget of {}: {}\n",
                       row_name(row), gib(row.peak_resident_bytes), gib(row.budget_bytes), why);
  }
  if (by_loss) {
    out += fmt::format(
        "note: result: where a run printed no checksum, its loss in every iteration is compared "
        "with native's within {:g} (relative; --loss-tolerance): cuDNN and cuBLAS are not "
        "bit-for-bit deterministic, and a run that is not can drift from native's and spike in "
        "an iteration where native did not (samples/pytorch/gpt2.py --deterministic prints a "
        "checksum)\n",
        report.loss_tolerance);
  }
  if (std::any_of(report.outcomes.begin(), report.outcomes.end(),
                  [](const ModeOutcome& o) { return o.rank.has_value(); })) {
    out +=
        "note: torchrun: one row per rank (r<N>), each from that rank's lines and stats file and "
        "compared with native's same rank; the budget is each rank's, on its own GPU\n";
  }
  if (!report.baseline_rows.empty()) {
    out +=
        "note: peak GiB of a baseline is the program's peak_allocated_bytes "
        "(torch.cuda.max_memory_allocated); of online and replay, the GPU-resident bytes umswap "
        "counted\n";
  }
  return out;
}

std::string render_verdicts(const CompareReport& report) {
  std::string out;
  for (const BaselineVerdict& v : baseline_verdicts(report.rows, report.baseline_rows)) {
    out += v.text + "\n";
  }
  return out;
}

json compare_json(const CompareReport& report) {
  json probe;
  if (report.probe.probe) {
    const LinkProbe& p = *report.probe.probe;
    probe = {{"ok", true},
             {"error", nullptr},
             {"device", p.device_name},
             {"gpu_total_bytes", p.total_bytes},
             {"gpu_free_bytes", p.free_bytes},
             {"htod_bytes_per_s", opt(p.rates.htod_bytes_per_s)},
             {"dtoh_bytes_per_s", opt(p.rates.dtoh_bytes_per_s)},
             {"prefetch_bytes_per_s", opt(p.rates.prefetch_bytes_per_s)},
             {"evict_bytes_per_s", opt(p.rates.evict_bytes_per_s)},
             {"notes", p.notes}};
  } else {
    probe = {{"ok", false},
             {"error", report.probe.error},
             {"device", nullptr},
             {"gpu_total_bytes", nullptr},
             {"gpu_free_bytes", nullptr},
             {"htod_bytes_per_s", nullptr},
             {"dtoh_bytes_per_s", nullptr},
             {"prefetch_bytes_per_s", nullptr},
             {"evict_bytes_per_s", nullptr},
             {"notes", json::array()}};
  }
  json modes = json::array();
  for (size_t i = 0; i < report.outcomes.size() && i < report.rows.size(); ++i) {
    const ModeOutcome& o = report.outcomes[i];
    const ModeRow& r = report.rows[i];
    json m = outcome_json(o, r);
    m["mode"] = compare_mode_name(o.mode);
    m["record_exit_code"] = opt(o.record_exit_code);
    m["record_wall_s"] = opt(o.record_wall_s);
    m["link_limit_ms"] = opt(r.link_limit_ms);
    m["ratio_to_link_limit"] = opt(r.ratio_to_link_limit);
    m["driver_limit_ms"] = opt(r.driver_limit_ms);
    m["ratio_to_driver_limit"] = opt(r.ratio_to_driver_limit);
    m["gpu_faults_per_iteration"] = opt(r.faults_per_iteration);
    m["peak_resident_bytes"] = opt(r.peak_resident_bytes);
    m["budget_bytes"] = opt(r.budget_bytes);
    m["budget_held"] = opt(r.budget_held);
    m["raw"]["stats"] = o.stats ? stats_json(*o.stats) : json(nullptr);
    m["raw"]["stats_error"] = text_or_null(o.stats_error);
    modes.push_back(std::move(m));
  }
  json baselines = json::array();
  for (size_t i = 0; i < report.baselines.size() && i < report.baseline_rows.size(); ++i) {
    const ModeOutcome& o = report.baselines[i];
    const ModeRow& r = report.baseline_rows[i];
    json b = outcome_json(o, r);
    b["baseline"] = o.baseline ? json(compare_baseline_name(*o.baseline)) : json(nullptr);
    b["flag"] = o.baseline ? json(compare_baseline_flag(*o.baseline)) : json(nullptr);
    b["peak_reserved_bytes"] = opt(get_u64(o.output.summary, "peak_reserved_bytes"));
    baselines.push_back(std::move(b));
  }
  json verdicts = json::array();
  for (const BaselineVerdict& v : baseline_verdicts(report.rows, report.baseline_rows)) {
    verdicts.push_back(
        {{"baseline", compare_baseline_name(v.baseline)},
         {"rank", opt(v.rank)},
         {"umswap_mode", v.umswap_mode ? json(compare_mode_name(*v.umswap_mode)) : json(nullptr)},
         {"umswap_steady_median_ms", opt(v.umswap_ms)},
         {"baseline_steady_median_ms", opt(v.baseline_ms)},
         {"umswap_peak_resident_bytes", opt(v.umswap_peak_bytes)},
         {"baseline_peak_allocated_bytes", opt(v.baseline_peak_bytes)},
         {"at_equal_memory", opt(v.at_equal_memory)},
         {"speedup", opt(v.speedup)},
         {"text", v.text}});
  }
  json natives_again = json::array();
  for (const ModeOutcome& o : report.natives_again) {
    natives_again.push_back({{"rank", opt(o.rank)},
                             {"status", mode_status_name(o.status)},
                             {"reason", text_or_null(o.reason)},
                             {"exit_code", opt(o.exit_code)},
                             {"wall_s", opt(o.wall_s)}});
  }
  return {{"umswap_compare_version", kCompareJsonVersion},
          {"command", report.command},
          {"loss_tolerance", report.loss_tolerance},
          {"budget_bytes", opt(report.budget.bytes)},
          {"budget",
           {{"spec", report.budget_spec.to_string()},
            {"description", text_or_null(report.budget.description)},
            {"error", text_or_null(report.budget.error)}}},
          {"probe", std::move(probe)},
          {"modes", std::move(modes)},
          {"natives_again", std::move(natives_again)},
          {"baselines", std::move(baselines)},
          {"baseline_comparisons", std::move(verdicts)}};
}

}  // namespace umswap::cli
