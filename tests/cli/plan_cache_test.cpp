// The plan cache (cli/include/umswap/cli/plan_cache.h): where it lives, the key, when a run uses
// it, and its entries on disk (a temporary folder, with a real trace recorded on an H200).
#include "umswap/cli/plan_cache.h"
#include "umswap/cli/cli_main.h"
#include "umswap/core/trace_file.h"
#include "umswap/core/trace_iterations.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace umswap::cli {
namespace {

namespace fs = std::filesystem;

// A recorded trace with a detected period (48 launches) and complete iterations of it.
const fs::path kTrace =
    fs::path(UMSWAP_TEST_SOURCE_DIR) / "tests/tracer/data/cupy_chain_h200.umtrace";

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

PlanIdentity identity() {
  return {{"python3", "train.py", "--steps", "100"}, "/home/u/proj", "", "0.1.0", ""};
}

TEST(PlanCacheDir, XdgFirstThenHome) {
  EXPECT_EQ(plan_cache_dir("/x/cache", "/home/u"), fs::path("/x/cache/umswap/plans"));
  EXPECT_EQ(plan_cache_dir(nullptr, "/home/u"), fs::path("/home/u/.cache/umswap/plans"));
  // The XDG specification ignores a relative XDG_CACHE_HOME.
  EXPECT_EQ(plan_cache_dir("rel/cache", "/home/u"), fs::path("/home/u/.cache/umswap/plans"));
  EXPECT_EQ(plan_cache_dir(nullptr, nullptr), std::nullopt);
  EXPECT_EQ(plan_cache_dir("", "relative"), std::nullopt);
}

TEST(PlanCacheKey, StableAndSixteenHexDigits) {
  const std::string key = plan_cache_key(identity());
  EXPECT_EQ(key.size(), 16u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(plan_cache_key(identity()), key);
  // The same on every machine and build: a change here orphans every user's cached plans.
  EXPECT_EQ(key, "19705f27add5743b");
}

TEST(PlanCacheKey, EveryFieldCounts) {
  const std::string base = plan_cache_key(identity());
  std::set<std::string> keys = {base};
  PlanIdentity i = identity();
  i.command.back() = "200";
  keys.insert(plan_cache_key(i));
  i = identity();
  i.command = {"python3", "train.py", "--steps 100"};  // one argument, not two
  keys.insert(plan_cache_key(i));
  i = identity();
  i.cwd = "/home/u/other";
  keys.insert(plan_cache_key(i));
  i = identity();
  i.alloc_conf = "backend:cudaMallocAsync";
  keys.insert(plan_cache_key(i));
  i = identity();
  i.version = "0.2.0";
  keys.insert(plan_cache_key(i));
  i = identity();
  i.files = "0123456789abcdef";
  keys.insert(plan_cache_key(i));
  EXPECT_EQ(keys.size(), 7u);
}

TEST(PlanCacheKey, TheSmallFilesTheCommandNames) {
  std::string pattern = (fs::temp_directory_path() / "umswap_identity_files.XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const fs::path dir = pattern;
  std::ofstream(dir / "train.py") << "print('train')\n";
  std::ofstream(dir / "big.bin") << std::string(kPlanCacheFileBytes + 1, 'x');
  fs::create_directory(dir / "data");
  const std::vector<std::string> command = {"python3", "train.py", "--data", "data", "big.bin"};
  const std::string before = identity_files(command, dir);
  EXPECT_EQ(before.size(), 16u);
  // The same contents through an absolute path name another argument: another hash.
  EXPECT_NE(identity_files(std::vector<std::string>{"python3", (dir / "train.py").string()}, dir),
            before);
  EXPECT_EQ(identity_files(command, dir), before);
  std::ofstream(dir / "train.py") << "print('edited')\n";
  EXPECT_NE(identity_files(command, dir), before);
  // No file, a folder, a file too large: nothing to hash.
  EXPECT_EQ(identity_files(std::vector<std::string>{"python3", "data", "big.bin", "nope.py"}, dir),
            "");
  fs::remove_all(dir);
}

TEST(PlanCacheKey, AllocConfFromEitherVariable) {
  EXPECT_EQ(identity_alloc_conf("a:1", "b:2"), "a:1");
  EXPECT_EQ(identity_alloc_conf(nullptr, "b:2"), "b:2");
  EXPECT_EQ(identity_alloc_conf(nullptr, nullptr), "");
}

// When `umswap run` uses the cache.
class SkipReason : public ::testing::Test {
 protected:
  std::optional<std::string> reason(const RunFlags& flags) {
    return plan_cache_skip_reason(flags, [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    });
  }
  RunFlags budgeted() {
    RunFlags f;
    f.budget = parse_size("8G");
    f.command = {"python3", "train.py"};
    return f;
  }
  std::map<std::string, std::string> env_;
};

TEST_F(SkipReason, AnOnlineRunWithABudgetUsesIt) {
  EXPECT_EQ(reason(budgeted()), std::nullopt);
  RunFlags f = budgeted();
  f.budget.reset();
  env_["UMSWAP_BUDGET"] = "50%";
  EXPECT_EQ(reason(f), std::nullopt);
  f = budgeted();
  f.mode = Mode::online;
  EXPECT_EQ(reason(f), std::nullopt);
}

TEST_F(SkipReason, WithoutABudgetNothingIsEvicted) {
  RunFlags f = budgeted();
  f.budget.reset();
  EXPECT_TRUE(contains(reason(f).value_or(""), "no budget"));
  f.budget = parse_size("0");
  EXPECT_TRUE(contains(reason(f).value_or(""), "no budget"));
  f.budget.reset();
  env_["UMSWAP_BUDGET"] = "banana";
  EXPECT_TRUE(contains(reason(f).value_or(""), "no budget"));
}

TEST_F(SkipReason, OtherModesEnginesAndCommands) {
  RunFlags f = budgeted();
  f.no_cache = true;
  EXPECT_TRUE(contains(reason(f).value_or(""), "--no-cache"));
  f = budgeted();
  f.mode = Mode::managed;
  EXPECT_TRUE(contains(reason(f).value_or(""), "mode"));
  f = budgeted();
  f.engine = Engine::vmm;
  EXPECT_TRUE(contains(reason(f).value_or(""), "engine"));
  f = budgeted();
  f.verify = true;
  EXPECT_TRUE(contains(reason(f).value_or(""), "--verify"));
  f = budgeted();
  f.record = RecordFlags();
  f.record->output = "t.umtrace";
  EXPECT_TRUE(contains(reason(f).value_or(""), "record"));
  f = budgeted();
  f.replay_trace = "t.umtrace";
  EXPECT_TRUE(contains(reason(f).value_or(""), "replay"));
  f = budgeted();
  f.command = {"torchrun", "--nproc-per-node", "2", "train.py"};
  EXPECT_TRUE(contains(reason(f).value_or(""), "torchrun")) << reason(f).value_or("");
  f.command = {"python3", "-m", "torch.distributed.run", "train.py"};
  EXPECT_TRUE(contains(reason(f).value_or(""), "torchrun"));
}

TEST_F(SkipReason, TheUsersOwnVariablesWin) {
  env_["UMSWAP_MODE"] = "passthrough";
  EXPECT_TRUE(contains(reason(budgeted()).value_or(""), "mode"));
  env_.clear();
  env_["UMSWAP_ENGINE"] = "vmm";
  EXPECT_TRUE(contains(reason(budgeted()).value_or(""), "engine"));
  env_.clear();
  env_["UMSWAP_TRACE"] = "/tmp/mine.umtrace";
  EXPECT_TRUE(contains(reason(budgeted()).value_or(""), "UMSWAP_TRACE"));
  env_.clear();
  env_["UMSWAP_REPLAY"] = "/tmp/mine.umtrace";
  EXPECT_TRUE(contains(reason(budgeted()).value_or(""), "UMSWAP_REPLAY"));
  // An empty variable is unset.
  env_["UMSWAP_REPLAY"] = "";
  EXPECT_EQ(reason(budgeted()), std::nullopt);
}

class PlanCacheFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_plan_cache.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    ASSERT_TRUE(fs::exists(kTrace)) << kTrace;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path root_;
  PlanCache cache() const { return PlanCache(root_ / "plans"); }
};

TEST_F(PlanCacheFiles, StoreThenFind) {
  const PlanCache c = cache();
  std::string problem;
  EXPECT_EQ(c.find("00000000000000aa", &problem), std::nullopt);
  EXPECT_EQ(problem, "");
  std::string error;
  ASSERT_TRUE(
      c.store("00000000000000aa", identity(), kTrace, std::nullopt, "2026-11-30 07:00:00", &error))
      << error;
  const std::optional<PlanCacheEntry> e = c.find("00000000000000aa", &problem);
  ASSERT_TRUE(e) << problem;
  EXPECT_EQ(e->trace, root_ / "plans/00000000000000aa.umtrace");
  EXPECT_EQ(e->identity.command, identity().command);
  EXPECT_EQ(e->identity.cwd, "/home/u/proj");
  EXPECT_EQ(e->recorded, "2026-11-30 07:00:00");
  EXPECT_EQ(e->runs, 1u);
  std::string why;
  const std::optional<trace::Trace> t = read_trace_file(kTrace.string(), &why);
  ASSERT_TRUE(t) << why;
  EXPECT_EQ(e->period, t->detection.period);
  EXPECT_EQ(e->iterations, t->iterations.size());
  EXPECT_EQ(e->bytes, fs::file_size(kTrace));
  // The source trace is copied, not moved; no temporary file is left behind.
  EXPECT_TRUE(fs::exists(kTrace));
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(root_ / "plans")) {
    EXPECT_NE(f.path().filename().string()[0], '.') << f.path();
    ++files;
  }
  EXPECT_EQ(files, 2u);
}

TEST_F(PlanCacheFiles, RunsCountOnAndUsedMoves) {
  const PlanCache c = cache();
  std::string error, problem;
  ASSERT_TRUE(
      c.store("00000000000000aa", identity(), kTrace, std::nullopt, "2026-11-30 07:00:00", &error));
  std::optional<PlanCacheEntry> e = c.find("00000000000000aa", &problem);
  ASSERT_TRUE(e);
  c.mark_used(*e, "2026-11-30 08:00:00");
  e = c.find("00000000000000aa", &problem);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->runs, 2u);
  EXPECT_EQ(e->used, "2026-11-30 08:00:00");
  EXPECT_EQ(e->recorded, "2026-11-30 07:00:00");
  ASSERT_TRUE(c.store("00000000000000aa", identity(), kTrace, e, "2026-11-30 09:00:00", &error));
  e = c.find("00000000000000aa", &problem);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->runs, 3u);
  EXPECT_EQ(e->recorded, "2026-11-30 09:00:00");
}

