#include "umswap/cli/command_line.h"

#include "umswap/cli/detail/run_flag_table.h"
#include "umswap/cli/detail/trace_command_usage.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>

#include <algorithm>

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

}  // namespace

CommandLine parse_command_line(std::span<const std::string> args) {
  // The command is everything after the first `--`, untouched: CLI11 never sees it.
  const auto separator = std::find(args.begin(), args.end(), std::string("--"));
  const std::span<const std::string> ours(args.begin(), separator);
  std::vector<std::string> command;
  if (separator != args.end()) command.assign(separator + 1, args.end());

  // A value flag at the very end would otherwise get CLI11's "1 required TEXT missing".
  if (!ours.empty()) {
    for (const auto& flag : detail::kRunFlags) {
      if (!flag.value_name.empty() && ours.back() == flag.name) {
        return usage_error(fmt::format("{} needs a value ({})", flag.name, flag.value_name),
                           fmt::format("usage: {}", detail::kRunUsage));
      }
    }
  }

  CLI::App app{"", "umswap"};
  app.set_help_flag();
  app.allow_extras();
  bool want_help = false;
  bool want_version = false;
  app.add_flag("-h,--help", want_help);
  app.add_flag("--version", want_version);
  CLI::App* run = app.add_subcommand("run");
  run->set_help_flag();
  run->allow_extras();
  run->add_flag("-h,--help", want_help);
  std::string budget, limit, mode, stats;
  bool verbose = false;
  auto* budget_option = run->add_option("--budget", budget);
  auto* limit_option = run->add_option("--limit", limit);
  auto* mode_option = run->add_option("--mode", mode);
  auto* stats_option = run->add_option("--stats", stats);
  for (auto* option : {budget_option, limit_option, mode_option, stats_option}) {
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // the last one given wins
  }
  run->add_flag("--verbose", verbose);

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
  auto* trace_output_option = record->add_option("-o,--output", trace_output);
  auto* iterations_option = record->add_option("--iterations", iterations);
  auto* marker_option = record->add_option("--marker", marker);
  for (auto* option : {record_budget, record_limit, record_mode, record_stats, trace_output_option,
                       iterations_option, marker_option}) {
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  record->add_flag("--verbose", verbose);

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

  if (want_help) return help(0);
  if (want_version) {
    CommandLine result;
    result.action = Action::version;
    return result;
  }
  for (const std::vector<std::string>& extras :
       {app.remaining(), run->remaining(), record->remaining(), report->remaining(),
        timeline->remaining()}) {
    if (extras.empty()) continue;
    const std::string& first = extras.front();
    if (!first.empty() && first[0] == '-') {
      return usage_error(fmt::format("unknown option '{}'", first),
                         "run 'umswap --help' for usage");
    }
    if (report->parsed() || timeline->parsed()) {
      return usage_error(fmt::format("unexpected argument '{}'", first),
                         fmt::format("usage: {}", report->parsed() ? detail::kReportUsage
                                                                   : detail::kTimelineUsage));
    }
    if (!run->parsed() && !record->parsed()) {
      return usage_error(
          fmt::format("unknown command '{}' (commands: run, record, report, timeline)", first),
          "run 'umswap --help' for usage");
    }
    return usage_error(
        fmt::format("unexpected argument '{}': put the command after `--`", first),
        fmt::format("usage: {}", record->parsed() ? detail::kRecordUsage : detail::kRunUsage));
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
    }
    result.action = is_report ? Action::report : Action::timeline;
    result.exit_code = 0;
    return result;
  }
  if (!run->parsed() && !record->parsed()) return help(kUsageErrorExitCode);

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
  if (budget_option->count() + record_budget->count() > 0) {
    if (auto error = parse_size_flag("--budget", budget, &flags.budget)) return usage_error(*error);
  }
  if (limit_option->count() + record_limit->count() > 0) {
    if (auto error = parse_size_flag("--limit", limit, &flags.managed_limit)) {
      return usage_error(*error);
    }
  }
  if (mode_option->count() + record_mode->count() > 0) {
    flags.mode = parse_mode(mode);
    if (!flags.mode) {
      return usage_error(fmt::format("--mode: '{}' is not a mode (expected {} or {})", mode,
                                     to_string(Mode::managed), to_string(Mode::passthrough)));
    }
  }
  if (stats_option->count() + record_stats->count() > 0) {
    if (stats.empty()) return usage_error("--stats: '' is empty (expected a file path)");
    flags.stats_path = stats;
  }
  flags.verbose = verbose;
  if (command.empty()) {
    return flags.record
               ? usage_error("record: no command given",
                             fmt::format("usage: {}", detail::kRecordUsage))
               : usage_error("run: no command given", fmt::format("usage: {}", detail::kRunUsage));
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
