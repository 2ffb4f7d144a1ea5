// `umswap compare` of a torchrun command, the pure parts: which commands are torchrun, each
// rank's lines apart, one outcome per rank, rows and verdicts compared rank by rank, the
// environment that makes torchrun prefix each line with its rank.
#include "umswap/cli/compare.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace umswap::cli {
namespace {

using nlohmann::json;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(CompareTorchrun, WhichCommandsAreTorchrun) {
  using V = std::vector<std::string>;
  EXPECT_TRUE(is_torchrun_command(V{"torchrun", "--nproc-per-node", "2", "train.py"}));
  EXPECT_TRUE(is_torchrun_command(V{"/opt/venv/bin/torchrun", "train.py"}));
  EXPECT_TRUE(is_torchrun_command(V{"python3", "-m", "torch.distributed.run", "train.py"}));
  EXPECT_TRUE(is_torchrun_command(
      V{"/usr/bin/python3.11", "-u", "-X", "dev", "-m", "torch.distributed.launch", "train.py"}));
  EXPECT_FALSE(is_torchrun_command(V{}));
  EXPECT_FALSE(is_torchrun_command(V{"python3", "train.py", "-m", "torch.distributed.run"}));
  EXPECT_FALSE(is_torchrun_command(V{"python3", "-c", "import torch", "-m"}));
  EXPECT_FALSE(is_torchrun_command(V{"python3", "-m", "pytest"}));
  EXPECT_FALSE(is_torchrun_command(V{"python3", "-m"}));
  EXPECT_FALSE(is_torchrun_command(V{"./my_torchrun", "train.py"}));
  EXPECT_FALSE(is_torchrun_command(V{"./cudnn_vgg16", "--batch", "64"}));
}

TEST(CompareTorchrun, RankPrefixes) {
  auto strip = [](std::string_view line) { return strip_rank_prefix(line); };
  EXPECT_EQ(strip("[rank3]:iter 1 ms 2.5"),
            (std::pair<std::optional<int>, std::string_view>{3, "iter 1 ms 2.5"}));
  EXPECT_EQ(strip("[default12]:x").first, 12);  // torchrun's own, without the template
  EXPECT_EQ(strip("[default12]:x").second, "x");
  EXPECT_EQ(strip("[rank0]:").second, "");
  // Not a rank's prefix: the whole line, no rank.
  for (std::string_view line : {"iter 1 ms 2.5", "[rank]:iter", "[]:x", "[3]x", "[rank3] iter",
                                "[W1128 12:01:02.300 socket.cpp:5] warning",
                                "[rank1234567]:too many digits", "[ra nk1]:x", ""}) {
    const auto [rank, rest] = strip(line);
    EXPECT_FALSE(rank) << line;
    EXPECT_EQ(rest, line);
  }
}

// torchrun's own copy of each rank's stdout, whole lines: the last attempt's, by local rank.
TEST(CompareTorchrun, RankLogsFromTorchrunsLogDir) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / fmt::format("umswap-ranklogs-{}", ::getpid());
  fs::remove_all(root);
  auto write = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  };
  write("none_ab12/attempt_0/0/stdout.log", "iter 0 ms 1 loss 9\n");
  write("none_ab12/attempt_1/0/stdout.log", "iter 0 ms 1 loss 1\n");  // the restart's
  write("none_ab12/attempt_1/1/stdout.log", "iter 0 ms 2 loss 2\n");
  write("none_ab12/attempt_1/1/stderr.log", "not stdout\n");
  write("none_ab12/attempt_1/x/stdout.log", "not a rank\n");
  write("none_ab12/other/2/stdout.log", "not an attempt\n");
  const std::map<int, std::string> logs = read_rank_logs(root.string());
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs.at(0), "iter 0 ms 1 loss 1\n");
  EXPECT_EQ(logs.at(1), "iter 0 ms 2 loss 2\n");
  EXPECT_TRUE(read_rank_logs((root / "nowhere").string()).empty());
  fs::remove_all(root);
}

TEST(CompareTorchrun, EachRanksLinesApartWithoutTorchrunsOwn) {
  const std::map<int, std::string> split = split_rank_output(
      "[rank1]:iter 0 ms 20 loss 2.0\n"
      "[rank0]:iter 0 ms 10 loss 1.0\n"
      "W1128 torchrun's own warning\n"
      "[rank0]:iter 1 ms 11 loss 0.9\n"
      "[rank1]:iter 1 ms 21 loss 1.9\n"
      "[rank0]:checksum ab12");  // no newline at the end
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split.at(0), "iter 0 ms 10 loss 1.0\niter 1 ms 11 loss 0.9\nchecksum ab12\n");
  EXPECT_EQ(split.at(1), "iter 0 ms 20 loss 2.0\niter 1 ms 21 loss 1.9\n");
  EXPECT_TRUE(split_rank_output("no ranks\nhere\n").empty());
}

StatsFigures rank_stats(std::optional<uint64_t> rank, uint64_t peak) {
  StatsFigures s;
  s.rank = rank;
  s.peak_resident_bytes = peak;
  return s;
}

