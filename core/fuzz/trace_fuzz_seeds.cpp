// Writes a seed corpus for trace_reader_fuzz: a few small valid traces, from empty to one with
// every field set (only that one has lifetimes, so both a file with the optional lifetimes
// section and files without it are seeds). Usage: trace_fuzz_seeds DIR (DIR must exist or be
// creatable).
#include "umswap/core/trace_file.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

namespace {

using namespace umswap::trace;

Trace small_trace() {
  Trace t;
  t.program = "train";
  t.pid = 7;
  t.names = {"gemm", "relu"};
  t.buffers = {{.id = 1, .size = 4096}, {.id = 2, .size = 8192}};
  t.accesses = {{.buffer = 0, .offset = 0, .length = 4096},
                {.buffer = 1, .offset = 0, .length = 100}};
  t.steps = {{.name = 0, .first_access = 0, .access_count = 1, .start_ns = 10, .end_ns = 20},
             {.name = 1, .first_access = 1, .access_count = 1, .start_ns = 25, .end_ns = 30}};
  t.iterations = {{.first_step = 0, .step_count = 2, .start_ns = 5, .end_ns = 35, .counters = {}}};
  return t;
}

Trace full_trace() {
  Trace t;
  t.program = "/usr/bin/python3";
  t.pid = 31337;
  t.dropped_records = 2;
  t.detection = {.period = 3, .confidence = 0.75, .warmup_steps = 1, .source = "period"};
  t.names = {"memcpy HtoD", "conv_fwd", "conv_bwd", "sgd_update"};
  t.buffers = {{.id = 0, .size = 1 << 20, .call_site = 0xabc, .base = 0x7f0000000000, .api = 1},
               {.id = 1,
                .size = 1 << 16,
                .call_site = 0xdef,
                .base = 0x7f0000100000,
                .api = 2,
                .freed = true},
               {.id = 5, .size = 4096, .call_site = 0x123, .base = 0x7f0000200000}};
  for (uint32_t i = 0; i < 7; ++i) {
    const uint64_t first = t.accesses.size();
    t.accesses.push_back({.buffer = i % 3, .offset = 0, .length = 1024});
    t.accesses.push_back({.buffer = (i + 1) % 3, .offset = 512, .length = 512});
    t.steps.push_back({.kind = i == 0 ? StepKind::memcpy : StepKind::kernel,
                       .name = i == 0 ? 0u : 1 + (i - 1) % 3,
                       .stream = i % 2 == 0 ? 0u : 0x55aa,
                       .first_access = first,
                       .access_count = 2,
                       .start_ns = 1000 + 100 * i,
                       .end_ns = i == 6 ? 0 : 1050 + 100 * i});
  }
  t.iterations = {{.first_step = 1,
                   .step_count = 3,
                   .start_ns = 900,
                   .end_ns = 1500,
                   .counters = {1, 2, 3, 4, 5}},
                  {.first_step = 4,
                   .step_count = 3,
                   .start_ns = 1500,
                   .end_ns = 1800,
                   .counters = {6, 7, 8, 9, 10}}};
  t.faults = {{.time_ns = 1210, .address = 0x7f0000000040, .buffer = 0, .access = 1},
              {.time_ns = 1220, .address = 0x10, .buffer = UINT32_MAX, .access = 2}};
  // Blocks carved out of buffer 0 (a slab): handed out before the first step, one given back and
  // its bytes handed out again between two launches, the rest given back after the last step.
  t.lifetimes = {{.before_step = 0, .buffer = 0, .offset = 0, .length = 4096},
                 {.before_step = 0, .buffer = 0, .offset = 4096, .length = 8192},
                 {.before_step = 3, .buffer = 0, .offset = 4096, .length = 8192, .freed = true},
                 {.before_step = 3, .buffer = 0, .offset = 4096, .length = 512},
                 {.before_step = 7, .buffer = 0, .offset = 0, .length = 4096, .freed = true},
                 {.before_step = 7, .buffer = 0, .offset = 4096, .length = 512, .freed = true}};
  t.totals = {11, 12, 13, 14, 15};
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: trace_fuzz_seeds DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::pair<const char*, Trace> seeds[] = {
      {"empty.umtrace", Trace{}}, {"small.umtrace", small_trace()}, {"full.umtrace", full_trace()}};
  for (const auto& [name, trace] : seeds) {
    std::string error;
    if (!umswap::write_trace_file((dir / name).string(), trace, &error)) {
      std::fprintf(stderr, "trace_fuzz_seeds: %s\n", error.c_str());
      return 1;
    }
  }
  return 0;
}
