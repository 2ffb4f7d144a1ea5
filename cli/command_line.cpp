#include "umswap/cli/command_line.h"

#include "umswap/cli/detail/compare_flag_table.h"
#include "umswap/cli/detail/run_flag_table.h"
#include "umswap/cli/detail/trace_command_usage.h"
#include "umswap/cli/plan_cache.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>

#include <algorithm>
#include <cmath>

namespace umswap::cli {
namespace {

using Action = CommandLine::Action;

CommandLine usage_error(std::string_view message, std::string_view hint = {}) {
  CommandLine result;
  result.action = Action::error;
  result.exit_code = kUsageErrorExitCode;
  result.message = fmt::format("umswap: error: {}\n", message);
  if (!hint.empty()) result.message += fmt::format("{}\n", hint);
  return result;
}

CommandLine help(int exit_code) {
  CommandLine result;
  result.action = Action::help;
  result.exit_code = exit_code;
  return result;
}

// `--budget: '12Q' is not a size (examples: 16G, 512M, 75%)`, or nullopt when the value is good.
std::optional<std::string> parse_size_flag(std::string_view flag, const std::string& text,
                                           std::optional<SizeSpec>* out) {
  std::string why;
  if (auto size = parse_size(text, &why)) {
    *out = *size;
    return std::nullopt;
  }
  return fmt::format("{}: '{}' {}", flag, text, why);
}

std::optional<uint64_t> whole_number(const std::string& text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// `3` or `2-5` (iteration numbers from 0, the last included) → (first, last); nullopt and `error`
// otherwise.
std::optional<std::pair<uint64_t, uint64_t>> parse_iteration_range(const std::string& text,
                                                                   std::string* error) {
  const size_t dash = text.find('-');
  const std::optional<uint64_t> first = whole_number(text.substr(0, dash));
  const std::optional<uint64_t> last =
      dash == std::string::npos ? first : whole_number(text.substr(dash + 1));
  if (!first || !last) {
    *error = fmt::format("'{}' is not an iteration (N) or a range of them (A-B), from 0", text);
    return std::nullopt;
  }
  if (*last < *first) {
    *error = fmt::format("'{}' ends before it starts", text);
    return std::nullopt;
  }
  return std::pair{*first, *last};
}

// `native,online` → the modes in their run order, without repeats; nullopt and `error` for an
// unknown name or an empty entry (so an empty list too).
std::optional<std::vector<CompareMode>> parse_mode_list(const std::string& text,
                                                        std::string* error) {
  std::vector<bool> wanted(kCompareModes.size(), false);
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') continue;
    const std::string name = text.substr(start, i - start);
    start = i + 1;
    const std::optional<CompareMode> mode = parse_compare_mode(name);
    if (!mode) {
      *error = name.empty() ? fmt::format("--modes: '{}' has an empty entry", text)
                            : fmt::format("--modes: '{}' is not a mode", name);
      *error += " (expected a comma-separated list of native, managed, online, replay, vmm)";
      return std::nullopt;
    }
    wanted[static_cast<size_t>(*mode)] = true;
  }
  std::vector<CompareMode> modes;
  for (size_t i = 0; i < kCompareModes.size(); ++i) {
    if (wanted[i]) modes.push_back(kCompareModes[i]);
  }
  return modes;
}

// `checkpoint,offload` → the baselines in their run order, without repeats; as parse_mode_list.
std::optional<std::vector<CompareBaseline>> parse_baseline_list(const std::string& text,
                                                                std::string* error) {
  std::vector<bool> wanted(kCompareBaselines.size(), false);
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') continue;
    const std::string name = text.substr(start, i - start);
    start = i + 1;
    const std::optional<CompareBaseline> baseline = parse_compare_baseline(name);
    if (!baseline) {
      *error = name.empty() ? fmt::format("--baselines: '{}' has an empty entry", text)
                            : fmt::format("--baselines: '{}' is not a baseline", name);
      *error += " (expected a comma-separated list of offload, checkpoint)";
      return std::nullopt;
    }
    wanted[static_cast<size_t>(*baseline)] = true;
  }
  std::vector<CompareBaseline> baselines;
  for (size_t i = 0; i < kCompareBaselines.size(); ++i) {
    if (wanted[i]) baselines.push_back(kCompareBaselines[i]);
  }
  return baselines;
}

// A finite number >= 0 in plain or exponent notation (`0.01`, `1e-2`).
std::optional<double> non_negative_number(const std::string& text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

CommandLine parse_command_line(std::span<const std::string> args) {
  // The command is everything after the first `--`, untouched: CLI11 never sees it.
  const auto separator = std::find(args.begin(), args.end(), std::string("--"));
  const std::span<const std::string> ours(args.begin(), separator);
  std::vector<std::string> command;
  if (separator != args.end()) command.assign(separator + 1, args.end());

  // A value flag at the very end would otherwise get CLI11's "1 required TEXT missing".
  if (!ours.empty() && ours.front() == "compare") {
    for (const auto& flag : detail::kCompareFlags) {
      if (!flag.value_name.empty() && ours.back() == flag.name) {
        return usage_error(fmt::format("{} needs a value ({})", flag.name, flag.value_name),
                           fmt::format("usage: {}", detail::kCompareUsage));
      }
    }
  } else if (!ours.empty()) {
    const std::string_view usage = ours.front() == "record"   ? detail::kRecordUsage
                                   : ours.front() == "replay" ? detail::kReplayUsage
                                                              : detail::kRunUsage;
    for (const auto& flag : detail::kRunFlags) {
      if (!flag.value_name.empty() && ours.back() == flag.name) {
        return usage_error(fmt::format("{} needs a value ({})", flag.name, flag.value_name),
                           fmt::format("usage: {}", usage));
      }
    }
  }

  CLI::App app{"", "umswap"};
  app.set_help_flag();
  app.allow_extras();
  bool want_help = false, want_help_all = false;
  bool want_version = false;
  app.add_flag("-h,--help", want_help);
  app.add_flag("--help-all", want_help_all);
  app.add_flag("--version", want_version);
  CLI::App* run = app.add_subcommand("run");
  run->set_help_flag();
  run->allow_extras();
  run->add_flag("-h,--help", want_help);
  std::string budget, limit, mode, stats, engine;
  bool verbose = false, verify = false, quiet = false;
  auto* budget_option = run->add_option("--budget", budget);
  auto* limit_option = run->add_option("--limit", limit);
  auto* mode_option = run->add_option("--mode", mode);
  auto* stats_option = run->add_option("--stats", stats);
  auto* engine_option = run->add_option("--engine", engine);
  for (auto* option : {budget_option, limit_option, mode_option, stats_option, engine_option}) {
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // the last one given wins
  }
  run->add_flag("--verbose", verbose);
  run->add_flag("-q,--quiet", quiet);
  run->add_flag("--verify", verify);
  bool no_cache = false;
  run->add_flag("--no-cache", no_cache);

  // `record`: the flags of `run` (bound to the same variables) plus where the trace goes.
  CLI::App* record = app.add_subcommand("record");
  record->set_help_flag();
  record->allow_extras();
  record->add_flag("-h,--help", want_help);
  std::string trace_output, iterations, marker;
  auto* record_budget = record->add_option("--budget", budget);
  auto* record_limit = record->add_option("--limit", limit);
  auto* record_mode = record->add_option("--mode", mode);
  auto* record_stats = record->add_option("--stats", stats);
  auto* record_engine = record->add_option("--engine", engine);
  auto* trace_output_option = record->add_option("-o,--output", trace_output);
  auto* iterations_option = record->add_option("--iterations", iterations);
  auto* marker_option = record->add_option("--marker", marker);
  for (auto* option : {record_budget, record_limit, record_mode, record_stats, record_engine,
                       trace_output_option, iterations_option, marker_option}) {
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  record->add_flag("--verbose", verbose);
  record->add_flag("-q,--quiet", quiet);

  // `replay TRACE`: the flags of `run` (bound to the same variables) plus the trace to replay.
  CLI::App* replay = app.add_subcommand("replay");
  replay->set_help_flag();
  replay->allow_extras();
  replay->add_flag("-h,--help", want_help);
  std::string replay_trace;
  auto* replay_budget = replay->add_option("--budget", budget);
  auto* replay_limit = replay->add_option("--limit", limit);
  auto* replay_mode = replay->add_option("--mode", mode);
  auto* replay_stats = replay->add_option("--stats", stats);
  auto* replay_engine = replay->add_option("--engine", engine);
  for (auto* option : {replay_budget, replay_limit, replay_mode, replay_stats, replay_engine}) {
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  auto* replay_trace_option = replay->add_option("trace", replay_trace);
  replay->add_flag("--verbose", verbose);
  replay->add_flag("-q,--quiet", quiet);
  replay->add_flag("--verify", verify);

  // `compare`: its own flags; the command after `--` is optional.
  CLI::App* compare = app.add_subcommand("compare");
  compare->set_help_flag();
  compare->allow_extras();
  compare->add_flag("-h,--help", want_help);
  std::string compare_budget, compare_modes, compare_json, steps_hint, baselines, loss_tolerance;
  bool keep = false;
  auto* compare_budget_option = compare->add_option("--budget", compare_budget);
  auto* modes_option = compare->add_option("--modes", compare_modes);
  auto* json_option = compare->add_option("--json", compare_json);
  auto* steps_hint_option = compare->add_option("--steps-hint", steps_hint);
  auto* baselines_option = compare->add_option("--baselines", baselines);
  auto* loss_tolerance_option = compare->add_option("--loss-tolerance", loss_tolerance);
  for (auto* option : {compare_budget_option, modes_option, json_option, steps_hint_option,
                       baselines_option, loss_tolerance_option}) {
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  compare->add_flag("--keep", keep);

  // `report FILE` and `timeline FILE -o OUT.json`: the file is a positional argument; anything
  // more is caught below with our own message.
  CLI::App* report = app.add_subcommand("report");
  CLI::App* timeline = app.add_subcommand("timeline");
  std::string report_path, timeline_path, output;
  for (CLI::App* sub : {report, timeline}) {
    sub->set_help_flag();
    sub->allow_extras();
    sub->add_flag("-h,--help", want_help);
  }
  auto* report_file = report->add_option("file", report_path);
  auto* timeline_file = timeline->add_option("file", timeline_path);
  auto* output_option = timeline->add_option("-o,--output", output);
  output_option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string iterations_text;
  auto* timeline_iterations = timeline->add_option("--iterations", iterations_text);
  timeline_iterations->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // `plans [list]`, `plans clear [KEY...]`: the words are positional, checked below.
  CLI::App* plans = app.add_subcommand("plans");
  plans->set_help_flag();
  plans->allow_extras();
  plans->add_flag("-h,--help", want_help);
  std::vector<std::string> plans_words;
  plans->add_option("words", plans_words);
  app.require_subcommand(0, 1);

  if (!ours.empty() && ours.front() == "timeline" &&
      (ours.back() == "-o" || ours.back() == "--output")) {
    return usage_error(fmt::format("{} needs a value (OUT.json)", ours.back()),
                       fmt::format("usage: {}", detail::kTimelineUsage));
  }

  // CLI11 wants argv-style input, last argument first.
  std::vector<std::string> reversed(ours.rbegin(), ours.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what(), "run 'umswap --help' for usage");
  }

  if (want_help_all) {
    CommandLine result = help(0);
    result.help_all = true;
    return result;
  }
  if (want_help) return help(0);
  if (want_version) {
    CommandLine result;
    result.action = Action::version;
    return result;
  }
  for (const std::vector<std::string>& extras :
       {app.remaining(), run->remaining(), record->remaining(), replay->remaining(),
        compare->remaining(), report->remaining(), timeline->remaining(), plans->remaining()}) {
    if (extras.empty()) continue;
    const std::string& first = extras.front();
    if (!first.empty() && first[0] == '-') {
      return usage_error(fmt::format("unknown option '{}'", first),
                         "run 'umswap --help' for usage");
    }
    if (plans->parsed()) {
      return usage_error(fmt::format("unexpected argument '{}'", first),
                         fmt::format("usage: {}", detail::kPlansUsage));
    }
    if (report->parsed() || timeline->parsed()) {
      return usage_error(fmt::format("unexpected argument '{}'", first),
                         fmt::format("usage: {}", report->parsed() ? detail::kReportUsage
                                                                   : detail::kTimelineUsage));
    }
    if (!run->parsed() && !record->parsed() && !replay->parsed() && !compare->parsed()) {
      return usage_error(fmt::format("unknown command '{}' (commands: run, record, replay, "
                                     "compare, report, timeline, plans)",
                                     first),
                         "run 'umswap --help' for usage");
    }
    const std::string_view usage = record->parsed()    ? detail::kRecordUsage
                                   : replay->parsed()  ? detail::kReplayUsage
                                   : compare->parsed() ? detail::kCompareUsage
                                                       : detail::kRunUsage;
    return usage_error(fmt::format("unexpected argument '{}': put the command after `--`", first),
                       fmt::format("usage: {}", usage));
  }
  if (compare->parsed()) {
    CommandLine result;
    CompareFlags& c = result.compare_flags;
    if (compare_budget_option->count() > 0) {
      std::optional<SizeSpec> spec;
      if (auto error = parse_size_flag("--budget", compare_budget, &spec)) {
        return usage_error(*error);
      }
      if (spec->is_zero()) {
        return usage_error(fmt::format(
            "--budget: '{}' is zero (expected a size such as 8G or a percentage such as 50%)",
            compare_budget));
      }
      c.budget = *spec;
    }
    if (modes_option->count() > 0) {
      std::string error;
      std::optional<std::vector<CompareMode>> modes = parse_mode_list(compare_modes, &error);
      if (!modes) return usage_error(error);
      c.modes = std::move(*modes);
    }
    if (json_option->count() > 0) {
      if (compare_json.empty()) return usage_error("--json: '' is empty (expected a file path)");
      c.json_path = compare_json;
    }
    if (steps_hint_option->count() > 0) {
      const std::optional<uint64_t> n = whole_number(steps_hint);
      if (!n || *n == 0) {
        return usage_error(fmt::format(
            "--steps-hint: '{}' is not a whole number above 0 (iterations the command runs)",
            steps_hint));
      }
      c.steps_hint = *n;
    }
    if (baselines_option->count() > 0) {
      std::string error;
      std::optional<std::vector<CompareBaseline>> list = parse_baseline_list(baselines, &error);
      if (!list) return usage_error(error);
      c.baselines = std::move(*list);
    }
    if (loss_tolerance_option->count() > 0) {
      const std::optional<double> tolerance = non_negative_number(loss_tolerance);
      if (!tolerance) {
        return usage_error(fmt::format(
            "--loss-tolerance: '{}' is not a number of at least 0 (a relative difference such "
            "as 0.01)",
            loss_tolerance));
      }
      c.loss_tolerance = *tolerance;
    }
    c.keep = keep;
    if (separator != args.end() && command.empty()) {
      return usage_error("compare: nothing after `--` (leave `--` out to run the bundled sample)",
                         fmt::format("usage: {}", detail::kCompareUsage));
    }
    if (!c.baselines.empty() && command.empty()) {
      return usage_error(
          "--baselines: needs a command after `--` that accepts --offload and --checkpoint (as "
          "samples/pytorch/*.py do); the bundled cudnn_vgg16 does not",
          fmt::format("usage: {}", detail::kCompareUsage));
    }
    c.command = std::move(command);
    result.action = Action::compare;
    result.exit_code = 0;
    return result;
  }
  if (report->parsed() || timeline->parsed()) {
    const bool is_report = report->parsed();
    const std::string_view name = is_report ? "report" : "timeline";
    const std::string_view usage = is_report ? detail::kReportUsage : detail::kTimelineUsage;
    if (separator != args.end()) {
      return usage_error(fmt::format("{}: unexpected `--` (it runs no command)", name),
                         fmt::format("usage: {}", usage));
    }
    const std::string& path = is_report ? report_path : timeline_path;
    if ((is_report ? report_file : timeline_file)->count() == 0 || path.empty()) {
      return usage_error(fmt::format("{}: no trace file given", name),
                         fmt::format("usage: {}", usage));
    }
    CommandLine result;
    result.trace_flags.trace_path = path;
    if (!is_report) {
      if (output_option->count() == 0) {
        return usage_error("timeline: no output file given (-o OUT.json)",
                           fmt::format("usage: {}", usage));
      }
      if (output.empty()) return usage_error("timeline: -o: '' is empty (expected a file path)");
      result.trace_flags.output_path = output;
      if (timeline_iterations->count() > 0) {
        std::string error;
        result.trace_flags.iterations = parse_iteration_range(iterations_text, &error);
        if (!result.trace_flags.iterations) {
          return usage_error(fmt::format("timeline: --iterations: {}", error),
                             fmt::format("usage: {}", usage));
        }
      }
    }
    result.action = is_report ? Action::report : Action::timeline;
    result.exit_code = 0;
    return result;
  }
  if (plans->parsed()) {
    const std::string usage = fmt::format("usage: {}", detail::kPlansUsage);
    if (separator != args.end()) {
      return usage_error("plans: unexpected `--` (it runs no command)", usage);
    }
    CommandLine result;
    result.action = Action::plans;
    result.exit_code = 0;
    if (plans_words.empty() || plans_words.front() == "list") {
      if (plans_words.size() > 1) {
        return usage_error(fmt::format("plans list: unexpected argument '{}'", plans_words[1]),
                           usage);
      }
      return result;
    }
    if (plans_words.front() != "clear") {
      return usage_error(
          fmt::format("plans: '{}' is not an action (expected list or clear)", plans_words[0]),
          usage);
    }
    result.plans_flags.clear = true;
    for (size_t i = 1; i < plans_words.size(); ++i) {
      const std::string& key = plans_words[i];
      if (!is_plan_key_prefix(key)) {
        return usage_error(fmt::format("plans clear: '{}' is not a key (up to 16 hex digits, as "
                                       "`umswap plans list` shows them)",
                                       key),
                           usage);
      }
      result.plans_flags.keys.push_back(key);
    }
    return result;
  }
  if (!run->parsed() && !record->parsed() && !replay->parsed()) return help(kUsageErrorExitCode);

  CommandLine result;
  RunFlags& flags = result.run_flags;
  if (record->parsed()) {
    RecordFlags r;
    if (trace_output_option->count() == 0 || trace_output.empty()) {
      return usage_error("record: no trace file given (-o FILE)",
                         fmt::format("usage: {}", detail::kRecordUsage));
    }
    r.output = trace_output;
    if (iterations_option->count() > 0) {
      const auto [end, ec] =
          std::from_chars(iterations.data(), iterations.data() + iterations.size(), r.iterations);
      if (iterations.empty() || ec != std::errc() || end != iterations.data() + iterations.size()) {
        return usage_error(fmt::format(
            "--iterations: '{}' is not a whole number (0 records the whole run)", iterations));
      }
    }
    if (marker_option->count() > 0) {
      if (marker.empty()) return usage_error("--marker: '' is empty (expected an NVTX range name)");
      r.marker = marker;
    }
    flags.record = std::move(r);
  }
  if (replay->parsed()) {
    if (replay_trace_option->count() == 0 || replay_trace.empty()) {
      return usage_error("replay: no trace file given",
                         fmt::format("usage: {}", detail::kReplayUsage));
    }
    if (replay_mode->count() > 0) {
      return usage_error("replay: --mode cannot be given (replay runs with UMSWAP_MODE=replay)",
                         fmt::format("usage: {}", detail::kReplayUsage));
    }
    flags.replay_trace = replay_trace;
  }
  if (budget_option->count() + record_budget->count() + replay_budget->count() > 0) {
    if (auto error = parse_size_flag("--budget", budget, &flags.budget)) return usage_error(*error);
  }
  if (limit_option->count() + record_limit->count() + replay_limit->count() > 0) {
    if (auto error = parse_size_flag("--limit", limit, &flags.managed_limit)) {
      return usage_error(*error);
    }
  }
  if (mode_option->count() + record_mode->count() > 0) {
    flags.mode = parse_mode(mode);
    if (!flags.mode || *flags.mode == Mode::replay) {
      return usage_error(
          flags.mode ? std::string("--mode: replay needs a trace: use 'umswap replay TRACE'")
                     : fmt::format("--mode: '{}' is not a mode (expected {}, {} or {})", mode,
                                   to_string(Mode::online), to_string(Mode::managed),
                                   to_string(Mode::passthrough)));
    }
  }
  if (engine_option->count() + record_engine->count() + replay_engine->count() > 0) {
    flags.engine = parse_engine(engine);
    if (!flags.engine) {
      return usage_error(fmt::format("--engine: '{}' is not an engine (expected {} or {})", engine,
                                     to_string(Engine::um), to_string(Engine::vmm)));
    }
    // Engine vmm runs no advisor yet: nothing to replay, no evictions to verify.
    if (*flags.engine == Engine::vmm && flags.replay_trace) {
      return usage_error(
          "replay: --engine vmm cannot replay a trace yet (it runs no advisor); use --engine um",
          fmt::format("usage: {}", detail::kReplayUsage));
    }
    if (*flags.engine == Engine::vmm && verify) {
      return usage_error(
          "--verify checks the evictions of engine um (engine vmm's moves keep every range "
          "mapped: nothing to verify); leave out --engine vmm or --verify");
    }
  }
  if (stats_option->count() + record_stats->count() + replay_stats->count() > 0) {
    if (stats.empty()) return usage_error("--stats: '' is empty (expected a file path)");
    flags.stats_path = stats;
  }
  if (verbose && quiet) return usage_error("--quiet and --verbose: give one of them");
  flags.verbose = verbose;
  flags.verify = verify;
  flags.quiet = quiet;
  flags.no_cache = no_cache;
  if (command.empty()) {
    if (flags.record) {
      return usage_error("record: no command given",
                         fmt::format("usage: {}", detail::kRecordUsage));
    }
    if (flags.replay_trace) {
      return usage_error("replay: no command given",
                         fmt::format("usage: {}", detail::kReplayUsage));
    }
    return usage_error("run: no command given", fmt::format("usage: {}", detail::kRunUsage));
  }
  flags.command = std::move(command);
  result.action = Action::run;
  result.exit_code = 0;
  return result;
}

std::string version_text() {
  return fmt::format("umswap {}\n", UMSWAP_CLI_VERSION);
}

}  // namespace umswap::cli