TEST(CompareTorchrun, OneOutcomePerRankWithItsLinesAndItsStats) {
  ModeOutcome whole;
  whole.mode = CompareMode::online;
  whole.status = ModeStatus::ok;
  whole.exit_code = 0;
  whole.wall_s = 9.5;
  whole.budget_bytes = 1000;
  whole.stats_error = "cannot read /t/online.%p.json";  // the pattern, not a file
  const std::string out =
      "[rank0]:iter 0 ms 10 loss 1.0\n[rank1]:iter 0 ms 20 loss 2.0\n[rank2]:iter 0 ms 30\n";
  // rank 1's file, rank 0's, and one from a process that was no rank; rank 2 left none.
  const std::vector<ModeOutcome> os =
      split_by_rank(whole, split_rank_output(out),
                    {rank_stats(1, 111), rank_stats(0, 100), rank_stats(std::nullopt, 999)});
  ASSERT_EQ(os.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const ModeOutcome& o = os[r];
    EXPECT_EQ(o.rank, r);
    EXPECT_EQ(o.mode, CompareMode::online);
    EXPECT_EQ(o.status, ModeStatus::ok);
    EXPECT_EQ(o.wall_s, 9.5);
    EXPECT_EQ(o.budget_bytes, 1000u);
    ASSERT_EQ(o.output.iterations.size(), 1u);
    EXPECT_DOUBLE_EQ(o.output.iterations[0].ms, 10.0 * (r + 1));
  }
  EXPECT_EQ(os[0].stats->peak_resident_bytes, 100u);
  EXPECT_EQ(os[0].stats_error, "");
  EXPECT_EQ(os[1].stats->peak_resident_bytes, 111u);
  EXPECT_FALSE(os[2].stats);
  EXPECT_EQ(os[2].stats_error, "no stats file from this rank");

  // Two files with rank 0 (a child of the rank used CUDA): the rank's own has the iterations.
  StatsFigures child = rank_stats(0, 7);
  StatsFigures own = rank_stats(0, 8);
  own.iterations.resize(3);
  for (const auto& files : {std::vector{child, own}, std::vector{own, child}}) {
    EXPECT_EQ(split_by_rank(whole, split_rank_output(out), files)[0].stats->peak_resident_bytes,
              8u);
  }

  // A rank seen only through its stats file still gets its row.
  const std::vector<ModeOutcome> only_stats = split_by_rank(whole, {}, {rank_stats(4, 5)});
  ASSERT_EQ(only_stats.size(), 1u);
  EXPECT_EQ(only_stats[0].rank, 4);
  EXPECT_TRUE(only_stats[0].output.iterations.empty());

  // No rank at all (torchrun failed before starting one): the whole run, saying so.
  ModeOutcome failed = whole;
  failed.status = ModeStatus::failed;
  failed.stats_error.clear();
  const std::vector<ModeOutcome> none =
      split_by_rank(failed, split_rank_output("torchrun: error\n"), {});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_FALSE(none[0].rank);
  EXPECT_EQ(none[0].status, ModeStatus::failed);
  EXPECT_EQ(none[0].stats_error, "no rank printed a line or left a stats file");
}

// A rank's outcome: four iterations at `ms`, losses `loss` + 0.1 * i (ranks train on their own
// data, so their losses differ), a stats file with the peak.
ModeOutcome ranked(CompareMode mode, int rank, double ms, double loss, uint64_t peak = 0) {
  ModeOutcome o;
  o.mode = mode;
  o.rank = rank;
  o.status = ModeStatus::ok;
  std::string text;
  for (int i = 0; i < 4; ++i) {
    text += fmt::format("iter {} ms {} loss {}\n", i, ms, loss + 0.1 * i);
  }
  o.output = parse_program_output(text);
  if (mode == CompareMode::online) {
    o.budget_bytes = 1000;
    StatsFigures s;
    s.rank = static_cast<uint64_t>(rank);
    s.peak_resident_bytes = peak;
    o.stats = s;
  }
  return o;
}

