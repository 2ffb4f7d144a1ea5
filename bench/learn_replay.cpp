// What online learning would choose over a recorded trace, check by check (CPU only). Reads a
// trace that `umswap record` wrote and hands its launch keys and each launch's data (a signature
// of the buffer offsets it touched) to OnlineLearning::choose at the advisor's cadence (every 64
// launches, or a quarter of those since learning started), from launch FROM on; prints each check
// whose keys give an iteration, and what the data make of it. Then the trace's own detection
// against tracer::detect_with_data over the whole trace. No plan is made, nothing diverges and
// nothing is placed: a run under a budget may relearn from other launches (the advisor's stats
// say where, `advisor.plan.applied_from_launch`).
//
//   learn_replay TRACE [FROM] [--all]      (--all: every check, not only the first 12 choices)
//
// Exit: 0, 1 when the trace cannot be read, 2 for bad arguments.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "umswap/advisor/online_learning.h"
#include "umswap/core/trace_file.h"
#include "umswap/tracer/step_data.h"

namespace {

int usage() {
  std::fprintf(stderr, "usage: learn_replay TRACE [FROM] [--all]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace umswap;
  std::string path;
  uint64_t from = 0;
  bool all = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--all") {
      all = true;
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: learn_replay TRACE [FROM] [--all]\n");
      return 0;
    } else if (path.empty()) {
      path = a;
    } else {
      char* end = nullptr;
      from = std::strtoull(argv[i], &end, 10);
      if (a.empty() || *end != '\0') return usage();
    }
  }
  if (path.empty()) return usage();
  std::string error;
  const std::optional<trace::Trace> t = read_trace_file(path, &error);
  if (!t) {
    std::fprintf(stderr, "learn_replay: %s: %s\n", path.c_str(), error.c_str());
    return 1;
  }
  std::vector<uint32_t> keys;
  std::vector<uint64_t> data;
  for (const trace::Step& s : t->steps) {
    keys.push_back(s.name * 4 + static_cast<uint32_t>(s.kind));
    std::vector<uint64_t> pointers;
    for (uint64_t a = s.first_access; a < s.first_access + s.access_count; ++a) {
      pointers.push_back(t->buffers[t->accesses[a].buffer].base + t->accesses[a].offset);
    }
    data.push_back(tracer::step_signature(pointers));
  }
  if (from >= keys.size()) {
    std::fprintf(stderr, "learn_replay: FROM %llu is past the trace's %zu launches\n",
                 static_cast<unsigned long long>(from), keys.size());
    return 2;
  }
  std::printf("%s: %zu launches, the trace's period %llu (%s)\n", path.c_str(), keys.size(),
              static_cast<unsigned long long>(t->detection.period), t->detection.source.c_str());
  advisor::OnlineLearning learning;
  uint64_t next_check = 0;
  int choices = 0;
  for (uint64_t logged = 64; from + logged <= keys.size() && (all || choices < 12); ++logged) {
    if (logged < next_check) continue;
    next_check = logged + std::max<uint64_t>(64, logged / 4);
    const std::span<const uint32_t> k(keys.data() + from, logged);
    const std::optional<advisor::LearnChoice> by_keys = learning.choose(k);
    if (!by_keys) {
      if (all)
        std::printf("launch %llu: nothing\n", static_cast<unsigned long long>(from + logged));
      continue;
    }
    ++choices;
    const std::optional<advisor::LearnChoice> with_data =
        learning.choose(k, std::span<const uint64_t>(data.data() + from, logged));
    std::printf("launch %llu: keys' period %llu from launch %llu; with the data: ",
                static_cast<unsigned long long>(from + logged),
                static_cast<unsigned long long>(by_keys->period),
                static_cast<unsigned long long>(from + by_keys->first));
    if (with_data) {
      std::printf("period %llu from launch %llu\n",
                  static_cast<unsigned long long>(with_data->period),
                  static_cast<unsigned long long>(from + with_data->first));
    } else {
      std::printf("nothing yet\n");
    }
  }
  const trace::Detection d = tracer::detect_with_data(keys, data);
  std::printf("whole trace: period %llu by the keys, %llu with the data (warm-up %llu)\n",
              static_cast<unsigned long long>(t->detection.period),
              static_cast<unsigned long long>(d.period),
              static_cast<unsigned long long>(d.warmup_steps));
  return 0;
}
