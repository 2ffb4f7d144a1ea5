// `umswap compare`, the pure parts: parsing its flags, reading canned program output and stats
// files, the limits, the budget, the default command's size, each run's environment, and the table
// and JSON built from canned outcomes.
#include "umswap/cli/compare.h"
#include "umswap/cli/command_line.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace umswap::cli {
namespace {

using Action = CommandLine::Action;
using nlohmann::json;

constexpr uint64_t kGiB = uint64_t{1} << 30;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

CommandLine parse(std::vector<std::string> args) {
  return parse_command_line(args);
}

// --- Flags
// ----------------------------------------------------------------------------------------

TEST(CompareCommandLine, Defaults) {
  const CommandLine cl = parse({"compare"});
  ASSERT_EQ(cl.action, Action::compare) << cl.message;
  const CompareFlags& f = cl.compare_flags;
  EXPECT_TRUE(f.budget.is_percent);
  EXPECT_EQ(f.budget.percent, 50.0);
  EXPECT_EQ(f.modes, (std::vector<CompareMode>{CompareMode::native, CompareMode::managed,
                                               CompareMode::online, CompareMode::replay}));
  EXPECT_EQ(f.json_path, "");
  EXPECT_EQ(f.steps_hint, 0u);
  EXPECT_FALSE(f.keep);
  EXPECT_TRUE(f.baselines.empty());
  EXPECT_EQ(f.loss_tolerance, 0.01);
  EXPECT_TRUE(f.command.empty());  // the bundled sample
}

TEST(CompareCommandLine, BaselinesAndLossTolerance) {
  const CommandLine cl = parse({"compare", "--baselines", "checkpoint,offload,checkpoint",
                                "--loss-tolerance", "1e-3", "--", "python3", "vgg16.py"});
  ASSERT_EQ(cl.action, Action::compare) << cl.message;
  // Always in run order, without repeats.
  EXPECT_EQ(cl.compare_flags.baselines,
            (std::vector<CompareBaseline>{CompareBaseline::offload, CompareBaseline::checkpoint}));
  EXPECT_DOUBLE_EQ(cl.compare_flags.loss_tolerance, 1e-3);
  EXPECT_EQ(parse({"compare", "--loss-tolerance", "0", "--", "x"}).compare_flags.loss_tolerance,
            0.0);
  EXPECT_EQ(compare_baseline_flag(CompareBaseline::offload), "--offload");
  EXPECT_EQ(compare_baseline_flag(CompareBaseline::checkpoint), "--checkpoint");
}

TEST(CompareCommandLine, AllFlags) {
  const CommandLine cl =
      parse({"compare", "--budget", "8G", "--modes", "online,native", "--json=c.json",
             "--steps-hint", "12", "--keep", "--", "python", "train.py", "--budget", "1"});
  ASSERT_EQ(cl.action, Action::compare) << cl.message;
  const CompareFlags& f = cl.compare_flags;
  EXPECT_EQ(f.budget, parse_size("8G"));
  // Always in run order, whatever order they were given in.
  EXPECT_EQ(f.modes, (std::vector<CompareMode>{CompareMode::native, CompareMode::online}));
  EXPECT_EQ(f.json_path, "c.json");
  EXPECT_EQ(f.steps_hint, 12u);
  EXPECT_TRUE(f.keep);
  EXPECT_EQ(f.command, (std::vector<std::string>{"python", "train.py", "--budget", "1"}));
}

TEST(CompareCommandLine, BudgetPercentAndRepeatedModes) {
  const CommandLine cl = parse({"compare", "--budget", "30%", "--modes", "replay,replay,managed"});
  ASSERT_EQ(cl.action, Action::compare) << cl.message;
  EXPECT_EQ(cl.compare_flags.budget, parse_size("30%"));
  EXPECT_EQ(cl.compare_flags.modes,
            (std::vector<CompareMode>{CompareMode::managed, CompareMode::replay}));
}

TEST(CompareCommandLine, BadValuesExit2WithAMessage) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"compare", "--budget", "12Q"}, "--budget: '12Q' has an unknown unit"},
      {{"compare", "--budget", "0"}, "--budget: '0' is zero"},
      {{"compare", "--budget", "0%"}, "--budget: '0%' is zero"},
      {{"compare", "--modes", "native,fast"}, "--modes: 'fast' is not a mode (expected"},
      {{"compare", "--modes", ""}, "--modes: '' has an empty entry"},
      {{"compare", "--modes", "native,"}, "--modes: 'native,' has an empty entry"},
      {{"compare", "--json", ""}, "--json: '' is empty"},
      {{"compare", "--steps-hint", "0"}, "--steps-hint: '0' is not a whole number above 0"},
      {{"compare", "--steps-hint", "x"}, "--steps-hint: 'x' is not a whole number"},
      {{"compare", "--budget"}, "--budget needs a value (B)\nusage: umswap compare"},
      {{"compare", "--modes"}, "--modes needs a value (LIST)"},
      {{"compare", "--bogus"}, "unknown option '--bogus'"},
      {{"compare", "python"}, "unexpected argument 'python': put the command after `--`"},
      {{"compare", "--"}, "compare: nothing after `--`"},
      {{"compare", "--baselines", "offload,zero"}, "--baselines: 'zero' is not a baseline"},
      {{"compare", "--baselines", ""}, "--baselines: '' has an empty entry"},
      {{"compare", "--baselines"}, "--baselines needs a value (LIST)"},
      {{"compare", "--baselines", "offload"},
       "--baselines: needs a command after `--` that accepts --offload"},
      {{"compare", "--loss-tolerance", "-0.1", "--", "x"},
       "--loss-tolerance: '-0.1' is not a number of at least 0"},
      {{"compare", "--loss-tolerance", "lots", "--", "x"}, "--loss-tolerance: 'lots' is not"},
      {{"compare", "--loss-tolerance", "inf", "--", "x"}, "--loss-tolerance: 'inf' is not"},
  };
  for (const auto& c : cases) {
    const CommandLine cl = parse(c.args);
    EXPECT_EQ(cl.action, Action::error) << c.message;
    EXPECT_EQ(cl.exit_code, kUsageErrorExitCode) << c.message;
    EXPECT_TRUE(contains(cl.message, "umswap: error: ")) << cl.message;
    EXPECT_TRUE(contains(cl.message, c.message)) << cl.message;
  }
}

TEST(CompareCommandLine, HelpExplainsFlagsColumnsAndSafety) {
  EXPECT_EQ(parse({"compare", "--help"}).action, Action::help);
  const std::string help = help_text();
  for (const char* part : {"umswap compare [--budget B]",
                           "--modes LIST",
                           "--json FILE",
                           "--steps-hint N",
                           "--keep",
                           "--baselines LIST",
                           "--loss-tolerance X",
                           "save_on_cpu",
                           "not at equal memory",
                           "cudnn_vgg16",
                           "x link",
                           "x driver",
                           "faults/it",
                           "GB in/it",
                           "peak GiB",
                           "DIFFERS",
                           "UMSWAP_MANAGED_LIMIT",
                           "Safety:",
                           "Exit codes of compare",
                           "umswap replay TRACE [run options] -- command"}) {
    EXPECT_TRUE(contains(help, part)) << part;
  }
}

TEST(ReplayCommandLine, TraceAndRunOptions) {
  const CommandLine cl =
      parse({"replay", "run.umtrace", "--budget", "40G", "--stats", "s.json", "--", "./train"});
  ASSERT_EQ(cl.action, Action::run) << cl.message;
  EXPECT_EQ(cl.run_flags.replay_trace, "run.umtrace");
  EXPECT_EQ(cl.run_flags.budget, parse_size("40G"));
  EXPECT_EQ(cl.run_flags.stats_path, "s.json");
  EXPECT_FALSE(cl.run_flags.mode);
  EXPECT_FALSE(cl.run_flags.record);
  EXPECT_EQ(cl.run_flags.command, (std::vector<std::string>{"./train"}));
}

TEST(ReplayCommandLine, UsageErrors) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"replay", "--", "true"}, "replay: no trace file given\nusage: umswap replay TRACE"},
      {{"replay", "t.umtrace"}, "replay: no command given"},
      {{"replay", "t.umtrace", "--mode", "managed", "--", "true"}, "replay: --mode cannot be"},
      {{"replay", "t.umtrace", "extra", "--", "true"}, "unexpected argument 'extra'"},
      {{"replay", "t.umtrace", "--budget"}, "--budget needs a value (SIZE)\nusage: umswap replay"},
  };
  for (const auto& c : cases) {
    const CommandLine cl = parse(c.args);
    EXPECT_EQ(cl.action, Action::error) << c.message;
    EXPECT_EQ(cl.exit_code, kUsageErrorExitCode);
    EXPECT_TRUE(contains(cl.message, c.message)) << cl.message;
  }
}

// --- Program output
// -------------------------------------------------------------------------------

TEST(ProgramOutputParse, IterationLines) {
  const auto it = parse_iteration_line("iter 3 ms 412.5 loss 2.302585");
  ASSERT_TRUE(it);
  EXPECT_EQ(it->index, 3u);
  EXPECT_DOUBLE_EQ(it->ms, 412.5);
  EXPECT_EQ(it->loss, "2.302585");
  EXPECT_TRUE(parse_iteration_line("  iter 0 ms 7"));
  EXPECT_FALSE(parse_iteration_line("iter x ms 7"));
  EXPECT_FALSE(parse_iteration_line("iter 1 ms"));
  EXPECT_FALSE(parse_iteration_line("iteration 1 ms 3"));
  EXPECT_FALSE(parse_iteration_line("iter 1 s 3"));
  EXPECT_FALSE(parse_iteration_line("iter 1 ms nan"));
}

