#include "umswap/cli/command_line.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace umswap::cli {
namespace {

using Action = CommandLine::Action;

CommandLine parse(std::vector<std::string> args) {
  return parse_command_line(args);
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(CommandLine, RunWithAllFlags) {
  const CommandLine cl = parse({"run", "--budget", "16G", "--limit=60G", "--mode", "passthrough",
                                "--stats", "s.json", "--verbose", "--", "python", "train.py"});
  ASSERT_EQ(cl.action, Action::run) << cl.message;
  EXPECT_EQ(cl.run_flags.budget, parse_size("16G"));
  EXPECT_EQ(cl.run_flags.managed_limit, parse_size("60G"));
  EXPECT_EQ(cl.run_flags.mode, Mode::passthrough);
  EXPECT_EQ(cl.run_flags.stats_path, "s.json");
  EXPECT_TRUE(cl.run_flags.verbose);
  EXPECT_EQ(cl.run_flags.command, (std::vector<std::string>{"python", "train.py"}));
}

TEST(CommandLine, VerifyOnRunAndReplayNotRecord) {
  EXPECT_TRUE(parse({"run", "--verify", "--", "true"}).run_flags.verify);
  EXPECT_FALSE(parse({"run", "--", "true"}).run_flags.verify);
  EXPECT_TRUE(parse({"replay", "t.umtrace", "--verify", "--", "true"}).run_flags.verify);
  const CommandLine record = parse({"record", "-o", "t.umtrace", "--verify", "--", "true"});
  EXPECT_EQ(record.action, Action::error);
  EXPECT_TRUE(contains(record.message, "--verify")) << record.message;
}

TEST(CommandLine, QuietOnRunRecordAndReplayButNotWithVerbose) {
  EXPECT_TRUE(parse({"run", "--quiet", "--", "true"}).run_flags.quiet);
  EXPECT_TRUE(parse({"run", "-q", "--", "true"}).run_flags.quiet);
  EXPECT_FALSE(parse({"run", "--", "true"}).run_flags.quiet);
  EXPECT_TRUE(parse({"record", "-o", "t.umtrace", "-q", "--", "true"}).run_flags.quiet);
  EXPECT_TRUE(parse({"replay", "t.umtrace", "--quiet", "--", "true"}).run_flags.quiet);
  const CommandLine both = parse({"run", "--quiet", "--verbose", "--", "true"});
  EXPECT_EQ(both.action, Action::error);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_TRUE(contains(both.message, "--quiet and --verbose")) << both.message;
}

TEST(CommandLine, FlagsNotGivenStayUnset) {
  const CommandLine cl = parse({"run", "--", "true"});
  ASSERT_EQ(cl.action, Action::run) << cl.message;
  EXPECT_FALSE(cl.run_flags.budget);
  EXPECT_FALSE(cl.run_flags.managed_limit);
  EXPECT_FALSE(cl.run_flags.mode);
  EXPECT_FALSE(cl.run_flags.engine);
  EXPECT_FALSE(cl.run_flags.stats_path);
  EXPECT_FALSE(cl.run_flags.verbose);
}

TEST(CommandLine, EngineOnRunRecordAndReplay) {
  EXPECT_FALSE(parse({"run", "--", "true"}).run_flags.engine);
  EXPECT_EQ(parse({"run", "--engine", "vmm", "--", "true"}).run_flags.engine, Engine::vmm);
  EXPECT_EQ(parse({"run", "--engine=um", "--", "true"}).run_flags.engine, Engine::um);
  EXPECT_EQ(parse({"run", "--engine", "um", "--engine", "VMM", "--", "true"}).run_flags.engine,
            Engine::vmm);  // the last one wins, any case
  EXPECT_EQ(parse({"record", "-o", "t", "--engine", "vmm", "--", "true"}).run_flags.engine,
            Engine::vmm);
  EXPECT_EQ(parse({"replay", "t.umtrace", "--engine", "um", "--", "true"}).run_flags.engine,
            Engine::um);
  // Every mode the CLI takes runs under vmm (online as placement only).
  for (const char* mode : {"online", "managed", "passthrough"}) {
    const CommandLine cl = parse({"run", "--engine", "vmm", "--mode", mode, "--", "true"});
    ASSERT_EQ(cl.action, Action::run) << mode << ": " << cl.message;
    EXPECT_EQ(cl.run_flags.engine, Engine::vmm);
  }
}

TEST(CommandLine, EngineErrorsNameTheProblem) {
  const CommandLine bad = parse({"run", "--engine", "hbm", "--", "true"});
  EXPECT_EQ(bad.action, Action::error);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.message, "umswap: error: --engine: 'hbm' is not an engine (expected um or vmm)\n");
  const CommandLine no_value = parse({"run", "--engine"});
  EXPECT_EQ(no_value.exit_code, 2);
  EXPECT_TRUE(contains(no_value.message, "--engine needs a value (ENGINE)")) << no_value.message;
  // Engine vmm runs no advisor yet: nothing to replay, nothing to verify.
  const CommandLine replay = parse({"replay", "t.umtrace", "--engine", "vmm", "--", "true"});
  EXPECT_EQ(replay.action, Action::error);
  EXPECT_EQ(replay.exit_code, 2);
  EXPECT_TRUE(contains(replay.message, "--engine vmm cannot replay")) << replay.message;
  const CommandLine verify = parse({"run", "--engine", "vmm", "--verify", "--", "true"});
  EXPECT_EQ(verify.action, Action::error);
  EXPECT_EQ(verify.exit_code, 2);
  EXPECT_TRUE(contains(verify.message, "--verify")) << verify.message;
  EXPECT_TRUE(contains(verify.message, "engine vmm")) << verify.message;
  EXPECT_EQ(parse({"run", "--engine", "um", "--verify", "--", "true"}).action, Action::run);
}

TEST(CommandLine, CommandAfterSeparatorIsVerbatim) {
  const CommandLine cl =
      parse({"run", "--", "python", "--help", "--budget", "x", "--", "a b", "'q'", ""});
  ASSERT_EQ(cl.action, Action::run) << cl.message;
  EXPECT_EQ(cl.run_flags.command, (std::vector<std::string>{"python", "--help", "--budget", "x",
                                                            "--", "a b", "'q'", ""}));
}

TEST(CommandLine, BadBudgetNamesFlagValueAndExpectation) {
  const CommandLine cl = parse({"run", "--budget", "12Q", "--", "true"});
  EXPECT_EQ(cl.action, Action::error);
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_EQ(cl.message,
            "umswap: error: --budget: '12Q' has an unknown unit (use K, M, G, T, P or %)\n");
  const CommandLine words = parse({"run", "--budget", "lots", "--", "true"});
  EXPECT_EQ(words.message,
            "umswap: error: --budget: 'lots' is not a size (examples: 16G, 512M, 75%)\n");
}

TEST(CommandLine, BadLimitNamesFlag) {
  const CommandLine cl = parse({"run", "--limit", "-5G", "--", "true"});
  EXPECT_EQ(cl.action, Action::error);
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_TRUE(contains(cl.message, "--limit")) << cl.message;
  EXPECT_TRUE(contains(cl.message, "'-5G'")) << cl.message;
}

TEST(CommandLine, BadModeNamesFlagAndChoices) {
  const CommandLine cl = parse({"run", "--mode", "fast", "--", "true"});
  EXPECT_EQ(cl.action, Action::error);
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_EQ(
      cl.message,
      "umswap: error: --mode: 'fast' is not a mode (expected online, managed or passthrough)\n");
}

TEST(CommandLine, FlagWithoutValue) {
  const CommandLine cl = parse({"run", "--budget"});
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_TRUE(contains(cl.message, "--budget needs a value")) << cl.message;
  EXPECT_EQ(parse({"run", "--stats", "", "--", "true"}).exit_code, 2);
}

TEST(CommandLine, MissingCommand) {
  for (const auto& args : {std::vector<std::string>{"run"}, std::vector<std::string>{"run", "--"},
                           std::vector<std::string>{"run", "--limit", "1G", "--"}}) {
    const CommandLine cl = parse(args);
    EXPECT_EQ(cl.action, Action::error);
    EXPECT_EQ(cl.exit_code, 2);
    EXPECT_TRUE(contains(cl.message, "no command given")) << cl.message;
    EXPECT_TRUE(contains(cl.message, "usage: umswap run")) << cl.message;
  }
}

TEST(CommandLine, CommandWithoutSeparatorIsRefused) {
  const CommandLine cl = parse({"run", "python", "train.py"});
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_TRUE(contains(cl.message, "'python'")) << cl.message;
  EXPECT_TRUE(contains(cl.message, "--")) << cl.message;
}

TEST(CommandLine, UnknownOptionAndCommand) {
  const CommandLine option = parse({"run", "--bduget", "4G", "--", "true"});
  EXPECT_EQ(option.exit_code, 2);
  EXPECT_TRUE(contains(option.message, "unknown option '--bduget'")) << option.message;
  const CommandLine command = parse({"recrod", "--", "true"});
  EXPECT_EQ(command.exit_code, 2);
  EXPECT_TRUE(contains(command.message, "unknown command 'recrod'")) << command.message;
}

TEST(CommandLine, HelpVersionAndNothing) {
  EXPECT_EQ(parse({"--help"}).action, Action::help);
  EXPECT_EQ(parse({"--help"}).exit_code, 0);
  EXPECT_EQ(parse({"run", "--help"}).action, Action::help);
  EXPECT_EQ(parse({"run", "-h", "--", "true"}).action, Action::help);
  EXPECT_EQ(parse({"--version"}).action, Action::version);
  const CommandLine nothing = parse({});
  EXPECT_EQ(nothing.action, Action::help);
  EXPECT_EQ(nothing.exit_code, 2);
}

TEST(CommandLine, LastFlagWins) {
  const CommandLine cl = parse({"run", "--budget", "1G", "--budget", "2G", "--", "true"});
  ASSERT_EQ(cl.action, Action::run) << cl.message;
  EXPECT_EQ(cl.run_flags.budget, parse_size("2G"));
}

TEST(HelpText, ListsFlagsModesVariablesExitCodesExamples) {
  const std::string help = help_text(true);
  for (const char* part :
       {"--budget SIZE", "--limit SIZE", "--mode MODE", "--stats FILE", "--verbose", "passthrough",
        "UMSWAP_MANAGED_LIMIT", "UMSWAP_CALLSITE_DEPTH", "UMSWAP_LIBRARY", "expandable_segments",
        "127", "128+N", "umswap run --limit 60G -- python train.py"}) {
    EXPECT_TRUE(contains(help, part)) << part;
  }
  for (const OptionInfo& option : option_table()) {
    EXPECT_TRUE(contains(help, option.name)) << option.name;
  }
  size_t start = 0;
  for (size_t end = help.find('\n'); end != std::string::npos; end = help.find('\n', start)) {
    EXPECT_LE(end - start, 100u) << help.substr(start, end - start);
    start = end + 1;
  }
}

// `umswap --help` lists the variables a user sets; the experiments and diagnostics only under
// `umswap --help-all`, and --help says how many it left out and where they are.
TEST(HelpText, AdvancedVariablesOnlyUnderHelpAll) {
  const std::string help = help_text(), all = help_text(true);
  size_t advanced = 0;
  for (const OptionInfo& option : option_table()) {
    const std::string name = std::string(option.name) + " ";
    EXPECT_EQ(contains(help, name), !option.advanced) << option.name;
    EXPECT_TRUE(contains(all, name)) << option.name;
    if (option.advanced) ++advanced;
  }
  EXPECT_GT(advanced, 0u);
  EXPECT_TRUE(contains(help, std::to_string(advanced) + " more")) << help;
  EXPECT_TRUE(contains(help, "umswap --help-all")) << help;
  EXPECT_TRUE(contains(all, "Experiments and diagnostics")) << all;
  const CommandLine cl = parse({"--help-all"});
  EXPECT_EQ(cl.action, Action::help);
  EXPECT_TRUE(cl.help_all);
  EXPECT_EQ(cl.exit_code, 0);
  EXPECT_FALSE(parse({"--help"}).help_all);
}

TEST(VersionText, NamesTheVersion) {
  EXPECT_EQ(version_text(), "umswap " UMSWAP_TEST_VERSION "\n");
}

TEST(CommandLine, RecordTakesRunFlagsAndItsOwn) {
  const CommandLine cl = parse({"record", "-o", "run.umtrace", "--iterations", "5", "--marker",
                                "step", "--limit", "60G", "--", "python", "train.py"});
  ASSERT_EQ(cl.action, Action::run) << cl.message;
  ASSERT_TRUE(cl.run_flags.record.has_value());
  EXPECT_EQ(cl.run_flags.record->output, "run.umtrace");
  EXPECT_EQ(cl.run_flags.record->iterations, 5u);
  EXPECT_EQ(cl.run_flags.record->marker, "step");
  ASSERT_TRUE(cl.run_flags.managed_limit.has_value());
  EXPECT_EQ(cl.run_flags.managed_limit->bytes, 60ull << 30);
  EXPECT_EQ(cl.run_flags.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_FALSE(parse({"run", "--", "true"}).run_flags.record.has_value());
}

TEST(CommandLine, RecordErrorsNameTheProblem) {
  const CommandLine no_output = parse({"record", "--", "true"});
  EXPECT_EQ(no_output.exit_code, 2);
  EXPECT_TRUE(contains(no_output.message, "no trace file given (-o FILE)")) << no_output.message;
  const CommandLine bad_n = parse({"record", "-o", "t", "--iterations", "five", "--", "true"});
  EXPECT_EQ(bad_n.exit_code, 2);
  EXPECT_TRUE(contains(bad_n.message, "--iterations: 'five' is not a whole number"))
      << bad_n.message;
  const CommandLine no_command = parse({"record", "-o", "t", "--"});
  EXPECT_EQ(no_command.exit_code, 2);
  EXPECT_TRUE(contains(no_command.message, "record: no command given")) << no_command.message;
}

TEST(CommandLine, NoCacheOnRunOnly) {
  EXPECT_TRUE(parse({"run", "--no-cache", "--", "true"}).run_flags.no_cache);
  EXPECT_FALSE(parse({"run", "--", "true"}).run_flags.no_cache);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"record", "-o", "t.umtrace", "--no-cache", "--", "true"},
        {"replay", "t.umtrace", "--no-cache", "--", "true"}}) {
    const CommandLine cl = parse(args);
    EXPECT_EQ(cl.action, Action::error) << args[0];
    EXPECT_TRUE(contains(cl.message, "unknown option '--no-cache'")) << cl.message;
  }
}

