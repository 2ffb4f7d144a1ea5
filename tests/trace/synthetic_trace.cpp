#include "synthetic_trace.h"

#include <tuple>

namespace umswap::trace {

bool operator==(const Buffer& a, const Buffer& b) {
  return std::tie(a.id, a.size, a.call_site, a.base, a.api, a.freed) ==
         std::tie(b.id, b.size, b.call_site, b.base, b.api, b.freed);
}
bool operator==(const Access& a, const Access& b) {
  return std::tie(a.buffer, a.offset, a.length) == std::tie(b.buffer, b.offset, b.length);
}
bool operator==(const Step& a, const Step& b) {
  return std::tie(a.kind, a.name, a.stream, a.first_access, a.access_count, a.start_ns, a.end_ns) ==
         std::tie(b.kind, b.name, b.stream, b.first_access, b.access_count, b.start_ns, b.end_ns);
}
bool operator==(const Counters& a, const Counters& b) {
  return std::tie(a.gpu_page_faults, a.bytes_htod, a.bytes_dtoh, a.thrashing_events,
                  a.cpu_page_faults) == std::tie(b.gpu_page_faults, b.bytes_htod, b.bytes_dtoh,
                                                 b.thrashing_events, b.cpu_page_faults);
}
bool operator==(const Iteration& a, const Iteration& b) {
  return std::tie(a.first_step, a.step_count, a.start_ns, a.end_ns) ==
             std::tie(b.first_step, b.step_count, b.start_ns, b.end_ns) &&
         a.counters == b.counters;
}
bool operator==(const Fault& a, const Fault& b) {
  return std::tie(a.time_ns, a.address, a.buffer, a.access) ==
         std::tie(b.time_ns, b.address, b.buffer, b.access);
}
bool operator==(const Lifetime& a, const Lifetime& b) {
  return std::tie(a.before_step, a.buffer, a.offset, a.length, a.freed) ==
         std::tie(b.before_step, b.buffer, b.offset, b.length, b.freed);
}
bool operator==(const Transfer& a, const Transfer& b) {
  return std::tie(a.start_ns, a.end_ns, a.address, a.bytes, a.to_gpu, a.kind) ==
         std::tie(b.start_ns, b.end_ns, b.address, b.bytes, b.to_gpu, b.kind);
}
bool operator==(const Detection& a, const Detection& b) {
  return std::tie(a.period, a.confidence, a.warmup_steps, a.source) ==
         std::tie(b.period, b.confidence, b.warmup_steps, b.source);
}
bool operator==(const Trace& a, const Trace& b) {
  return std::tie(a.program, a.pid, a.dropped_records, a.names, a.buffers, a.steps, a.accesses,
                  a.iterations, a.faults, a.lifetimes, a.transfers) ==
             std::tie(b.program, b.pid, b.dropped_records, b.names, b.buffers, b.steps, b.accesses,
                      b.iterations, b.faults, b.lifetimes, b.transfers) &&
         a.detection == b.detection && a.totals == b.totals;
}

}  // namespace umswap::trace

