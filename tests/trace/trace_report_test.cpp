// The report and the timeline of a trace with known figures (synthetic_trace.cpp).
#include "umswap/core/trace_report.h"

#include "synthetic_trace.h"
#include "umswap/core/trace_file.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace umswap {
namespace {

using nlohmann::json;
using trace::Trace;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  return lines;
}

// The line that starts with `prefix` (after leading spaces), or "" when there is none.
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (const std::string& line : lines_of(text)) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, prefix.size(), prefix) == 0) return line;
  }
  return "";
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::stringstream s(line);
  for (std::string w; s >> w;) words.push_back(w);
  return words;
}

using Words = std::vector<std::string>;

TEST(Report, FiguresOfThreeIterations) {
  const Trace t = test::three_iteration_trace();
  ASSERT_EQ(check_trace(t), std::nullopt);
  const std::string r = render_report(t);
  SCOPED_TRACE(r);

  EXPECT_EQ(line_starting(r, "umswap trace of"), "umswap trace of ./trainer (pid 4242)");
  EXPECT_EQ(words_of(line_starting(r, "steps ")),
            (Words{"steps", "10:", "9", "kernels,", "1", "memcpy,", "0", "memset;", "10", "with",
                   "GPU", "times"}));
  EXPECT_EQ(words_of(line_starting(r, "dropped records")).at(2), "5");

  EXPECT_EQ(words_of(line_starting(r, "found")), (Words{"found", "3", "(source:", "period)"}));
  EXPECT_EQ(words_of(line_starting(r, "period")),
            (Words{"period", "3", "steps,", "confidence", "0.90"}));
  EXPECT_EQ(words_of(line_starting(r, "warm-up")).at(1), "1");
  EXPECT_EQ(words_of(line_starting(r, "steps/iteration")), (Words{"steps/iteration", "3"}));
  EXPECT_EQ(words_of(line_starting(r, "time/iteration")),
            (Words{"time/iteration", "min", "1.50", "ms,", "median", "1.50", "ms,", "max", "2.00",
                   "ms"}));

  EXPECT_EQ(line_starting(r, "Kernels:"), "Kernels: 3 distinct, 9 launches (top 3 by launches)");
  // Ties keep the order of first launch: conv, relu, sgd.
  const std::vector<std::string> lines = lines_of(r);
  const auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("launches") != std::string::npos && l.find("share") != std::string::npos;
  });
  ASSERT_NE(header, lines.end());
  EXPECT_EQ(words_of(header[1]), (Words{"3", "33.3%", "300.00", "us", "conv"}));
  EXPECT_EQ(words_of(header[2]), (Words{"3", "33.3%", "150.00", "us", "relu"}));
  EXPECT_EQ(words_of(header[3]), (Words{"3", "33.3%", "60.00", "us", "sgd"}));

  EXPECT_EQ(words_of(line_starting(r, "count")),
            (Words{"count", "4", "(1", "freed", "before", "the", "trace", "was", "written)"}));
  EXPECT_EQ(words_of(line_starting(r, "footprint")).at(1), "7.06");
  EXPECT_EQ(words_of(line_starting(r, "largest")),
            (Words{"largest", "4.00", "MiB", "(buffer", "1,", "id", "11)"}));

  EXPECT_EQ(words_of(line_starting(r, "max ")),
            (Words{"max", "2.00", "MiB", "(step", "0,", "memcpy", "HtoD)"}));
  EXPECT_EQ(words_of(line_starting(r, "median ")),
            (Words{"median", "1.00", "MiB", "(over", "10", "steps)"}));

  // iteration steps time touched segments touched/seg faults HtoD DtoH
  EXPECT_EQ(words_of(line_starting(r, "0 ")),
            (Words{"0", "3", "2.00", "ms", "2.56", "MiB", "5.06", "MiB", "0.51", "100", "8.00",
                   "MiB", "1.00", "MiB"}));
  EXPECT_EQ(words_of(line_starting(r, "1 ")),
            (Words{"1", "3", "1.50", "ms", "2.56", "MiB", "5.06", "MiB", "0.51", "10", "2.00",
                   "MiB", "2.00", "MiB"}));
  EXPECT_EQ(words_of(line_starting(r, "2 ")), (Words{"2", "3", "1.50", "ms", "2.56", "MiB", "5.06",
                                                     "MiB", "0.51", "0", "0", "B", "0", "B"}));
  EXPECT_EQ(words_of(line_starting(r, "mean ")),
            (Words{"mean", "3", "1.67", "ms", "2.56", "MiB", "5.06", "MiB", "0.51", "36", "3.33",
                   "MiB", "1.00", "MiB"}));
  EXPECT_EQ(words_of(line_starting(r, "total ")),
            (Words{"total", "9", "5.00", "ms", "110", "10.00", "MiB", "3.00", "MiB"}));
  EXPECT_EQ(words_of(line_starting(r, "thrashing events  1 in")).at(2), "1");

  EXPECT_EQ(words_of(line_starting(r, "GPU page faults")).at(3), "150");
  EXPECT_EQ(words_of(line_starting(r, "moved HtoD")), (Words{"moved", "HtoD", "12.00", "MiB"}));
  EXPECT_EQ(words_of(line_starting(r, "moved DtoH")), (Words{"moved", "DtoH", "3.00", "MiB"}));
  EXPECT_EQ(words_of(line_starting(r, "CPU page faults")).at(3), "7");

  for (const std::string& line : lines) EXPECT_LE(line.size(), 100u) << line;
}