TEST(CommandLine, Plans) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"plans"}, {"plans", "list"}}) {
    const CommandLine cl = parse(args);
    ASSERT_EQ(cl.action, Action::plans) << cl.message;
    EXPECT_FALSE(cl.plans_flags.clear);
  }
  CommandLine cl = parse({"plans", "clear"});
  ASSERT_EQ(cl.action, Action::plans) << cl.message;
  EXPECT_TRUE(cl.plans_flags.clear);
  EXPECT_TRUE(cl.plans_flags.keys.empty());
  cl = parse({"plans", "clear", "6b8e", "0123456789abcdef"});
  ASSERT_EQ(cl.action, Action::plans) << cl.message;
  EXPECT_EQ(cl.plans_flags.keys, (std::vector<std::string>{"6b8e", "0123456789abcdef"}));
}

TEST(CommandLine, PlansMistakes) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"plans", "show"}, "'show' is not an action (expected list or clear)"},
      {{"plans", "list", "x"}, "plans list: unexpected argument 'x'"},
      {{"plans", "clear", "6B8E"}, "'6B8E' is not a key"},
      {{"plans", "clear", "0123456789abcdef0"}, "is not a key"},
      {{"plans", "--all"}, "unknown option '--all'"},
      {{"plans", "--", "x"}, "plans: unexpected `--`"},
  };
  for (const auto& [args, message] : cases) {
    const CommandLine cl = parse(args);
    EXPECT_EQ(cl.action, Action::error) << args[1];
    EXPECT_EQ(cl.exit_code, 2);
    EXPECT_TRUE(contains(cl.message, message)) << cl.message;
  }
}

}  // namespace
}  // namespace umswap::cli