namespace umswap::test {

using namespace trace;

Trace full_trace() {
  Trace t;
  t.program = "/opt/conda/bin/python3 \xce\xbb";  // not only ASCII
  t.pid = 0x1234567890abULL;
  t.dropped_records = 17;
  t.detection = {.period = 3, .confidence = 0.8125, .warmup_steps = 2, .source = "nvtx:train_step"};
  t.names = {"memcpy HtoD", "_Z4gemmPfS_S_i", "relu", "", "memset"};
  t.buffers = {
      {.id = 0,
       .size = 1 << 20,
       .call_site = 0xdeadbeefcafef00dULL,
       .base = 0x7f1200000000,
       .api = 1,
       .freed = false},
      {.id = 3,
       .size = (1ULL << 33) + 5,
       .call_site = 42,
       .base = 0x7f1300000000,
       .api = 2,
       .freed = true},
      {.id = UINT64_MAX, .size = 4096, .call_site = 0, .base = 0, .api = 255, .freed = false},
  };
  t.accesses = {
      {.buffer = 0, .offset = 0, .length = 1 << 20},
      {.buffer = 1, .offset = 1ULL << 32, .length = (1ULL << 32) + 5},
      {.buffer = 2, .offset = 4095, .length = 1},
      {.buffer = 0, .offset = 512, .length = 512},
      {.buffer = 1, .offset = 0, .length = 1},
      {.buffer = 2, .offset = 0, .length = 4096},
  };
  t.steps = {
      {.kind = StepKind::memcpy,
       .name = 0,
       .stream = 0,
       .first_access = 0,
       .access_count = 1,
       .start_ns = 100,
       .end_ns = 200},
      {.kind = StepKind::kernel,
       .name = 1,
       .stream = 0x5555aaaa5555aaaaULL,
       .first_access = 1,
       .access_count = 2,
       .start_ns = 300,
       .end_ns = 1300},
      {.kind = StepKind::kernel,
       .name = 2,
       .stream = 0x10,
       .first_access = 3,
       .access_count = 1,
       .start_ns = 0,
       .end_ns = 0},
      {.kind = StepKind::memset,
       .name = 4,
       .stream = 0x10,
       .first_access = 4,
       .access_count = 0,
       .start_ns = UINT64_MAX - 1,
       .end_ns = UINT64_MAX},
      {.kind = StepKind::kernel,
       .name = 3,
       .stream = 0,
       .first_access = 4,
       .access_count = 2,
       .start_ns = 5000,
       .end_ns = 5000},
  };
  t.iterations = {
      {.first_step = 1,
       .step_count = 2,
       .start_ns = 250,
       .end_ns = 1400,
       .counters = {.gpu_page_faults = 1,
                    .bytes_htod = 2,
                    .bytes_dtoh = 3,
                    .thrashing_events = 4,
                    .cpu_page_faults = 5}},
      {.first_step = 3,
       .step_count = 2,
       .start_ns = 1400,
       .end_ns = 6000,
       .counters = {.gpu_page_faults = 6,
                    .bytes_htod = UINT64_MAX,
                    .bytes_dtoh = 8,
                    .thrashing_events = 9,
                    .cpu_page_faults = 10}},
  };
  t.faults = {
      {.time_ns = 350, .address = 0x7f1300000010, .buffer = 1, .access = 2},
      {.time_ns = 360, .address = 0x10, .buffer = UINT32_MAX, .access = 4},
  };
  // Blocks of buffers 0 and 1 handed out and given back; two events between the same launches,
  // and one after the last step (before_step == steps.size()).
  t.lifetimes = {
      {.before_step = 0, .buffer = 0, .offset = 0, .length = 4096, .freed = false},
      {.before_step = 2,
       .buffer = 1,
       .offset = 1ULL << 32,
       .length = (1ULL << 32) + 5,
       .freed = false},
      {.before_step = 2, .buffer = 0, .offset = 0, .length = 4096, .freed = true},
      {.before_step = 5,
       .buffer = 1,
       .offset = 1ULL << 32,
       .length = (1ULL << 32) + 5,
       .freed = true},
  };
  t.totals = {.gpu_page_faults = 11,
              .bytes_htod = 12,
              .bytes_dtoh = 13,
              .thrashing_events = 14,
              .cpu_page_faults = 15};
  return t;
}

Trace three_iteration_trace() {
  constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
  constexpr uint64_t T = 5'000'000'000;  // GPU clock of the first step
  Trace t;
  t.program = "./trainer";
  t.pid = 4242;
  t.dropped_records = 5;
  t.detection = {.period = 3, .confidence = 0.9, .warmup_steps = 1, .source = "period"};
  t.names = {"memcpy HtoD", "conv", "relu", "sgd"};
  // Footprint 1 + 4 + 1/16 + 2 MiB = 7.0625 MiB; largest 4 MiB (buffer 1, id 11).
  t.buffers = {{.id = 10, .size = 1 * MiB, .base = 0x10000000},
               {.id = 11, .size = 4 * MiB, .base = 0x20000000},
               {.id = 12, .size = 64 * KiB, .base = 0x30000000, .freed = true},
               {.id = 13, .size = 2 * MiB, .base = 0x40000000}};
  auto add_step = [&t](StepKind kind, uint32_t name, uint64_t stream, uint64_t duration_ns,
                       std::initializer_list<Access> accesses) {
    const uint64_t start = T + 200'000 * t.steps.size();  // a step every 200 us
    t.steps.push_back({.kind = kind,
                       .name = name,
                       .stream = stream,
                       .first_access = t.accesses.size(),
                       .access_count = static_cast<uint32_t>(accesses.size()),
                       .start_ns = start,
                       .end_ns = start + duration_ns});
    t.accesses.insert(t.accesses.end(), accesses);
  };
  // Warm-up: the memcpy touches 2 MiB of buffer 3.
  add_step(StepKind::memcpy, 0, 0, 10'000, {{.buffer = 3, .offset = 0, .length = 2 * MiB}});
  // Each iteration: conv touches 2 MiB, relu 1 MiB, sgd 64 KiB; together (overlaps once)
  // 1 + 1.5 + 1/16 = 2.5625 MiB of buffers 0, 1, 2 (5.0625 MiB): touched/segments 0.51.
  for (int i = 0; i < 3; ++i) {
    add_step(StepKind::kernel, 1, 0x10, 100'000,
             {{.buffer = 0, .offset = 0, .length = 1 * MiB},
              {.buffer = 1, .offset = 0, .length = 1 * MiB}});
    add_step(StepKind::kernel, 2, 0x10, 50'000,
             {{.buffer = 1, .offset = 512 * KiB, .length = 1 * MiB}});
    add_step(StepKind::kernel, 3, 0x20, 20'000, {{.buffer = 2, .offset = 0, .length = 64 * KiB}});
  }
  // Host times: 2 ms, 1.5 ms, 1.5 ms.
  t.iterations = {
      {.first_step = 1,
       .step_count = 3,
       .start_ns = 1'000'000,
       .end_ns = 3'000'000,
       .counters = {.gpu_page_faults = 100,
                    .bytes_htod = 8 * MiB,
                    .bytes_dtoh = 1 * MiB,
                    .thrashing_events = 1}},
      {.first_step = 4,
       .step_count = 3,
       .start_ns = 3'000'000,
       .end_ns = 4'500'000,
       .counters = {.gpu_page_faults = 10, .bytes_htod = 2 * MiB, .bytes_dtoh = 2 * MiB}},
      {.first_step = 7,
       .step_count = 3,
       .start_ns = 4'500'000,
       .end_ns = 6'000'000,
       .counters = {}},
  };
  t.faults = {{.time_ns = T + 210'000, .address = 0x10000040, .buffer = 0, .access = 1},
              {.time_ns = T + 220'000, .address = 0x99, .buffer = UINT32_MAX, .access = 2},
              {.time_ns = T + 410'000, .address = 0x20000000, .buffer = 1, .access = 3}};
  t.totals = {.gpu_page_faults = 150,
              .bytes_htod = 12 * MiB,
              .bytes_dtoh = 3 * MiB,
              .thrashing_events = 2,
              .cpu_page_faults = 7};
  return t;
}

}  // namespace umswap::test
