// End-to-end runs of `umswap compare` and `umswap replay` through the built binary, with a shell
// script standing in for the program (it prints iteration lines, writes a stats file as
// libumswap.so would, fails on request) and the trivial preload library. No GPU is needed: on a
// machine without one the link probe fails, and compare must carry on.
#include "umswap/core/trace_file.h"
#include "umswap_process.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

using umswap_test::lines_of;
using umswap_test::read_file;
using umswap_test::Result;
namespace fs = std::filesystem;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// A valid trace, as `umswap record` would leave it.
umswap::trace::Trace small_trace() {
  umswap::trace::Trace t;
  t.program = "./fake";
  t.pid = 7;
  t.detection = {.period = 1, .confidence = 1.0, .warmup_steps = 0, .source = "period"};
  t.names = {"gemm"};
  t.buffers = {{.id = 1, .size = 4096}};
  t.accesses = {{.buffer = 0, .offset = 0, .length = 4096}};
  t.steps = {{.name = 0, .stream = 1, .first_access = 0, .access_count = 1}};
  t.iterations = {{.first_step = 0, .step_count = 1, .counters = {}}};
  return t;
}

// The program's environment and arguments, one line per run, go to $LOG. $FAIL_MODE makes the
// run in that UMSWAP_MODE fail, $INT_MODE the one killed by SIGINT; $NO_SUMMARY leaves out the
// summary line; $GOOD_TRACE is copied to UMSWAP_TRACE. As the PyTorch samples do, it takes
// --offload (slower, less memory) and --checkpoint, which $NO_CHECKPOINT makes it refuse.
constexpr const char* kFakeProgram = R"(#!/bin/sh
echo "$UMSWAP_MODE|${UMSWAP_BUDGET-unset}|$UMSWAP_STATS|${UMSWAP_TRACE-unset}|${UMSWAP_REPLAY-unset}|${UMSWAP_MANAGED_LIMIT-unset}|$LD_PRELOAD|$*" >> "$LOG"
echo "starting $UMSWAP_MODE" >&2
if [ "$1" = --checkpoint ] && [ -n "$NO_CHECKPOINT" ]; then
  echo "fake.sh: error: unrecognized arguments: --checkpoint" >&2; exit 2
fi
if [ "$1" = --offload ]; then
  for i in 0 1 2 3; do echo "iter $i ms 2$i.5 loss 0.2501"; done
  echo 'summary {"peak_allocated_bytes": 3000}'
  exit 0
fi
i=0
while [ $i -lt 4 ]; do echo "iter $i ms 1$i.5 loss 0.25"; i=$((i + 1)); done
[ "$1" = --checkpoint ] || echo "checksum 0123456789abcdef"
[ -n "$NO_SUMMARY" ] || echo 'summary {"peak_allocated_bytes": 4000}'
if [ "$UMSWAP_MODE" = managed ]; then
  printf '{"umswap_stats_version": 1, "allocator": {"managed_bytes_peak": 2000}}' > "$UMSWAP_STATS"
fi
if [ "$UMSWAP_ENGINE" = vmm ]; then
  printf '{"umswap_stats_version": 1, "engine": "vmm", "vmm": {"budget_bytes": 1000, "gpu_and_program_bytes_peak": 990, "bytes_to_gpu": 4000, "bytes_to_host": 2000}, "iterations": [{"index": 0, "wall_ms": 1}, {"index": 1, "wall_ms": 1}, {"index": 2, "wall_ms": 1}, {"index": 3, "wall_ms": 1}]}' > "$UMSWAP_STATS"
elif [ "$UMSWAP_MODE" = online ] && [ -z "$UMSWAP_TRACE" ]; then
  printf '{"umswap_stats_version": 1, "advisor": {"budget_bytes": 1000, "peak_resident_bytes": 1100}, "iterations": [{"index": 0, "gpu_page_faults": 100}, {"index": 1, "gpu_page_faults": 50}, {"index": 2, "gpu_page_faults": 7}, {"index": 3, "gpu_page_faults": 9}]}' > "$UMSWAP_STATS"
