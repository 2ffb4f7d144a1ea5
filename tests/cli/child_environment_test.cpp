#include "umswap/cli/child_environment.h"
#include "umswap/cli/compare.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace umswap::cli {
namespace {

std::optional<std::string> find_var(const ChildEnvironment& env, std::string_view name) {
  for (const EnvVar& var : env.set) {
    if (var.name == name) return var.value;
  }
  return std::nullopt;
}

bool unsets(const ChildEnvironment& env, std::string_view name) {
  return std::find(env.unset.begin(), env.unset.end(), name) != env.unset.end();
}

TEST(AllocConf, UnsetGivesOnlyTheEntry) {
  EXPECT_EQ(merge_pytorch_alloc_conf(std::nullopt).value, "expandable_segments:False");
  EXPECT_EQ(merge_pytorch_alloc_conf("").value, "expandable_segments:False");
  EXPECT_EQ(merge_pytorch_alloc_conf("  ").value, "expandable_segments:False");
  EXPECT_TRUE(merge_pytorch_alloc_conf(std::nullopt).replaced.empty());
}

TEST(AllocConf, OtherKeysKeptInOrder) {
  const AllocConfMerge merge =
      merge_pytorch_alloc_conf("max_split_size_mb:128,garbage_collection_threshold:0.6");
  EXPECT_EQ(merge.value,
            "max_split_size_mb:128,garbage_collection_threshold:0.6,expandable_segments:False");
  EXPECT_TRUE(merge.replaced.empty());
}

TEST(AllocConf, TrueIsOverriddenInPlace) {
  const AllocConfMerge merge =
      merge_pytorch_alloc_conf("max_split_size_mb:128,expandable_segments:True,backend:native");
  EXPECT_EQ(merge.value, "max_split_size_mb:128,expandable_segments:False,backend:native");
  EXPECT_EQ(merge.replaced, "True");
}

TEST(AllocConf, FalseIsKeptAsWritten) {
  const AllocConfMerge merge = merge_pytorch_alloc_conf("expandable_segments:False,backend:native");
  EXPECT_EQ(merge.value, "expandable_segments:False,backend:native");
  EXPECT_TRUE(merge.replaced.empty());
}

TEST(AllocConf, OddSpacingIsUnderstood) {
  // PyTorch's lexer ignores blanks, so this is expandable_segments:True.
  const AllocConfMerge merge =
      merge_pytorch_alloc_conf("  max_split_size_mb : 256 ,  expandable_segments :  True  ,");
  EXPECT_EQ(merge.value, "max_split_size_mb : 256,expandable_segments:False");
  EXPECT_EQ(merge.replaced, "True");
  EXPECT_EQ(merge_pytorch_alloc_conf(" expandable_segments : False ").value,
            "expandable_segments : False");
}

TEST(AllocConf, BracketedListsStayWhole) {
  const AllocConfMerge merge = merge_pytorch_alloc_conf(
      "roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True");
  EXPECT_EQ(merge.value, "roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:False");
}

TEST(AllocConf, DuplicatesCollapseToOneFalse) {
  // PyTorch lets the last entry win, so False followed by True means True.
  const AllocConfMerge merge =
      merge_pytorch_alloc_conf("expandable_segments:False,expandable_segments:True");
  EXPECT_EQ(merge.value, "expandable_segments:False");
  EXPECT_EQ(merge.replaced, "True");
}

TEST(LdPreload, PrependsToUnsetOrEmpty) {
  EXPECT_EQ(prepend_ld_preload("/opt/umswap/lib/libumswap.so", std::nullopt),
            "/opt/umswap/lib/libumswap.so");
  EXPECT_EQ(prepend_ld_preload("/opt/umswap/lib/libumswap.so", ""), "/opt/umswap/lib/libumswap.so");
}

TEST(LdPreload, KeepsOthersAfterItInOrder) {
  EXPECT_EQ(prepend_ld_preload("/u/libumswap.so", "/a/liba.so:/b/libb.so"),
            "/u/libumswap.so:/a/liba.so:/b/libb.so");
  // ld.so also separates with blanks; the result uses ':' only.
  EXPECT_EQ(prepend_ld_preload("/u/libumswap.so", "/a/liba.so /b/libb.so"),
            "/u/libumswap.so:/a/liba.so:/b/libb.so");
}

TEST(LdPreload, KeepsTheLibraryOnce) {
  EXPECT_EQ(prepend_ld_preload("/u/libumswap.so", "/a/liba.so:/u/libumswap.so::/u/libumswap.so"),
            "/u/libumswap.so:/a/liba.so");
  EXPECT_EQ(prepend_ld_preload("/u/libumswap.so", "/u/libumswap.so"), "/u/libumswap.so");
}

TEST(ChildEnv, NoFlagsSetsOnlyPreloadAndAllocatorSettings) {
  RunFlags flags;
  flags.command = {"true"};
  const ChildEnvironment env = plan_child_environment(flags, {}, "/u/libumswap.so");
  ASSERT_EQ(env.set.size(), 4u);
  EXPECT_EQ(env.set[0], (EnvVar{"LD_PRELOAD", "/u/libumswap.so"}));
  EXPECT_EQ(env.set[1], (EnvVar{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"}));
  EXPECT_EQ(env.set[2], (EnvVar{"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"}));
  EXPECT_EQ(env.set[3], (EnvVar{"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}));
  EXPECT_TRUE(env.warnings.empty());
}

// JAX's default allocator maps its memory with cuMemCreate/cuMemMap: replaced, with a warning.
TEST(ChildEnv, XlaAllocatorOtherThanCudaAsyncWarnsAndIsOverridden) {
  for (const char* value : {"platform", "bfc", " default "}) {
    RunFlags flags;
    flags.mode = Mode::managed;
    flags.command = {"true"};
    CurrentEnv current;
    current.xla_allocator = value;
    const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
    EXPECT_EQ(find_var(env, "XLA_PYTHON_CLIENT_ALLOCATOR"), "cuda_async") << value;
    ASSERT_EQ(env.warnings.size(), 1u) << value;
    EXPECT_EQ(env.warnings[0].rfind("XLA_PYTHON_CLIENT_ALLOCATOR is ", 0), 0u) << env.warnings[0];
    EXPECT_NE(env.warnings[0].find("cuMemCreate"), std::string::npos);
  }
}

// Passthrough runs the program as it runs without umswap (compare's native row): JAX keeps its own
// allocator, unwarned.
TEST(ChildEnv, PassthroughLeavesJaxsAllocatorAlone) {
  RunFlags flags;
  flags.mode = Mode::passthrough;
  flags.command = {"true"};
  CurrentEnv current;
  current.xla_allocator = "platform";
  const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
  // The user's own value set back, the one the user did not set removed.
  EXPECT_EQ(find_var(env, "XLA_PYTHON_CLIENT_ALLOCATOR"), "platform");
  EXPECT_FALSE(find_var(env, "XLA_PYTHON_CLIENT_PREALLOCATE"));
  EXPECT_TRUE(unsets(env, "XLA_PYTHON_CLIENT_PREALLOCATE"));
  EXPECT_FALSE(unsets(env, "XLA_PYTHON_CLIENT_ALLOCATOR"));
  EXPECT_TRUE(env.warnings.empty());
  // The user's UMSWAP_MODE=passthrough without --mode, likewise; --mode wins over it.
  RunFlags no_flag;
  no_flag.command = {"true"};
  CurrentEnv by_variable;
  by_variable.umswap_mode = "passthrough";
  const ChildEnvironment v = plan_child_environment(no_flag, by_variable, "/u/libumswap.so");
  EXPECT_TRUE(unsets(v, "XLA_PYTHON_CLIENT_ALLOCATOR"));
  EXPECT_FALSE(find_var(v, "XLA_PYTHON_CLIENT_ALLOCATOR"));
  by_variable.umswap_mode = " PassThrough ";  // as the library reads it: case and blanks aside
  EXPECT_TRUE(unsets(plan_child_environment(no_flag, by_variable, "/u/libumswap.so"),
                     "XLA_PYTHON_CLIENT_ALLOCATOR"));
  // umswap replay sets UMSWAP_MODE=replay whatever the user's says: umswap's settings.
  RunFlags replay = no_flag;
  replay.replay_trace = "run.umtrace";
  EXPECT_EQ(find_var(plan_child_environment(replay, by_variable, "/u/libumswap.so"),
                     "XLA_PYTHON_CLIENT_ALLOCATOR"),
            "cuda_async");
  no_flag.mode = Mode::online;
  EXPECT_EQ(find_var(plan_child_environment(no_flag, by_variable, "/u/libumswap.so"),
                     "XLA_PYTHON_CLIENT_ALLOCATOR"),
            "cuda_async");
  // compare's native run likewise, and its managed run gets umswap's settings.
  CompareRunSettings native;
  native.run = CompareRun::native;
  native.stats_path = "/tmp/s.json";
  const ChildEnvironment n = plan_compare_environment(native, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(n, "XLA_PYTHON_CLIENT_ALLOCATOR"), "platform");
  EXPECT_EQ(find_var(n, "UMSWAP_MODE"), "passthrough");
  // With none of the user's, a native run after a managed one (compare applies each plan to its
  // own environment) does not inherit the managed run's settings.
  const ChildEnvironment bare = plan_compare_environment(native, {}, "/u/libumswap.so");
  EXPECT_TRUE(unsets(bare, "XLA_PYTHON_CLIENT_ALLOCATOR"));
  EXPECT_TRUE(unsets(bare, "XLA_PYTHON_CLIENT_PREALLOCATE"));
  EXPECT_EQ(std::count_if(n.set.begin(), n.set.end(),
                          [](const EnvVar& var) { return var.name == "UMSWAP_MODE"; }),
            1);
  CompareRunSettings managed = native;
  managed.run = CompareRun::managed;
  const ChildEnvironment m = plan_compare_environment(managed, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(m, "XLA_PYTHON_CLIENT_ALLOCATOR"), "cuda_async");
  EXPECT_EQ(find_var(m, "UMSWAP_MODE"), "managed");
  // The user's UMSWAP_MODE=passthrough does not make compare's managed run a passthrough one.
  const ChildEnvironment mv = plan_compare_environment(managed, by_variable, "/u/libumswap.so");
  EXPECT_EQ(find_var(mv, "XLA_PYTHON_CLIENT_ALLOCATOR"), "cuda_async");
}

TEST(ChildEnv, XlaCudaAsyncAndTheUsersPreallocationAreKept) {
  RunFlags flags;
  flags.command = {"true"};
  CurrentEnv current;
  current.xla_allocator = "cuda_async";
  current.xla_preallocate = "true";
  const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "XLA_PYTHON_CLIENT_ALLOCATOR"), "cuda_async");
  // Set by the user: not in the plan, so the command inherits theirs.
  EXPECT_FALSE(find_var(env, "XLA_PYTHON_CLIENT_PREALLOCATE"));
  EXPECT_TRUE(env.warnings.empty());
  // Blank is the same as unset.
  CurrentEnv blank;
  blank.xla_allocator = "";
  blank.xla_preallocate = " ";
  const ChildEnvironment blank_env = plan_child_environment(flags, blank, "/u/libumswap.so");
  EXPECT_EQ(find_var(blank_env, "XLA_PYTHON_CLIENT_PREALLOCATE"), "false");
  EXPECT_TRUE(blank_env.warnings.empty());
}

TEST(ChildEnv, FlagsBecomeVariables) {
  RunFlags flags;
  flags.budget = parse_size("16G");
  flags.managed_limit = parse_size("75%");
  flags.mode = Mode::passthrough;
  flags.stats_path = "stats-%p.json";
  flags.verbose = true;
  flags.command = {"true"};
  const ChildEnvironment env = plan_child_environment(flags, {}, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "UMSWAP_BUDGET"), "16G");
  EXPECT_EQ(find_var(env, "UMSWAP_MANAGED_LIMIT"), "75%");
  EXPECT_EQ(find_var(env, "UMSWAP_MODE"), "passthrough");
  EXPECT_EQ(find_var(env, "UMSWAP_STATS"), "stats-%p.json");
  EXPECT_EQ(find_var(env, "UMSWAP_VERBOSE"), "1");
  EXPECT_FALSE(find_var(env, "UMSWAP_CALLSITE_DEPTH"));
}

TEST(ChildEnv, EngineBecomesItsVariable) {
  RunFlags flags;
  flags.command = {"true"};
  EXPECT_FALSE(find_var(plan_child_environment(flags, {}, "/u/libumswap.so"), "UMSWAP_ENGINE"));
  flags.engine = Engine::vmm;
  EXPECT_EQ(find_var(plan_child_environment(flags, {}, "/u/libumswap.so"), "UMSWAP_ENGINE"), "vmm");
  flags.engine = Engine::um;
  EXPECT_EQ(find_var(plan_child_environment(flags, {}, "/u/libumswap.so"), "UMSWAP_ENGINE"), "um");
}

// Expandable segments are turned off under engine vmm too (a tensor across several of their
// handles is read partly over the link, which changed cuDNN's dropout attention, run 216), with
// the one warning, whatever the engine.
TEST(ChildEnv, ExpandableSegmentsAreOffUnderEitherEngine) {
  RunFlags flags;
  flags.command = {"true"};
  CurrentEnv current;
  current.pytorch_cuda_alloc_conf = "expandable_segments:True";
  for (const std::optional<Engine> engine :
       {std::optional<Engine>(Engine::vmm), std::optional<Engine>(Engine::um),
        std::optional<Engine>()}) {
    flags.engine = engine;
    const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
    EXPECT_EQ(find_var(env, "PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:False");
    ASSERT_EQ(env.warnings.size(), 1u);
    EXPECT_TRUE(env.warnings[0].find("under engine vmm a tensor across several") !=
                std::string::npos)
        << env.warnings[0];
  }
  // Nothing set: turned off without a word.
  current.pytorch_cuda_alloc_conf.reset();
  flags.engine = Engine::vmm;
  const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:False");
  EXPECT_TRUE(env.warnings.empty());
}

TEST(ChildEnv, QuietSilencesTheLibrarysNotices) {
  RunFlags flags;
  flags.quiet = true;
  flags.command = {"true"};
  const ChildEnvironment env = plan_child_environment(flags, {}, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "UMSWAP_VERBOSE"), "quiet");
}

TEST(ChildEnv, OnlyGivenFlagsAreSet) {
  RunFlags flags;
  flags.managed_limit = parse_size("60G");
  flags.command = {"true"};
  const ChildEnvironment env = plan_child_environment(flags, {}, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "UMSWAP_MANAGED_LIMIT"), "60G");
  for (const char* name :
       {"UMSWAP_BUDGET", "UMSWAP_MODE", "UMSWAP_ENGINE", "UMSWAP_STATS", "UMSWAP_VERBOSE"}) {
    EXPECT_FALSE(find_var(env, name)) << name;
  }
}

TEST(ChildEnv, ExpandableSegmentsTrueWarnsOnceAndIsOverridden) {
  RunFlags flags;
  flags.mode = Mode::passthrough;  // passthrough too: it is the like-for-like baseline
  flags.command = {"true"};
  const CurrentEnv current{.ld_preload = "/a/liba.so",
                           .pytorch_cuda_alloc_conf = "expandable_segments:True",
                           .pytorch_alloc_conf = std::nullopt};
  const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "LD_PRELOAD"), "/u/libumswap.so:/a/liba.so");
  EXPECT_EQ(find_var(env, "PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:False");
  ASSERT_EQ(env.warnings.size(), 1u);
  EXPECT_NE(env.warnings[0].find("expandable segments"), std::string::npos);
  EXPECT_NE(env.warnings[0].find("cuMemCreate"), std::string::npos);
}

TEST(ChildEnv, BothAllocConfsAreMergedSeparately) {
  RunFlags flags;
  flags.command = {"true"};
  const CurrentEnv current{.ld_preload = std::nullopt,
                           .pytorch_cuda_alloc_conf = "backend:native",
                           .pytorch_alloc_conf = "max_split_size_mb:64"};
  const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "PYTORCH_CUDA_ALLOC_CONF"), "backend:native,expandable_segments:False");
  EXPECT_EQ(find_var(env, "PYTORCH_ALLOC_CONF"), "max_split_size_mb:64,expandable_segments:False");
  EXPECT_TRUE(env.warnings.empty());
}

