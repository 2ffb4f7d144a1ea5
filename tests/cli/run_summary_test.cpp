// The summary `umswap run` prints when the command ends (run_summary.h), from stats files.
#include "umswap/cli/run_summary.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace umswap::cli {
namespace {

using json = nlohmann::json;

// Six iterations; the plan in force from launch 300, which iteration 2 begins at: the steady
// iterations are 3, 4 and 5 (the first one under the plan is left out).
json stats(const std::string& mode = "online") {
  return json::parse(R"({
    "umswap_stats_version": 1,
    "allocator": {"managed_bytes_peak": 21474836480,
                  "allocations_by_api": {"cudaMalloc": 10, "cudaMallocAsync": 0},
                  "unmanaged_vmm_allocations": 0},
    "advisor": {"mode": ")" +
                     mode + R"(", "budget_bytes": 10737418240, "state": "applied",
                "fallback": null, "peak_resident_bytes": 10737418240,
                "plan": {"applied_from_launch": 300}},
    "iterations": [
      {"index": 0, "first_step": 0, "wall_ms": 2500.0, "gpu_page_faults": 9000,
       "bytes_htod": 1000000000, "bytes_dtoh": 0},
      {"index": 1, "first_step": 150, "wall_ms": 900.0, "gpu_page_faults": 500,
       "bytes_htod": 1000000000, "bytes_dtoh": 0},
      {"index": 2, "first_step": 300, "wall_ms": 700.0, "gpu_page_faults": 50,
       "bytes_htod": 1000000000, "bytes_dtoh": 0},
      {"index": 3, "first_step": 450, "wall_ms": 410.0, "gpu_page_faults": 0,
       "bytes_htod": 2000000000, "bytes_dtoh": 1000000000},
      {"index": 4, "first_step": 600, "wall_ms": 430.0, "gpu_page_faults": 3,
       "bytes_htod": 4000000000, "bytes_dtoh": 3000000000},
      {"index": 5, "first_step": 750, "wall_ms": 420.0, "gpu_page_faults": 0,
       "bytes_htod": 3000000000, "bytes_dtoh": 2000000000}
    ]})");
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A plan relearned later: the steady iterations start after the first plan's first one, and the
// line names both.
TEST(RunSummary, CountsFromTheFirstPlanAndNamesTheRelearnedOne) {
  json s = stats();
  s["advisor"]["first_plan_applied_from_launch"] = 150;  // iteration 1
  s["advisor"]["plan"]["applied_from_launch"] = 600;     // relearned: iteration 4
  const std::string t = run_summary_text({{"stats-1.json", s}}, true);
  EXPECT_TRUE(has(t,
                  "umswap: 6 iterations, median 425.0 ms over 4 iterations under the plan; "
                  "the plan in force from iteration 1, relearned from iteration 4\n"))
      << t;
  // Made too late to take effect (after the last iteration began): not named.
  s["advisor"]["plan"]["applied_from_launch"] = 900;
  const std::string u = run_summary_text({{"stats-1.json", s}}, true);
  EXPECT_TRUE(has(u, "; the plan in force from iteration 1\n")) << u;
  // No plan started (null), one staged: no plan named, the steady iterations from the third.
  s["advisor"]["first_plan_applied_from_launch"] = nullptr;
  s["advisor"]["plan"]["applied_from_launch"] = 300;
  const std::string v = run_summary_text({{"stats-1.json", s}}, true);
  EXPECT_TRUE(has(v, "umswap: 6 iterations, median 425.0 ms over 4 steady iterations\n")) << v;
  // An older file without the first plan's launch: counted from the last plan, as before.
  s["advisor"].erase("first_plan_applied_from_launch");
  s["advisor"]["plan"]["applied_from_launch"] = 300;
  EXPECT_TRUE(has(run_summary_text({{"stats-1.json", s}}, true),
                  "over 3 iterations under the plan; the plan in force from iteration 2\n"));
}

TEST(RunSummary, SaysTheSteadyFiguresUnderThePlan) {
  const std::string t = run_summary_text({{"stats-1.json", stats()}}, true);
  EXPECT_TRUE(has(t,
                  "umswap: 6 iterations, median 420.0 ms over 3 iterations under the plan; "
                  "the plan in force from iteration 2\n"))
      << t;
  EXPECT_TRUE(has(t, "per iteration: 3.00 GB to the GPU, 2.00 GB to the host, 1 GPU page faults"))
      << t;
  EXPECT_TRUE(has(t, "peak GPU-resident 10.00 GiB for a budget of 10.00 GiB (100%)\n")) << t;
  EXPECT_TRUE(has(t, "advisor online, applied\n")) << t;
  EXPECT_TRUE(has(t, "10 allocations, none stream-ordered")) << t;
  EXPECT_TRUE(has(t, "backend:cudaMallocAsync")) << t;
  EXPECT_FALSE(has(t, "stats-1.json")) << "one process: not named";
  for (size_t at = 0; at < t.size();) {  // every line is umswap's
    EXPECT_TRUE(t.compare(at, 8, "umswap: ") == 0 || t.compare(at, 8, "        ") == 0) << t;
    at = t.find('\n', at) + 1;
  }
}

TEST(RunSummary, SaysWhetherPyTorchsBlocksWereFollowed) {
  json s = stats();
  s["torch_blocks"] = {{"state", "checked"}, {"segments", 103}, {"blocks", 14166}};
  std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t,
                  "none stream-ordered; PyTorch's caching allocator's blocks followed in 103 "
                  "segments (plans follow each tensor)"))
      << t;
  EXPECT_FALSE(has(t, "backend:cudaMallocAsync")) << t;
  s["torch_blocks"]["state"] = "not PyTorch";  // a CUDA program of its own: no PyTorch advice
  t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "none stream-ordered (plans follow whole allocations)\n")) << t;
  s["torch_blocks"]["state"] = "it is not the native caching allocator (another backend)";
  t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "PyTorch's blocks not followed: it is not the native caching allocator")) << t;
  EXPECT_TRUE(has(t, "backend:cudaMallocAsync")) << t;
}