fi
if [ -n "$UMSWAP_TRACE" ] && [ -n "$GOOD_TRACE" ]; then cp "$GOOD_TRACE" "$UMSWAP_TRACE"; fi
if [ "$UMSWAP_MODE" = "$FAIL_MODE" ]; then echo "fake: no memory left" >&2; exit 3; fi
if [ "$UMSWAP_MODE" = "$INT_MODE" ]; then kill -INT $$; fi
exit 0
)";

class CompareEndToEnd : public umswap_test::UmswapProcess {
 protected:
  void SetUp() override {
    UmswapProcess::SetUp();
    program_ = dir_ / "fake.sh";
    std::ofstream(program_) << kFakeProgram;
    ::chmod(program_.c_str(), 0755);
    tmp_ = dir_ / "tmp";
    fs::create_directories(tmp_);
    good_trace_ = (dir_ / "good.umtrace").string();
    std::string error;
    ASSERT_TRUE(umswap::write_trace_file(good_trace_, small_trace(), &error)) << error;
  }

  // `umswap compare <flags> -- fake.sh` with its temporary directories under tmp_.
  Result compare(std::vector<std::string> flags, umswap_test::EnvChanges changes = {}) {
    std::vector<std::string> args = {"compare"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", program_.string()});
    changes.insert(changes.begin(), {{"LOG", (dir_ / "log").string()}, {"TMPDIR", tmp_.string()}});
    return umswap(args, changes);
  }

  std::vector<std::string> log_lines() { return lines_of(read_file(dir_ / "log")); }

  std::vector<fs::path> run_directories() {
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(tmp_)) dirs.push_back(entry.path());
    return dirs;
  }

  fs::path program_;
  fs::path tmp_;
  std::string good_trace_;
};