TEST_F(PlanCacheFiles, AShorterTraceDoesNotReplaceALongerOne) {
  const PlanCache c = cache();
  std::string error, problem;
  ASSERT_TRUE(c.store("00000000000000aa", identity(), kTrace, std::nullopt, "t1", &error));
  std::optional<PlanCacheEntry> e = c.find("00000000000000aa", &problem);
  ASSERT_TRUE(e);
  // A run of the same command that stopped early: its trace holds fewer iterations.
  std::optional<trace::Trace> t = read_trace_file(kTrace.string(), &error);
  ASSERT_TRUE(t) << error;
  const fs::path shorter = root_ / "shorter.umtrace";
  ASSERT_TRUE(write_trace_file(shorter.string(), trace::first_iterations(*t, 3), &error)) << error;
  EXPECT_FALSE(c.store("00000000000000aa", identity(), shorter, e, "t2", &error));
  EXPECT_TRUE(contains(error, "the run stopped early")) << error;
  e = c.find("00000000000000aa", &problem);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->iterations, t->iterations.size());
  EXPECT_EQ(e->recorded, "t1");
  // As long or longer: replaced.
  EXPECT_TRUE(c.store("00000000000000aa", identity(), kTrace, e, "t3", &error)) << error;
}

TEST_F(PlanCacheFiles, ATraceWithoutAnIterationIsNotStored) {
  const PlanCache c = cache();
  const fs::path junk = root_ / "junk.umtrace";
  std::ofstream(junk) << "not a trace";
  std::string error;
  EXPECT_FALSE(c.store("00000000000000aa", identity(), junk, std::nullopt, "t", &error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(c.store("00000000000000aa", identity(), root_ / "missing.umtrace", std::nullopt, "t",
                       &error));
  EXPECT_FALSE(error.empty());
  EXPECT_TRUE(c.list().empty());
}

TEST_F(PlanCacheFiles, ADamagedEntryIsRemovedWithTheReason) {
  const PlanCache c = cache();
  std::string error, problem;
  ASSERT_TRUE(c.store("00000000000000aa", identity(), kTrace, std::nullopt, "t", &error));
  const fs::path trace = root_ / "plans/00000000000000aa.umtrace";
  fs::resize_file(trace, fs::file_size(trace) / 2);
  EXPECT_EQ(c.find("00000000000000aa", &problem), std::nullopt);
  EXPECT_FALSE(problem.empty());
  EXPECT_FALSE(fs::exists(trace));
  EXPECT_FALSE(fs::exists(root_ / "plans/00000000000000aa.json"));

  ASSERT_TRUE(c.store("00000000000000bb", identity(), kTrace, std::nullopt, "t", &error));
  std::ofstream(root_ / "plans/00000000000000bb.json") << "{ not json";
  EXPECT_EQ(c.find("00000000000000bb", &problem), std::nullopt);
  EXPECT_TRUE(contains(problem, "does not read")) << problem;
  EXPECT_FALSE(fs::exists(root_ / "plans/00000000000000bb.umtrace"));

  // A trace without its description (a run killed between the two renames).
  fs::copy_file(kTrace, root_ / "plans/00000000000000cc.umtrace");
  EXPECT_EQ(c.find("00000000000000cc", &problem), std::nullopt);
  EXPECT_FALSE(problem.empty());
}

TEST_F(PlanCacheFiles, ListLastUsedFirstAndRemoveByPrefix) {
  const PlanCache c = cache();
  std::string error;
  ASSERT_TRUE(
      c.store("aaaa000000000001", identity(), kTrace, std::nullopt, "2026-11-30 07:00:00", &error));
  ASSERT_TRUE(
      c.store("bbbb000000000002", identity(), kTrace, std::nullopt, "2026-11-30 09:00:00", &error));
  ASSERT_TRUE(
      c.store("cccc000000000003", identity(), kTrace, std::nullopt, "2026-11-30 08:00:00", &error));
  std::ofstream(root_ / "plans/notes.txt") << "mine";
  std::vector<PlanCacheEntry> all = c.list();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].key, "bbbb000000000002");
  EXPECT_EQ(all[1].key, "cccc000000000003");
  EXPECT_EQ(all[2].key, "aaaa000000000001");

  const std::vector<std::string> prefixes = {"cccc"};
  EXPECT_EQ(c.remove(prefixes), std::vector<std::string>{"cccc000000000003"});
  EXPECT_EQ(c.list().size(), 2u);
  EXPECT_EQ(c.remove({}).size(), 2u);
  EXPECT_TRUE(c.list().empty());
  EXPECT_TRUE(fs::exists(root_ / "plans/notes.txt"));  // not the cache's
}

