// `umswap run` with the plan cache, and `umswap plans`, end to end: the program is a shell that
// plays libumswap.so's part (it writes a recorded trace where UMSWAP_TRACE says) and prints what
// umswap set up for it. Each test has its own cache (XDG_CACHE_HOME in its temporary folder).
#include "umswap_process.h"

#include <fmt/format.h>

namespace {

using umswap_test::lines_of;
using umswap_test::Result;
namespace fs = std::filesystem;

const fs::path kTrace =
    fs::path(UMSWAP_TEST_SOURCE_DIR) / "tests/tracer/data/cupy_chain_h200.umtrace";

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

class PlanCacheRun : public umswap_test::UmswapProcess {
 protected:
  fs::path plans() const { return dir_ / "cache/umswap/plans"; }
  size_t entries() const {
    size_t n = 0;
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(plans(), ec)) {
      n += f.path().extension() == ".umtrace";
    }
    return n;
  }
  // A program that prints the mode, the replayed trace and the iterations to record, then writes
  // `traces` copies of the trace (as that many processes would: %p made 1, 2, ...).
  static std::vector<std::string> program(int traces = 1) {
    return {"sh", "-c",
            fmt::format("echo \"mode=$UMSWAP_MODE replay=$UMSWAP_REPLAY "
                        "iterations=$UMSWAP_TRACE_ITERATIONS\"; "
                        "[ -n \"$UMSWAP_TRACE\" ] || exit 0; "
                        "for i in $(seq 1 {}); do cp '{}' \"$(printf '%s' \"$UMSWAP_TRACE\" | "
                        "sed \"s/%p/$i/\")\"; done",
                        traces, kTrace.string())};
  }
  Result run(std::vector<std::string> flags, int traces = 1) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("--");
    for (const std::string& a : program(traces)) args.push_back(a);
    return umswap(args);
  }
};