TEST_F(CompareEndToEnd, EveryModeRunsWithItsOwnEnvironment) {
  const Result r =
      compare({"--json", (dir_ / "c.json").string()}, {{"GOOD_TRACE", good_trace_},
                                                       {"UMSWAP_MANAGED_LIMIT", "9G"},
                                                       {"UMSWAP_TRACE", "/nowhere/user.umtrace"},
                                                       {"UMSWAP_BUDGET", "77G"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const std::vector<std::string> runs = log_lines();
  ASSERT_EQ(runs.size(), 5u) << read_file(dir_ / "log");
  auto field = [](const std::string& line, size_t i) {
    size_t start = 0;
    for (size_t k = 0; k < i; ++k) start = line.find('|', start) + 1;
    return line.substr(start, line.find('|', start) - start);
  };
  // mode | budget | stats | trace | replay | limit | preload
  EXPECT_EQ(field(runs[0], 0), "passthrough");
  EXPECT_EQ(field(runs[0], 1), "unset");  // the user's UMSWAP_BUDGET is not the native run's
  EXPECT_EQ(field(runs[0], 3), "unset");  // nor is the user's UMSWAP_TRACE
  EXPECT_TRUE(field(runs[0], 2).ends_with("/native.json")) << runs[0];
  EXPECT_EQ(field(runs[0], 5), "9G");  // the user's limit stays
  EXPECT_TRUE(fs::equivalent(field(runs[0], 6), UMSWAP_TEST_PRELOAD_LIBRARY)) << runs[0];
  EXPECT_EQ(field(runs[1], 0), "managed");
  EXPECT_EQ(field(runs[1], 1), "unset");
  // 50% of the managed run's peak (2000 bytes).
  EXPECT_EQ(field(runs[2], 0), "online");
  EXPECT_EQ(field(runs[2], 1), "1000");
  EXPECT_EQ(field(runs[2], 3), "unset");
  EXPECT_EQ(field(runs[3], 0), "online");  // the record run
  const std::string trace = field(runs[3], 3);
  EXPECT_TRUE(trace.ends_with("/compare.umtrace")) << runs[3];
  EXPECT_EQ(field(runs[4], 0), "replay");
  EXPECT_EQ(field(runs[4], 1), "1000");
  EXPECT_EQ(field(runs[4], 3), "unset");
  EXPECT_EQ(field(runs[4], 4), trace);
  EXPECT_EQ(field(runs[4], 5), "9G");

  // Progress on stderr, the table on stdout.
  for (const char* line :
       {"[1/5] native: done in ", "[2/5] managed: done in ", "[3/5] online: done in ",
        "[4/5] record: done in ", "[5/5] replay: done in ", "compare: budget 50% of 1.95 KiB"}) {
    EXPECT_TRUE(contains(r.err, line)) << line << "\n" << r.err;
  }
  EXPECT_TRUE(contains(r.out, "mode      steady ms  x native")) << r.out;
  // iter lines 0..3: steady = 12.5, 13.5; median 13.0; first 10.5.
  EXPECT_TRUE(contains(r.out, "native         13.0      1.00")) << r.out;
  // online: faults (7 + 9) / 2 = 8.0 per steady iteration; peak 1100 > 1000 * 1.05: not held.
  const std::vector<std::string> lines = lines_of(r.out);
  const auto online = std::find_if(lines.begin(), lines.end(),
                                   [](const std::string& l) { return l.starts_with("online "); });
  ASSERT_NE(online, lines.end()) << r.out;
  EXPECT_TRUE(contains(*online, "      8.0  ")) << *online;
  EXPECT_TRUE(online->ends_with("      no     same")) << *online;
  // Nothing failed: the directory of outputs is gone.
  EXPECT_TRUE(run_directories().empty());
  EXPECT_FALSE(contains(r.err, "are in")) << r.err;

  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "c.json"));
  EXPECT_EQ(j["umswap_compare_version"], 4);
  EXPECT_EQ(j["command"], nlohmann::json({program_.string()}));
  EXPECT_EQ(j["budget_bytes"], 1000);
  EXPECT_TRUE(j["probe"]["ok"].is_boolean());
  ASSERT_EQ(j["modes"].size(), 4u);
  for (const auto& mode : j["modes"]) EXPECT_EQ(mode["status"], "ok") << mode.dump();
  EXPECT_EQ(j["modes"][2]["gpu_faults_per_iteration"], 8.0);
  EXPECT_EQ(j["modes"][2]["budget_held"], false);
  EXPECT_EQ(j["modes"][3]["record_exit_code"], 0);
}

TEST_F(CompareEndToEnd, BaselinesRunNativelyWithTheirFlagAndGetRowsAndAVerdict) {
  const Result r = compare({"--modes", "native,online", "--baselines", "checkpoint,offload",
                            "--json", (dir_ / "c.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> runs = log_lines();
  ASSERT_EQ(runs.size(), 4u) << read_file(dir_ / "log");
  // native, online, then offload and checkpoint in that order: passthrough, flag appended.
  EXPECT_TRUE(runs[2].starts_with("passthrough|unset|")) << runs[2];
  EXPECT_TRUE(runs[2].ends_with("|--offload")) << runs[2];
  EXPECT_TRUE(contains(runs[2], "/offload.json|")) << runs[2];
  EXPECT_TRUE(runs[3].starts_with("passthrough|unset|")) << runs[3];
  EXPECT_TRUE(runs[3].ends_with("|--checkpoint")) << runs[3];
  EXPECT_TRUE(contains(r.err, "[3/4] offload: done in ")) << r.err;
  EXPECT_TRUE(contains(r.err, "[4/4] checkpoint: done in ")) << r.err;
  // offload: steady 22.5, 23.5; peak 3000 bytes. Its loss 0.2501 is within 1% of 0.25.
  EXPECT_TRUE(contains(r.out, "\noffload          23.0      1.77")) << r.out;
  EXPECT_TRUE(contains(r.out, "≈ native (loss within 0.01)")) << r.out;
  EXPECT_TRUE(contains(r.out, "\ncheckpoint       13.0      1.00")) << r.out;
  // online's counted peak, 1100 bytes, is below offload's 3000.
  EXPECT_TRUE(contains(r.out,
                       "umswap vs save_on_cpu (offload): umswap online is 1.77× faster "
                       "than save_on_cpu at equal or lower peak memory"))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "umswap vs checkpointing (checkpoint): checkpointing is about "
                       "as fast as umswap online"))
      << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "c.json"));
  ASSERT_EQ(j["baselines"].size(), 2u);
  EXPECT_EQ(j["baselines"][0]["baseline"], "offload");
  EXPECT_EQ(j["baselines"][0]["peak_allocated_bytes"], 3000);
  EXPECT_EQ(j["baselines"][0]["result_match"], "within_tolerance");
  EXPECT_EQ(j["baseline_comparisons"][0]["umswap_mode"], "online");
  EXPECT_EQ(j["modes"].size(), 2u);
}