TEST(RunSummary, SaysWhenTheResidencyCountIsUnreliable) {
  json s = stats();  // 12 GB in and 6 GB out over the iterations
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "that count is unreliable"))
      << "20 GiB managed";
  s["allocator"]["managed_bytes_peak"] = 4294967296;  // 4 GiB: 6 GB more in is impossible
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t,
                  "(that count is unreliable: 5.59 GiB more came to the GPU than left it, past "
                  "the 4.00 GiB of managed memory, so CUPTI's records of moves are incomplete)"))
      << t;
}

// CUDA graph launches (XLA's command buffers by default): their kernels' memory is neither planned
// nor counted, so the summary says the figures leave it out; none, no line.
TEST(RunSummary, SaysWhenCudaGraphsRanKernelsItCannotSee) {
  json s = stats();
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "CUDA graph"));
  s["advisor"]["graph_launches"] = 0;
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "CUDA graph"));
  s["advisor"]["graph_launches"] = 183;
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t,
                  "        183 CUDA graph launches (XLA's command buffers, torch.compile's "
                  "reduce-overhead mode) ran kernels umswap cannot see into: the memory they "
                  "touch is neither planned nor counted, so the figures above leave it out "
                  "and the budget does not bound it (docs/jax.md)\n"))
      << t;
  s["advisor"]["graph_launches"] = 1;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), "1 CUDA graph launch (XLA's"));
  // Without a budget there is none to bound.
  const std::string n = run_summary_text({{"a", s}}, false);
  EXPECT_TRUE(has(n, "so the figures above leave it out (docs/jax.md)\n")) << n;
}