TEST(ProgramOutputParse, SummaryChecksumAndNoise) {
  const ProgramOutput out = parse_program_output(
      "loading...\n"
      "iter 0 ms 900.0 loss 6.9\n"
      "iter 1 ms 210.0 loss 6.8\r\n"
      "oom at iter 5: nothing\n"
      "iter 2 ms 200.0 loss 6.7\n"
      "checksum 00ff00ff00ff00ff\n"
      "summary {\"first_ms\": 900.0, \"peak_allocated_bytes\": 123, \"checksum\": \"zz\"}\n"
      "summary not json\n");
  ASSERT_EQ(out.iterations.size(), 3u);
  EXPECT_EQ(out.iterations[2].loss, "6.7");
  EXPECT_EQ(out.summary["peak_allocated_bytes"], 123);  // the bad later summary is ignored
  EXPECT_EQ(out.checksum, "00ff00ff00ff00ff");          // the line wins over the summary key

  EXPECT_EQ(parse_program_output("summary {\"checksum\": \"ab12\"}").checksum, "ab12");
  EXPECT_EQ(parse_program_output("summary {\"checksum\": 42}\n").checksum, "42");
  EXPECT_TRUE(parse_program_output("").summary.is_null());
}

TEST(ProgramOutputParse, Footprint) {
  EXPECT_EQ(parse_footprint_output("warming\nfootprint_bytes 6549807104\n"), 6549807104u);
  EXPECT_FALSE(parse_footprint_output("footprint_bytes lots\n"));
  EXPECT_FALSE(parse_footprint_output(""));
}

// --- Stats file
// -----------------------------------------------------------------------------------

json online_stats() {
  return json::parse(R"({
    "umswap_stats_version": 1,
    "allocator": {"managed_bytes_peak": 21474836480},
    "advisor": {"mode": "online", "budget_bytes": 10737418240, "state": "applying",
                "fallback": null, "prefetched_bytes": 5000, "evicted_bytes": 4000,
                "peak_resident_bytes": 10200547328, "peak_resident_plan_bytes": 9000000000},
    "iterations": [
      {"index": 1, "wall_ms": 900.0, "gpu_page_faults": 5000, "bytes_htod": 9000000000,
       "bytes_dtoh": 1000000000},
      {"index": 0, "wall_ms": 2500.0, "gpu_page_faults": 90000, "bytes_htod": 20000000000,
       "bytes_dtoh": 0},
      {"index": 2, "wall_ms": 410.0, "gpu_page_faults": 10, "bytes_htod": 10000000000,
       "bytes_dtoh": 9000000000},
      {"index": 3, "wall_ms": 420.0, "gpu_page_faults": 30, "bytes_htod": 12000000000,
       "bytes_dtoh": 11000000000},
      {"index": 4, "wall_ms": 430.0, "gpu_page_faults": 20, "bytes_htod": 14000000000,
       "bytes_dtoh": 10000000000}
    ]})");
}

TEST(StatsParse, ReadsEveryFigureAndSortsIterations) {
  const StatsFigures s = parse_stats_figures(online_stats());
  EXPECT_EQ(s.managed_bytes_peak, 20 * kGiB);
  EXPECT_EQ(s.advisor_mode, "online");
  EXPECT_EQ(s.advisor_state, "applying");
  EXPECT_FALSE(s.advisor_fallback);
  EXPECT_EQ(s.budget_bytes, 10 * kGiB);
  EXPECT_EQ(s.peak_resident_bytes, 10200547328u);
  EXPECT_EQ(s.peak_resident_plan_bytes, 9000000000u);
  ASSERT_EQ(s.iterations.size(), 5u);
  EXPECT_EQ(s.iterations[0].index, 0u);
  EXPECT_EQ(s.iterations[0].wall_ms, 2500.0);
  EXPECT_EQ(s.iterations[4].bytes_dtoh, 10000000000u);
}

TEST(StatsParse, UmswapsOwnCopiesCountInTheBytesEachWay) {
  // UMSWAP_EVICT_COPY: bytes umswap copied itself are on the link but not in CUPTI's counters.
  const StatsFigures s = parse_stats_figures(json::parse(R"({
    "umswap_stats_version": 1,
    "iterations": [{"index": 0, "bytes_htod": 1000, "bytes_dtoh": 2000,
                    "copied_in_bytes": 30, "copied_out_bytes": 40},
                   {"index": 1, "copied_in_bytes": 5}]})"));
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_EQ(s.iterations[0].bytes_htod, 1030u);
  EXPECT_EQ(s.iterations[0].bytes_dtoh, 2040u);
  EXPECT_FALSE(s.iterations[1].bytes_htod);  // CUPTI's count unknown: the sum is too
}

TEST(StatsParse, MissingAndWrongTypedFieldsAreUnknown) {
  const StatsFigures s = parse_stats_figures(json::parse(R"({
    "umswap_stats_version": 1,
    "allocator": {"managed_bytes_peak": "lots"},
    "advisor": {"mode": 3, "fallback": "cupti unavailable", "budget_bytes": -1},
    "iterations": [{"index": 0}, 7, {"wall_ms": "x", "gpu_page_faults": 2.0}]})"));
  EXPECT_FALSE(s.managed_bytes_peak);
  EXPECT_FALSE(s.advisor_mode);
  EXPECT_EQ(s.advisor_fallback, "cupti unavailable");
  EXPECT_FALSE(s.budget_bytes);
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_FALSE(s.iterations[0].wall_ms);
  EXPECT_EQ(s.iterations[1].gpu_page_faults, 2u);
  EXPECT_TRUE(parse_stats_figures(json::parse("{}")).iterations.empty());
}

// --- Arithmetic
// -----------------------------------------------------------------------------------