// A stand-in for torchrun: two ranks, each printing its lines with the prefix compare asked for
// (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), interleaved, and writing its stats file (`%p` in
// UMSWAP_STATS as 4000 + rank) with its rank in it; torchrun's own line has no prefix. Each
// rank's lines also go whole to PET_LOG_DIR/<run id>/attempt_0/<rank>/stdout.log, as torchrun
// keeps them; with $SPLIT_LINES its stdout has rank 1's lines cut in two, as torchrun's copy of
// a block-buffered rank can. Rank 1 is twice as slow and takes ten times the faults of rank 0;
// the launcher's variables go to $LOG.
constexpr const char* kFakeTorchrun = R"SH(#!/bin/sh
echo "$UMSWAP_MODE|${UMSWAP_BUDGET-unset}|$UMSWAP_STATS|${PET_TEE-unset}|${PET_LOG_DIR-unset}|$*" >> "$LOG"
echo "W1128 torchrun: starting 2 ranks"
mkdir -p "$PET_LOG_DIR/none_x1/attempt_0/0" "$PET_LOG_DIR/none_x1/attempt_0/1"
for i in 0 1 2 3; do
  for r in 0 1; do
    prefix=$(printf '%s' "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" | sed "s/\${rank}/$r/")
    echo "iter $i ms $((r + 1))0.5 loss 0.$r$i" >> "$PET_LOG_DIR/none_x1/attempt_0/$r/stdout.log"
    if [ $r = 1 ] && [ -n "$SPLIT_LINES" ]; then
      echo "${prefix}iter $i ms $((r + 1))"; echo "${prefix}0.5 loss 0.$r$i"
    else
      echo "${prefix}iter $i ms $((r + 1))0.5 loss 0.$r$i"
    fi
  done
done
for r in 0 1; do
  stats=$(printf '%s' "$UMSWAP_STATS" | sed "s/%p/$((4000 + r))/")
  case "$UMSWAP_MODE.$r" in
    managed.0) echo '{"umswap_stats_version": 1, "rank": 0, "allocator": {"managed_bytes_peak": 2000}}' > "$stats" ;;
    managed.1) echo '{"umswap_stats_version": 1, "rank": 1, "allocator": {"managed_bytes_peak": 4000}}' > "$stats" ;;
    online.0) echo '{"umswap_stats_version": 1, "rank": 0, "advisor": {"budget_bytes": 2000, "peak_resident_bytes": 1500}, "iterations": [{"index": 0, "gpu_page_faults": 1}, {"index": 1, "gpu_page_faults": 1}, {"index": 2, "gpu_page_faults": 5}, {"index": 3, "gpu_page_faults": 5}]}' > "$stats" ;;
    online.1) echo '{"umswap_stats_version": 1, "rank": 1, "advisor": {"budget_bytes": 2000, "peak_resident_bytes": 1500}, "iterations": [{"index": 0, "gpu_page_faults": 1}, {"index": 1, "gpu_page_faults": 1}, {"index": 2, "gpu_page_faults": 50}, {"index": 3, "gpu_page_faults": 50}]}' > "$stats" ;;
  esac
done
exit 0
)SH";

