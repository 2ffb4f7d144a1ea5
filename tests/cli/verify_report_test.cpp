// `umswap run --verify`: the verdict on a run's stats files (verify_report.h), and the run itself
// end to end with a stand-in program that writes the stats file the library would.
#include "umswap/cli/verify_report.h"

#include <gtest/gtest.h>

#include "umswap/core/stats_file.h"

#include "umswap_process.h"

namespace umswap::cli {
namespace {

using nlohmann::json;
using umswap::kStatsFormatVersion;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

json copied(uint64_t out) {
  return {{"umswap_stats_version", kStatsFormatVersion},
          {"advisor", {{"evict_copy", {{"copied_out_bytes", out}, {"copied_in_bytes", out}}}}},
          {"copy_check",
           {{"harmful", 0},
            {"unforeseen",
             {{"windows", 100}, {"faults", 0}, {"copies_out_before_copy_back_ended", 0}}}}}};
}

TEST(VerifyReport, CleanCopiesPass) {
  const VerifyVerdict v = judge_verify({copied(1 << 30)}, {"a.json"});
  EXPECT_TRUE(v.ok) << v.text;
  EXPECT_TRUE(contains(v.text, "passed: 1.00 GiB copied")) << v.text;
  EXPECT_TRUE(contains(v.text, "100 page windows")) << v.text;
}

TEST(VerifyReport, AFaultOnADiscardedPageFailsAndNamesBufferAndKernel) {
  json s = copied(1 << 30);
  s["copy_check"]["unforeseen"]["faults"] = 4255;
  s["copy_check"]["unforeseen"]["first"] =
      json::array({{{"address", "0x7fce68001000"},
                    {"access", 1},
                    {"buffer", {{"index", 12}, {"base", "0x7fce68000000"}, {"size", 134217728}}},
                    {"steps_running", {"step 407 _Z10table_readPKPKfPfm"}}}});
  const VerifyVerdict v = judge_verify({s}, {"a.json"});
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.text, "FAILED: 4255 GPU page faults")) << v.text;
  EXPECT_TRUE(contains(v.text, "0x7fce68001000 in buffer 12 at 0x7fce68000000")) << v.text;
  EXPECT_TRUE(contains(v.text, "step 407 _Z10table_readPKPKfPfm")) << v.text;
  EXPECT_TRUE(contains(v.text, "UMSWAP_EVICT_COPY=0")) << v.text;
}

// The round trips (advisor/round_trips.h): equal hashes are counted in the verdict, a range
// back different fails it with its launches, unhashed trips are said to be so.
TEST(VerifyReport, RoundTripsThatCameBackDifferentFail) {
  json s = copied(1 << 30);
  s["advisor"]["evict_copy"]["round_trips"] = {
      {"hashed", true},
      {"page_bytes", 2 << 20},
      {"checked_pages", 512},
      {"mismatched_pages", 0},
      {"not_compared_pages", {{"no_slot", 0}, {"unmatched", 0}, {"away_at_exit", 0}}}};
  VerifyVerdict v = judge_verify({s}, {"a.json"});
  EXPECT_TRUE(v.ok) << v.text;
  EXPECT_TRUE(contains(v.text, "round trips: 512 pages (1.00 GiB) hashed")) << v.text;
  EXPECT_FALSE(contains(v.text, "not compared")) << v.text;

  s["advisor"]["evict_copy"]["round_trips"]["not_compared_pages"]["unmatched"] = 3;
  v = judge_verify({s}, {"a.json"});
  EXPECT_TRUE(v.ok) << v.text;
  EXPECT_TRUE(contains(v.text, "3 pages not compared")) << v.text;

  s["advisor"]["evict_copy"]["round_trips"]["mismatched_pages"] = 2;
  s["advisor"]["evict_copy"]["round_trips"]["first_mismatches"] =
      json::array({{{"page", "0x7f0000200000"},
                    {"left_at_launch", 1200},
                    {"back_at_launch", 1290},
                    {"left_kernel", "relu_fwd"},
                    {"back_kernel", "relu_bwd"},
                    {"buffer", {{"index", 7}, {"base", "0x7f0000000000"}, {"size", 1 << 30}}}}});
  v = judge_verify({s}, {"a.json"});
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.text, "FAILED: 2 pages")) << v.text;
  EXPECT_TRUE(contains(v.text,
                       "page 0x7f0000200000 in buffer 7 at 0x7f0000000000: out at "
                       "launch 1200 (relu_fwd), back at launch 1290 (relu_bwd)"))
      << v.text;
  EXPECT_TRUE(contains(v.text, "umswap's fault")) << v.text;
  EXPECT_FALSE(contains(v.text, "passed:")) << v.text;

  s["advisor"]["evict_copy"]["round_trips"] = {{"hashed", false},
                                               {"off_reason", "no pinned memory for the hashes"}};
  v = judge_verify({s}, {"a.json"});
  EXPECT_TRUE(v.ok) << v.text;
  EXPECT_TRUE(contains(v.text, "not hashed (no pinned memory for the hashes)")) << v.text;
}