TEST(Report, WithoutIterationsOrSteps) {
  const std::string r = render_report(Trace{});
  EXPECT_NE(line_starting(r, "found").find("none"), std::string::npos) << r;
  EXPECT_EQ(line_starting(r, "iteration "), "") << r;  // no per-iteration table
  EXPECT_EQ(line_starting(r, "Kernels:"), "Kernels: 0 distinct, 0 launches") << r;
  EXPECT_NE(r.find("no steps"), std::string::npos) << r;
}

TEST(Report, SaysWhenTheRecordsOfMovesAreIncomplete) {
  Trace t;
  t.buffers.push_back({});
  t.buffers.back().size = uint64_t{2} << 30;
  t.totals.bytes_htod = uint64_t{10} << 30;
  t.totals.bytes_dtoh = uint64_t{7} << 30;  // 10 in, at most 7 + 2 of them possible
  std::string r = render_report(t);
  EXPECT_NE(line_starting(r, "records short").find("3.00 GiB more moved in than out"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("CUPTI's records of moves are incomplete here,\n"), std::string::npos) << r;
  t.totals.bytes_dtoh = uint64_t{8} << 30;  // 8 out + 2 that began on the host: possible
  r = render_report(t);
  EXPECT_EQ(line_starting(r, "records short"), "") << r;
}

TEST(Report, ManyIterationsAndLongNames) {
  Trace t = test::three_iteration_trace();
  t.names[1] = std::string(300, 'k');
  for (int i = 0; i < 12; ++i) {  // 12 more iterations of one sgd step each
    t.steps.push_back(t.steps[3]);
    t.steps.back().first_access = t.accesses.size();
    t.accesses.push_back(t.accesses[t.steps[3].first_access]);
    t.iterations.push_back({.first_step = t.steps.size() - 1, .step_count = 1, .counters = {}});
  }
  ASSERT_EQ(check_trace(t), std::nullopt);
  const std::string r = render_report(t);
  EXPECT_NE(r.find("(5 more not shown)"), std::string::npos) << r;
  EXPECT_NE(r.find("steps/iteration   min 1, median 1, max 3"), std::string::npos) << r;
  EXPECT_NE(r.find(std::string(57, 'k') + "..."), std::string::npos) << r;
  for (const std::string& line : lines_of(r)) EXPECT_LE(line.size(), 100u) << line;
}

TEST(Report, TransfersByKindAndDirection) {
  Trace t = test::three_iteration_trace();
  EXPECT_EQ(render_report(t).find("transfers"), std::string::npos);  // none recorded
  t.transfers = {
      {.start_ns = 1,
       .end_ns = 2,
       .address = 0,
       .bytes = 1 << 20,
       .to_gpu = false,
       .kind = trace::Transfer::copy},
      {.start_ns = 3,
       .end_ns = 4,
       .address = 0,
       .bytes = 3 << 20,
       .to_gpu = true,
       .kind = trace::Transfer::copy},
      {.start_ns = 5,
       .end_ns = 6,
       .address = 0,
       .bytes = 2 << 20,
       .to_gpu = true,
       .kind = trace::Transfer::driver},
  };
  const std::string r = render_report(t);
  EXPECT_NE(r.find("  transfers         3 recorded (to the GPU / to the host)\n"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("    umswap's copies   3.00 MiB in 1 / 1.00 MiB in 1\n"), std::string::npos)
      << r;
  EXPECT_NE(r.find("    the driver's own  2.00 MiB in 1 / 0 B in 0\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("prefetch calls"), std::string::npos) << r;  // none of that kind
}

// Per iteration: each direction's busy time (overlapping transfers merged, in any order), its
// share of the iteration's GPU span, the rate while busy, and the time both ran at once.
TEST(Report, LinkUsePerIteration) {
  Trace t = test::three_iteration_trace();
  constexpr uint64_t T = 5'000'000'000;  // the fixture's first step; iteration 0 spans
                                         // [T + 200 us, T + 620 us], iteration 1 [T + 800 us,
                                         // T + 1,220 us], iteration 2 has no transfers
  const auto x = [](uint64_t start_us, uint64_t end_us, uint64_t bytes, bool to_gpu) {
    return trace::Transfer{.start_ns = T + start_us * 1000,
                           .end_ns = T + end_us * 1000,
                           .address = 0,
                           .bytes = bytes,
                           .to_gpu = to_gpu,
                           .kind = trace::Transfer::copy};
  };
  t.transfers = {x(210, 260, 5'000'000, true),    x(250, 300, 5'000'000, true),
                 x(280, 380, 2'000'000, false),   x(700, 790, 9'000'000, true),  // between spans
                 x(1200, 1300, 4'000'000, false),  // clipped at the end
                 x(230, 240, 1'000'000, false)};   // out of order
  ASSERT_EQ(check_trace(t), std::nullopt);
  const std::string r = render_report(t);
  SCOPED_TRACE(r);
  const size_t at = r.find("Link use per iteration");
  ASSERT_NE(at, std::string::npos);
  const std::vector<std::string> lines = lines_of(r.substr(at));
  const size_t header = 4;  // after the three lines of explanation
  ASSERT_GE(lines.size(), header + 2);
  EXPECT_EQ(words_of(lines[header - 1]),
            (Words{"iteration", "span", "steps", "to", "GPU", "share", "rate", "to", "host",
                   "share", "rate", "both", "ways"}));
  // Iteration 0: to the GPU [210, 300] us, 10 MB; to the host [230, 240] and [280, 380], 3 MB;
  // both at once [230, 240] and [280, 300].
  // Its steps ran [200, 300], [400, 450] and [600, 620] us: 170 us.
  EXPECT_EQ(words_of(lines[header]),
            (Words{"0", "420.00", "us", "170.00", "us", "90.00", "us", "21%", "111.1", "GB/s",
                   "110.00", "us", "26%", "27.3", "GB/s", "30.00", "us"}));
  // Iteration 1: to the host [1200, 1220] us of a transfer that ends past the span; 4 MB.
  EXPECT_EQ(words_of(lines[header + 1]),
            (Words{"1", "420.00", "us", "170.00", "us", "0", "ns", "0%", "-", "20.00", "us", "4%",
                   "200.0", "GB/s", "0", "ns"}));
  EXPECT_TRUE(lines.size() == header + 2 ||
              words_of(lines[header + 2]).empty());  // no row for iteration 2
  for (const std::string& line : lines) EXPECT_LE(line.size(), 100u) << line;
  t.transfers.clear();
  EXPECT_EQ(render_report(t).find("Link use"), std::string::npos);
}

// --- Timeline -----------------------------------------------------------------------------------

std::vector<json> events_with(const json& timeline, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : timeline["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

std::map<int, std::string> track_names(const json& timeline) {
  std::map<int, std::string> names;
  for (const json& e : events_with(timeline, "M")) {
    if (e["name"] == "thread_name") names[e["tid"].get<int>()] = e["args"]["name"];
  }
  return names;
}

TEST(Timeline, TransfersOnTracksOfTheirDirection) {
  Trace t = test::three_iteration_trace();
  const uint64_t s0 = t.steps[0].start_ns;  // the origin: the first step's start
  t.transfers = {
      {.start_ns = s0 + 250000,
       .end_ns = s0 + 300000,
       .address = 0x20000000 + 4096,
       .bytes = 1 << 20,
       .to_gpu = false,
       .kind = trace::Transfer::copy},
      {.start_ns = s0 + 400000,
       .end_ns = s0 + 410000,
       .address = 0x50000000,
       .bytes = 2 << 20,
       .to_gpu = true,
       .kind = trace::Transfer::prefetch_call},
      {.start_ns = s0 + 420000,
       .end_ns = s0 + 421000,
       .address = 0x10000000,
       .bytes = 65536,
       .to_gpu = true,
       .kind = trace::Transfer::driver},
  };
  ASSERT_EQ(check_trace(t), std::nullopt);
  const json timeline = render_timeline(t);
  const std::map<int, std::string> tracks = track_names(timeline);
  EXPECT_EQ(tracks.at(kTimelineAdvisorPrefetchTid), "to the GPU");
  EXPECT_EQ(tracks.at(kTimelineAdvisorEvictTid), "to the host");
  std::vector<json> transfers;
  for (const json& e : events_with(timeline, "X")) {
    if (e["cat"] == "transfer") transfers.push_back(e);
  }
  ASSERT_EQ(transfers.size(), 3u);
  const json& out = transfers[0];
  EXPECT_EQ(out["name"], "umswap copy out");
  EXPECT_EQ(out["tid"], kTimelineAdvisorEvictTid);
  EXPECT_DOUBLE_EQ(out["ts"].get<double>(), 250.0);
  EXPECT_DOUBLE_EQ(out["dur"].get<double>(), 50.0);
  EXPECT_EQ(out["args"]["buffer"], 1);
  EXPECT_EQ(out["args"]["id"], 11);
  EXPECT_EQ(out["args"]["offset"], 4096);
  EXPECT_EQ(out["args"]["bytes"], 1 << 20);
  EXPECT_EQ(transfers[1]["name"], "prefetch");
  EXPECT_EQ(transfers[1]["tid"], kTimelineAdvisorPrefetchTid);
  EXPECT_FALSE(transfers[1]["args"].contains("buffer"));  // in no buffer
  EXPECT_EQ(transfers[2]["name"], "driver in");
  EXPECT_EQ(transfers[2]["args"]["id"], 10);
  // Without transfers, no such tracks.
  const std::map<int, std::string> plain =
      track_names(render_timeline(test::three_iteration_trace()));
  EXPECT_FALSE(plain.contains(kTimelineAdvisorPrefetchTid));
  EXPECT_FALSE(plain.contains(kTimelineAdvisorEvictTid));
}

TEST(Timeline, OnlySomeIterations) {
  Trace t = test::three_iteration_trace();
  const uint64_t s0 = t.steps[0].start_ns;
  // Iteration 1 is steps 4-6, from s0 + 800 us to s0 + 1220 us; the faults are all in iteration 0.
  t.transfers = {
      {.start_ns = s0 + 300000, .end_ns = s0 + 310000, .address = 0, .bytes = 1, .to_gpu = true},
      {.start_ns = s0 + 900000, .end_ns = s0 + 950000, .address = 0, .bytes = 2, .to_gpu = false},
  };
  const json timeline = render_timeline(t, std::pair<uint64_t, uint64_t>{1, 1});
  // 1 process name; 2 metadata per track: iterations, to the host, 2 streams; 3 steps;
  // 1 iteration; 1 transfer.
  EXPECT_EQ(timeline["traceEvents"].size(), 1u + 2 * 4 + 3 + 1 + 1) << timeline.dump(1);
  EXPECT_TRUE(events_with(timeline, "i").empty());  // no fault in its span
  std::vector<int64_t> steps;
  for (const json& e : events_with(timeline, "X")) {
    if (e["cat"] == "kernel") steps.push_back(e["args"]["step"]);
    if (e["cat"] == "iteration") {
      EXPECT_EQ(e["name"], "iteration 1");
    }
    if (e["cat"] == "transfer") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 100.0);
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 5, 6}));
  const std::map<int, std::string> tracks = track_names(timeline);
  EXPECT_FALSE(tracks.contains(kTimelineFaultsTid));
  EXPECT_FALSE(tracks.contains(kTimelineAdvisorPrefetchTid));  // its transfer is outside
  EXPECT_TRUE(tracks.contains(kTimelineAdvisorEvictTid));
  EXPECT_EQ(timeline["otherData"]["iterations"], "1-1");
  EXPECT_EQ(timeline["otherData"]["faults_drawn"], 0);
  EXPECT_EQ(timeline["otherData"]["time_origin_ns"], s0 + 800000);
  // All three: everything but the warm-up step before them (and its stream's track).
  const json all = render_timeline(t, std::pair<uint64_t, uint64_t>{0, 2});
  const json plain = render_timeline(t);
  EXPECT_EQ(all["traceEvents"].size() + 1 + 2, plain["traceEvents"].size());
  EXPECT_EQ(all["otherData"]["faults_drawn"], 3);
  EXPECT_EQ(all["otherData"]["iterations"], "0-2");
  EXPECT_EQ(plain["otherData"]["iterations"], "all");
}

TEST(Timeline, ChromeTraceOfThreeIterations) {
  const Trace t = test::three_iteration_trace();
  const json timeline = render_timeline(t);
  // Valid JSON text that parses back to the same thing.
  const json reparsed = json::parse(timeline.dump());
  EXPECT_EQ(reparsed, timeline);
  ASSERT_TRUE(timeline.contains("traceEvents"));
  ASSERT_TRUE(timeline["traceEvents"].is_array());

  // 1 process name; 2 metadata per track: iterations, faults and 3 streams; 10 steps;
  // 3 iterations; 3 faults.
  EXPECT_EQ(timeline["traceEvents"].size(), 1u + 2 * 5 + 10 + 3 + 3);
  EXPECT_EQ(events_with(timeline, "M").size(), 11u);
  EXPECT_EQ(events_with(timeline, "X").size(), 13u);
  EXPECT_EQ(events_with(timeline, "i").size(), 3u);

  const std::map<int, std::string> tracks = track_names(timeline);
  EXPECT_EQ(tracks, (std::map<int, std::string>{{kTimelineIterationsTid, "iterations"},
                                                {kTimelineFaultsTid, "GPU page faults"},
                                                {kTimelineFirstStreamTid, "stream 0 (default)"},
                                                {kTimelineFirstStreamTid + 1, "stream 0x10"},
                                                {kTimelineFirstStreamTid + 2, "stream 0x20"}}));

  // One track per stream: every step on its stream's track, named after its kernel.
  std::map<int, std::multiset<std::string>> by_track;
  for (const json& e : events_with(timeline, "X")) {
    if (e["cat"] != "iteration") by_track[e["tid"].get<int>()].insert(e["name"]);
  }
  EXPECT_EQ(by_track[kTimelineFirstStreamTid], (std::multiset<std::string>{"memcpy HtoD"}));
  EXPECT_EQ(by_track[kTimelineFirstStreamTid + 1],
            (std::multiset<std::string>{"conv", "conv", "conv", "relu", "relu", "relu"}));
  EXPECT_EQ(by_track[kTimelineFirstStreamTid + 2],
            (std::multiset<std::string>{"sgd", "sgd", "sgd"}));

  // Step 1 (the first conv): 200 us after the first step, 100 us long, touching two buffers.
  const json conv = events_with(timeline, "X")[1];
  EXPECT_EQ(conv["name"], "conv");
  EXPECT_DOUBLE_EQ(conv["ts"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(conv["dur"].get<double>(), 100.0);
  EXPECT_EQ(conv["args"]["step"], 1);
  EXPECT_EQ(conv["args"]["iteration"], 0);
  ASSERT_EQ(conv["args"]["buffers"].size(), 2u);
  EXPECT_EQ(conv["args"]["buffers"][1]["id"], 11);
  EXPECT_EQ(conv["args"]["buffers"][1]["bytes"], 1 << 20);

  // Iteration 0 spans its steps' GPU times: from step 1's start to step 3's end.
  std::vector<json> iterations;
  for (const json& e : events_with(timeline, "X")) {
    if (e["tid"] == kTimelineIterationsTid) iterations.push_back(e);
  }
  ASSERT_EQ(iterations.size(), 3u);
  EXPECT_EQ(iterations[0]["name"], "iteration 0");
  EXPECT_DOUBLE_EQ(iterations[0]["ts"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(iterations[0]["dur"].get<double>(), 420.0);
  EXPECT_EQ(iterations[0]["args"]["gpu_page_faults"], 100);

  // Faults: instants on the faults track, with address and buffer.
  const std::vector<json> faults = events_with(timeline, "i");
  for (const json& f : faults) EXPECT_EQ(f["tid"], kTimelineFaultsTid);
  EXPECT_DOUBLE_EQ(faults[0]["ts"].get<double>(), 210.0);
  EXPECT_EQ(faults[0]["args"]["address"], "0x10000040");
  EXPECT_EQ(faults[0]["args"]["id"], 10);
  EXPECT_EQ(faults[0]["args"]["offset"], 0x40);
  EXPECT_EQ(faults[0]["name"], "page fault (read)");
  EXPECT_FALSE(faults[1]["args"].contains("buffer"));

  const json& other = timeline["otherData"];
  EXPECT_EQ(other["clock"], "gpu (CUPTI)");
  EXPECT_EQ(other["steps_without_gpu_times"], 0);
  EXPECT_FALSE(other.contains("note"));
  EXPECT_EQ(other["tracks"]["advisor prefetch"], kTimelineAdvisorPrefetchTid);
  EXPECT_EQ(other["tracks"]["advisor evict"], kTimelineAdvisorEvictTid);
}

TEST(Timeline, StepsWithoutGpuTimesAreCountedNotDrawn) {
  Trace t = test::three_iteration_trace();
  t.steps[0].start_ns = t.steps[0].end_ns = 0;
  t.steps[5].end_ns = 0;
  const json timeline = render_timeline(t);
  EXPECT_EQ(events_with(timeline, "X").size(), 8u + 3u);
  EXPECT_EQ(timeline["otherData"]["steps_without_gpu_times"], 2);
  EXPECT_NE(timeline["otherData"]["note"].get<std::string>().find("2 of 10 steps have no GPU"),
            std::string::npos);
  // The origin moves to the first step that has times.
  EXPECT_DOUBLE_EQ(events_with(timeline, "X")[0]["ts"].get<double>(), 0.0);
}

TEST(Timeline, WithoutAnyGpuTimesIterationsUseTheHostClock) {
  Trace t = test::three_iteration_trace();
  for (trace::Step& s : t.steps) s.start_ns = s.end_ns = 0;
  const json timeline = render_timeline(t);
  const std::vector<json> x = events_with(timeline, "X");
  ASSERT_EQ(x.size(), 3u);  // the iterations only
  EXPECT_DOUBLE_EQ(x[0]["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(x[0]["dur"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(x[1]["ts"].get<double>(), 2000.0);
  EXPECT_TRUE(events_with(timeline, "i").empty());
  EXPECT_EQ(timeline["otherData"]["clock"], "host (iterations only)");
  EXPECT_NE(timeline["otherData"]["note"].get<std::string>().find("3 faults are not drawn"),
            std::string::npos);
  EXPECT_EQ(track_names(timeline).size(), 4u);  // iterations and 3 streams; no faults track
}

TEST(Timeline, NamesThatAreNotUtf8StillDump) {
  Trace t = test::three_iteration_trace();
  t.names[1] = "conv\xff\xfe";
  const json timeline = render_timeline(t);
  const std::string text = timeline.dump(-1, ' ', false, json::error_handler_t::replace);
  json parsed;
  EXPECT_NO_THROW(parsed = json::parse(text));
  EXPECT_EQ(parsed["traceEvents"].size(), timeline["traceEvents"].size());
}

TEST(Timeline, EmptyTrace) {
  const json timeline = render_timeline(Trace{});
  EXPECT_EQ(timeline["traceEvents"].size(), 1u);  // the process name
  EXPECT_EQ(timeline["otherData"]["steps"], 0);
}

}  // namespace
}  // namespace umswap
