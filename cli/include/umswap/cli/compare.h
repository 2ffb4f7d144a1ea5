// `umswap compare`, the pure parts: reading what each run left behind (the program's output and
// umswap's stats file), the budget, the link limits, the default command's size, each run's
// environment, the baselines' verdicts, and the table and JSON. Nothing here runs a process or
// touches CUDA (compare_command() in cli_main.h does), so all of it is unit-tested from canned
// data.
#pragma once

#include "umswap/cli/child_environment.h"
#include "umswap/cli/compare_flags.h"
#include "umswap/cli/link_probe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace umswap::cli {

inline constexpr int kCompareJsonVersion = 4;
// Fewer steady iterations than this in an online or replay row: a note says the figure is thin.
inline constexpr size_t kFewSteadyIterations = 3;
// A budget counts as held while peak GPU-resident bytes stay within this factor of it.
inline constexpr double kBudgetTolerance = 1.05;

// The whole of `text` as a number of type T (std::from_chars); nullopt for anything else.
template <typename T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// --- What the program printed -------------------------------------------------------------------

// `iter <i> ms <float> [loss <x>] ...`, as the bundled samples print each iteration.
struct IterationLine {
  uint64_t index = 0;
  double ms = 0;
  std::string loss;  // the text after `loss`, "" when none
};
// nullopt for any other line.
std::optional<IterationLine> parse_iteration_line(std::string_view line);

struct ProgramOutput {
  std::vector<IterationLine> iterations;  // in the order printed
  nlohmann::json summary;                 // object of the last `summary {json}` line; null if none
  std::string checksum;                   // `checksum <hex>` line, else summary's "checksum"
};
// Lines that are none of the above are ignored, as is a summary that is not a JSON object.
ProgramOutput parse_program_output(std::string_view text);

// `footprint_bytes <N>` from `cudnn_vgg16 --print-footprint`; nullopt when there is none.
std::optional<uint64_t> parse_footprint_output(std::string_view text);

// --- What libumswap.so wrote in the stats file
// ---------------------------------------------------- Every field is optional: a library that does
// not know a figure leaves it out, and a value of the wrong type is treated as missing.

struct StatsIteration {
  std::optional<uint64_t> index;
  std::optional<uint64_t> first_step;  // the launch it begins with
  std::optional<double> wall_ms;
  std::optional<uint64_t> gpu_page_faults;
  std::optional<uint64_t> bytes_htod;  // CUPTI's, plus copied_in_bytes (UMSWAP_EVICT_COPY)
  std::optional<uint64_t> bytes_dtoh;  // CUPTI's, plus copied_out_bytes
  std::optional<uint64_t> prefetched_bytes;
  std::optional<uint64_t> evicted_bytes;
  std::optional<uint64_t> peak_resident_bytes;
  std::optional<uint64_t> vmm_bytes_to_gpu, vmm_bytes_to_host;  // engine vmm's windows
};