TEST_F(PlanCacheRun, TheSecondRunReplaysTheFirstRunsTrace) {
  Result r = run({"--budget", "1G"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mode= replay= iterations=16\n");
  EXPECT_TRUE(contains(r.err, "plan cached for the next run of this command")) << r.err;
  EXPECT_EQ(entries(), 1u);

  r = run({"--budget", "2G"});  // the budget is not part of the key
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  EXPECT_TRUE(out[0].starts_with("mode=replay replay=" + plans().string() + "/")) << out[0];
  EXPECT_TRUE(out[0].ends_with(".umtrace iterations=16")) << out[0];
  EXPECT_TRUE(contains(r.err, "replaying the plan cached by an earlier run (key ")) << r.err;
  EXPECT_FALSE(contains(r.err, "plan cached for the next run")) << r.err;
  EXPECT_EQ(entries(), 1u);

  r = umswap({"plans", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "1 cached plan in " + plans().string())) << r.out;
  EXPECT_TRUE(contains(r.out, "     2 ")) << r.out;  // two runs used it
  EXPECT_TRUE(contains(r.out, "sh -c ")) << r.out;

  r = umswap({"plans", "clear"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "umswap: removed 1 cached plan from " + plans().string() + "\n");
  EXPECT_EQ(entries(), 0u);
  r = run({"--budget", "1G"});
  EXPECT_EQ(r.out, "mode= replay= iterations=16\n");
}

TEST_F(PlanCacheRun, AnEditedScriptLearnsAgain) {
  cwd_ = dir_;
  const std::string body = program()[2];
  std::ofstream(dir_ / "prog.sh") << body << "\n";
  const std::vector<std::string> args = {"run", "--budget", "1G", "--", "sh", "prog.sh"};
  ASSERT_EQ(umswap(args).exit_code, 0);
  Result r = umswap(args);
  EXPECT_TRUE(r.out.starts_with("mode=replay ")) << r.out;
  std::ofstream(dir_ / "prog.sh", std::ios::app) << "# edited\n";
  r = umswap(args);
  EXPECT_TRUE(r.out.starts_with("mode= replay= ")) << r.out;
  EXPECT_TRUE(contains(r.err, "plan cached for the next run")) << r.err;
  EXPECT_EQ(entries(), 2u);  // the old script's entry stays until it is the least recently used
}

TEST_F(PlanCacheRun, QuietSaysNothingAndStillCaches) {
  Result r = run({"--budget", "1G", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(entries(), 1u);
  r = run({"--budget", "1G", "--quiet"});
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(r.out.starts_with("mode=replay ")) << r.out;
}

TEST_F(PlanCacheRun, NotUsedWithoutABudgetOrWithNoCache) {
  for (const std::vector<std::string>& flags : {std::vector<std::string>{},
                                                {"--budget", "1G", "--no-cache"},
                                                {"--budget", "1G", "--mode", "managed"}}) {
    const Result r = run(flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out,
              "mode=" + std::string(flags.size() == 4 ? "managed" : "") + " replay= iterations=\n");
    EXPECT_FALSE(fs::exists(plans()));
  }
  const Result r = run({"--budget", "1G", "--no-cache", "--verbose"});
  EXPECT_TRUE(contains(r.err, "plan cache: not used (--no-cache was given)")) << r.err;
}

TEST_F(PlanCacheRun, SeveralProcessesTracesAreNotCached) {
  const Result r = run({"--budget", "1G", "--verbose"}, 2);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "2 processes recorded one each")) << r.err;
  EXPECT_EQ(entries(), 0u);
}

TEST_F(PlanCacheRun, AHalfWrittenTraceIsNotATrace) {
  // As a process killed in write_trace_file() leaves it, beside one good trace.
  const Result r = umswap({"run", "--budget", "1G", "--", "sh", "-c",
                           "t=$(printf '%s' \"$UMSWAP_TRACE\" | sed \"s/%p/7/\"); cp '" +
                               kTrace.string() + "' \"$t\"; echo x > \"$t.tmp.8\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "plan cached for the next run")) << r.err;
  EXPECT_EQ(entries(), 1u);
}

TEST_F(PlanCacheRun, AProgramThatRecordsNothingLeavesNoEntry) {
  const Result r = umswap({"run", "--budget", "1G", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(entries(), 0u);
}

// A run whose stats say its advisor never put a plan in force (online learning found no
// iteration) leaves no entry: its trace is not one to replay. One whose advisor did, is cached.
TEST_F(PlanCacheRun, ARunThatMadeNoPlanIsNotCached) {
  auto with_stats = [&](const std::string& first_plan, bool verbose) {
    const std::string stats = fmt::format(
        R"({{"umswap_stats_version": 1, "advisor": {{"mode": "online", "state": "learning", )"
        R"("first_plan_applied_from_launch": {}}}}})",
        first_plan);
    std::vector<std::string> args = {"run", "--budget", "1G"};
    if (verbose) args.push_back("--verbose");
    args.insert(args.end(),
                {"--", "sh", "-c",
                 fmt::format("cp '{}' \"$(printf '%s' \"$UMSWAP_TRACE\" | sed 's/%p/1/')\"; "
                             "printf '%s' '{}' > \"$(printf '%s' \"$UMSWAP_STATS\" | "
                             "sed 's/%p/1/')\"",
                             kTrace.string(), stats)});
    return umswap(args);
  };
  Result r = with_stats("null", false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "no plan was made")) << r.err;  // the summary read the stats
  EXPECT_FALSE(contains(r.err, "plan cached for the next run")) << r.err;
  EXPECT_EQ(entries(), 0u);
  r = with_stats("null", true);
  EXPECT_TRUE(contains(r.err, "plan cache: this run's trace not cached (the run made no plan)"))
      << r.err;
  EXPECT_EQ(entries(), 0u);
  r = with_stats("4000", false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "plan cached for the next run")) << r.err;
  EXPECT_EQ(entries(), 1u);
}

TEST_F(PlanCacheRun, ADamagedEntryIsRemovedAndTheRunLearns) {
  ASSERT_EQ(run({"--budget", "1G"}).exit_code, 0);
  ASSERT_EQ(entries(), 1u);
  for (const auto& f : fs::directory_iterator(plans())) {
    if (f.path().extension() == ".umtrace") std::ofstream(f.path()) << "damaged";
  }
  const Result r = run({"--budget", "1G"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mode= replay= iterations=16\n");  // learned, not replayed
  EXPECT_TRUE(contains(r.err,
                       "umswap: warning: plan cache: the plan cached for this command was "
                       "removed"))
      << r.err;
  EXPECT_EQ(entries(), 1u);  // and cached again
}

TEST_F(PlanCacheRun, ClearByKeyAndBadKeys) {
  ASSERT_EQ(run({"--budget", "1G"}).exit_code, 0);
  Result r = umswap({"plans", "clear", "zz"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "'zz' is not a key")) << r.err;
  std::string key;
  for (const auto& f : fs::directory_iterator(plans())) key = f.path().stem().string();
  const std::string other = key[0] == '0' ? "1" : "0";
  r = umswap({"plans", "clear", other});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "no cached plan's key starts with '" + other + "'")) << r.err;
  EXPECT_EQ(entries(), 1u);
  r = umswap({"plans", "clear", key.substr(0, 4)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(entries(), 0u);
}

TEST_F(PlanCacheRun, ListWithoutACacheFolder) {
  Result r = umswap({"plans"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "no cached plans in " + plans().string())) << r.out;
  r = umswap({"plans", "list"}, {{"XDG_CACHE_HOME", std::nullopt}, {"HOME", std::nullopt}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "no cache folder")) << r.err;
}

}  // namespace