TEST(CompareMath, MedianAndSteadyRange) {
  EXPECT_FALSE(median({}));
  EXPECT_EQ(median({3.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(steady_range(0), (std::pair<size_t, size_t>{0, 0}));
  EXPECT_EQ(steady_range(1), (std::pair<size_t, size_t>{0, 1}));
  EXPECT_EQ(steady_range(2), (std::pair<size_t, size_t>{1, 2}));
  EXPECT_EQ(steady_range(3), (std::pair<size_t, size_t>{2, 3}));
  EXPECT_EQ(steady_range(10), (std::pair<size_t, size_t>{2, 10}));
}

// `count` detected iterations, the first beginning at launch `first`, one every `every` launches.
StatsFigures evenly_spaced(uint64_t count, uint64_t first, uint64_t every) {
  StatsFigures s;
  for (uint64_t i = 0; i < count; ++i) {
    StatsIteration it;
    it.index = i;
    it.first_step = first + every * i;
    s.iterations.push_back(it);
  }
  return s;
}

// Online plans take effect late in short runs: the steady part starts at the second iteration
// that began under the plan, counted from the end when the program printed more iterations than
// were detected.
TEST(Compare, PlannedSteadyRangeStartsAfterThePlansFirstIteration) {
  StatsFigures s = evenly_spaced(11, 374, 326);
  using R = std::pair<size_t, size_t>;
  EXPECT_EQ(planned_steady_range(11, &s), (R{2, 11}));  // no plan
  s.plan_applied_from = 2173;                           // iteration 6 (launch 2330) is the first
  EXPECT_EQ(planned_steady_range(11, &s), (R{7, 11}));
  EXPECT_EQ(planned_steady_range(12, &s), (R{8, 12}));  // one more program line, at the start
  s.plan_applied_from = 374;                            // replay: from the first iteration
  EXPECT_EQ(planned_steady_range(11, &s), (R{2, 11}));  // never before the plain range
  s.plan_applied_from = 3634;                           // only the last iteration is planned
  EXPECT_EQ(planned_steady_range(11, &s), (R{2, 11}));
  s.plan_applied_from = 2173;
  EXPECT_EQ(planned_steady_range(5, &s), (R{2, 5}));  // fewer lines than iterations: plain
  EXPECT_EQ(planned_steady_range(11, nullptr), (R{2, 11}));
}

// A plan relearned later (or made too late to start) does not move the steady part: it begins
// after the first plan that took effect, when the stats say which that was.
TEST(Compare, PlannedSteadyRangeFollowsTheFirstPlan) {
  StatsFigures s = evenly_spaced(20, 36, 189);
  using R = std::pair<size_t, size_t>;
  s.plan_applied_from = 3060;                            // relearned: iteration 16
  EXPECT_EQ(planned_steady_range(20, &s), (R{17, 20}));  // a file without the first plan's launch
  s.first_plan_applied_from = 603;                       // iteration 3
  s.first_plan_known = true;
  EXPECT_EQ(steady_from_launch(s), 603u);
  EXPECT_EQ(planned_steady_range(20, &s), (R{4, 20}));
  s.plan_applied_from = 4005;  // staged after the last iteration began: never in force
  EXPECT_EQ(planned_steady_range(20, &s), (R{4, 20}));
  s.first_plan_applied_from.reset();  // a file without the field again
  s.first_plan_known = false;
  EXPECT_EQ(planned_steady_range(20, &s), (R{2, 20}));  // no iteration after 4005: plain
  s.plan_applied_from = 3060;
  s.first_plan_known = true;  // the file says no plan started (null): not the last plan's launch
  EXPECT_EQ(steady_from_launch(s), std::nullopt);
  EXPECT_EQ(planned_steady_range(20, &s), (R{2, 20}));
}

TEST(CompareMath, LinkLimit) {
  const LinkRates rates{.htod_bytes_per_s = 50e9,
                        .dtoh_bytes_per_s = 25e9,
                        .prefetch_bytes_per_s = 40e9,
                        .evict_bytes_per_s = 10e9};
  // Native dominates when little moves.
  EXPECT_DOUBLE_EQ(*link_limit_ms(100.0, 1e9, 1e9, rates), 100.0);
  // 10 GB in at 50 GB/s = 200 ms; 2 GB out at 25 GB/s = 80 ms.
  EXPECT_DOUBLE_EQ(*link_limit_ms(100.0, 10e9, 2e9, rates), 200.0);
  // 5 GB out at 25 GB/s = 200 ms beats 4 GB in at 50 GB/s = 80 ms.
  EXPECT_DOUBLE_EQ(*link_limit_ms(100.0, 4e9, 5e9, rates), 200.0);
  EXPECT_FALSE(link_limit_ms(std::nullopt, 1e9, 1e9, rates));
  EXPECT_FALSE(link_limit_ms(100.0, std::nullopt, 1e9, rates));
  EXPECT_FALSE(link_limit_ms(100.0, 1e9, 1e9, LinkRates{}));
  EXPECT_FALSE(link_limit_ms(100.0, 1e9, 1e9,
                             {.htod_bytes_per_s = 0.0,
                              .dtoh_bytes_per_s = 1e9,
                              .prefetch_bytes_per_s = std::nullopt,
                              .evict_bytes_per_s = std::nullopt}));
}

TEST(CompareMath, DriverLimitAddsTheTwoDirections) {
  const LinkRates rates{.htod_bytes_per_s = 50e9,
                        .dtoh_bytes_per_s = 50e9,
                        .prefetch_bytes_per_s = 40e9,
                        .evict_bytes_per_s = 10e9};
  // 8 GB in at 40 GB/s = 200 ms, plus 3 GB out at 10 GB/s = 300 ms.
  EXPECT_DOUBLE_EQ(*driver_limit_ms(100.0, 8e9, 3e9, rates), 500.0);
  EXPECT_DOUBLE_EQ(*driver_limit_ms(600.0, 8e9, 3e9, rates), 600.0);
  EXPECT_FALSE(driver_limit_ms(100.0, 8e9, 3e9,
                               {.htod_bytes_per_s = 50e9,
                                .dtoh_bytes_per_s = 50e9,
                                .prefetch_bytes_per_s = 40e9,
                                .evict_bytes_per_s = std::nullopt}));
}

TEST(CompareMath, FailureReason) {
  EXPECT_EQ(failure_reason(1, "  out of memory \n"), "exit 1: out of memory");
  EXPECT_EQ(failure_reason(137, ""), "exit 137 (signal 9)");
  EXPECT_EQ(failure_reason(2, "cudnn_vgg16: bad"), "exit 2: cudnn_vgg16: bad");
}

// --- Budget and the default command
// -----------------------------------------------------------------

TEST(CompareBudget, SizeOrShareOfTheFootprint) {
  const SizeSpec half = *parse_size("50%");
  const BudgetChoice fixed = resolve_budget(*parse_size("8G"), 20 * kGiB, std::nullopt);
  EXPECT_EQ(fixed.bytes, 8 * kGiB);
  EXPECT_EQ(fixed.description, "8.00 GiB");

  const BudgetChoice managed = resolve_budget(half, 20 * kGiB, 30 * kGiB, 40 * kGiB);
  EXPECT_EQ(managed.bytes, 10 * kGiB);
  EXPECT_EQ(managed.description, "50% of 20.00 GiB (managed peak) = 10.00 GiB");

  const BudgetChoice native = resolve_budget(half, 0, 30 * kGiB);
  EXPECT_EQ(native.bytes, 15 * kGiB);
  EXPECT_TRUE(contains(native.description, "native peak_allocated_bytes")) << native.description;

  EXPECT_EQ(resolve_budget(*parse_size("25%"), std::nullopt, std::nullopt, 8 * kGiB).bytes,
            2 * kGiB);

  const BudgetChoice unknown = resolve_budget(half, std::nullopt, std::nullopt);
  EXPECT_FALSE(unknown.bytes);
  EXPECT_EQ(unknown.error.rfind("budget unknown: 50%", 0), 0u) << unknown.error;
}

TEST(CompareDefault, AllowedMemoryIsTheSmallerOfFreeShareAndLimit) {
  EXPECT_EQ(allowed_memory(50 * kGiB, 80 * kGiB, std::nullopt), 40 * kGiB);
  EXPECT_EQ(allowed_memory(50 * kGiB, 80 * kGiB, parse_size("30G")), 30 * kGiB);
  EXPECT_EQ(allowed_memory(50 * kGiB, 80 * kGiB, parse_size("100G")), 40 * kGiB);
  EXPECT_EQ(allowed_memory(50 * kGiB, 80 * kGiB, parse_size("25%")), 20 * kGiB);  // of total
  EXPECT_EQ(allowed_memory(50 * kGiB, 80 * kGiB, parse_size("0")), 40 * kGiB);    // no cap
}

TEST(CompareDefault, BatchHalvesUntilItFits) {
  std::vector<int> asked;
  // 100 MiB per image.
  auto footprint = [&](int batch, std::string*) -> std::optional<uint64_t> {
    asked.push_back(batch);
    return uint64_t(batch) * 100 * (uint64_t{1} << 20);
  };
  const BatchChoice big = choose_batch(10 * kGiB, footprint);
  EXPECT_EQ(big.batch, 64);
  EXPECT_EQ(asked, (std::vector<int>{64}));

  asked.clear();
  const BatchChoice small = choose_batch(2 * kGiB, footprint);
  EXPECT_EQ(small.batch, 16);
  EXPECT_EQ(small.footprint_bytes, 1600u << 20);
  EXPECT_EQ(asked, (std::vector<int>{64, 32, 16}));

  const BatchChoice none = choose_batch(500u << 20, footprint);
  EXPECT_FALSE(none.batch);
  EXPECT_TRUE(contains(none.error, "even batch 8 needs 800.00 MiB")) << none.error;
  EXPECT_TRUE(contains(none.error, "refusing to oversubscribe")) << none.error;

  const BatchChoice broken = choose_batch(10 * kGiB, [](int, std::string* error) {
    *error = "cudnn_vgg16 exit 1";
    return std::optional<uint64_t>();
  });
  EXPECT_FALSE(broken.batch);
  EXPECT_EQ(broken.error, "cudnn_vgg16 exit 1");
}

// --- Environment of each run
// ----------------------------------------------------------------------

std::optional<std::string> find_var(const ChildEnvironment& env, std::string_view name) {
  for (const EnvVar& var : env.set) {
    if (var.name == name) return var.value;
  }
  return std::nullopt;
}

// The environment of a compare run with stats at /t/x.json and the library at /u/libumswap.so.
ChildEnvironment plan_run(const CurrentEnv& current, CompareRun run,
                          std::optional<uint64_t> budget = std::nullopt, std::string trace = "") {
  return plan_compare_environment({.run = run,
                                   .budget_bytes = budget,
                                   .stats_path = "/t/x.json",
                                   .trace_path = std::move(trace),
                                   .managed_limit_bytes = std::nullopt,
                                   .torchrun_log_dir = ""},
                                  current, "/u/libumswap.so");
}

bool unsets(const ChildEnvironment& env, std::string_view name) {
  return std::find(env.unset.begin(), env.unset.end(), name) != env.unset.end();
}

TEST(CompareEnvironment, EachRunGetsItsModeAndOnlyWhatItUses) {
  const CurrentEnv current{.ld_preload = "/a/liba.so",
                           .pytorch_cuda_alloc_conf = std::nullopt,
                           .pytorch_alloc_conf = std::nullopt};
  auto plan = [&](CompareRun run, std::optional<uint64_t> budget = std::nullopt,
                  std::string trace = "") { return plan_run(current, run, budget, trace); };
  const ChildEnvironment native = plan(CompareRun::native);
  EXPECT_EQ(find_var(native, "LD_PRELOAD"), "/u/libumswap.so:/a/liba.so");
  EXPECT_EQ(find_var(native, "PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:False");
  EXPECT_EQ(find_var(native, "UMSWAP_MODE"), "passthrough");
  EXPECT_EQ(find_var(native, "UMSWAP_STATS"), "/t/x.json");
  EXPECT_TRUE(unsets(native, "UMSWAP_BUDGET") && unsets(native, "UMSWAP_TRACE") &&
              unsets(native, "UMSWAP_REPLAY"));
  EXPECT_FALSE(find_var(native, "UMSWAP_MANAGED_LIMIT"));  // the user's stays
  EXPECT_FALSE(unsets(native, "UMSWAP_MANAGED_LIMIT"));

  EXPECT_EQ(find_var(plan(CompareRun::managed), "UMSWAP_MODE"), "managed");

  const ChildEnvironment online = plan(CompareRun::online, 1000);
  EXPECT_EQ(find_var(online, "UMSWAP_MODE"), "online");
  EXPECT_EQ(find_var(online, "UMSWAP_BUDGET"), "1000");
  EXPECT_TRUE(unsets(online, "UMSWAP_TRACE"));

  const ChildEnvironment record = plan(CompareRun::record, 1000, "/t/compare.umtrace");
  EXPECT_EQ(find_var(record, "UMSWAP_MODE"), "online");
  EXPECT_EQ(find_var(record, "UMSWAP_TRACE"), "/t/compare.umtrace");
  EXPECT_TRUE(unsets(record, "UMSWAP_REPLAY"));

  const ChildEnvironment replay = plan(CompareRun::replay, 1000, "/t/compare.umtrace");
  EXPECT_EQ(find_var(replay, "UMSWAP_MODE"), "replay");
  EXPECT_EQ(find_var(replay, "UMSWAP_REPLAY"), "/t/compare.umtrace");
  EXPECT_EQ(find_var(replay, "UMSWAP_BUDGET"), "1000");
  EXPECT_TRUE(unsets(replay, "UMSWAP_TRACE"));

  const ChildEnvironment capped = plan_compare_environment({.run = CompareRun::managed,
                                                            .budget_bytes = std::nullopt,
                                                            .stats_path = "/t/m.json",
                                                            .trace_path = "",
                                                            .managed_limit_bytes = 4096,
                                                            .torchrun_log_dir = ""},
                                                           current, "/u/libumswap.so");
  EXPECT_EQ(find_var(capped, "UMSWAP_MANAGED_LIMIT"), "4096");
}

// --- Rows, table and JSON from canned runs
// ----------------------------------------------------------

ModeOutcome outcome(CompareMode mode, std::string_view stdout_text,
                    std::optional<json> stats = std::nullopt) {
  ModeOutcome o;
  o.mode = mode;
  o.status = ModeStatus::ok;
  o.exit_code = 0;
  o.wall_s = 12.5;
  o.output = parse_program_output(stdout_text);
  if (stats) o.stats = parse_stats_figures(*stats);
  return o;
}

const LinkRates kRates{.htod_bytes_per_s = 50e9,
                       .dtoh_bytes_per_s = 50e9,
                       .prefetch_bytes_per_s = 40e9,
                       .evict_bytes_per_s = 10e9};

std::vector<ModeOutcome> canned_outcomes() {
  std::vector<ModeOutcome> outcomes;
  outcomes.push_back(outcome(CompareMode::native,
                             "iter 0 ms 900.0 loss 6.9\niter 1 ms 190.0 loss 6.8\n"
                             "iter 2 ms 180.0 loss 6.7\niter 3 ms 200.0 loss 6.6\n"
                             "iter 4 ms 190.0 loss 6.5\n"
                             "checksum 1111222233334444\n"
                             "summary {\"peak_allocated_bytes\": 21474836480}\n"));
  outcomes.push_back(outcome(CompareMode::managed,
                             "iter 0 ms 2100.0 loss 6.9\niter 1 ms 210.0 loss 6.8\n"
                             "iter 2 ms 200.0 loss 6.7\niter 3 ms 220.0 loss 6.6\n"
                             "iter 4 ms 210.0 loss 6.5\n"
                             "checksum 1111222233334444\n",
                             json::parse(R"({"allocator": {"managed_bytes_peak": 21474836480},
                               "iterations": [{"index": 0, "gpu_page_faults": 90000},
                                              {"index": 1, "gpu_page_faults": 0},
                                              {"index": 2, "gpu_page_faults": 0,
                                               "bytes_htod": 0, "bytes_dtoh": 0},
                                              {"index": 3, "gpu_page_faults": 0,
                                               "bytes_htod": 0, "bytes_dtoh": 0}]})")));
  // online: no iter lines, so its times come from the stats; loss differs but no checksum.
  ModeOutcome online = outcome(CompareMode::online, "checksum 9999222233334444\n", online_stats());
  online.budget_bytes = 10 * kGiB;
  outcomes.push_back(std::move(online));
  ModeOutcome replay;
  replay.mode = CompareMode::replay;
  replay.status = ModeStatus::failed;
  replay.exit_code = 1;
  replay.reason = "exit 1: cudaErrorMemoryAllocation";
  outcomes.push_back(std::move(replay));
  return outcomes;
}

TEST(CompareRows, FiguresFromCannedRuns) {
  const std::vector<ModeRow> rows = compute_rows(canned_outcomes(), kRates);
  ASSERT_EQ(rows.size(), 4u);

  const ModeRow& native = rows[0];
  EXPECT_EQ(native.timing_source, "program");
  EXPECT_EQ(native.steady_iterations, 3u);
  EXPECT_DOUBLE_EQ(*native.steady_median_ms, 190.0);  // of 180, 200, 190
  EXPECT_DOUBLE_EQ(*native.first_ms, 900.0);
  EXPECT_DOUBLE_EQ(*native.ratio_to_native, 1.0);
  EXPECT_DOUBLE_EQ(*native.link_limit_ms, 190.0);  // moves nothing
  EXPECT_DOUBLE_EQ(*native.ratio_to_link_limit, 1.0);
  EXPECT_FALSE(native.faults_per_iteration);
  EXPECT_FALSE(native.same_result);  // the reference
  EXPECT_FALSE(native.budget_held);

  const ModeRow& managed = rows[1];
  EXPECT_DOUBLE_EQ(*managed.steady_median_ms, 210.0);
  EXPECT_DOUBLE_EQ(*managed.ratio_to_native, 210.0 / 190.0);
  EXPECT_DOUBLE_EQ(*managed.first_ms, 2100.0);
  EXPECT_DOUBLE_EQ(*managed.faults_per_iteration, 0.0);  // iterations 2 and 3
  EXPECT_DOUBLE_EQ(*managed.bytes_in_per_iteration, 0.0);
  EXPECT_FALSE(managed.budget_bytes);  // no budget in managed mode
  EXPECT_FALSE(managed.budget_held);
  EXPECT_EQ(managed.same_result, true);
  EXPECT_EQ(managed.result_basis, "checksum");

  const ModeRow& online = rows[2];
  EXPECT_EQ(online.timing_source, "stats");
  EXPECT_DOUBLE_EQ(*online.steady_median_ms, 420.0);  // of 410, 420, 430
  EXPECT_DOUBLE_EQ(*online.first_ms, 2500.0);
  EXPECT_DOUBLE_EQ(*online.faults_per_iteration, 20.0);          // (10 + 30 + 20) / 3
  EXPECT_DOUBLE_EQ(*online.bytes_in_per_iteration, 12e9);        // (10 + 12 + 14) / 3 GB
  EXPECT_DOUBLE_EQ(*online.bytes_out_per_iteration, 10e9);       // (9 + 11 + 10) / 3 GB
  EXPECT_DOUBLE_EQ(*online.link_limit_ms, 240.0);                // 12 GB / 50 GB/s
  EXPECT_DOUBLE_EQ(*online.ratio_to_link_limit, 420.0 / 240.0);  // 1.75
  EXPECT_DOUBLE_EQ(*online.driver_limit_ms, 1300.0);  // 12 GB / 40 GB/s + 10 GB / 10 GB/s
  EXPECT_EQ(online.peak_resident_bytes, 10200547328u);
  EXPECT_EQ(online.budget_bytes, 10 * kGiB);
  EXPECT_EQ(online.budget_held, true);  // 9.5 GiB <= 10 GiB
  EXPECT_EQ(online.same_result, false);
  EXPECT_EQ(online.result_basis, "checksum");

  EXPECT_EQ(rows[3].status, ModeStatus::failed);
  EXPECT_FALSE(rows[3].steady_median_ms);
}

TEST(CompareEnvironment, TheVmmRunGetsEngineVmmAndTheOthersEngineUm) {
  const CurrentEnv current{};
  auto plan = [&](CompareRun run) { return plan_run(current, run, 1000); };
  const ChildEnvironment vmm = plan(CompareRun::vmm);
  EXPECT_EQ(find_var(vmm, "UMSWAP_ENGINE"), "vmm");
  EXPECT_EQ(find_var(vmm, "UMSWAP_MODE"), "online");
  EXPECT_EQ(find_var(vmm, "UMSWAP_BUDGET"), "1000");
  for (CompareRun run : {CompareRun::native, CompareRun::managed, CompareRun::online,
                         CompareRun::record, CompareRun::replay}) {
    EXPECT_EQ(find_var(plan(run), "UMSWAP_ENGINE"), "um") << compare_run_name(run);
  }
  EXPECT_EQ(compare_run_name(CompareRun::vmm), "vmm");
  EXPECT_EQ(parse_compare_mode("vmm"), CompareMode::vmm);
  const CommandLine cl = parse({"compare", "--modes", "vmm,native", "--", "x"});
  ASSERT_EQ(cl.action, Action::compare) << cl.message;
  EXPECT_EQ(cl.compare_flags.modes,
            (std::vector<CompareMode>{CompareMode::native, CompareMode::vmm}));
}

TEST(CompareRows, BudgetHeldWithinFivePercent) {
  auto row_with_peak = [](uint64_t peak) {
    json stats = online_stats();
    stats["advisor"]["peak_resident_bytes"] = peak;
    std::vector<ModeOutcome> outcomes = {outcome(CompareMode::online, "iter 0 ms 1\n", stats)};
    outcomes[0].budget_bytes = 1000;
    return compute_rows(outcomes, kRates)[0];
  };
  EXPECT_EQ(row_with_peak(1050).budget_held, true);
  EXPECT_EQ(row_with_peak(1051).budget_held, false);
  // No figure from the library: unknown, not "no".
  json stats = online_stats();
  stats["advisor"].erase("peak_resident_bytes");
  std::vector<ModeOutcome> outcomes = {outcome(CompareMode::online, "iter 0 ms 1\n", stats)};
  EXPECT_FALSE(compute_rows(outcomes, kRates)[0].budget_held);
}

// CUDA graph launches under engine um: the counted peak leaves their kernels' memory out, so a
// peak within the budget is no answer (the column `-`, a note says why), one over it is still
// "no"; engine vmm's pool is judged as before. The note names a torchrun rank's row.
TEST(CompareRows, GraphLaunchesLeaveAPeakWithinTheBudgetUnknown) {
  auto report_with = [](CompareMode mode, uint64_t graphs, uint64_t peak = 900) {
    json stats = online_stats();
    stats["advisor"]["peak_resident_bytes"] = peak;
    stats["advisor"]["graph_launches"] = graphs;
    stats["vmm"] = {{"gpu_bytes_peak", peak}, {"budget_bytes", 1000}};
    CompareReport report;
    report.outcomes = {outcome(mode, "iter 0 ms 1\n", stats)};
    report.outcomes[0].budget_bytes = 1000;
    report.rows = compute_rows(report.outcomes, kRates);
    return report;
  };
  EXPECT_EQ(report_with(CompareMode::online, 0).rows[0].budget_held, true);
  EXPECT_FALSE(contains(render_notes(report_with(CompareMode::online, 0)), "CUDA graph"));
  const CompareReport graphs = report_with(CompareMode::online, 9);
  EXPECT_FALSE(graphs.rows[0].budget_held);
  const std::string notes = render_notes(graphs);
  EXPECT_TRUE(contains(notes,
                       "note: online ran 9 CUDA graph launches (XLA's command buffers, "
                       "torch.compile's reduce-overhead mode), whose kernels umswap cannot see "
                       "into: its peak counts only what it saw, so whether the budget held is "
                       "not known (docs/jax.md)\n"))
      << notes;
  // Counted over the budget: over it whatever the graphs add.
  const CompareReport over = report_with(CompareMode::online, 9, 2000);
  EXPECT_EQ(over.rows[0].budget_held, false);
  const std::string over_notes = render_notes(over);
  EXPECT_TRUE(contains(over_notes, "its peak counts only what it saw (docs/jax.md)\n"))
      << over_notes;
  EXPECT_TRUE(contains(over_notes, "over its budget of")) << over_notes;
  // Engine vmm: judged by its pool, no note.
  const CompareReport vmm = report_with(CompareMode::vmm, 9);
  EXPECT_FALSE(contains(render_notes(vmm), "CUDA graph"));
  EXPECT_FALSE(vmm.rows[0].graph_launches);
  // A rank's row is named as such.
  CompareReport ranked = report_with(CompareMode::online, 3);
  ranked.rows[0].rank = 1;
  EXPECT_TRUE(contains(render_notes(ranked), "note: online r1 ran 3 CUDA graph launches"));
}

TEST(CompareRows, PeakResidentIsTheSteadyIterationsPeak) {
  // The learning iterations (0, 1) hold the whole footprint; the steady ones (2-4) are judged.
  json stats = online_stats();
  const uint64_t peaks[] = {15000, 20000, 980, 1000, 1040};  // as listed: "index" 1, 0, 2, 3, 4
  for (size_t i = 0; i < stats["iterations"].size(); ++i) {
    stats["iterations"][i]["peak_resident_bytes"] = peaks[i];
  }
  std::vector<ModeOutcome> outcomes = {outcome(CompareMode::online, "iter 0 ms 1\n", stats)};
  outcomes[0].budget_bytes = 1000;
  ModeRow row = compute_rows(outcomes, kRates)[0];
  EXPECT_EQ(row.peak_resident_bytes, 1040u);  // not the run's 10200547328
  EXPECT_EQ(row.budget_held, true);           // 1040 <= 1050
  stats["iterations"][4]["peak_resident_bytes"] = 1100;
  outcomes = {outcome(CompareMode::online, "iter 0 ms 1\n", stats)};
  outcomes[0].budget_bytes = 1000;
  row = compute_rows(outcomes, kRates)[0];
  EXPECT_EQ(row.peak_resident_bytes, 1100u);
  EXPECT_EQ(row.budget_held, false);
}

// With native's second run, a loss past the tolerance passes where it lies within 4x what the two
// natives differ by up to that iteration (as the correctness matrix judges), and fails past it.
TEST(CompareRows, ALossPastTheToleranceIsJudgedAgainstTheNativesSpread) {
  const std::vector<ModeOutcome> outcomes = {
      outcome(CompareMode::native,
              "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.0\n"
              "iter 2 ms 10 loss 4.0\n"),
      // 5% off in iteration 2, where the natives differ by 10%: within.
      outcome(CompareMode::managed,
              "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.0\n"
              "iter 2 ms 10 loss 4.2105263\n"),
      // 5% off in iteration 1, where the natives do not differ yet: a change.
      outcome(CompareMode::online,
              "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.1052632\n"
              "iter 2 ms 10 loss 4.0\n"),
      // Within the tolerance: as before, whatever the natives do.
      outcome(CompareMode::replay,
              "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.0\n"
              "iter 2 ms 10 loss 4.01\n")};
  // Before native ran again: managed and online are past the tolerance, so it must.
  std::vector<ModeRow> rows = compute_rows(outcomes, LinkRates{});
  EXPECT_EQ(rows[1].same_result, false);
  EXPECT_EQ(rows[2].same_result, false);
  EXPECT_FALSE(rows[1].loss_native_spread);
  EXPECT_TRUE(needs_native_again(rows));

  const std::vector<ModeOutcome> again = {outcome(CompareMode::native,
                                                  "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.0\n"
                                                  "iter 2 ms 10 loss 3.6\n")};
  rows = compute_rows(outcomes, LinkRates{}, kDefaultLossTolerance, again);
  EXPECT_EQ(rows[1].same_result, true);
  EXPECT_TRUE(rows[1].within_native_spread);
  EXPECT_NEAR(*rows[1].loss_native_spread, 0.1, 1e-9);
  EXPECT_NEAR(*rows[1].loss_relative_difference, 0.05, 1e-6);
  EXPECT_EQ(rows[2].same_result, false);
  EXPECT_FALSE(rows[2].within_native_spread);
  EXPECT_EQ(rows[2].loss_worst_iteration, 1u);
  EXPECT_EQ(rows[3].same_result, true);
  EXPECT_FALSE(rows[3].within_native_spread);
  EXPECT_FALSE(needs_native_again(rows));  // it ran: no third time

  // 4x the spread is the limit: 41% off where the natives differ by 10% is a change.
  const std::vector<ModeOutcome> far = {outcomes[0],
                                        outcome(CompareMode::online,
                                                "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.0\n"
                                                "iter 2 ms 10 loss 6.8\n")};
  EXPECT_EQ(compute_rows(far, LinkRates{}, kDefaultLossTolerance, again)[1].same_result, false);

  // What the reader sees: the cell, the note, the JSON.
  CompareReport report;
  report.outcomes = outcomes;
  report.rows = compute_rows(outcomes, LinkRates{}, kDefaultLossTolerance, again);
  report.natives_again = again;
  const std::string table = render_table(report.rows);
  EXPECT_TRUE(contains(table, "≈ native (natives differ)")) << table;
  const std::string notes = render_notes(report);
  EXPECT_TRUE(contains(notes, "note: managed's loss at iteration 2 is 0.05 off native's")) << notes;
  EXPECT_TRUE(contains(notes, "within 4x what two native runs differ by")) << notes;
  EXPECT_TRUE(contains(notes, "the program is not deterministic")) << notes;
  EXPECT_TRUE(contains(notes, "up to there (0.1; native ran twice to tell)")) << notes;
  EXPECT_TRUE(contains(notes,
                       "note: online's loss at iteration 1 is 0.05 off native's (relative), "
                       "more than --loss-tolerance 0.01 and more than 4x what two native "
                       "runs differ by up to there (0)"))
      << notes;
  EXPECT_FALSE(contains(notes, "second run")) << notes;
  json j = compare_json(report);
  EXPECT_EQ(j["modes"][1]["result_match"], "within_native_spread");
  EXPECT_NEAR(j["modes"][1]["loss_native_spread"].get<double>(), 0.1, 1e-9);
  EXPECT_EQ(j["modes"][2]["result_match"], "differs");
  EXPECT_EQ(j["modes"][2]["loss_past_iteration"], 1);
  EXPECT_EQ(j["natives_again"].size(), 1u);
  EXPECT_EQ(j["natives_again"][0]["status"], "ok");

  // The note names the first iteration past what was allowed, not the largest difference: 3%
  // off in iteration 1 (no spread yet) fails; 30% off in iteration 2 (spread 10%) would pass.
  const std::vector<ModeOutcome> early = {outcomes[0],
                                          outcome(CompareMode::online,
                                                  "iter 0 ms 10 loss 1.0\niter 1 ms 10 loss 2.06\n"
                                                  "iter 2 ms 10 loss 5.7142857\n")};
  report.outcomes = early;
  report.rows = compute_rows(early, LinkRates{}, kDefaultLossTolerance, again);
  EXPECT_EQ(report.rows[1].same_result, false);
  EXPECT_EQ(report.rows[1].loss_worst_iteration, 2u);
  EXPECT_EQ(report.rows[1].loss_past_iteration, 1u);
  EXPECT_NEAR(*report.rows[1].loss_past_difference, 0.06 / 2.06, 1e-9);
  EXPECT_EQ(report.rows[1].loss_native_spread_at, 0.0);
  EXPECT_TRUE(contains(render_notes(report), "note: online's loss at iteration 1 is 0.029 off"))
      << render_notes(report);

  // --loss-tolerance 0 asks for equal values: no second native run.
  EXPECT_FALSE(needs_native_again(compute_rows(outcomes, LinkRates{}, 0.0)));

  // A second native run that failed: judged by the tolerance alone, and said so.
  ModeOutcome failed = again[0];
  failed.status = ModeStatus::failed;
  failed.reason = "exit 3: out of memory";
  report.natives_again = {failed};
  report.outcomes = outcomes;
  report.rows = compute_rows(outcomes, LinkRates{}, kDefaultLossTolerance, report.natives_again);
  EXPECT_EQ(report.rows[1].same_result, false);
  EXPECT_FALSE(report.rows[1].loss_native_spread);
  EXPECT_TRUE(contains(render_notes(report),
                       "note: native's second run failed (exit 3: out of memory): the losses "
                       "were judged by --loss-tolerance alone"))
      << render_notes(report);
  j = compare_json(report);
  EXPECT_EQ(j["natives_again"][0]["status"], "failed");
}

TEST(CompareRows, LossIsComparedWithinAToleranceWhenThereIsNoChecksum) {
  std::vector<ModeOutcome> outcomes = {
      outcome(CompareMode::native, "iter 0 ms 10 loss 2.5\niter 1 ms 10 loss 2.25\n"),
      // cuDNN's last digits: 2.27 is 0.9% off 2.25, within the default 1%.
      outcome(CompareMode::managed, "iter 0 ms 12 loss 2.5\niter 1 ms 11 loss 2.27\n"),
      outcome(CompareMode::online, "iter 0 ms 12 loss 2.5\niter 1 ms 11 loss 2.5\n"),
      outcome(CompareMode::replay, "iter 0 ms 12\n")};
  const std::vector<ModeRow> rows = compute_rows(outcomes, LinkRates{});
  EXPECT_EQ(rows[1].same_result, true);
  EXPECT_EQ(rows[1].result_basis, "loss");
  EXPECT_NEAR(*rows[1].loss_relative_difference, 0.02 / 2.27, 1e-12);
  EXPECT_EQ(rows[1].loss_tolerance, 0.01);
  EXPECT_EQ(rows[2].same_result, false);  // 10% off
  EXPECT_NEAR(*rows[2].loss_relative_difference, 0.1, 1e-12);
  EXPECT_FALSE(rows[3].same_result);  // nothing to compare
  // At most two iterations: the last one is the steady one.
  EXPECT_DOUBLE_EQ(*rows[1].steady_median_ms, 11.0);
  EXPECT_FALSE(rows[1].link_limit_ms);  // no rates

  // A tighter tolerance; zero asks for equal values.
  EXPECT_EQ(compute_rows(outcomes, LinkRates{}, 1e-3)[1].same_result, false);
  EXPECT_EQ(compute_rows(outcomes, LinkRates{}, 0.2)[2].same_result, true);
  std::vector<ModeOutcome> exact = {outcome(CompareMode::native, "iter 0 ms 1 loss 2.25\n"),
                                    outcome(CompareMode::managed, "iter 0 ms 1 loss 2.250\n")};
  EXPECT_EQ(compute_rows(exact, LinkRates{}, 0.0)[1].same_result, true);
  // A loss that is not a number: only the same text is the same.
  std::vector<ModeOutcome> text = {outcome(CompareMode::native, "iter 0 ms 1 loss nan\n"),
                                   outcome(CompareMode::managed, "iter 0 ms 1 loss nan\n"),
                                   outcome(CompareMode::online, "iter 0 ms 1 loss 2.5\n")};
  const std::vector<ModeRow> text_rows = compute_rows(text, LinkRates{});
  EXPECT_EQ(text_rows[1].same_result, true);
  EXPECT_FALSE(text_rows[1].loss_relative_difference);
  EXPECT_EQ(text_rows[2].same_result, false);
}

TEST(CompareRows, ALossSpikeInOneIterationDiffersEvenWhenTheLastLossAgrees) {
  // GPT-2 under UMSWAP_EVICT_COPY (2026-11-25): one iteration 22% off, the last within 0.1%.
  const std::vector<ModeOutcome> outcomes = {
      outcome(CompareMode::native,
              "iter 0 ms 10 loss 10.0\niter 1 ms 10 loss 9.84\niter 2 ms 10 loss 9.75\n"),
      outcome(CompareMode::online,
              "iter 0 ms 20 loss 10.0\niter 1 ms 20 loss 12.02\niter 2 ms 20 loss 9.76\n"),
      // Iterations only one side printed are not compared; the rest agree.
      outcome(CompareMode::managed,
              "iter 1 ms 11 loss 9.85\niter 2 ms 11 loss 9.75\n"
              "iter 3 ms 11 loss 1.0\n")};
  const std::vector<ModeRow> rows = compute_rows(outcomes, LinkRates{});
  EXPECT_EQ(rows[1].same_result, false);
  EXPECT_EQ(rows[1].loss_worst_iteration, 1u);
  EXPECT_NEAR(*rows[1].loss_relative_difference, (12.02 - 9.84) / 12.02, 1e-12);
  EXPECT_EQ(rows[2].same_result, true);
  EXPECT_EQ(rows[2].loss_worst_iteration, 1u);
  EXPECT_NEAR(*rows[2].loss_relative_difference, 0.01 / 9.85, 1e-12);
  // A text that differs in one iteration: that one is named.
  const std::vector<ModeOutcome> text = {
      outcome(CompareMode::native, "iter 0 ms 1 loss 2.5\niter 1 ms 1 loss 2.4\n"),
      outcome(CompareMode::online, "iter 0 ms 1 loss nan\niter 1 ms 1 loss 2.4\n")};
  const ModeRow t = compute_rows(text, LinkRates{})[1];
  EXPECT_EQ(t.same_result, false);
  EXPECT_EQ(t.loss_worst_iteration, 0u);
  CompareReport report;
  report.outcomes = text;
  report.rows = compute_rows(text, LinkRates{});
  EXPECT_TRUE(contains(render_notes(report),
                       "note: online's loss at iteration 0 is not a number equal to native's\n"))
      << render_notes(report);
}

TEST(CompareTable, ASteadyFigureFromFewPlannedIterationsSaysSo) {
  CompareReport report;
  report.outcomes = {
      outcome(CompareMode::native, "iter 0 ms 10\niter 1 ms 10\niter 2 ms 10\niter 3 ms 10\n"),
      outcome(CompareMode::online, "iter 0 ms 10\niter 1 ms 10\niter 2 ms 30\n"),
      outcome(CompareMode::replay,
              "iter 0 ms 10\niter 1 ms 10\niter 2 ms 20\niter 3 ms 20\niter 4 ms 20\n")};
  report.rows = compute_rows(report.outcomes, LinkRates{});
  ASSERT_EQ(report.rows[1].steady_iterations, 1u);
  ASSERT_EQ(report.rows[2].steady_iterations, 3u);
  const std::string notes = render_notes(report);
  EXPECT_TRUE(contains(notes,
                       "note: online's steady ms is the median of 1 iteration after its plan took "
                       "effect; run more steps for a steadier figure\n"))
      << notes;
  EXPECT_FALSE(contains(notes, "replay's steady ms")) << notes;
  EXPECT_FALSE(contains(notes, "native's steady ms")) << notes;  // not a planned run
}

TEST(CompareTable, ABudgetNotHeldSaysWhy) {
  const auto with = [](std::string_view advisor) {
    ModeOutcome o = outcome(CompareMode::online, "iter 0 ms 10\niter 1 ms 10\niter 2 ms 10\n",
                            json::parse(fmt::format(R"({{"advisor": {{"budget_bytes": 2147483648,
                               "peak_resident_bytes": 4294967296{}}}}})",
                                                    advisor)));
    o.budget_bytes = 2147483648;
    CompareReport report;
    report.outcomes = {outcome(CompareMode::native, "iter 0 ms 10\niter 1 ms 10\n"), o};
    report.rows = compute_rows(report.outcomes, LinkRates{});
    return render_notes(report);
  };
  const std::string off = with(R"(, "prefetch_wait": false, "evict_wait": false)");
  EXPECT_TRUE(contains(off,
                       "note: online counted 4.00 GiB GPU-resident at its peak, over its "
                       "budget of 2.00 GiB: UMSWAP_PREFETCH_WAIT=0: a launch does not wait for "
                       "a prefetch that is late"))
      << off;
  // The default: launches wait for late prefetches, not for evictions.
  const std::string no_evict_wait =
      with(R"(, "prefetch_wait": true, "evict_wait": false, "wait_stalls": 0)");
  EXPECT_TRUE(contains(no_evict_wait,
                       "launches do not wait for evictions still on their way "
                       "out; UMSWAP_EVICT_WAIT=1"))
      << no_evict_wait;
  EXPECT_FALSE(contains(no_evict_wait, "UMSWAP_PREFETCH_WAIT")) << no_evict_wait;
  const std::string stalled =
      with(R"(, "prefetch_wait": true, "evict_wait": true, "wait_stalls": 1)");
  EXPECT_TRUE(contains(stalled, "the watchdog released launches")) << stalled;
  const std::string on = with(R"(, "prefetch_wait": true, "evict_wait": true, "wait_stalls": 0)");
  EXPECT_TRUE(contains(on, "over its budget of 2.00 GiB: see docs/advisor.md")) << on;
  const std::string kept = with(R"(, "prefetch_wait": true, "evict_wait": true, "wait_stalls": 0,
      "evict_copy": {"kept_reached": {"evictions": 18, "bytes": 5368709120}})");
  EXPECT_TRUE(contains(kept,
                       "over its budget of 2.00 GiB: 18 evictions (5.00 GiB in the run) were "
                       "left on the GPU because the program had already submitted"))
      << kept;
  const std::string none_kept =
      with(R"(, "prefetch_wait": true, "evict_wait": true, "wait_stalls": 0,
      "evict_copy": {"kept_reached": {"evictions": 0, "bytes": 0}})");
  EXPECT_TRUE(contains(none_kept, "over its budget of 2.00 GiB: see docs/advisor.md")) << none_kept;
  // Held: no note.
  ModeOutcome held = outcome(CompareMode::online, "iter 0 ms 10\n",
                             json::parse(R"({"advisor": {"peak_resident_bytes": 900}})"));
  held.budget_bytes = 1000;
  CompareReport report;
  report.outcomes = {held};
  report.rows = compute_rows(report.outcomes, LinkRates{});
  EXPECT_FALSE(contains(render_notes(report), "over its budget")) << render_notes(report);
}