TEST_F(PlanCacheFiles, TheLeastRecentlyUsedGoPastTheLimit) {
  const PlanCache c = cache();
  std::string error;
  for (size_t i = 0; i <= kPlanCacheMaxEntries; ++i) {
    const std::string key = fmt::format("{:016x}", i + 1);
    const std::string now = fmt::format("2026-11-30 07:{:02}:00", i);
    ASSERT_TRUE(c.store(key, identity(), kTrace, std::nullopt, now, &error)) << error;
  }
  const std::vector<PlanCacheEntry> all = c.list();
  ASSERT_EQ(all.size(), kPlanCacheMaxEntries);
  EXPECT_EQ(all.front().key, fmt::format("{:016x}", kPlanCacheMaxEntries + 1));
  EXPECT_EQ(all.back().key, fmt::format("{:016x}", 2));  // the first stored went
  EXPECT_FALSE(fs::exists(root_ / "plans/0000000000000001.umtrace"));
}

TEST_F(PlanCacheFiles, TheLeastRecentlyUsedGoPastTheBytes) {
  const PlanCache c = cache();
  const uint64_t one = fs::file_size(kTrace);
  std::string error;
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(c.store(fmt::format("{:016x}", i), identity(), kTrace, std::nullopt,
                        fmt::format("2026-11-30 07:0{}:00", i), &error, 2 * one))
        << error;
  }
  // Room for two traces: the third stored made the first go.
  std::vector<PlanCacheEntry> all = c.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].key, fmt::format("{:016x}", 3));
  EXPECT_EQ(all[1].key, fmt::format("{:016x}", 2));
  // One trace larger than the limit alone: it stays, everything else goes.
  ASSERT_TRUE(c.store(fmt::format("{:016x}", 4), identity(), kTrace, std::nullopt,
                      "2026-11-30 06:00:00", &error, one / 2));
  all = c.list();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key, fmt::format("{:016x}", 4));
}

TEST(PlansListText, EmptyAndOneEntry) {
  EXPECT_TRUE(contains(plans_list_text({}, "/c/plans"), "no cached plans in /c/plans"));
  PlanCacheEntry e;
  e.key = "2ae8f09c45bb0b27";
  e.identity = identity();
  e.identity.command.push_back("it's");
  e.identity.alloc_conf = "backend:cudaMallocAsync";
  e.used = "2026-11-30 07:00:00";
  e.runs = 3;
  e.bytes = 3 << 20;
  e.iterations = 16;
  e.period = 2268;
  const std::string text = plans_list_text({e}, "/c/plans");
  EXPECT_TRUE(contains(text, "1 cached plan in /c/plans (3.00 MiB)")) << text;
  EXPECT_TRUE(
      contains(text,
               "2ae8f09c45bb0b27  2026-11-30 07:00:00     3   3.00 MiB              16 x 2268  "
               "python3 train.py --steps 100 'it'\\''s' (/home/u/proj)"))
      << text;
  EXPECT_TRUE(contains(text, "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync")) << text;
}

}  // namespace
}  // namespace umswap::cli
