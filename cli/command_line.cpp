#include "umswap/cli/command_line.h"

#include "umswap/cli/detail/run_flag_table.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

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
  app.require_subcommand(0, 1);

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
  for (const std::vector<std::string>& extras : {app.remaining(), run->remaining()}) {
    if (extras.empty()) continue;
    const std::string& first = extras.front();
    if (!first.empty() && first[0] == '-') {
      return usage_error(fmt::format("unknown option '{}'", first),
                         "run 'umswap --help' for usage");
    }
    if (!run->parsed()) {
      return usage_error(fmt::format("unknown command '{}' (commands: run)", first),
                         "run 'umswap --help' for usage");
    }
    return usage_error(fmt::format("unexpected argument '{}': put the command after `--`", first),
                       fmt::format("usage: {}", detail::kRunUsage));
  }
  if (!run->parsed()) return help(kUsageErrorExitCode);

  CommandLine result;
  RunFlags& flags = result.run_flags;
  if (budget_option->count() > 0) {
    if (auto error = parse_size_flag("--budget", budget, &flags.budget)) return usage_error(*error);
  }
  if (limit_option->count() > 0) {
    if (auto error = parse_size_flag("--limit", limit, &flags.managed_limit)) {
      return usage_error(*error);
    }
  }
  if (mode_option->count() > 0) {
    flags.mode = parse_mode(mode);
    if (!flags.mode) {
      return usage_error(fmt::format("--mode: '{}' is not a mode (expected {} or {})", mode,
                                     to_string(Mode::managed), to_string(Mode::passthrough)));
    }
  }
  if (stats_option->count() > 0) {
    if (stats.empty()) return usage_error("--stats: '' is empty (expected a file path)");
    flags.stats_path = stats;
  }
  flags.verbose = verbose;
  if (command.empty()) {
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