struct StatsFigures {
  std::optional<uint64_t> managed_bytes_peak;  // allocator.managed_bytes_peak
  // advisor.*
  std::optional<std::string> advisor_mode;
  std::optional<std::string> advisor_state;
  std::optional<std::string> advisor_fallback;  // nullopt for JSON null too
  std::optional<uint64_t> budget_bytes;
  std::optional<uint64_t> prefetched_bytes;
  std::optional<uint64_t> evicted_bytes;
  std::optional<uint64_t> peak_resident_bytes;  // counted from CUPTI records
  std::optional<uint64_t> peak_resident_plan_bytes;
  std::optional<uint64_t> plan_applied_from;  // advisor.plan.applied_from_launch (the last plan)
  // advisor.plan.unfit_steps, largest_step_bytes: launches whose own data is over the budget,
  // and the most one launch touches (the smallest budget with none).
  std::optional<uint64_t> plan_unfit_steps, plan_largest_step_bytes;
  // detection.*: how the run's end found its iterations.
  std::optional<std::string> detection_source;
  std::optional<uint64_t> detection_period, detection_warmup_steps, detection_steps;
  std::optional<double> detection_confidence;
  std::optional<uint64_t> first_plan_applied_from;  // advisor.first_plan_applied_from_launch
  bool first_plan_known = false;  // the file has that field (null: no plan started)
  // advisor.prefetch_wait, evict_wait (UMSWAP_PREFETCH_WAIT, UMSWAP_EVICT_WAIT) and wait_stalls
  // (times the watchdog released waiting launches and turned the waits off).
  std::optional<bool> prefetch_wait, evict_wait;
  std::optional<uint64_t> wait_stalls;
  std::optional<uint64_t> graph_launches;  // advisor.graph_launches
  // advisor.evict_copy.kept_reached: evictions not made because a launch the program had already
  // submitted reached the range (left on the GPU, over the budget until that use).
  std::optional<uint64_t> kept_reached_evictions, kept_reached_bytes;
  std::optional<uint64_t> rank;  // the process's RANK under torchrun
  // Engine vmm's (vmm.*): the pool as given (the budget), the most GPU chunks in use plus the
  // program's own GPU memory at once (else the chunks' peak alone), bytes moved each way in all.
  std::optional<uint64_t> vmm_budget_bytes, vmm_gpu_peak, vmm_bytes_to_gpu, vmm_bytes_to_host;
  std::vector<StatsIteration> iterations;  // iterations[], sorted by index when they have one
};
StatsFigures parse_stats_figures(const nlohmann::json& stats);

// --- One mode's run
// -------------------------------------------------------------------------------

enum class ModeStatus { ok, failed, skipped };
std::string_view mode_status_name(ModeStatus status);  // "ok", "failed", "skipped"

struct ModeOutcome {
  CompareMode mode = CompareMode::native;
  // Set for a baseline run; `mode` is then native: the native run's environment, with the
  // baseline's flag appended to the command.
  std::optional<CompareBaseline> baseline;
  // Set for one rank's share of a torchrun run (split_by_rank): its lines and its stats file;
  // the status, exit code and times are the whole run's.
  std::optional<int> rank;
  ModeStatus status = ModeStatus::skipped;
  std::string reason;                    // why it failed or was skipped; "" when ok
  std::optional<int> exit_code;          // of the command (replay: of the replay run)
  std::optional<double> wall_s;          // of the command, as umswap measured it
  std::optional<uint64_t> budget_bytes;  // the UMSWAP_BUDGET it ran with (online, replay)
  std::optional<int> record_exit_code;   // replay: of the record run before it
  std::optional<double> record_wall_s;
  ProgramOutput output;
  std::optional<StatsFigures> stats;
  std::string stats_error;  // why there are no stats, when there are none
};

// The reason of a failed run: "exit 1: <last line>", "killed by signal 9: <last line>", or
// without the line when `last_stderr_line` is empty.
std::string failure_reason(int exit_code, std::string_view last_stderr_line);

// --- Limits
// ----------------------------------------------------------------------------------------

// The link limit of one steady iteration, in ms: max(native, bytes_in / htod, bytes_out / dtoh).
// nullopt when the native time, a byte count or a rate it needs is unknown or a rate is not > 0.
std::optional<double> link_limit_ms(std::optional<double> native_ms, std::optional<double> bytes_in,
                                    std::optional<double> bytes_out, const LinkRates& rates);
// The driver-path limit: max(native, bytes_in / prefetch + bytes_out / evict) (the driver's two
// migration directions take turns). nullopt as above.
std::optional<double> driver_limit_ms(std::optional<double> native_ms,
                                      std::optional<double> bytes_in,
                                      std::optional<double> bytes_out, const LinkRates& rates);