TEST(CompareTable, LossResultsSayHowCloseAndWhy) {
  CompareReport report;
  report.outcomes = {outcome(CompareMode::native, "iter 0 ms 10 loss 2.25\n"),
                     outcome(CompareMode::managed, "iter 0 ms 11 loss 2.26\n"),
                     outcome(CompareMode::online, "iter 0 ms 12 loss 2.5\n")};
  report.rows = compute_rows(report.outcomes, LinkRates{});
  const std::string table = render_table(report.rows);
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t nl; (nl = table.find('\n', start)) != std::string::npos; start = nl + 1) {
      out.push_back(table.substr(start, nl - start));
    }
    return out;
  }();
  ASSERT_EQ(lines.size(), 4u) << table;
  EXPECT_TRUE(lines[1].ends_with("       -        -")) << table;
  EXPECT_TRUE(lines[2].ends_with("  ≈ native (loss within 0.01)")) << table;
  EXPECT_TRUE(lines[3].ends_with("  DIFFERS")) << table;
  const std::string notes = render_notes(report);
  EXPECT_TRUE(contains(notes,
                       "note: online's loss at iteration 0 is 0.1 off native's (relative), more "
                       "than --loss-tolerance 0.01\n"))
      << notes;
  EXPECT_TRUE(contains(notes,
                       "its loss in every iteration is compared with native's within 0.01 "
                       "(relative; --loss-tolerance): cuDNN and cuBLAS are not bit-for-bit"))
      << notes;
  EXPECT_EQ(compare_json(report)["modes"][1]["result_match"], "within_tolerance");
  EXPECT_EQ(compare_json(report)["modes"][2]["result_match"], "differs");
}