TEST_F(CompareEndToEnd, ATorchrunCommandGetsOneRowPerRank) {
  const fs::path torchrun = dir_ / "torchrun";
  std::ofstream(torchrun) << kFakeTorchrun;
  ::chmod(torchrun.c_str(), 0755);
  const Result r =
      umswap({"compare", "--json", (dir_ / "c.json").string(), "--", torchrun.string(),
              "--nproc-per-node", "2", "train.py"},
             {{"LOG", (dir_ / "log").string()}, {"TMPDIR", tmp_.string()}, {"SPLIT_LINES", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  // native, managed, online; no record or replay (one trace file would serve every rank).
  const std::vector<std::string> runs = log_lines();
  ASSERT_EQ(runs.size(), 3u) << read_file(dir_ / "log");
  const char* names[] = {"native", "managed", "online"};
  for (size_t i = 0; i < runs.size(); ++i) {
    // A stats file per process; --tee 1; torchrun's copies of the ranks' output per run.
    EXPECT_TRUE(contains(runs[i], fmt::format("/{}.%p.json|1|", names[i]))) << runs[i];
    EXPECT_TRUE(contains(runs[i], fmt::format("/torchrun-logs/{}|", names[i]))) << runs[i];
  }
  // 50% of the largest rank's managed peak (4000 bytes), the same for every rank.
  EXPECT_TRUE(runs[2].starts_with("online|2000|")) << runs[2];
  EXPECT_TRUE(contains(r.err, "compare: a torchrun command: one row per rank")) << r.err;
  EXPECT_TRUE(contains(r.err, "[4/5] record: skipped")) << r.err;
  EXPECT_TRUE(contains(r.out, "\nnative r0        10.5      1.00")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nnative r1        20.5      1.00")) << r.out;  // its own native
  EXPECT_TRUE(contains(r.out, "\nreplay      skipped: not for torchrun")) << r.out;
  EXPECT_TRUE(contains(r.out, "note: torchrun: one row per rank")) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "c.json"));
  ASSERT_EQ(j["modes"].size(), 7u) << j["modes"].dump();
  EXPECT_EQ(j["budget_bytes"], 2000);
  for (size_t i = 0; i < 6; ++i) {
    const nlohmann::json& m = j["modes"][i];
    EXPECT_EQ(m["rank"], i % 2) << m.dump();
    EXPECT_EQ(m["status"], "ok") << m.dump();
    EXPECT_EQ(m["steady_median_ms"], i % 2 ? 20.5 : 10.5) << m.dump();
    if (i >= 2) {
      EXPECT_EQ(m["result_match"], "within_tolerance") << m.dump();  // its rank's losses
    }
  }
  EXPECT_EQ(j["modes"][4]["gpu_faults_per_iteration"], 5.0);
  EXPECT_EQ(j["modes"][5]["gpu_faults_per_iteration"], 50.0);
  EXPECT_EQ(j["modes"][5]["budget_held"], true);
  EXPECT_EQ(j["modes"][6]["mode"], "replay");
  EXPECT_EQ(j["modes"][6]["status"], "skipped");
  EXPECT_TRUE(j["modes"][6]["rank"].is_null());
  EXPECT_TRUE(run_directories().empty());  // nothing failed: torchrun's logs went with the rest
}

// --modes vmm: engine vmm at the budget, its peak and moves from the stats' vmm section; every
// other run gets engine um, whatever the user's UMSWAP_ENGINE says.
TEST_F(CompareEndToEnd, TheVmmModeRunsEngineVmmAtTheBudget) {
  const Result r =
      compare({"--modes", "vmm,native", "--budget", "1000", "--json", (dir_ / "c.json").string()},
              {{"UMSWAP_ENGINE", "vmm"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> runs = log_lines();
  ASSERT_EQ(runs.size(), 2u) << read_file(dir_ / "log");
  EXPECT_TRUE(runs[0].starts_with("passthrough|unset|")) << runs[0];
  EXPECT_TRUE(runs[1].starts_with("online|1000|")) << runs[1];
  EXPECT_TRUE(contains(runs[1], "/vmm.json|")) << runs[1];
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "c.json"));
  ASSERT_EQ(j["modes"].size(), 2u);
  const nlohmann::json& v = j["modes"][1];
  EXPECT_EQ(v["mode"], "vmm");
  EXPECT_EQ(v["budget_bytes"], 1000);
  EXPECT_EQ(v["peak_resident_bytes"], 990);
  EXPECT_EQ(v["budget_held"], true);
  EXPECT_EQ(v["bytes_in_per_iteration"], 1000.0);  // 4000 over the 4 iterations traced
  EXPECT_EQ(v["bytes_out_per_iteration"], 500.0);
  EXPECT_EQ(v["result_match"], "same");
  EXPECT_TRUE(contains(r.out, "\nvmm     ")) << r.out;
}

// A program that is not deterministic: its second native run ends on another loss (3.6 for 4.0),
// the others end on $LAST; no checksum. Each run's mode goes to $LOG. $FAIL_SECOND makes the
// second native run fail.
constexpr const char* kFakeNondeterministic = R"SH(#!/bin/sh
echo "$UMSWAP_MODE" >> "$LOG"
last=$LAST
if [ "$UMSWAP_MODE" = passthrough ]; then
  n=$(cat "$COUNT" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$COUNT"
  if [ $n = 1 ]; then last=4.0; else last=3.6; fi
  if [ $n = 2 ] && [ -n "$FAIL_SECOND" ]; then echo "fake: no memory left" >&2; exit 3; fi
fi
i=0
for x in 1.0 2.0 $last; do echo "iter $i ms 1$i.5 loss $x"; i=$((i + 1)); done
echo 'summary {"peak_allocated_bytes": 4000}'
)SH";

// A loss past --loss-tolerance with no checksum: native runs a second time, and the result is
// judged against what the two natives differ by; within the tolerance, native runs once.
TEST_F(CompareEndToEnd, ALossPastTheToleranceRunsNativeAgainToJudgeAgainstItsSpread) {
  const fs::path program = dir_ / "nondeterministic.sh";
  std::ofstream(program) << kFakeNondeterministic;
  ::chmod(program.c_str(), 0755);
  auto run = [&](const std::string& last, const std::string& name, bool fail_second = false) {
    umswap_test::EnvChanges env = {{"LOG", (dir_ / (name + ".log")).string()},
                                   {"COUNT", (dir_ / (name + ".count")).string()},
                                   {"TMPDIR", tmp_.string()},
                                   {"LAST", last}};
    if (fail_second) env.push_back({"FAIL_SECOND", "1"});
    return umswap({"compare", "--modes", "native,online", "--budget", "1M", "--json",
                   (dir_ / (name + ".json")).string(), "--", program.string()},
                  env);
  };
  // 5% off where the natives differ by 10%: within 4x their spread.
  Result r = run("4.2105263", "within");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(read_file(dir_ / "within.log")),
            (std::vector<std::string>{"passthrough", "online", "passthrough"}));
  EXPECT_TRUE(contains(r.err, "native runs again to measure")) << r.err;
  EXPECT_TRUE(contains(r.err, "[3/3] native2: done in ")) << r.err;
  EXPECT_TRUE(contains(r.out, "≈ native (natives differ)")) << r.out;
  EXPECT_TRUE(contains(r.out, "the program is not deterministic")) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(dir_ / "within.json"));
  EXPECT_EQ(j["modes"][1]["result_match"], "within_native_spread");
  EXPECT_EQ(j["modes"].size(), 2u);  // the second native has no row

  // 50% off: a changed result, said so with the spread it was held to.
  r = run("8.0", "differs");
  EXPECT_EQ(lines_of(read_file(dir_ / "differs.log")).size(), 3u);
  EXPECT_TRUE(contains(r.out, "DIFFERS")) << r.out;
  EXPECT_TRUE(contains(r.out, "more than 4x what two native runs differ by")) << r.out;

  // Within the tolerance: one native run.
  r = run("4.01", "same");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(read_file(dir_ / "same.log")),
            (std::vector<std::string>{"passthrough", "online"}));
  EXPECT_FALSE(contains(r.err, "native2")) << r.err;

  // The second native run fails: the result is the tolerance's, a note says why, and the
  // outputs are kept.
  r = run("4.2105263", "failing", true);
  EXPECT_TRUE(contains(r.err, "[3/3] native2: failed (exit 3): fake: no memory left")) << r.err;
  EXPECT_TRUE(contains(r.out, "DIFFERS")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "note: native's second run failed (exit 3: fake: no memory left): "
                       "the losses were judged by --loss-tolerance alone"))
      << r.out;
  EXPECT_TRUE(contains(r.err, "compare: outputs and stats of each run are in")) << r.err;
}