// Copies that stopped before the program's end are said to have stopped (the check covers the
// run before); stopping at the end is not worth a line.
TEST(VerifyReport, CopiesStoppedEarlyAreSaid) {
  json s = copied(1 << 30);
  s["advisor"]["evict_copy"]["off_reason"] = "launches waited 2 s for the advisor";
  VerifyVerdict v = judge_verify({s}, {"a.json"});
  EXPECT_TRUE(v.ok) << v.text;
  EXPECT_TRUE(contains(v.text,
                       "note: the copy path stopped before the end (launches waited 2 s "
                       "for the advisor)"))
      << v.text;
  s["advisor"]["evict_copy"]["off_reason"] = "the program ends";
  v = judge_verify({s}, {"a.json"});
  EXPECT_FALSE(contains(v.text, "stopped before the end")) << v.text;
}

TEST(VerifyReport, FaultsInKernelsAreNamedNotFailed) {
  json s = copied(1 << 30);
  s["fault_kernels"] = {{"faults", 120},
                        {"outside_kernels", 20},
                        {"kernels", json::array({{{"kernel", "cudnn_sdpa_fprop"}, {"faults", 90}},
                                                 {{"kernel", "gemm"}, {"faults", 10}}})}};
  const VerifyVerdict v = judge_verify({s}, {"a.json"});
  EXPECT_TRUE(v.ok) << v.text;
  EXPECT_TRUE(contains(v.text,
                       "warning: 100 GPU page faults came while kernels ran, most while: "
                       "cudnn_sdpa_fprop (90); gemm (10)"))
      << v.text;
  // None in kernels: no warning.
  s["fault_kernels"]["outside_kernels"] = 120;
  EXPECT_FALSE(contains(judge_verify({s}, {"a.json"}).text, "warning")) << v.text;
  s.erase("fault_kernels");
  EXPECT_FALSE(contains(judge_verify({s}, {"a.json"}).text, "warning"));
}

TEST(VerifyReport, FaultsInKernelsThatMustBeResidentFail) {
  for (const bool copied_any : {true, false}) {
    json s = copied(copied_any ? 1 << 30 : 0);
    s["fault_kernels"] = {
        {"faults", 120},
        {"outside_kernels", 0},
        {"kernels", json::array({{{"kernel", "gemm"}, {"faults", 117}}})},
        {"must_be_resident",
         {{"faults", 3},
          {"kernels",
           json::array({{{"kernel", "cudnn_generated_fort_native_sdpa_fprop"}, {"faults", 3}}})}}}};
    const VerifyVerdict v = judge_verify({s}, {"a.json"});
    EXPECT_FALSE(v.ok) << v.text;
    EXPECT_TRUE(contains(v.text,
                         "FAILED: 3 GPU page faults inside kernels that compute differently on "
                         "memory not on the GPU: cudnn_generated_fort_native_sdpa_fprop (3)"))
        << v.text;
    EXPECT_FALSE(contains(v.text, "NOT VERIFIED")) << v.text;
    // None inside them: the copy path's verdict alone (passed, or not verified without copies).
    s["fault_kernels"]["must_be_resident"]["faults"] = 0;
    const VerifyVerdict clean = judge_verify({s}, {"a.json"});
    EXPECT_EQ(clean.ok, copied_any) << clean.text;
    EXPECT_FALSE(contains(clean.text, "inside kernels that compute")) << clean.text;
  }
}