TEST(CompareRows, NoNativeMeansNoRatios) {
  std::vector<ModeOutcome> outcomes = canned_outcomes();
  outcomes[0].status = ModeStatus::failed;
  outcomes[0].reason = "exit 1: no GPU";
  const std::vector<ModeRow> rows = compute_rows(outcomes, kRates);
  EXPECT_FALSE(rows[1].ratio_to_native);
  EXPECT_FALSE(rows[2].link_limit_ms);
  EXPECT_FALSE(rows[1].same_result);
  EXPECT_DOUBLE_EQ(*rows[1].steady_median_ms, 210.0);
}

CompareReport canned_report() {
  CompareReport report;
  report.command = {"./cudnn_vgg16", "--batch", "64"};
  report.budget_spec = *parse_size("50%");
  report.budget = resolve_budget(report.budget_spec, 20 * kGiB, std::nullopt);
  LinkProbe probe;
  probe.device_name = "NVIDIA H100 80GB HBM3";
  probe.total_bytes = 80 * kGiB;
  probe.free_bytes = 79 * kGiB;
  probe.rates = kRates;
  report.probe.probe = probe;
  report.outcomes = canned_outcomes();
  report.rows = compute_rows(report.outcomes, kRates);
  return report;
}

TEST(CompareTable, Rendered) {
  const CompareReport report = canned_report();
  const std::string table = render_table(report.rows);
  const std::string expected =
      "mode      steady ms  x native  x link  x driver   first ms  faults/it  GB in/it  GB out/it"
      "  peak GiB  budget   result\n"
      "native        190.0      1.00    1.00      1.00      900.0          -         -          -"
      "         -       -        -\n"
      "managed       210.0      1.11    1.11      1.11     2100.0        0.0      0.00       0.00"
      "         -       -     same\n"
      "online        420.0      2.21    1.75      0.32     2500.0       20.0     12.00      10.00"
      "      9.50     yes  DIFFERS\n"
      "replay    failed: exit 1: cudaErrorMemoryAllocation\n";
  EXPECT_EQ(table, expected) << table;

  const std::string notes = render_notes(report);
  EXPECT_TRUE(contains(notes,
                       "link (NVIDIA H100 80GB HBM3): host->device 50.0 GB/s, device->host 50.0 "
                       "GB/s (pinned copies); managed prefetch to the GPU 40.0 GB/s, to the host "
                       "10.0 GB/s\n"))
      << notes;
  EXPECT_TRUE(contains(notes, "budget: 50% of 20.00 GiB (managed peak) = 10.00 GiB\n")) << notes;
  EXPECT_TRUE(contains(notes, "note: online printed no iteration times")) << notes;
}