// The median of `values` (mean of the middle two for an even count); nullopt when empty.
std::optional<double> median(std::vector<double> values);
// The steady part of `count` iterations as [first, count): all but the first two; when there are
// at most two, the last one; {0, 0} when there are none.
std::pair<size_t, size_t> steady_range(size_t count);
// The steady part of `count` timings (program lines or stats iterations, aligned by their ends:
// a program's first iterations may come before the first one detected) of a run with an advisor
// plan: from the second iteration that began after the first plan took effect (the first one
// moves the data to where the plan wants it; plans relearned later are part of the steady run),
// and never before steady_range(count). steady_range(count) when the stats show no plan or no
// such iteration.
std::pair<size_t, size_t> planned_steady_range(size_t count, const StatsFigures* stats);
// The launch the steady iterations are counted from: the first plan's (none when the file says
// no plan started), else (a stats file without the field) the last plan's.
std::optional<uint64_t> steady_from_launch(const StatsFigures& stats);
// The first of `iterations` that began at or after `launch`; nullopt when none did.
std::optional<size_t> iteration_from(const std::vector<StatsIteration>& iterations,
                                     uint64_t launch);
// Mean of `get(iteration)` over the steady iterations (planned_steady_range) that have the
// figure; nullopt when none do.
template <typename Get>
std::optional<double> steady_mean(const StatsFigures& stats, Get get) {
  const std::vector<StatsIteration>& iterations = stats.iterations;
  const auto [first, end] = planned_steady_range(iterations.size(), &stats);
  double sum = 0;
  size_t n = 0;
  for (size_t i = first; i < end; ++i) {
    if (const std::optional<uint64_t> v = get(iterations[i])) {
      sum += static_cast<double>(*v);
      ++n;
    }
  }
  return n ? std::optional<double>(sum / static_cast<double>(n)) : std::nullopt;
}
// Largest `get(iteration)` over the same steady iterations; nullopt when none has the figure.
template <typename Get>
std::optional<uint64_t> steady_max(const StatsFigures& stats, Get get) {
  const std::vector<StatsIteration>& iterations = stats.iterations;
  const auto [first, end] = planned_steady_range(iterations.size(), &stats);
  std::optional<uint64_t> most;
  for (size_t i = first; i < end; ++i) {
    if (const std::optional<uint64_t> v = get(iterations[i])) most = std::max(most.value_or(0), *v);
  }
  return most;
}
// A stats or summary field read as a count: a non-negative number, else nullopt (missing, null,
// negative, another type).
std::optional<uint64_t> u64_of(const nlohmann::json* v);

// --- Rows of the table
// ------------------------------------------------------------------------------

struct ModeRow {
  CompareMode mode = CompareMode::native;
  std::optional<CompareBaseline> baseline;  // a baseline's row (its name replaces the mode's)
  std::optional<int> rank;                  // a torchrun rank's row (after the name: `online r1`)
  ModeStatus status = ModeStatus::skipped;
  std::string reason;
  std::optional<double> steady_median_ms;
  std::string timing_source;  // "program" (iter lines), "summary", "stats" or ""
  size_t steady_iterations = 0;
  std::optional<double> first_ms;
  std::optional<double> ratio_to_native;
  std::optional<double> link_limit_ms;
  std::optional<double> ratio_to_link_limit;
  std::optional<double> driver_limit_ms;
  std::optional<double> ratio_to_driver_limit;
  std::optional<double> faults_per_iteration;     // mean over steady iterations (stats)
  std::optional<double> bytes_in_per_iteration;   // bytes_htod, mean over steady iterations
  std::optional<double> bytes_out_per_iteration;  // bytes_dtoh, mean over steady iterations
  std::optional<uint64_t> peak_resident_bytes;    // advisor.peak_resident_bytes
  std::optional<uint64_t> peak_allocated_bytes;   // the program's summary (PyTorch's own peak)
  std::optional<uint64_t> budget_bytes;           // online and replay only
  std::optional<bool> budget_held;                // peak_resident <= budget * kBudgetTolerance
  // Engine um rows whose run launched CUDA graphs (advisor.graph_launches): their kernels' memory
  // is not in peak_resident_bytes, so a peak within the budget says nothing (budget_held unset),
  // one over it still does, and no baseline verdict claims equal memory from it.
  std::optional<uint64_t> graph_launches;
  std::string checksum;
  // vs native; nullopt when either side has nothing to compare. With a checksum on both sides,
  // equal checksums; else the losses of every iteration both runs printed within loss_tolerance
  // of each other.
  std::optional<bool> same_result;
  std::string result_basis;  // "checksum", "loss" (every iteration printed by both) or ""
  // basis "loss": the largest |a - b| / max(|a|, |b|) (0 for two zeros) over the iterations, and
  // the tolerance it was held to; nullopt when no pair of losses was two numbers (texts such as
  // `nan` must be equal). loss_worst_iteration: where it was largest, unless it is within the
  // tolerance and some iteration's texts differ: then the first of those.
  std::optional<double> loss_relative_difference;
  std::optional<double> loss_tolerance;
  std::optional<uint64_t> loss_worst_iteration;
  // basis "loss", when native ran a second time (compare does where a loss was past a tolerance
  // above 0 and there was no checksum on both sides): the largest relative difference between the
  // two native runs' losses over the iterations; within_native_spread when the result passed only
  // because of it (each iteration within kNativeSpreadFactor x the natives' largest difference up
  // to it). loss_past_iteration and loss_past_difference: the first iteration past that, and its
  // difference; loss_native_spread_at: the natives' largest difference up to the iteration a note
  // names (that one when there is one, else loss_worst_iteration).
  std::optional<double> loss_native_spread;
  bool within_native_spread = false;
  std::optional<uint64_t> loss_past_iteration;
  std::optional<double> loss_past_difference;
  std::optional<double> loss_native_spread_at;
};