TEST(VerifyReport, EachOtherProblemFails) {
  for (const char* what : {"early", "harmful", "lost"}) {
    json s = copied(1 << 30);
    if (std::string(what) == "early") {
      s["copy_check"]["unforeseen"]["copies_out_before_copy_back_ended"] = 3;
    } else if (std::string(what) == "harmful") {
      s["copy_check"]["harmful"] = 2;
    } else {
      s["advisor"]["evict_copy"]["lost_bytes"] = 4096;
    }
    const VerifyVerdict v = judge_verify({s}, {"a.json"});
    EXPECT_FALSE(v.ok) << what;
    EXPECT_TRUE(contains(v.text, "FAILED")) << what << ": " << v.text;
  }
}

TEST(VerifyReport, NothingCopiedOrNoStatsIsNotVerified) {
  json off = copied(0);
  off["advisor"]["evict_copy"]["off_reason"] = "no budget";
  VerifyVerdict v = judge_verify({off}, {"a.json"});
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.text, "copies off: no budget")) << v.text;
  EXPECT_TRUE(contains(v.text, "NOT VERIFIED")) << v.text;
  v = judge_verify({}, {});
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.text, "no stats file")) << v.text;
}

TEST(VerifyReport, OneBadProcessFailsTheRunAndIsNamed) {
  json bad = copied(1 << 30);
  bad["copy_check"]["harmful"] = 1;
  const VerifyVerdict v = judge_verify({copied(1 << 30), bad}, {"s-1.json", "s-2.json"});
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(contains(v.text, "s-1.json: passed")) << v.text;
  EXPECT_TRUE(contains(v.text, "s-2.json: FAILED")) << v.text;
}

class VerifyEndToEnd : public umswap_test::UmswapProcess {};

// The stand-in program writes to UMSWAP_STATS (a temporary file's %p pattern without --stats),
// as libumswap.so would: it sees UMSWAP_EVICT_COPY=1 and UMSWAP_VERIFY=1, and the verdict decides
// the exit code.
TEST_F(VerifyEndToEnd, TheVerdictDecidesTheExitCode) {
  const std::string clean = copied(1 << 30).dump();
  json bad_json = copied(1 << 30);
  bad_json["copy_check"]["unforeseen"]["faults"] = 7;
  const std::string bad = bad_json.dump();
  const auto writer = [](const std::string& text) {
    return "test \"$UMSWAP_EVICT_COPY\" = 1 && test \"$UMSWAP_VERIFY\" = 1 || exit 9; f=$(printf "
           "'%s' \"$UMSWAP_STATS\" | sed "
           "\"s/%p/$$/\"); printf '%s' '" +
           text + "' > \"$f\"";
  };
  umswap_test::Result r = umswap({"run", "--verify", "--", "sh", "-c", writer(clean)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "umswap: verify: passed")) << r.err;
  r = umswap({"run", "--verify", "--", "sh", "-c", writer(bad)});
  EXPECT_EQ(r.exit_code, kVerifyFailedExitCode) << r.err;
  EXPECT_TRUE(contains(r.err, "FAILED: 7 GPU page faults")) << r.err;
  // The program's own failure wins over the verdict.
  r = umswap({"run", "--verify", "--", "sh", "-c", writer(clean) + "; exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  // A program that writes nothing is not verified.
  r = umswap({"run", "--verify", "--", "true"});
  EXPECT_EQ(r.exit_code, kVerifyFailedExitCode) << r.err;
  EXPECT_TRUE(contains(r.err, "NOT VERIFIED")) << r.err;
  // With --stats the file stays where the user asked.
  const std::string kept = (dir_ / "mine.json").string();
  r = umswap({"run", "--verify", "--stats", kept, "--", "sh", "-c", writer(clean)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(kept));
}

}  // namespace
}  // namespace umswap::cli