TEST(CompareTorchrun, RowsAreComparedWithNativesSameRank) {
  const std::vector<ModeOutcome> outcomes = {
      ranked(CompareMode::native, 0, 10, 1.0), ranked(CompareMode::native, 1, 20, 2.0),
      ranked(CompareMode::online, 0, 30, 1.0, 900),
      ranked(CompareMode::online, 1, 40, 2.5, 1200)};  // rank 1: other losses, over budget
  const std::vector<ModeRow> rows = compute_rows(outcomes, LinkRates{});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].rank, 0);
  EXPECT_DOUBLE_EQ(*rows[1].ratio_to_native, 1.0);  // rank 1's native against itself
  EXPECT_DOUBLE_EQ(*rows[2].ratio_to_native, 3.0);  // 30 / rank 0's 10
  EXPECT_DOUBLE_EQ(*rows[3].ratio_to_native, 2.0);  // 40 / rank 1's 20
  EXPECT_EQ(rows[2].same_result, true);             // rank 0's losses equal rank 0's
  EXPECT_EQ(rows[3].same_result, false);            // rank 1's are 2.5 against 2.0
  EXPECT_EQ(rows[2].budget_held, true);
  EXPECT_EQ(rows[3].budget_held, false);

  CompareReport report;
  report.outcomes = outcomes;
  report.rows = rows;
  const std::string table = render_table(rows);
  EXPECT_TRUE(contains(table, "\nnative r0 ")) << table;
  EXPECT_TRUE(contains(table, "\nonline r1 ")) << table;
  const std::string notes = render_notes(report);
  EXPECT_TRUE(contains(notes, "torchrun: one row per rank")) << notes;
  EXPECT_TRUE(contains(notes, "online r1 counted")) << notes;  // the budget not held, by rank
  EXPECT_FALSE(contains(notes, "online r0 counted")) << notes;
  const json j = compare_json(report);
  EXPECT_EQ(j["modes"][3]["rank"], 1);
  EXPECT_EQ(j["modes"][3]["result_match"], "differs");

  // Without ranks nothing changes: no rank in the names, the JSON's rank is null.
  std::vector<ModeOutcome> plain = {ranked(CompareMode::native, 0, 10, 1.0)};
  plain[0].rank.reset();
  CompareReport p;
  p.outcomes = plain;
  p.rows = compute_rows(plain, LinkRates{});
  EXPECT_TRUE(contains(render_table(p.rows), "\nnative  ")) << render_table(p.rows);
  EXPECT_FALSE(contains(render_notes(p), "torchrun")) << render_notes(p);
  EXPECT_TRUE(compare_json(p)["modes"][0]["rank"].is_null());
}

TEST(CompareTorchrun, EachRanksBaselineIsJudgedAgainstItsOwnRows) {
  auto offload = [](int rank, double ms) {
    ModeOutcome o = ranked(CompareMode::native, rank, ms, 1.0 + rank);
    o.baseline = CompareBaseline::offload;
    o.output.summary = {{"peak_allocated_bytes", 2000}};
    return o;
  };
  const std::vector<ModeOutcome> outcomes = {
      ranked(CompareMode::native, 0, 10, 1.0), ranked(CompareMode::native, 1, 10, 2.0),
      ranked(CompareMode::online, 0, 30, 1.0, 900), ranked(CompareMode::online, 1, 60, 2.0, 900)};
  const std::vector<ModeOutcome> baselines = {offload(0, 60), offload(1, 60)};
  const std::vector<ModeRow> rows = compute_rows(outcomes, LinkRates{});
  const std::vector<ModeRow> brows = compute_baseline_rows(baselines, outcomes);
  ASSERT_EQ(brows.size(), 2u);
  EXPECT_EQ(brows[1].rank, 1);
  EXPECT_DOUBLE_EQ(*brows[1].ratio_to_native, 6.0);
  EXPECT_EQ(brows[1].same_result, true);  // rank 1's losses, 2.0 + 0.1 i, as rank 1's native
  const std::vector<BaselineVerdict> v = baseline_verdicts(rows, brows);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].rank, 0);
  EXPECT_DOUBLE_EQ(*v[0].speedup, 2.0);  // 60 / rank 0's 30
  EXPECT_EQ(v[1].rank, 1);
  EXPECT_DOUBLE_EQ(*v[1].speedup, 1.0);  // 60 / rank 1's 60, not rank 0's 30
  EXPECT_TRUE(v[1].text.starts_with("umswap vs save_on_cpu (offload), rank 1: ")) << v[1].text;
}

TEST(CompareTorchrun, TheEnvironmentAsksTorchrunForPrefixedLines) {
  const CurrentEnv current{};
  CompareRunSettings settings{.run = CompareRun::online,
                              .budget_bytes = 1000,
                              .stats_path = "/t/online.%p.json",
                              .trace_path = "",
                              .managed_limit_bytes = std::nullopt,
                              .torchrun_log_dir = "/t/torchrun-logs"};
  auto value = [](const ChildEnvironment& env,
                  std::string_view name) -> std::optional<std::string> {
    for (const EnvVar& v : env.set) {
      if (v.name == name) return v.value;
    }
    return std::nullopt;
  };
  const ChildEnvironment env = plan_compare_environment(settings, current, "/u/libumswap.so");
  EXPECT_EQ(value(env, "PET_TEE"), "1");
  EXPECT_EQ(value(env, "PET_LOG_DIR"), "/t/torchrun-logs");
  EXPECT_EQ(value(env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"), "[rank${rank}]:");
  EXPECT_EQ(value(env, "UMSWAP_STATS"), "/t/online.%p.json");
  settings.torchrun_log_dir.clear();
  const ChildEnvironment plain = plan_compare_environment(settings, current, "/u/libumswap.so");
  EXPECT_FALSE(value(plain, "PET_TEE"));
  EXPECT_FALSE(value(plain, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"));
}

}  // namespace
}  // namespace umswap::cli