TEST(ChildEnv, PytorchAllocConfAloneIsCarriedIntoBoth) {
  RunFlags flags;
  flags.command = {"true"};
  const CurrentEnv current{.ld_preload = std::nullopt,
                           .pytorch_cuda_alloc_conf = std::nullopt,
                           .pytorch_alloc_conf = "max_split_size_mb:64,expandable_segments:True"};
  const ChildEnvironment env = plan_child_environment(flags, current, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "PYTORCH_CUDA_ALLOC_CONF"),
            "max_split_size_mb:64,expandable_segments:False");
  EXPECT_EQ(find_var(env, "PYTORCH_ALLOC_CONF"), "max_split_size_mb:64,expandable_segments:False");
  ASSERT_EQ(env.warnings.size(), 1u);
  EXPECT_EQ(env.warnings[0].rfind("PYTORCH_ALLOC_CONF has expandable_segments:True", 0), 0u)
      << env.warnings[0];
}

TEST(ChildEnv, RecordSetsTraceVariablesWithAnAbsolutePath) {
  RunFlags flags;
  flags.command = {"true"};
  flags.record = RecordFlags{.output = "run.umtrace", .iterations = 3, .marker = "step"};
  const ChildEnvironment env = plan_child_environment(flags, {}, "/u/libumswap.so");
  const auto trace = find_var(env, "UMSWAP_TRACE");
  ASSERT_TRUE(trace);
  EXPECT_EQ(trace->front(), '/');
  EXPECT_TRUE(trace->ends_with("/run.umtrace")) << *trace;
  EXPECT_EQ(find_var(env, "UMSWAP_TRACE_ITERATIONS"), "3");
  EXPECT_EQ(find_var(env, "UMSWAP_ITERATION_MARKER"), "step");
  flags.record->marker.clear();
  EXPECT_FALSE(
      find_var(plan_child_environment(flags, {}, "/u/libumswap.so"), "UMSWAP_ITERATION_MARKER"));
}

TEST(ChildEnv, ReplaySetsModeAndAnAbsoluteTracePath) {
  RunFlags flags;
  flags.command = {"true"};
  flags.budget = parse_size("40G");
  flags.replay_trace = "runs/a.umtrace";
  const ChildEnvironment env = plan_child_environment(flags, {}, "/u/libumswap.so");
  EXPECT_EQ(find_var(env, "UMSWAP_MODE"), "replay");
  EXPECT_EQ(find_var(env, "UMSWAP_BUDGET"), "40G");
  const auto trace = find_var(env, "UMSWAP_REPLAY");
  ASSERT_TRUE(trace);
  EXPECT_EQ(trace->front(), '/');
  EXPECT_TRUE(trace->ends_with("/runs/a.umtrace")) << *trace;
  EXPECT_TRUE(env.unset.empty());
}

}  // namespace
}  // namespace umswap::cli