TEST(RunSummary, SaysWhenThePeakIsOverTheBudget) {
  json s = stats();
  s["advisor"]["peak_resident_bytes"] = 11811160064;  // 11 GiB
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "for a budget of 10.00 GiB (110%: over it)")) << t;
  // Without a budget, budget_bytes is the GPU's memory: not judged.
  const std::string n = run_summary_text({{"a", s}}, false);
  EXPECT_TRUE(has(n, "peak GPU-resident 11.00 GiB (no budget)")) << n;
}

// Under the plan: the steady iterations' own peaks, which is what the plan holds; the whole run's,
// learning included, beside it when higher.
TEST(RunSummary, SaysThePeakUnderThePlanApartFromLearning) {
  json s = stats();
  s["advisor"]["peak_resident_bytes"] = 16106127360;  // 15 GiB, in a learning iteration
  for (json& it : s["iterations"]) it["peak_resident_bytes"] = 16106127360;
  s["iterations"][3]["peak_resident_bytes"] = 10200547328;  // 9.5 GiB
  s["iterations"][4]["peak_resident_bytes"] = 10737418240;  // 10 GiB
  s["iterations"][5]["peak_resident_bytes"] = 10468982784;  // 9.75 GiB
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t,
                  "peak GPU-resident 10.00 GiB under the plan for a budget of 10.00 GiB (100%); "
                  "15.00 GiB in the whole run, learning included\n"))
      << t;
  // One steady iteration over it: judged over.
  s["iterations"][5]["peak_resident_bytes"] = 12884901888;  // 12 GiB
  const std::string u = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(u,
                  "peak GPU-resident 12.00 GiB under the plan for a budget of 10.00 GiB (120%: "
                  "over it); 15.00 GiB in the whole run"))
      << u;
  // No plan in force: the whole run's peak, as before.
  s["advisor"]["plan"]["applied_from_launch"] = nullptr;
  s["advisor"]["first_plan_applied_from_launch"] = nullptr;
  const std::string v = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(v, "peak GPU-resident 15.00 GiB for a budget of 10.00 GiB (150%: over it)\n"))
      << v;
}

TEST(RunSummary, SaysTheFallbackAndTheAllocationPath) {
  json s = stats("replay");
  s["advisor"]["fallback"] = "the launches no longer match the trace";
  s["advisor"]["state"] = "learning";
  s["allocator"]["allocations_by_api"] = {{"cudaMallocAsync", 40}, {"cudaMalloc", 0}};
  s["allocator"]["unmanaged_vmm_allocations"] = 2;
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "advisor replay, learning: the launches no longer match the trace")) << t;
  EXPECT_TRUE(has(t, "40 allocations, all stream-ordered")) << t;
  EXPECT_TRUE(has(t, "2 mapped with cuMemMap, not managed")) << t;
  EXPECT_FALSE(has(t, "backend:cudaMallocAsync")) << t;
}

TEST(RunSummary, WithoutAPlanUsesTheIterationsAfterTheFirstTwo) {
  json s = stats();
  s["advisor"].erase("plan");
  s["advisor"]["state"] = "learning";
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "6 iterations, median 425.0 ms over 4 steady iterations\n")) << t;
  EXPECT_FALSE(has(t, "plan in force")) << t;
}