TEST(CompareTable, WithoutAProbeTheLinkRatiosAreDashes) {
  CompareReport report = canned_report();
  report.probe = {.probe = std::nullopt, .error = "no NVIDIA driver: libcuda.so.1: not found"};
  report.rows = compute_rows(report.outcomes, LinkRates{});
  const std::string table = render_table(report.rows);
  EXPECT_TRUE(contains(table, "native        190.0      1.00       -         -      900.0"))
      << table;
  const std::string notes = render_notes(report);
  EXPECT_EQ(notes.find("link: not measured (no NVIDIA driver: libcuda.so.1: not found)"), 0u)
      << notes;
}

TEST(CompareJson, CarriesEveryFigure) {
  const json j = compare_json(canned_report());
  EXPECT_EQ(j["umswap_compare_version"], 4);
  EXPECT_EQ(j["command"], (json{"./cudnn_vgg16", "--batch", "64"}));
  EXPECT_EQ(j["loss_tolerance"], 0.01);
  EXPECT_EQ(j["baselines"], json::array());
  EXPECT_EQ(j["baseline_comparisons"], json::array());
  EXPECT_EQ(j["budget_bytes"], 10 * kGiB);
  EXPECT_EQ(j["budget"]["spec"], "50%");
  EXPECT_EQ(j["probe"]["ok"], true);
  EXPECT_EQ(j["probe"]["htod_bytes_per_s"], 50e9);
  EXPECT_EQ(j["probe"]["gpu_free_bytes"], 79 * kGiB);
  ASSERT_EQ(j["modes"].size(), 4u);

  const json& native = j["modes"][0];
  EXPECT_EQ(native["mode"], "native");
  EXPECT_EQ(native["status"], "ok");
  EXPECT_TRUE(native["reason"].is_null());
  EXPECT_EQ(native["steady_median_ms"], 190.0);
  EXPECT_EQ(native["raw"]["iter_ms"], (json{900.0, 190.0, 180.0, 200.0, 190.0}));
  EXPECT_EQ(native["raw"]["summary"]["peak_allocated_bytes"], 20 * kGiB);
  EXPECT_EQ(native["peak_allocated_bytes"], 20 * kGiB);
  EXPECT_TRUE(native["result_match"].is_null());

  const json& online = j["modes"][2];
  EXPECT_EQ(online["gpu_faults_per_iteration"], 20.0);
  EXPECT_EQ(online["bytes_in_per_iteration"], 12e9);
  EXPECT_EQ(online["link_limit_ms"], 240.0);
  EXPECT_EQ(online["driver_limit_ms"], 1300.0);
  EXPECT_EQ(online["budget_held"], true);
  EXPECT_EQ(online["result_match"], "differs");
  EXPECT_EQ(online["raw"]["stats"]["advisor"]["state"], "applying");
  EXPECT_EQ(online["raw"]["stats"]["iterations"].size(), 5u);

  const json& replay = j["modes"][3];
  EXPECT_EQ(replay["status"], "failed");
  EXPECT_EQ(replay["reason"], "exit 1: cudaErrorMemoryAllocation");
  EXPECT_TRUE(replay["steady_median_ms"].is_null());
  EXPECT_EQ(replay["exit_code"], 1);

  CompareReport no_probe = canned_report();
  no_probe.probe = {.probe = std::nullopt, .error = "no GPU"};
  const json k = compare_json(no_probe);
  EXPECT_EQ(k["probe"]["ok"], false);
  EXPECT_EQ(k["probe"]["error"], "no GPU");
  EXPECT_TRUE(k["probe"]["htod_bytes_per_s"].is_null());
}