// How far beyond the two native runs' largest difference so far a loss may lie and still count
// as the same result (the factor tests/gpu/correctness_matrix.py allows its natives' spread).
inline constexpr double kNativeSpreadFactor = 4.0;

// The rows for `outcomes` (one per mode and rank, in order). Ratios are to the median of the
// native outcome of the same rank (the only one without ranks);
// the native row's bytes moved count as 0 when its stats have none (passthrough moves no managed
// memory). Rows of failed or skipped modes carry only status and reason.
// `natives_again`: native's second run (per rank), made when a loss was past the tolerance
// (needs_native_again); a loss then passes within the natives' spread.
std::vector<ModeRow> compute_rows(const std::vector<ModeOutcome>& outcomes, const LinkRates& rates,
                                  double loss_tolerance = kDefaultLossTolerance,
                                  const std::vector<ModeOutcome>& natives_again = {});
// The rows for `baselines` (outcomes with `baseline` set): times, ratio to the native outcome
// among `outcomes`, the program's peak_allocated_bytes and the result check; no stats or limits.
std::vector<ModeRow> compute_baseline_rows(const std::vector<ModeOutcome>& baselines,
                                           const std::vector<ModeOutcome>& outcomes,
                                           double loss_tolerance = kDefaultLossTolerance,
                                           const std::vector<ModeOutcome>& natives_again = {});
// Whether native should run a second time to tell a program that is not deterministic from a
// changed result: some row's losses are past its tolerance, which is above 0 (0 asks for equal
// values), and it has not run twice yet.
bool needs_native_again(const std::vector<ModeRow>& rows);

// --- Baselines against umswap
// ---------------------------------------------------------------------------

// One baseline against umswap's online or replay run, for the line under the table. Peaks are of
// different kinds: umswap's is the GPU-resident managed bytes the driver's records count, the
// baseline's what PyTorch allocated (torch.cuda.max_memory_allocated), which leaves out
// PyTorch's cached free blocks; a resident peak at or below it is at equal or lower memory.
struct BaselineVerdict {
  CompareBaseline baseline = CompareBaseline::offload;
  std::optional<int> rank;                 // the baseline row's rank (torchrun)
  std::optional<CompareMode> umswap_mode;  // the row compared with; nullopt: none ran
  std::optional<double> umswap_ms;
  std::optional<double> baseline_ms;
  std::optional<uint64_t> umswap_peak_bytes;    // peak GPU-resident
  std::optional<uint64_t> baseline_peak_bytes;  // peak_allocated_bytes
  std::optional<bool> at_equal_memory;          // umswap peak <= baseline peak; nullopt: unknown
  // baseline_ms / umswap_ms (> 1: umswap is faster). For offload only at equal memory: a
  // speed-up bought with more GPU memory is no speed-up over save_on_cpu.
  std::optional<double> speedup;
  std::string text;  // the line, without a newline
};
// For each baseline row, among the online/replay rows of its rank: offload against the fastest
// whose peak is at or below its own (else against the one with the lowest peak, saying it is not at
// equal memory); checkpoint against the fastest online/replay row.
std::vector<BaselineVerdict> baseline_verdicts(const std::vector<ModeRow>& rows,
                                               const std::vector<ModeRow>& baseline_rows);