// A plan relearned later whose iterations stay lower than the first plan's: the peak under the
// plan (both, as the steady iterations are counted) and, beside it, the relearned plan's own.
TEST(RunSummary, SaysThePeakUnderTheRelearnedPlan) {
  json s = stats();
  s["advisor"]["first_plan_applied_from_launch"] = 150;  // iteration 1: steady from 2
  s["advisor"]["plan"]["applied_from_launch"] = 450;     // relearned: iteration 3, counted from 4
  for (json& it : s["iterations"]) it["peak_resident_bytes"] = 10737418240;  // 10 GiB
  s["iterations"][2]["peak_resident_bytes"] = 12884901888;                   // 12 GiB
  s["iterations"][3]["peak_resident_bytes"] = 11811160064;                   // 11 GiB
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t,
                  "peak GPU-resident 12.00 GiB under the plan for a budget of 10.00 GiB (120%: "
                  "over it); 10.00 GiB (100%) from iteration 4 on, under the relearned plan\n"))
      << t;
  // Over the budget under the relearned plan too: said so.
  s["iterations"][4]["peak_resident_bytes"] = 11274289152;  // 10.5 GiB
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "; 10.50 GiB (105%: over it) from iteration 4 on, under the relearned plan\n"))
      << run_summary_text({{"a", s}}, true);
  s["iterations"][4]["peak_resident_bytes"] = 10737418240;
  // Without a budget, no share; with the relearned plan as high, nothing beside it.
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, false),
                  "(no budget); 10.00 GiB from iteration 4 on, under the relearned plan\n"));
  s["iterations"][5]["peak_resident_bytes"] = 12884901888;
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "under the relearned plan"));
  // Not relearned: nothing beside it.
  EXPECT_FALSE(has(run_summary_text({{"a", stats()}}, true), "under the relearned plan"));
}

// Iterations the run's end found only weakly (low confidence, or over a short tail of the run):
// a line says their figures are probably not the loop's; none for a steady detection or marks.
TEST(RunSummary, SaysWhenTheIterationsAreDoubtful) {
  json s = stats();
  s["detection"] = {{"source", "period"},
                    {"period", 39},
                    {"confidence", 0.476},
                    {"steps", 28888},
                    {"warmup_steps", 28473}};
  const std::string doubt =
      "(those iterations are a period of 39 launches found over the last 1% of the run's 28888 "
      "launches, confidence 0.48: probably not the program's loop)\n";
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), doubt)) << run_summary_text({{"a", s}}, true);
  s["detection"]["confidence"] = 0.97;  // confident, but over the last 1% only
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), "over the last 1% of the run's"));
  s["detection"]["warmup_steps"] = 4000;  // confident and over 86% of the run
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "probably not"));
  s["detection"]["confidence"] = 0.5;  // over most of the run, but weak
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), "confidence 0.50: probably not"));
  s["detection"]["source"] = "api";  // marks: not judged
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "probably not"));
  EXPECT_FALSE(has(run_summary_text({{"a", stats()}}, true), "probably not"));
}

// Online under a budget, learning at the end, no plan ever made (the first plan's field there,
// null, and no last plan): the summary says why that usually is; not without a budget, not in
// replay, not when a plan started or one was made too late to start, not for a file without the
// field.
TEST(RunSummary, SaysWhyNoPlanWasMade) {
  json s = stats();
  s["advisor"].erase("plan");
  s["advisor"]["state"] = "learning";
  s["advisor"]["first_plan_applied_from_launch"] = nullptr;
  const std::string why = "no plan was made: the launches never repeated as one iteration";
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), why)) << run_summary_text({{"a", s}}, true);
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, false), why));
  json replayed = s;
  replayed["advisor"]["mode"] = "replay";
  EXPECT_FALSE(has(run_summary_text({{"a", replayed}}, true), why));
  json started = s;
  started["advisor"]["first_plan_applied_from_launch"] = 300;
  EXPECT_FALSE(has(run_summary_text({{"a", started}}, true), why));
  json staged = s;  // made, but too late to start
  staged["advisor"]["plan"] = {{"applied_from_launch", 900}};
  EXPECT_FALSE(has(run_summary_text({{"a", staged}}, true), why));
  json off = s;
  off["advisor"]["state"] = "off";
  EXPECT_FALSE(has(run_summary_text({{"a", off}}, true), why));
  EXPECT_FALSE(has(run_summary_text({{"a", stats()}}, true), why));
}