// --- Baselines: PyTorch's save_on_cpu and checkpointing, from canned script output
// --------------------------------------------------------------------------------------------

// What samples/pytorch/vgg16.py prints: iter lines, then the summary with PyTorch's peaks.
std::string script_output(double steady_ms, double last_loss, uint64_t peak_allocated) {
  return fmt::format(
      "iter 0 ms 900.000 loss 6.900000\niter 1 ms {0:.3f} loss 6.800000\n"
      "iter 2 ms {0:.3f} loss 6.700000\niter 3 ms {0:.3f} loss {1:.6f}\n"
      "summary {{\"first_ms\": 900.0, \"steady_median_ms\": {0}, \"peak_allocated_bytes\": {2}, "
      "\"peak_reserved_bytes\": {3}, \"iters\": 4, \"oom\": false, \"offload\": true}}\n",
      steady_ms, last_loss, peak_allocated, peak_allocated + kGiB);
}

json stats_with_peak(uint64_t peak_resident) {
  return json{{"advisor", {{"peak_resident_bytes", peak_resident}}}};
}

ModeOutcome baseline_outcome(CompareBaseline baseline, std::string_view stdout_text) {
  ModeOutcome o = outcome(CompareMode::native, stdout_text);
  o.baseline = baseline;
  return o;
}

ModeOutcome failed_baseline(CompareBaseline baseline, std::string reason) {
  ModeOutcome o;
  o.mode = CompareMode::native;
  o.baseline = baseline;
  o.status = ModeStatus::failed;
  o.exit_code = 2;
  o.reason = std::move(reason);
  return o;
}

// native 100 ms with 20 GiB; online 300 ms at 9 GiB resident, replay 200 ms at 10 GiB; offload
// and checkpoint as given.
CompareReport baseline_report(std::vector<ModeOutcome> baselines) {
  CompareReport report;
  report.command = {"python3", "vgg16.py"};
  report.outcomes = {
      outcome(CompareMode::native, script_output(100, 5.0, 20 * kGiB)),
      outcome(CompareMode::online, script_output(300, 5.01, 20 * kGiB), stats_with_peak(9 * kGiB)),
      outcome(CompareMode::replay, script_output(200, 5.02, 20 * kGiB),
              stats_with_peak(10 * kGiB))};
  report.rows = compute_rows(report.outcomes, LinkRates{});
  report.baselines = std::move(baselines);
  report.baseline_rows = compute_baseline_rows(report.baselines, report.outcomes);
  return report;
}

TEST(CompareBaselines, RowsFromTheScriptsOutput) {
  const CompareReport report = baseline_report(
      {baseline_outcome(CompareBaseline::offload, script_output(250, 5.0, 12 * kGiB)),
       baseline_outcome(CompareBaseline::checkpoint, script_output(150, 5.3, 6 * kGiB))});
  ASSERT_EQ(report.baseline_rows.size(), 2u);
  const ModeRow& offload = report.baseline_rows[0];
  EXPECT_EQ(offload.baseline, CompareBaseline::offload);
  EXPECT_EQ(offload.status, ModeStatus::ok);
  EXPECT_EQ(offload.timing_source, "program");
  EXPECT_DOUBLE_EQ(*offload.steady_median_ms, 250.0);
  EXPECT_DOUBLE_EQ(*offload.first_ms, 900.0);
  EXPECT_DOUBLE_EQ(*offload.ratio_to_native, 2.5);
  EXPECT_EQ(offload.peak_allocated_bytes, 12 * kGiB);  // torch.cuda.max_memory_allocated
  EXPECT_FALSE(offload.peak_resident_bytes);
  EXPECT_EQ(offload.same_result, true);
  EXPECT_EQ(offload.result_basis, "loss");
  const ModeRow& checkpoint = report.baseline_rows[1];
  EXPECT_DOUBLE_EQ(*checkpoint.ratio_to_native, 1.5);
  EXPECT_EQ(checkpoint.same_result, false);  // 5.3 is 5.7% off 5.0

  // The extra rows of the same table, the name column widened for `checkpoint`; their peak is
  // PyTorch's.
  std::vector<ModeRow> rows = report.rows;
  rows.insert(rows.end(), report.baseline_rows.begin(), report.baseline_rows.end());
  const std::string table = render_table(rows);
  EXPECT_TRUE(contains(table, "mode        steady ms  x native")) << table;
  EXPECT_TRUE(contains(table, "\nreplay          200.0      2.00       -")) << table;
  EXPECT_TRUE(contains(table,
                       "\noffload         250.0      2.50       -         -      900.0"
                       "          -         -          -     12.00       -  ≈ native "
                       "(loss within 0.01)\n"))
      << table;
  EXPECT_TRUE(contains(table, "\ncheckpoint      150.0      1.50       -")) << table;
  EXPECT_TRUE(contains(table, "      6.00       -  DIFFERS\n")) << table;
  EXPECT_TRUE(contains(render_notes(report),
                       "peak GiB of a baseline is the program's "
                       "peak_allocated_bytes"));
}

