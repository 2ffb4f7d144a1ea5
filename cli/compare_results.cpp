// `umswap compare`: what each run left behind, turned into rows, a table and JSON. Pure.
#include "umswap/cli/compare.h"

#include "umswap/core/stats_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace umswap::cli {
namespace {

using nlohmann::json;
namespace schema = umswap::stats_schema;

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_blank(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !is_blank(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// Calls `f` with each line of `text`, without its newline.
template <typename F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    f(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

// Field readers that treat a missing field, or one of the wrong type, as unknown: by key (the
// program's summary line), or by the stats file's schema (stats_schema.h).
const json* field(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::optional<double> double_of(const json* v) {
  if (!v || !v->is_number()) return std::nullopt;
  const double d = v->get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

std::optional<std::string> string_of(const json* v) {
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::optional<bool> bool_of(const json* v) {
  return v && v->is_boolean() ? std::optional<bool>(v->get<bool>()) : std::nullopt;
}

std::optional<uint64_t> get_u64(const json& object, std::string_view key) {
  return u64_of(field(object, key));
}
std::optional<double> get_double(const json& object, std::string_view key) {
  return double_of(field(object, key));
}

std::optional<uint64_t> get_u64(const json& j, const schema::Field& f) {
  return u64_of(schema::find(j, f));
}
std::optional<double> get_double(const json& j, const schema::Field& f) {
  return double_of(schema::find(j, f));
}
std::optional<std::string> get_string(const json& j, const schema::Field& f) {
  return string_of(schema::find(j, f));
}
std::optional<bool> get_bool(const json& j, const schema::Field& f) {
  return bool_of(schema::find(j, f));
}

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json text_or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

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

bool has_budget(CompareMode mode) {
  return mode == CompareMode::online || mode == CompareMode::replay || mode == CompareMode::vmm;
}

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

std::string gib(std::optional<uint64_t> bytes) {
  return bytes ? fmt::format("{:.2f} GiB", static_cast<double>(*bytes) / kGiB)
               : std::string("unknown");
}

std::string ms_text(std::optional<double> ms) {
  return ms ? fmt::format("{:.1f} ms", *ms) : std::string("unknown");
}

// The name a row goes by: its baseline's, else its mode's; a rank's row with ` r<rank>` after it.
std::string row_name(const ModeRow& row) {
  const std::string_view name =
      row.baseline ? compare_baseline_name(*row.baseline) : compare_mode_name(row.mode);
  return row.rank ? fmt::format("{} r{}", name, *row.rank) : std::string(name);
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

// How `a_ms` compares with `b_ms`: "1.25× faster than", "1.25× slower than", or "about as fast
// as" when the factor would print as 1.00.
std::string faster_or_slower(double a_ms, double b_ms) {
  const double factor = std::max(a_ms, b_ms) / std::min(a_ms, b_ms);
  if (factor < 1.005) return "about as fast as";
  return fmt::format("{:.2f}× {} than", factor, a_ms < b_ms ? "faster" : "slower");
}

}  // namespace

std::optional<uint64_t> u64_of(const json* v) {
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    return i >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(i)) : std::nullopt;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    return d >= 0 && d < 1.8e19 ? std::optional<uint64_t>(static_cast<uint64_t>(d)) : std::nullopt;
  }
  return std::nullopt;
}

std::string_view compare_baseline_name(CompareBaseline baseline) {
  switch (baseline) {
    case CompareBaseline::offload:
      return "offload";
    case CompareBaseline::checkpoint:
      return "checkpoint";
  }
  return "unknown";
}

std::string_view compare_baseline_flag(CompareBaseline baseline) {
  switch (baseline) {
    case CompareBaseline::offload:
      return "--offload";
    case CompareBaseline::checkpoint:
      return "--checkpoint";
  }
  return "";
}

std::optional<CompareBaseline> parse_compare_baseline(std::string_view text) {
  for (const CompareBaseline baseline : kCompareBaselines) {
    if (compare_baseline_name(baseline) == trim(text)) return baseline;
  }
  return std::nullopt;
}

std::string_view compare_mode_name(CompareMode mode) {
  switch (mode) {
    case CompareMode::native:
      return "native";
    case CompareMode::managed:
      return "managed";
    case CompareMode::online:
      return "online";
    case CompareMode::replay:
      return "replay";
    case CompareMode::vmm:
      return "vmm";
  }
  return "unknown";
}

std::optional<CompareMode> parse_compare_mode(std::string_view text) {
  for (const CompareMode mode : kCompareModes) {
    if (compare_mode_name(mode) == trim(text)) return mode;
  }
  return std::nullopt;
}

std::string_view mode_status_name(ModeStatus status) {
  switch (status) {
    case ModeStatus::ok:
      return "ok";
    case ModeStatus::failed:
      return "failed";
    case ModeStatus::skipped:
      return "skipped";
  }
  return "unknown";
}

std::string_view compare_run_name(CompareRun run) {
  switch (run) {
    case CompareRun::native:
      return "native";
    case CompareRun::managed:
      return "managed";
    case CompareRun::online:
      return "online";
    case CompareRun::record:
      return "record";
    case CompareRun::replay:
      return "replay";
    case CompareRun::vmm:
      return "vmm";
  }
  return "unknown";
}

std::optional<IterationLine> parse_iteration_line(std::string_view line) {
  const std::vector<std::string_view> w = words(line);
  if (w.size() < 4 || w[0] != "iter" || w[2] != "ms") return std::nullopt;
  const std::optional<uint64_t> index = parse_number<uint64_t>(w[1]);
  const std::optional<double> ms = parse_number<double>(w[3]);
  if (!index || !ms || !std::isfinite(*ms)) return std::nullopt;
  IterationLine it{.index = *index, .ms = *ms, .loss = {}};
  for (size_t i = 4; i + 1 < w.size(); ++i) {
    if (w[i] == "loss") it.loss = w[i + 1];
  }
  return it;
}

ProgramOutput parse_program_output(std::string_view text) {
  ProgramOutput out;
  std::string checksum_line;
  for_each_line(text, [&](std::string_view line) {
    if (auto it = parse_iteration_line(line)) {
      out.iterations.push_back(std::move(*it));
      return;
    }
    const std::string_view t = trim(line);
    if (t.starts_with("summary ") || t.starts_with("summary\t")) {
      json j = json::parse(t.substr(8), nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) out.summary = std::move(j);
      return;
    }
    const std::vector<std::string_view> w = words(t);
    if (w.size() == 2 && w[0] == "checksum") checksum_line = w[1];
  });
  if (!checksum_line.empty()) {
    out.checksum = checksum_line;
  } else if (const json* c = field(out.summary, "checksum"); c && !c->is_null()) {
    out.checksum = c->is_string() ? c->get<std::string>() : c->dump();
  }
  return out;
}

std::optional<uint64_t> parse_footprint_output(std::string_view text) {
  std::optional<uint64_t> found;
  for_each_line(text, [&](std::string_view line) {
    const std::vector<std::string_view> w = words(line);
    if (w.size() == 2 && w[0] == "footprint_bytes") {
      if (auto n = parse_number<uint64_t>(w[1])) found = n;
    }
  });
  return found;
}

StatsFigures parse_stats_figures(const json& stats) {
  namespace advisor = schema::advisor;
  StatsFigures s;
  s.managed_bytes_peak = get_u64(stats, schema::allocator::kManagedBytesPeak);
  s.advisor_mode = get_string(stats, advisor::kMode);
  s.advisor_state = get_string(stats, advisor::kState);
  s.advisor_fallback = get_string(stats, advisor::kFallback);
  s.budget_bytes = get_u64(stats, advisor::kBudgetBytes);
  s.prefetched_bytes = get_u64(stats, advisor::kPrefetchedBytes);
  s.evicted_bytes = get_u64(stats, advisor::kEvictedBytes);
  s.peak_resident_bytes = get_u64(stats, advisor::kPeakResidentBytes);
  s.peak_resident_plan_bytes = get_u64(stats, advisor::kPeakResidentPlanBytes);
  s.plan_applied_from = get_u64(stats, advisor::plan::kAppliedFromLaunch);
  s.first_plan_applied_from = get_u64(stats, advisor::kFirstPlanAppliedFromLaunch);
  s.first_plan_known = schema::find(stats, advisor::kFirstPlanAppliedFromLaunch) != nullptr;
  s.prefetch_wait = get_bool(stats, advisor::kPrefetchWait);
  s.evict_wait = get_bool(stats, advisor::kEvictWait);
  s.wait_stalls = get_u64(stats, advisor::kWaitStalls);
  s.kept_reached_evictions = get_u64(stats, advisor::evict_copy::kept_reached::kEvictions);
  s.kept_reached_bytes = get_u64(stats, advisor::evict_copy::kept_reached::kBytes);
  s.rank = get_u64(stats, schema::kRank);
  s.vmm_budget_bytes = get_u64(stats, schema::vmm::kBudgetBytes);
  s.vmm_gpu_peak = get_u64(stats, schema::vmm::kGpuAndProgramBytesPeak);
  if (!s.vmm_gpu_peak) s.vmm_gpu_peak = get_u64(stats, schema::vmm::kGpuBytesPeak);
  s.vmm_bytes_to_gpu = get_u64(stats, schema::vmm::kBytesToGpu);
  s.vmm_bytes_to_host = get_u64(stats, schema::vmm::kBytesToHost);
  if (const json* iterations = schema::find(stats, schema::kIterations);
      iterations && iterations->is_array()) {
    namespace iteration = schema::iterations;
    // Bytes each way: the driver's (CUPTI) and umswap's own copies (UMSWAP_EVICT_COPY), which
    // CUPTI's unified-memory counters do not see.
    const auto plus = [](std::optional<uint64_t> a, std::optional<uint64_t> b) {
      return a && b ? std::optional<uint64_t>(*a + *b) : a;
    };
    for (const json& it : *iterations) {
      if (!it.is_object()) continue;
      s.iterations.push_back({.index = get_u64(it, iteration::kIndex),
                              .first_step = get_u64(it, iteration::kFirstStep),
                              .wall_ms = get_double(it, iteration::kWallMs),
                              .gpu_page_faults = get_u64(it, iteration::kGpuPageFaults),
                              .bytes_htod = plus(get_u64(it, iteration::kBytesHtod),
                                                 get_u64(it, iteration::kCopiedInBytes)),
                              .bytes_dtoh = plus(get_u64(it, iteration::kBytesDtoh),
                                                 get_u64(it, iteration::kCopiedOutBytes)),
                              .prefetched_bytes = get_u64(it, iteration::kPrefetchedBytes),
                              .evicted_bytes = get_u64(it, iteration::kEvictedBytes),
                              .peak_resident_bytes = get_u64(it, iteration::kPeakResidentBytes)});
    }
    std::stable_sort(s.iterations.begin(), s.iterations.end(),
                     [](const StatsIteration& a, const StatsIteration& b) {
                       return a.index.value_or(UINT64_MAX) < b.index.value_or(UINT64_MAX);
                     });
  }
  return s;
}

std::string failure_reason(int exit_code, std::string_view last_stderr_line) {
  std::string reason = exit_code > 128 && exit_code < 128 + 65
                           ? fmt::format("exit {} (signal {})", exit_code, exit_code - 128)
                           : fmt::format("exit {}", exit_code);
  const std::string_view line = trim(last_stderr_line);
  if (!line.empty()) reason += fmt::format(": {}", line);
  return reason;
}

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

std::vector<ModeRow> compute_rows(const std::vector<ModeOutcome>& outcomes, const LinkRates& rates,
                                  double loss_tolerance,
                                  const std::vector<ModeOutcome>& natives_again) {
  std::vector<ModeRow> rows;
  for (const ModeOutcome& o : outcomes) {
    const ModeOutcome* native = ok_native(outcomes, o.rank);
    const std::optional<double> native_ms = native_median_ms(native);
    ModeRow row;
    row.mode = o.mode;
    row.rank = o.rank;
    row.status = o.status;
    row.reason = o.reason;
    if (o.status != ModeStatus::ok) {
      rows.push_back(std::move(row));
      continue;
    }
    const Timing t = timing_of(o);
    row.steady_median_ms = t.steady_median_ms;
    row.first_ms = t.first_ms;
    row.steady_iterations = t.steady_iterations;
    row.timing_source = t.source;
    row.ratio_to_native = ratio(row.steady_median_ms, native_ms);
    row.peak_allocated_bytes = get_u64(o.output.summary, "peak_allocated_bytes");

    if (o.stats) {
      const std::vector<StatsIteration>& its = o.stats->iterations;
      row.faults_per_iteration =
          steady_mean(*o.stats, [](const auto& i) { return i.gpu_page_faults; });
      row.bytes_in_per_iteration =
          steady_mean(*o.stats, [](const auto& i) { return i.bytes_htod; });
      row.bytes_out_per_iteration =
          steady_mean(*o.stats, [](const auto& i) { return i.bytes_dtoh; });
      // Over the steady iterations: the learning ones hold the whole footprint on purpose.
      const auto [first, end] = planned_steady_range(its.size(), &*o.stats);
      for (size_t i = first; i < end; ++i) {
        if (its[i].peak_resident_bytes) {
          row.peak_resident_bytes =
              std::max(row.peak_resident_bytes.value_or(0), *its[i].peak_resident_bytes);
        }
      }
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
      if (row.budget_bytes && row.peak_resident_bytes) {
        row.budget_held = static_cast<double>(*row.peak_resident_bytes) <=
                          static_cast<double>(*row.budget_bytes) * kBudgetTolerance;
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
    const std::optional<double> native_ms = native_median_ms(native);
    ModeRow row;
    row.mode = o.mode;
    row.baseline = o.baseline;
    row.rank = o.rank;
    row.status = o.status;
    row.reason = o.reason;
    if (o.status == ModeStatus::ok) {
      const Timing t = timing_of(o);
      row.steady_median_ms = t.steady_median_ms;
      row.first_ms = t.first_ms;
      row.steady_iterations = t.steady_iterations;
      row.timing_source = t.source;
      row.ratio_to_native = ratio(row.steady_median_ms, native_ms);
      row.peak_allocated_bytes = get_u64(o.output.summary, "peak_allocated_bytes");
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
      if (r->peak_resident_bytes && v.baseline_peak_bytes &&
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
      v.at_equal_memory = *v.umswap_peak_bytes <= *v.baseline_peak_bytes;
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
                          v.baseline_peak_bytes ? "umswap counted no GPU-resident bytes"
                                                : "the offload run printed no "
                                                  "peak_allocated_bytes",
                          figures);
    }
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

BudgetChoice resolve_budget(const SizeSpec& spec, std::optional<uint64_t> managed_peak,
                            std::optional<uint64_t> native_peak, std::optional<uint64_t> estimate) {
  BudgetChoice choice;
  if (!spec.is_percent) {
    choice.bytes = spec.bytes;
    choice.description = format_bytes(spec.bytes);
    return choice;
  }
  std::optional<uint64_t> basis;
  std::string_view basis_name;
  if (managed_peak && *managed_peak > 0) {
    basis = managed_peak;
    basis_name = "managed peak";
  } else if (native_peak && *native_peak > 0) {
    basis = native_peak;
    basis_name = "native peak_allocated_bytes";
  } else if (estimate && *estimate > 0) {
    basis = estimate;
    basis_name = "estimated footprint";
  }
  if (!basis) {
    choice.error = fmt::format(
        "budget unknown: {} is a share of the footprint, and neither the managed run's stats "
        "(allocator.managed_bytes_peak) nor the native run's summary line "
        "(peak_allocated_bytes) gave one; give --budget as a size (for example 8G)",
        spec.to_string());
    return choice;
  }
  choice.bytes = spec.resolve(*basis);
  choice.description = fmt::format("{} of {} ({}) = {}", spec.to_string(), format_bytes(*basis),
                                   basis_name, format_bytes(*choice.bytes));
  return choice;
}

uint64_t allowed_memory(uint64_t free_bytes, uint64_t total_bytes,
                        const std::optional<SizeSpec>& managed_limit) {
  uint64_t allowed =
      static_cast<uint64_t>(static_cast<long double>(free_bytes) * kDefaultFreeShare);
  if (managed_limit && !managed_limit->is_zero()) {
    allowed = std::min(allowed, managed_limit->resolve(total_bytes));
  }
  return allowed;
}

BatchChoice choose_batch(
    uint64_t allowed_bytes,
    const std::function<std::optional<uint64_t>(int batch, std::string* error)>& footprint_of) {
  BatchChoice choice;
  for (const int batch : kDefaultBatches) {
    std::string error;
    const std::optional<uint64_t> footprint = footprint_of(batch, &error);
    if (!footprint) {
      choice.error = error.empty() ? fmt::format("no footprint for batch {}", batch) : error;
      return choice;
    }
    choice.footprint_bytes = *footprint;
    if (*footprint <= allowed_bytes) {
      choice.batch = batch;
      return choice;
    }
  }
  choice.error = fmt::format(
      "even batch {} needs {} and only {} may be used (80% of the GPU's free memory, or "
      "UMSWAP_MANAGED_LIMIT if lower); refusing to oversubscribe the GPU",
      kDefaultBatches[std::size(kDefaultBatches) - 1], format_bytes(choice.footprint_bytes),
      format_bytes(allowed_bytes));
  return choice;
}

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
    } else if (s && (s->prefetch_wait == false || s->evict_wait == false)) {
      why =
          "a launch does not wait for a prefetch that is late, so its data faults in while "
          "evictions are still on their way out; UMSWAP_PREFETCH_WAIT=1 UMSWAP_EVICT_WAIT=1 "
          "(experimental) make launches wait for both, at a cost in time (docs/advisor.md)";
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
    json iter_ms = json::array(), losses = json::array();
    for (const IterationLine& it : o.output.iterations) {
      iter_ms.push_back(it.ms);
      losses.push_back(text_or_null(it.loss));
    }
    modes.push_back({
        {"mode", compare_mode_name(o.mode)},
        {"rank", opt(o.rank)},
        {"status", mode_status_name(o.status)},
        {"reason", text_or_null(o.reason)},
        {"exit_code", opt(o.exit_code)},
        {"wall_s", opt(o.wall_s)},
        {"record_exit_code", opt(o.record_exit_code)},
        {"record_wall_s", opt(o.record_wall_s)},
        {"steady_median_ms", opt(r.steady_median_ms)},
        {"timing_source", text_or_null(r.timing_source)},
        {"steady_iterations", r.steady_iterations},
        {"first_ms", opt(r.first_ms)},
        {"ratio_to_native", opt(r.ratio_to_native)},
        {"link_limit_ms", opt(r.link_limit_ms)},
        {"ratio_to_link_limit", opt(r.ratio_to_link_limit)},
        {"driver_limit_ms", opt(r.driver_limit_ms)},
        {"ratio_to_driver_limit", opt(r.ratio_to_driver_limit)},
        {"gpu_faults_per_iteration", opt(r.faults_per_iteration)},
        {"bytes_in_per_iteration", opt(r.bytes_in_per_iteration)},
        {"bytes_out_per_iteration", opt(r.bytes_out_per_iteration)},
        {"peak_resident_bytes", opt(r.peak_resident_bytes)},
        {"peak_allocated_bytes", opt(r.peak_allocated_bytes)},
        {"budget_bytes", opt(r.budget_bytes)},
        {"budget_held", opt(r.budget_held)},
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
          {"summary", o.output.summary},
          {"stats", o.stats ? stats_json(*o.stats) : json(nullptr)},
          {"stats_error", text_or_null(o.stats_error)}}},
    });
  }
  json baselines = json::array();
  for (size_t i = 0; i < report.baselines.size() && i < report.baseline_rows.size(); ++i) {
    const ModeOutcome& o = report.baselines[i];
    const ModeRow& r = report.baseline_rows[i];
    json iter_ms = json::array(), losses = json::array();
    for (const IterationLine& it : o.output.iterations) {
      iter_ms.push_back(it.ms);
      losses.push_back(text_or_null(it.loss));
    }
    baselines.push_back({
        {"baseline", o.baseline ? json(compare_baseline_name(*o.baseline)) : json(nullptr)},
        {"flag", o.baseline ? json(compare_baseline_flag(*o.baseline)) : json(nullptr)},
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
        {"peak_allocated_bytes", opt(r.peak_allocated_bytes)},
        {"peak_reserved_bytes", opt(get_u64(o.output.summary, "peak_reserved_bytes"))},
        {"bytes_in_per_iteration", opt(r.bytes_in_per_iteration)},
        {"bytes_out_per_iteration", opt(r.bytes_out_per_iteration)},
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
    });
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