// --- Budget
// ----------------------------------------------------------------------------------------

struct BudgetChoice {
  std::optional<uint64_t> bytes;
  std::string description;  // "50% of 19.61 GiB (managed peak) = 9.80 GiB", "16.00 GiB"
  std::string error;        // when !bytes: "budget unknown: ..."
};
// A size stands for itself. A percentage refers to the managed run's peak managed bytes, else to
// the native run's peak_allocated_bytes, else to `estimate` (the default command's footprint).
BudgetChoice resolve_budget(const SizeSpec& spec, std::optional<uint64_t> managed_peak,
                            std::optional<uint64_t> native_peak,
                            std::optional<uint64_t> estimate = std::nullopt);

// --- The default command
// ---------------------------------------------------------------------------

inline constexpr int kDefaultBatches[] = {64, 32, 16, 8};
// 20: online mode learns over its first iterations; with 8, the steady figures were mostly learning
// (cudnn_vgg16 batch 64 on an H200, 2026-11-26: online 814.7 ms at 8 steps, 585.0 at 20).
inline constexpr uint64_t kDefaultSteps = 20;
// Share of the GPU's free memory the default command may use.
inline constexpr double kDefaultFreeShare = 0.8;

// min(free * kDefaultFreeShare, managed_limit resolved against total) (a zero limit is no limit).
uint64_t allowed_memory(uint64_t free_bytes, uint64_t total_bytes,
                        const std::optional<SizeSpec>& managed_limit);

struct BatchChoice {
  std::optional<int> batch;  // the largest of kDefaultBatches whose footprint fits
  uint64_t footprint_bytes = 0;
  std::string error;  // when !batch
};
// Asks `footprint_of` for each batch of kDefaultBatches in turn until one fits in `allowed_bytes`.
// An error from footprint_of ends the search with that error.
BatchChoice choose_batch(
    uint64_t allowed_bytes,
    const std::function<std::optional<uint64_t>(int batch, std::string* error)>& footprint_of);

// --- Environment of each run
// --------------------------------------------------------------------------

enum class CompareRun { native, managed, online, record, replay, vmm };
std::string_view compare_run_name(CompareRun run);  // "native", ..., "record", "replay", "vmm"

struct CompareRunSettings {
  CompareRun run = CompareRun::native;
  std::optional<uint64_t> budget_bytes;         // online, record, replay, vmm
  std::string stats_path;                       // UMSWAP_STATS
  std::string trace_path;                       // record: UMSWAP_TRACE; replay: UMSWAP_REPLAY
  std::optional<uint64_t> managed_limit_bytes;  // set UMSWAP_MANAGED_LIMIT (default command)
  // A torchrun command: set PET_TEE=1, PET_LOG_DIR to this (torchrun's copies of the ranks'
  // output, removed with compare's directory) and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
  std::string torchrun_log_dir;
};
// plan_child_environment() with only the engine (LD_PRELOAD, PyTorch's allocator settings,
// UMSWAP_ENGINE: vmm for the vmm run, um for every other, whatever the user's variable says) and,
// for native, the passthrough mode (so JAX keeps its own allocator there), then UMSWAP_MODE
// (passthrough, managed, online, online, replay, online), UMSWAP_STATS, and
// UMSWAP_BUDGET,
// UMSWAP_TRACE, UMSWAP_REPLAY where the run uses them; those it does not use are unset, so a
// user's own UMSWAP_TRACE cannot make the native run record; then torchrun's three variables when
// torchrun_log_dir is set. Other UMSWAP_* variables (the
// user's UMSWAP_MANAGED_LIMIT among them) are left as they are.
ChildEnvironment plan_compare_environment(const CompareRunSettings& settings,
                                          const CurrentEnv& current, std::string_view library_path);

