// `umswap compare`: the names of its modes and runs, and what a run printed or wrote, parsed. Pure.
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
  s.plan_unfit_steps = get_u64(stats, advisor::plan::kUnfitSteps);
  s.detection_source = get_string(stats, schema::detection::kSource);
  s.detection_period = get_u64(stats, schema::detection::kPeriod);
  s.detection_confidence = get_double(stats, schema::detection::kConfidence);
  s.detection_warmup_steps = get_u64(stats, schema::detection::kWarmupSteps);
  s.detection_steps = get_u64(stats, schema::detection::kSteps);
  s.plan_largest_step_bytes = get_u64(stats, advisor::plan::kLargestStepBytes);
  s.first_plan_applied_from = get_u64(stats, advisor::kFirstPlanAppliedFromLaunch);
  s.first_plan_known = schema::find(stats, advisor::kFirstPlanAppliedFromLaunch) != nullptr;
  s.prefetch_wait = get_bool(stats, advisor::kPrefetchWait);
  s.evict_wait = get_bool(stats, advisor::kEvictWait);
  s.wait_stalls = get_u64(stats, advisor::kWaitStalls);
  s.graph_launches = get_u64(stats, advisor::kGraphLaunches);
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
                              .peak_resident_bytes = get_u64(it, iteration::kPeakResidentBytes),
                              .vmm_bytes_to_gpu = get_u64(it, iteration::kVmmBytesToGpu),
                              .vmm_bytes_to_host = get_u64(it, iteration::kVmmBytesToHost)});
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

}  // namespace umswap::cli