TEST(CompareBaselines, SaveOnCpusBytesEachWayFromTheSummary) {
  // The bundled scripts count what save_on_cpu copies (samples/pytorch/common.py); the offload
  // row shows it in GB, the JSON in bytes. A negative or missing count is unknown.
  std::string text = script_output(250, 5.0, 12 * kGiB);
  const std::string counted =
      "\"offload_bytes_out_per_iteration\": 42877372804, "
      "\"offload_bytes_in_per_iteration\": 42000000000, \"iters\"";
  text.replace(text.find("\"iters\""), std::string("\"iters\"").size(), counted);
  std::string negative = script_output(250, 5.0, 12 * kGiB);
  negative.replace(negative.find("\"iters\""), std::string("\"iters\"").size(),
                   "\"offload_bytes_out_per_iteration\": -1, \"iters\"");
  const CompareReport report =
      baseline_report({baseline_outcome(CompareBaseline::offload, text),
                       baseline_outcome(CompareBaseline::offload, negative)});
  const ModeRow& offload = report.baseline_rows[0];
  EXPECT_DOUBLE_EQ(*offload.bytes_out_per_iteration, 42877372804.0);
  EXPECT_DOUBLE_EQ(*offload.bytes_in_per_iteration, 42e9);
  EXPECT_FALSE(report.baseline_rows[1].bytes_out_per_iteration);
  EXPECT_FALSE(report.baseline_rows[1].bytes_in_per_iteration);
  const std::string table = render_table(report.baseline_rows);
  EXPECT_TRUE(contains(table, "900.0          -     42.00      42.88     12.00")) << table;
  EXPECT_TRUE(contains(table, "900.0          -         -          -     12.00")) << table;
  const json j = compare_json(report);
  EXPECT_EQ(j["baselines"][0]["bytes_out_per_iteration"], 42877372804.0);
  EXPECT_EQ(j["baselines"][0]["bytes_in_per_iteration"], 42e9);
  EXPECT_TRUE(j["baselines"][1]["bytes_out_per_iteration"].is_null());
}
TEST(CompareBaselines, AFailedBaselineKeepsItsRowAndIsNotCompared) {
  const CompareReport report = baseline_report(
      {failed_baseline(CompareBaseline::offload,
                       "exit 2: vgg16.py: error: unrecognized arguments: --offload (the command "
                       "must accept --offload, as samples/pytorch/*.py do)"),
       baseline_outcome(CompareBaseline::checkpoint, script_output(150, 5.0, 6 * kGiB))});
  EXPECT_EQ(report.baseline_rows[0].status, ModeStatus::failed);
  EXPECT_FALSE(report.baseline_rows[0].steady_median_ms);
  EXPECT_EQ(report.baseline_rows[1].status, ModeStatus::ok);  // the rest goes on
  const std::string table = render_table(report.baseline_rows);
  EXPECT_TRUE(contains(table,
                       "\noffload     failed: exit 2: vgg16.py: error: unrecognized "
                       "arguments: --offload (the command must accept --offload"))
      << table;
  const std::vector<BaselineVerdict> v = baseline_verdicts(report.rows, report.baseline_rows);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FALSE(v[0].speedup);
  EXPECT_FALSE(v[0].umswap_mode);
  EXPECT_EQ(v[0].text,
            "umswap vs save_on_cpu (offload): nothing to compare: the offload run failed (see "
            "its row)");
  const json j = compare_json(report);
  EXPECT_EQ(j["baselines"][0]["status"], "failed");
  EXPECT_EQ(j["baselines"][0]["flag"], "--offload");
  EXPECT_TRUE(j["baselines"][0]["steady_median_ms"].is_null());
  EXPECT_EQ(j["baselines"][1]["status"], "ok");
}

// A row whose run launched CUDA graphs has a peak that leaves their memory out: no claim of equal
// memory is made from it (online and replay both ran graphs here).
TEST(CompareBaselines, NoEqualMemoryClaimFromAPeakThatLeavesGraphsOut) {
  CompareReport report = baseline_report(
      {baseline_outcome(CompareBaseline::offload, script_output(250, 5.0, 12 * kGiB))});
  for (ModeRow& row : report.rows) {
    if (row.mode != CompareMode::native) row.graph_launches = 8;
  }
  const std::vector<BaselineVerdict> v = baseline_verdicts(report.rows, report.baseline_rows);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].at_equal_memory);
  EXPECT_FALSE(v[0].speedup);
  EXPECT_TRUE(contains(v[0].text,
                       "umswap's count leaves out the memory of the kernels in CUDA "
                       "graphs"))
      << v[0].text;
}

TEST(CompareBaselines, SpeedUpOverSaveOnCpuAtEqualOrLowerMemory) {
  // offload: 250 ms at 12 GiB allocated. replay (200 ms, 10 GiB) and online (300 ms, 9 GiB) are
  // both at or below it; the faster, replay, is compared.
  const CompareReport report = baseline_report(
      {baseline_outcome(CompareBaseline::offload, script_output(250, 5.0, 12 * kGiB))});
  const std::vector<BaselineVerdict> v = baseline_verdicts(report.rows, report.baseline_rows);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].umswap_mode, CompareMode::replay);
  EXPECT_EQ(v[0].at_equal_memory, true);
  EXPECT_DOUBLE_EQ(*v[0].speedup, 1.25);
  EXPECT_EQ(v[0].text,
            "umswap vs save_on_cpu (offload): umswap replay is 1.25× faster than save_on_cpu at "
            "equal or lower peak memory (replay 200.0 ms, 10.00 GiB GPU-resident; offload 250.0 "
            "ms, 12.00 GiB allocated)");
  EXPECT_EQ(render_verdicts(report), v[0].text + "\n");

  // At 9.5 GiB only online is at or below; it is slower.
  const CompareReport tight = baseline_report(
      {baseline_outcome(CompareBaseline::offload, script_output(250, 5.0, 9 * kGiB + kGiB / 2))});
  const std::vector<BaselineVerdict> w = baseline_verdicts(tight.rows, tight.baseline_rows);
  EXPECT_EQ(w[0].umswap_mode, CompareMode::online);
  EXPECT_DOUBLE_EQ(*w[0].speedup, 250.0 / 300.0);
  EXPECT_TRUE(contains(w[0].text,
                       "umswap online is 1.20× slower than save_on_cpu at equal or "
                       "lower peak memory"))
      << w[0].text;

  const json j = compare_json(report);
  ASSERT_EQ(j["baseline_comparisons"].size(), 1u);
  const json& c = j["baseline_comparisons"][0];
  EXPECT_EQ(c["baseline"], "offload");
  EXPECT_EQ(c["umswap_mode"], "replay");
  EXPECT_EQ(c["speedup"], 1.25);
  EXPECT_EQ(c["at_equal_memory"], true);
  EXPECT_EQ(c["umswap_peak_resident_bytes"], 10 * kGiB);
  EXPECT_EQ(c["baseline_peak_allocated_bytes"], 12 * kGiB);
  EXPECT_EQ(j["baselines"][0]["peak_allocated_bytes"], 12 * kGiB);
  EXPECT_EQ(j["baselines"][0]["peak_reserved_bytes"], 13 * kGiB);
  EXPECT_EQ(j["baselines"][0]["raw"]["iter_ms"].size(), 4u);
}

TEST(CompareBaselines, NoSpeedUpClaimedWhenUmswapHoldsMoreMemory) {
  // offload at 8 GiB: umswap's lowest peak (online, 9 GiB) is above it.
  const CompareReport report = baseline_report(
      {baseline_outcome(CompareBaseline::offload, script_output(400, 5.0, 8 * kGiB))});
  const std::vector<BaselineVerdict> v = baseline_verdicts(report.rows, report.baseline_rows);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].at_equal_memory, false);
  EXPECT_FALSE(v[0].speedup);  // umswap is faster, but with more memory: no claim
  EXPECT_EQ(v[0].umswap_mode, CompareMode::online);
  EXPECT_EQ(v[0].text,
            "umswap vs save_on_cpu (offload): not at equal memory, so no speed-up is claimed: "
            "umswap's lowest peak is above save_on_cpu's (online 300.0 ms, 9.00 GiB "
            "GPU-resident; offload 400.0 ms, 8.00 GiB allocated)");
  EXPECT_FALSE(contains(v[0].text, "faster"));
  EXPECT_TRUE(compare_json(report)["baseline_comparisons"][0]["speedup"].is_null());

  // Without counted residency there is nothing to hold the peak against: no claim either.
  CompareReport unknown = baseline_report(
      {baseline_outcome(CompareBaseline::offload, script_output(400, 5.0, 12 * kGiB))});
  for (ModeRow& row : unknown.rows) row.peak_resident_bytes.reset();
  const std::vector<BaselineVerdict> u = baseline_verdicts(unknown.rows, unknown.baseline_rows);
  EXPECT_FALSE(u[0].at_equal_memory);
  EXPECT_FALSE(u[0].speedup);
  EXPECT_TRUE(contains(u[0].text,
                       "peak memory not known (umswap counted no GPU-resident bytes), "
                       "so no speed-up at equal memory is claimed"))
      << u[0].text;
}

TEST(CompareBaselines, CheckpointingFasterOrSlowerThanUmswap) {
  const CompareReport faster = baseline_report(
      {baseline_outcome(CompareBaseline::checkpoint, script_output(150, 5.0, 6 * kGiB))});
  const std::vector<BaselineVerdict> v = baseline_verdicts(faster.rows, faster.baseline_rows);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].umswap_mode, CompareMode::replay);  // the fastest umswap run
  EXPECT_DOUBLE_EQ(*v[0].speedup, 0.75);
  EXPECT_EQ(v[0].text,
            "umswap vs checkpointing (checkpoint): checkpointing is 1.33× faster than umswap "
            "replay (replay 200.0 ms, 10.00 GiB GPU-resident; checkpoint 150.0 ms, 6.00 GiB "
            "allocated)");
  const CompareReport slower = baseline_report(
      {baseline_outcome(CompareBaseline::checkpoint, script_output(500, 5.0, 6 * kGiB))});
  EXPECT_TRUE(contains(baseline_verdicts(slower.rows, slower.baseline_rows)[0].text,
                       "checkpointing is 2.50× slower than umswap replay"));
  // No umswap run to compare with.
  CompareReport alone = slower;
  alone.rows.resize(1);  // native only
  EXPECT_EQ(baseline_verdicts(alone.rows, alone.baseline_rows)[0].text,
            "umswap vs checkpointing (checkpoint): nothing to compare: no online or replay run "
            "finished with iteration times");
}

}  // namespace
}  // namespace umswap::cli