// --- Launchers: torchrun, one process per GPU
// -------------------------------------------------------------
// `torchrun ...`, or `python* [-X...] -m torch.distributed.run|torch.distributed.launch ...` (the
// program by its file name, any directory). compare then reads one stats file per process and
// each rank's lines apart.
bool is_torchrun_command(const std::vector<std::string>& command);
// What compare sets for a torchrun command so that each line a rank prints reaches torchrun's
// stdout with the rank in front: PET_TEE=1 (torchrun's --tee 1: each rank's stdout goes to a file
// in PET_LOG_DIR and is copied to torchrun's stdout, line by line, each with its rank's prefix)
// and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, the prefix.
inline constexpr std::string_view kRankPrefixTemplate = "[rank${rank}]:";
// `line` without torchrun's prefix, and the rank the prefix names: `[rank3]:text` (the template
// above) and `[default3]:text` (torchrun's own, by local rank) give 3 and `text`; a line without
// one gives nullopt and the whole line.
std::pair<std::optional<int>, std::string_view> strip_rank_prefix(std::string_view line);
// The lines of each rank, prefixes removed, in their order; lines without a prefix (torchrun's
// own) are left out. A rank whose stdout is block-buffered can have a line cut in two by
// torchrun's copy; read_rank_logs() has them whole.
std::map<int, std::string> split_rank_output(std::string_view text);
// Each local rank's stdout as torchrun kept it under PET_LOG_DIR `log_dir`
// (`<run id>_<x>/attempt_<n>/<local rank>/stdout.log`; of several attempts, the last); empty
// when there is none (a torchrun without --tee support, or none started).
std::map<int, std::string> read_rank_logs(const std::string& log_dir);
// One outcome per rank that printed a line (`outputs`: read_rank_logs(), else
// split_rank_output()) or left a stats file with its rank: `whole` (status, exit code, times,
// budget) with that rank's output and stats; a rank without a stats file gets
// stats_error "no stats file from this rank"; of several files with one rank (a child that
// used CUDA inherits RANK), the one with the most iterations. No rank at all: `whole` alone, its
// stats_error saying so. Stats files without a rank (a process torchrun did not start as a rank)
// are left out.
std::vector<ModeOutcome> split_by_rank(const ModeOutcome& whole,
                                       const std::map<int, std::string>& outputs,
                                       const std::vector<StatsFigures>& stats_files);

// --- Output
// ------------------------------------------------------------------------------------------

struct CompareReport {
  std::vector<std::string> command;
  SizeSpec budget_spec;
  BudgetChoice budget;
  LinkProbeResult probe;
  std::vector<ModeOutcome> outcomes;
  std::vector<ModeRow> rows;
  std::vector<ModeOutcome> baselines;  // in kCompareBaselines order
  std::vector<ModeRow> baseline_rows;
  std::vector<ModeOutcome> natives_again;  // native's second run, per rank; usually none
  double loss_tolerance = kDefaultLossTolerance;
};

// The table, one line per row, columns as documented in docs/cli.md; `-` where a figure is
// unknown; a failed or skipped row shows its reason after the mode (or baseline) name. A
// baseline's `peak GiB` is its peak_allocated_bytes.
std::string render_table(const std::vector<ModeRow>& rows);
// The baseline verdicts' lines (empty without baselines).
std::string render_verdicts(const CompareReport& report);
// The lines under the table: the link rates (or why there are none), the budget, probe notes,
// how results were compared without a checksum, and what a baseline's peak is.
std::string render_notes(const CompareReport& report);
// The --json document (schema in docs/cli.md).
nlohmann::json compare_json(const CompareReport& report);
// "N CUDA graph launch(es) (XLA's command buffers, torch.compile's reduce-overhead mode)": how
// compare's notes and the run summary name the launches whose kernels umswap cannot see into.
std::string graph_launches_text(uint64_t launches);

}  // namespace umswap::cli