// A plan with launches whose own data is over the budget: the summary says the smallest budget
// that can be held (only with a budget given, and only when there are such launches).
TEST(RunSummary, SaysWhenLaunchesTouchMoreThanTheBudget) {
  json s = stats();
  s["advisor"]["plan"]["unfit_steps"] = 3;
  s["advisor"]["plan"]["largest_step_bytes"] = 12884901888;  // 12 GiB, over the 10 GiB budget
  const std::string line =
      "3 launches of the iteration touch more managed memory than the budget leaves for it (one "
      "touches 12.00 GiB): no plan holds the budget there, and what does not fit faults in; no "
      "budget below that can be held\n";
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), line)) << run_summary_text({{"a", s}}, true);
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, false), "more managed memory"));
  s["advisor"]["plan"]["unfit_steps"] = 1;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), "1 launch of the iteration touches more"));
  s["advisor"]["plan"]["unfit_steps"] = 0;
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "more managed memory"));
  EXPECT_FALSE(has(run_summary_text({{"a", stats()}}, true), "more managed memory"));
}

TEST(RunSummary, NamesEachProcessAndSkipsThoseWithoutTheAdvisor) {
  json managed = stats();
  managed.erase("advisor");  // a launcher, or --mode managed
  const std::string t = run_summary_text(
      {{"stats-1.json", stats()}, {"stats-2.json", managed}, {"stats-3.json", stats()}}, true);
  EXPECT_TRUE(has(t, "umswap: stats-1.json: 6 iterations")) << t;
  EXPECT_TRUE(has(t, "umswap: stats-3.json: 6 iterations")) << t;
  EXPECT_FALSE(has(t, "stats-2.json")) << t;
  EXPECT_EQ(run_summary_text({{"stats-2.json", managed}}, true), "");
  EXPECT_EQ(run_summary_text({}, true), "");
}

TEST(RunSummary, CountsTheProcessesPastTheLimit) {
  std::vector<SummaryInput> many;
  for (int i = 0; i < 5; ++i) many.push_back({"stats-" + std::to_string(i) + ".json", stats()});
  const std::string t = run_summary_text(many, true, 2);
  EXPECT_TRUE(has(t, "stats-1.json")) << t;
  EXPECT_FALSE(has(t, "stats-2.json")) << t;
  EXPECT_TRUE(has(t, "umswap: and 3 more processes")) << t;
}

TEST(RunSummary, AFileWithoutIterationsStillSaysWhatItKnows) {
  json s = stats();
  s.erase("iterations");
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "umswap: 0 iterations\n")) << t;
  EXPECT_FALSE(has(t, "per iteration")) << t;
  EXPECT_TRUE(has(t, "advisor online, applied")) << t;
}