TEST_F(CompareEndToEnd, AFailingBaselineGetsItsRowAndTheRestGoesOn) {
  const Result r =
      compare({"--modes", "native", "--baselines", "offload,checkpoint"}, {{"NO_CHECKPOINT", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;  // native ran
  EXPECT_EQ(log_lines().size(), 3u);
  EXPECT_TRUE(contains(r.err,
                       "[3/3] checkpoint: failed (exit 2): fake.sh: error: unrecognized "
                       "arguments: --checkpoint"))
      << r.err;
  EXPECT_TRUE(contains(r.out,
                       "\ncheckpoint  failed: exit 2: fake.sh: error: unrecognized "
                       "arguments: --checkpoint (the command must accept --checkpoint, as "
                       "samples/pytorch/*.py do)\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "\noffload          23.0")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "umswap vs checkpointing (checkpoint): nothing to compare: the "
                       "checkpoint run failed"))
      << r.out;
  // No umswap run: the offload line says there is nothing to compare it with.
  EXPECT_TRUE(contains(r.out,
                       "umswap vs save_on_cpu (offload): nothing to compare: no online or "
                       "replay run"))
      << r.out;
  EXPECT_EQ(run_directories().size(), 1u);  // kept: a run failed
}

TEST_F(CompareEndToEnd, AFailingModeGetsItsRowAndTheOthersStillRun) {
  const Result r = compare({}, {{"FAIL_MODE", "online"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;  // native ran
  EXPECT_EQ(log_lines().size(), 4u);   // native, managed, online, record; no replay
  EXPECT_TRUE(contains(r.err, "[3/5] online: failed (exit 3): fake: no memory left")) << r.err;
  EXPECT_TRUE(contains(r.err, "[5/5] replay: failed: record run failed: exit 3")) << r.err;
  EXPECT_TRUE(contains(r.out, "online    failed: exit 3: fake: no memory left\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "replay    failed: record run failed: exit 3: fake: no memory left"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "native         13.0")) << r.out;
  EXPECT_TRUE(contains(r.out, "managed        13.0")) << r.out;
  // The outputs are kept and the directory named.
  const std::vector<fs::path> dirs = run_directories();
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_TRUE(contains(r.err, "compare: outputs and stats of each run are in " + dirs[0].string()))
      << r.err;
  EXPECT_TRUE(contains(read_file(dirs[0] / "online.err"), "fake: no memory left"));
  EXPECT_TRUE(contains(read_file(dirs[0] / "native.out"), "iter 3 ms 13.5"));
}

TEST_F(CompareEndToEnd, NativeFailingExits1) {
  const Result r = compare({"--modes", "native,managed"}, {{"FAIL_MODE", "passthrough"}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out, "native    failed: exit 3: fake: no memory left")) << r.out;
  EXPECT_TRUE(contains(r.out, "managed        13.0")) << r.out;
}

TEST_F(CompareEndToEnd, AnInterruptedRunStopsTheComparison) {
  const Result r = compare({"--modes", "native,managed,online"}, {{"INT_MODE", "passthrough"}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(log_lines().size(), 1u);
  EXPECT_TRUE(contains(r.out, "native    failed: exit 130 (signal 2)")) << r.out;
  EXPECT_TRUE(contains(r.out, "managed   skipped: interrupted\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "online    skipped: interrupted\n")) << r.out;
}

TEST_F(CompareEndToEnd, NoTraceRecorded) {
  const Result r = compare({"--modes", "native,replay", "--budget", "1M"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(log_lines().size(), 2u);  // native and record
  EXPECT_TRUE(contains(r.out, "replay    failed: no trace recorded (")) << r.out;
  EXPECT_TRUE(contains(r.err, "[2/3] record: done")) << r.err;
}

TEST_F(CompareEndToEnd, UnknownBudgetSkipsTheBudgetedModes) {
  const Result r = compare({"--modes", "native,online"}, {{"NO_SUMMARY", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(log_lines().size(), 1u);
  EXPECT_TRUE(contains(r.out, "online    skipped: budget unknown: 50% is a share of the footprint"))
      << r.out;
  EXPECT_TRUE(contains(r.err, "[2/2] online: skipped (budget unknown")) << r.err;
}

TEST_F(CompareEndToEnd, KeepKeepsTheOutputs) {
  const Result r = compare({"--modes", "native", "--keep"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<fs::path> dirs = run_directories();
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_TRUE(fs::exists(dirs[0] / "native.out"));
  EXPECT_TRUE(contains(r.err, "are in " + dirs[0].string())) << r.err;
}

TEST_F(CompareEndToEnd, BadFlagsExit2BeforeAnythingRuns) {
  for (const auto& flags : {std::vector<std::string>{"--modes", "native,turbo"},
                            std::vector<std::string>{"--budget", "half"},
                            std::vector<std::string>{"--steps-hint", "-1"}}) {
    const Result r = compare(flags);
    EXPECT_EQ(r.exit_code, 2) << flags[0];
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "umswap: error: " + flags[0] + ": '")) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_ / "log"));
}

TEST_F(CompareEndToEnd, DefaultCommandNeedsAGpuAndNeverOversubscribes) {
  // A copy of umswap with a stand-in for the bundled sample next to it.
  fs::create_directories(dir_ / "bin");
  const fs::path binary = dir_ / "bin" / "umswap";
  fs::copy_file(UMSWAP_TEST_CLI_BINARY, binary);
  const fs::path sample = dir_ / "bin" / "cudnn_vgg16";
  std::ofstream(sample) << "#!/bin/sh\n"
                           "echo \"$*\" >> \"$LOG\"\n"
                           "case \"$*\" in *--print-footprint*) echo footprint_bytes 1048576;; "
                           "*) echo 'iter 0 ms 1.0';; esac\n";
  ::chmod(sample.c_str(), 0755);
  const Result r =
      umswap({"compare", "--modes", "native"},
             {{"LOG", (dir_ / "log").string()}, {"TMPDIR", tmp_.string()}}, binary.string());
  if (contains(r.err, "needs a GPU")) {
    // No GPU here: say so, run nothing.
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err,
                         "umswap: error: compare: the default command (cudnn_vgg16) needs "
                         "a GPU, and there is none here: "))
        << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "log"));
    EXPECT_TRUE(run_directories().empty());
  } else {
    // A GPU with more than 1.25 MiB free: batch 64 fits, 20 steps, and a managed limit is set.
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err,
                         "compare: cudnn_vgg16 --batch 64 --steps 20 (footprint 1.00 MiB, "
                         "budget 50% = 512.00 KiB; UMSWAP_MANAGED_LIMIT="))
        << r.err;
    const std::vector<std::string> runs = log_lines();
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0], "--print-footprint --batch 64");
    EXPECT_EQ(runs[1], "--batch 64 --steps 20");
  }
}

// --- umswap replay -------------------------------------------------------------------------------

class ReplayEndToEnd : public umswap_test::UmswapProcess {};

TEST_F(ReplayEndToEnd, MissingTraceExits1NamingTheFile) {
  const std::string missing = (dir_ / "missing.umtrace").string();
  const Result r = umswap({"replay", missing, "--", "touch", (dir_ / "ran").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "umswap: error: replay: " + missing + ": cannot open: No such file or directory\n");
  EXPECT_FALSE(fs::exists(dir_ / "ran"));  // nothing ran
}

TEST_F(ReplayEndToEnd, CorruptTraceExits1NamingTheProblem) {
  const std::string good = (dir_ / "good.umtrace").string();
  std::string error;
  ASSERT_TRUE(umswap::write_trace_file(good, small_trace(), &error)) << error;
  std::string bytes = read_file(good);
  bytes[bytes.size() / 2] ^= 0x40;
  const std::string bad = (dir_ / "bad.umtrace").string();
  std::ofstream(bad, std::ios::binary) << bytes;
  const Result damaged = umswap({"replay", bad, "--", "true"});
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_TRUE(damaged.err.starts_with("umswap: error: replay: " + bad + ": damaged: checksum"))
      << damaged.err;

  std::ofstream(bad, std::ios::binary) << "hello\n";
  const Result text = umswap({"replay", bad, "--", "true"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_TRUE(contains(text.err, bad + ": not a umswap trace")) << text.err;
}

TEST_F(ReplayEndToEnd, ValidTraceIsPassedAsAnAbsolutePath) {
  std::string error;
  ASSERT_TRUE(umswap::write_trace_file((dir_ / "run.umtrace").string(), small_trace(), &error))
      << error;
  cwd_ = dir_;
  const Result r = umswap({"replay", "run.umtrace", "--budget", "2G", "--", "sh", "-c",
                           "echo \"$UMSWAP_MODE|$UMSWAP_REPLAY|$UMSWAP_BUDGET\"; exit 4"},
                          {{"UMSWAP_MODE", "managed"}});
  EXPECT_EQ(r.exit_code, 4) << r.err;  // the command's own code
  EXPECT_EQ(r.out, "replay|" + (dir_ / "run.umtrace").string() + "|2G\n");
  EXPECT_EQ(r.err, "");
}

}  // namespace
