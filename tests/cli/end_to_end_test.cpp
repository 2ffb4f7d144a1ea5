// End-to-end runs of the built `umswap` binary. UMSWAP_LIBRARY points at a trivial shared
// library, so these tests need neither the real libumswap.so nor a GPU.
#include "umswap_process.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include "umswap/core/stats_schema.h"

namespace {

using umswap_test::lines_of;
using umswap_test::Result;
namespace fs = std::filesystem;

class EndToEnd : public umswap_test::UmswapProcess {};

TEST_F(EndToEnd, ExitCodePassesThrough) {
  EXPECT_EQ(umswap({"run", "--", "sh", "-c", "exit 3"}).exit_code, 3);
  EXPECT_EQ(umswap({"run", "--", "true"}).exit_code, 0);
}

TEST_F(EndToEnd, ChildKilledBySignalGives128PlusSignal) {
  EXPECT_EQ(umswap({"run", "--", "sh", "-c", "kill -TERM $$"}).exit_code, 143);
  EXPECT_EQ(umswap({"run", "--", "sh", "-c", "kill -KILL $$"}).exit_code, 137);
}

TEST_F(EndToEnd, CommandNotFoundIs127) {
  const Result r = umswap({"run", "--", "umswap-no-such-command-xyz", "arg"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.err,
            "umswap: error: cannot run 'umswap-no-such-command-xyz': No such file or "
            "directory\n");
}

TEST_F(EndToEnd, NotExecutableIs126) {
  const fs::path script = dir_ / "script.sh";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  ::chmod(script.c_str(), 0644);
  const Result r = umswap({"run", "--", script.string()});
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
}

TEST_F(EndToEnd, ArgumentsArriveIntact) {
  const Result r = umswap(
      {"run", "--", "printf", "%s\\n", "a b", "it's", "\"q\"", "", "  x  ", "--help", "$HOME"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "a b\nit's\n\"q\"\n\n  x  \n--help\n$HOME\n");
}

TEST_F(EndToEnd, ChildSeesPreloadAndAllocConf) {
  const Result r = umswap(
      {"run", "--", "sh", "-c", "printf '%s\\n' \"$LD_PRELOAD\" \"$PYTORCH_CUDA_ALLOC_CONF\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const fs::path first = lines[0].substr(0, lines[0].find(':'));
  EXPECT_TRUE(first.is_absolute()) << lines[0];
  EXPECT_TRUE(fs::is_regular_file(first)) << lines[0];
  EXPECT_TRUE(fs::equivalent(first, UMSWAP_TEST_PRELOAD_LIBRARY)) << lines[0];
  EXPECT_EQ(lines[1], "expandable_segments:False");
  EXPECT_EQ(r.err, "");
}

TEST_F(EndToEnd, PreloadKeptOnceAndUserEntriesAfterIt) {
#if defined(__SANITIZE_ADDRESS__)
  // The user's LD_PRELOAD reaches umswap itself too, and the ASan runtime refuses to start a
  // program in which a preloaded library comes before it.
  GTEST_SKIP() << "not under AddressSanitizer";
#endif
  const std::string lib = fs::absolute(UMSWAP_TEST_PRELOAD_LIBRARY).lexically_normal().string();
  const Result r = umswap({"run", "--", "sh", "-c", "printf '%s\\n' \"$LD_PRELOAD\""},
                          {{"LD_PRELOAD", lib + ":" + lib}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, lib + "\n");
}

TEST_F(EndToEnd, ExpandableSegmentsTrueIsOverriddenWithOneWarning) {
  const Result r =
      umswap({"run", "--mode", "passthrough", "--", "sh", "-c",
              "printf '%s\\n' \"$PYTORCH_CUDA_ALLOC_CONF\""},
             {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:128"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "expandable_segments:False,max_split_size_mb:128\n");
  const std::vector<std::string> err = lines_of(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("umswap: warning: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find("cannot back expandable segments"), std::string::npos) << err[0];
}

TEST_F(EndToEnd, FlagsBecomeUmswapVariables) {
  const Result r = umswap({"run", "--budget", "16G", "--limit", "60G", "--mode", "passthrough",
                           "--stats", "s-%p.json", "--verbose", "--", "sh", "-c",
                           "echo \"$UMSWAP_BUDGET|$UMSWAP_MANAGED_LIMIT|$UMSWAP_MODE|"
                           "$UMSWAP_STATS|$UMSWAP_VERBOSE\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "16G|60G|passthrough|s-%p.json|1\n");
  // --verbose prints the environment it set.
  EXPECT_NE(r.err.find("LD_PRELOAD=/"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"), std::string::npos);
  EXPECT_NE(r.err.find("UMSWAP_MANAGED_LIMIT=60G"), std::string::npos) << r.err;
}

TEST_F(EndToEnd, UsersOwnVariablesPassThroughUntouched) {
  const Result r =
      umswap({"run", "--limit", "1G", "--", "sh", "-c",
              "echo \"$UMSWAP_BUDGET|$UMSWAP_MODE|$UMSWAP_MANAGED_LIMIT|${UMSWAP_VERBOSE-unset}\""},
             {{"UMSWAP_BUDGET", "not-checked"},
              {"UMSWAP_MODE", "passthrough"},
              {"UMSWAP_MANAGED_LIMIT", "9G"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "not-checked|passthrough|1G|unset\n");
}

// A program that writes a stats file as libumswap.so does (to $UMSWAP_STATS, %p its pid) and
// prints the folder it went to.
std::vector<std::string> writes_stats() {
  const std::string stats = fmt::format(
      R"({{"umswap_stats_version": {}, "advisor": {{"mode": "online", "state": "applied", )"
      R"("budget_bytes": 1073741824, "peak_resident_bytes": 1073741824}}, "iterations": [)"
      R"({{"index": 0, "wall_ms": 30.0}}, {{"index": 1, "wall_ms": 20.0}}, )"
      R"({{"index": 2, "wall_ms": 10.0}}]}})",
      umswap::kStatsFormatVersion);
  return {"sh", "-c",
          "[ -n \"$UMSWAP_STATS\" ] || { echo unset; exit 0; }; "
          "f=$(printf '%s' \"$UMSWAP_STATS\" | sed \"s/%p/$$/\"); printf '%s' '" +
              stats + "' > \"$f\"; dirname \"$f\""};
}

TEST_F(EndToEnd, SummaryAtTheEndFromATemporaryStatsFile) {
  std::vector<std::string> args = {"run", "--budget", "1G", "--"};
  for (const std::string& a : writes_stats()) args.push_back(a);
  const Result r = umswap(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  EXPECT_NE(out[0].find("umswap-run-"), std::string::npos) << out[0];
  EXPECT_FALSE(fs::exists(out[0])) << "the temporary folder is removed";
  EXPECT_NE(r.err.find("umswap: 3 iterations, median 10.0 ms over 1 steady iterations\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("peak GPU-resident 1.00 GiB for a budget of 1.00 GiB (100%)"),
            std::string::npos)
      << r.err;
}

TEST_F(EndToEnd, SummaryReadsTheUsersStatsFilesAndKeepsThem) {
  std::vector<std::string> args = {"run", "--stats", (dir_ / "mine-%p.json").string(), "--"};
  for (const std::string& a : writes_stats()) args.push_back(a);
  const Result r = umswap(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("umswap: 3 iterations"), std::string::npos) << r.err;
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    kept += e.path().filename().string().starts_with("mine-");
  }
  EXPECT_EQ(kept, 1);
}

TEST_F(EndToEnd, QuietAndModesWithoutTheAdvisorWriteNoStatsForTheSummary) {
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"run", "--quiet"},
                                             {"run", "-q"},
                                             {"run", "--mode", "managed"},
                                             {"run", "--mode", "passthrough"}}) {
    std::vector<std::string> args = flags;
    args.push_back("--");
    for (const std::string& a : writes_stats()) args.push_back(a);
    const Result r = umswap(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "unset\n") << flags.back();
    EXPECT_EQ(r.err, "") << flags.back();
  }
  // --quiet with --stats: the file is written, nothing is printed.
  std::vector<std::string> args = {"run", "--quiet", "--stats", (dir_ / "q-%p.json").string(),
                                   "--"};
  for (const std::string& a : writes_stats()) args.push_back(a);
  const Result r = umswap(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST_F(EndToEnd, BadValuesExit2NamingTheFlag) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--budget", "12Q"}, {"--limit", "lots"}, {"--mode", "fast"}}) {
    const Result r = umswap({"run", flag, value, "--", "true"});
    EXPECT_EQ(r.exit_code, 2) << flag;
    const std::vector<std::string> err = lines_of(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("umswap: error: " + flag + ": '" + value + "' ", 0), 0u) << err[0];
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(EndToEnd, MissingCommandExits2WithUsage) {
  const Result r = umswap({"run", "--limit", "1G"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no command given"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("usage: umswap run"), std::string::npos) << r.err;
}

TEST_F(EndToEnd, VersionAndHelp) {
  const Result version = umswap({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "umswap " UMSWAP_TEST_VERSION "\n");

  for (const auto& args :
       {std::vector<std::string>{"--help"}, std::vector<std::string>{"run", "--help"}}) {
    const Result help = umswap(args);
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_NE(help.out.find("UMSWAP_MANAGED_LIMIT"), std::string::npos);
    EXPECT_NE(help.out.find("umswap run --limit 60G -- python train.py"), std::string::npos);
  }
  const Result nothing = umswap({});
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_EQ(nothing.out, "");
  EXPECT_NE(nothing.err.find("Usage:"), std::string::npos);
}

TEST_F(EndToEnd, FindsLibraryNextToItsBinary) {
  fs::create_directories(dir_ / "prefix" / "bin");
  fs::create_directories(dir_ / "prefix" / "lib");
  const fs::path binary = dir_ / "prefix" / "bin" / "umswap";
  fs::copy_file(UMSWAP_TEST_CLI_BINARY, binary);
  // Through a symlink: lookup starts from the binary's real path.
  fs::create_symlink(binary, dir_ / "link-to-umswap");

  const Result missing = umswap({"run", "--", "true"}, {{"UMSWAP_LIBRARY", std::nullopt}},
                                (dir_ / "link-to-umswap").string());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find((dir_ / "prefix" / "lib" / "libumswap.so").string()),
            std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find((dir_ / "prefix" / "bin" / "libumswap.so").string()),
            std::string::npos)
      << missing.err;

  fs::copy_file(UMSWAP_TEST_PRELOAD_LIBRARY, dir_ / "prefix" / "lib" / "libumswap.so");
  const Result found =
      umswap({"run", "--", "sh", "-c", "printf '%s\\n' \"$LD_PRELOAD\""},
             {{"UMSWAP_LIBRARY", std::nullopt}}, (dir_ / "link-to-umswap").string());
  EXPECT_EQ(found.exit_code, 0) << found.err;
  EXPECT_EQ(found.out, (dir_ / "prefix" / "lib" / "libumswap.so").string() + "\n");
}

TEST_F(EndToEnd, SigtermIsForwardedToTheCommand) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = start({"run", "--", "sh", "-c", "echo ready; exec sleep 5"});
  ASSERT_TRUE(wait_for_output("ready"));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(finish(pid).exit_code, 143);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(EndToEnd, ExitCodeSurvivesAnIgnoredSigchld) {
  // A SIG_IGN for SIGCHLD is inherited through exec; umswap must still get the status.
  const Result r = umswap({"run", "--", "sh", "-c", "exit 6"}, {}, UMSWAP_TEST_CLI_BINARY,
                          /*ignore_sigchld=*/true);
  EXPECT_EQ(r.exit_code, 6) << r.err;
}

TEST_F(EndToEnd, SigintIsLeftToTheCommand) {
  // Only umswap gets the SIGINT here; it must keep waiting and return the command's code.
  const pid_t pid = start({"run", "--", "sh", "-c", "echo ready; sleep 0.3; exit 4"});
  ASSERT_TRUE(wait_for_output("ready"));
  ::kill(pid, SIGINT);
  EXPECT_EQ(finish(pid).exit_code, 4);
}

}  // namespace