// Engine vmm runs no advisor: its process is still shown, with the engine named, the peaks on
// its chunks against the pool, and its moves (or that there were none).
TEST(RunSummary, NamesEngineVmmAndItsChunks) {
  json s = stats();
  s.erase("advisor");
  s["engine"] = "vmm";
  s["allocator"]["allocations_by_api"] = {{"cudaMalloc", 12}, {"cudaMallocAsync", 3}};
  s["vmm"] = {{"budget_bytes", 4294967296},
              {"gpu_bytes_peak", 4294967296},
              {"host_bytes_peak", 2147483648},
              {"out_of_memory", 0}};
  const std::string t = run_summary_text({{"a", s}}, true);
  EXPECT_TRUE(has(t, "umswap: 6 iterations, median 425.0 ms over 4 steady iterations\n")) << t;
  EXPECT_TRUE(has(t,
                  "peak on GPU chunks 4.00 GiB for a pool of 4.00 GiB (100%), peak on host "
                  "chunks 2.00 GiB\n"))
      << t;
  EXPECT_TRUE(has(t, "moves: none (every step found its ranges on the GPU, or none was traced)\n"))
      << t;
  EXPECT_TRUE(has(t, "engine vmm: 15 allocations in 2 MiB chunks\n")) << t;
  EXPECT_FALSE(has(t, "managed memory")) << t;
  EXPECT_FALSE(has(t, "per iteration")) << t;  // CUPTI's migrations: none under vmm
  s["vmm"]["windows"] = 40;
  s["vmm"]["window_ms"] = 812.4;
  s["vmm"]["ranges_restored"] = 35;
  s["vmm"]["ranges_prefetched"] = 12;
  s["vmm"]["ranges_evicted"] = 50;
  s["vmm"]["bytes_to_gpu"] = 3221225472;
  s["vmm"]["bytes_to_host"] = 2147483648;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "moves: 40 windows held the program 812 ms in all; 35 ranges in for their "
                  "step, 12 ahead, 50 out; 3.00 GiB to the GPU, 2.00 GiB to the host\n"));
  // Each way in a steady iteration (the mean over the steady ones: iterations 2-5 here).
  for (json& it : s["iterations"]) {
    const bool steady = it["index"].get<int>() >= 2;
    it["vmm_bytes_to_gpu"] = steady ? 1073741824 : 8589934592;
    it["vmm_bytes_to_host"] = steady ? 536870912 : 8589934592;
  }
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "3.00 GiB to the GPU, 2.00 GiB to the host (1.00 GiB in and 512.0 MiB out a "
                  "steady iteration)\n"));
  // Not when the window log dropped windows (the iterations' figures fall short), nor over
  // fewer than three steady iterations.
  s["vmm"]["windows_not_logged"] = 7;
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "a steady iteration")) << s.dump();
  s["vmm"].erase("windows_not_logged");
  json few = s;
  few["iterations"].erase(few["iterations"].begin() + 3, few["iterations"].end());
  EXPECT_FALSE(has(run_summary_text({{"a", few}}, true), "a steady iteration"));
  // CUDA graph launches: said under engine vmm too, only when there were some.
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "CUDA graph"));
  s["vmm"]["graph_launches"] = 0;
  EXPECT_FALSE(has(run_summary_text({{"a", s}}, true), "CUDA graph"));
  s["vmm"]["graph_launches"] = 16;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "\n        16 CUDA graph launches (XLA's command buffers, torch.compile's "
                  "reduce-overhead mode) ran kernels umswap cannot see into: no window brings "
                  "what they reach to the GPU, and what is on host chunks is read over the link "
                  "(docs/jax.md)\n"));
  s["vmm"].erase("graph_launches");
  s["vmm"]["out_of_memory"] = 2;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true), "15 allocations in 2 MiB chunks, 2 refused"));
  s["vmm"]["block_bytes"] = 16777216;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "engine vmm: 15 allocations in 16 MiB blocks and 2 MiB chunks, 2 refused"));
  s["vmm"]["ranges_reused"] = 9;
  s["vmm"]["kept_bytes"] = 1073741824;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "16 MiB blocks and 2 MiB chunks, 9 of them in released ranges kept mapped "
                  "(1.00 GiB kept at exit), 2 refused"));
  // The program's own mappings served as ranges (JAX's allocators).
  s["allocator"]["allocations_by_api"]["cuMemMap"] = 5;
  EXPECT_TRUE(has(run_summary_text({{"a", s}}, true),
                  "engine vmm: 20 allocations in 16 MiB blocks and 2 MiB chunks, 5 of them the "
                  "program's own mappings (cuMemMap, as JAX's allocators make them), 9 of them in "
                  "released ranges kept mapped"));
  // A file of engine um names it too, with or without the field.
  json um = stats();
  um["engine"] = "um";
  EXPECT_TRUE(has(run_summary_text({{"a", um}}, true), "managed memory (engine um)"));
  EXPECT_TRUE(has(run_summary_text({{"a", stats()}}, true), "managed memory (engine um)"));
}

}  // namespace
}  // namespace umswap::cli
