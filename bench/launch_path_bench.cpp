// Launch-path cost: what the tracer adds to every kernel launch and copy once a function's layout
// is cached (ParamLayoutCache::find, a registry snapshot, StepRecorder::record_*: parameter scan,
// log append, detector, observer), on synthetic parameter buffers. No CUDA, no CUPTI.
//
//   launch_path_bench                                       all cases
//   launch_path_bench --benchmark_filter=Kernel/elementwise:1/real_time/threads:1
//
// The workload is one training iteration of 512 kernels launched over and over (the detector
// locks on the period): 60% elementwise kernels (3 pointers and 2 scalars as separate parameters),
// 30% TensorIterator-like (one 264-byte struct holding 3 pointers among sizes and strides), 10%
// multi-tensor-apply-like (one 1.7 KiB struct holding 48 pointers), against 1024 registered
// buffers. elementwise:1 launches only the elementwise kernels: the scan is short, so the rest of
// the launch path shows. Time per iteration is one launch; `hits` is pointer hits per launch.
// WhileReading runs an advisor-like reader on another thread meanwhile (copy_keys of the last 4096
// steps and copy_steps of the last 512, in a loop): the launch must not wait for it (compare real
// time on a machine with a core free for the reader).
#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "umswap/allocator/registry.h"
#include "umswap/tracer/param_scanner.h"
#include "umswap/tracer/step_recorder.h"

namespace {

using umswap::BufferRecord;
using umswap::Registry;
using umswap::tracer::FunctionLayout;
using umswap::tracer::ParamLayoutCache;
using umswap::tracer::ParamSlot;
using umswap::tracer::StepLog;
using umswap::tracer::StepRecorder;

constexpr uint64_t kFirstBase = 0x7f0000000000;
constexpr uint64_t kGranule = uint64_t{2} << 20;
constexpr size_t kBuffers = 1024;
constexpr size_t kKernels = 512;

struct Kernel {
  uint64_t handle = 0;
  std::vector<ParamSlot> layout;
  std::vector<std::vector<std::byte>> values;  // one per parameter
  std::vector<const void*> params;             // kernelParams: pointers to the values
  bool elementwise = false;
};

// The registry, and one iteration's launches with their parameter values.
struct Workload {
  Registry registry;
  std::vector<BufferRecord> records;
  std::vector<Kernel> kernels;
  std::vector<const Kernel*> mixed;        // all of them, in order
  std::vector<const Kernel*> elementwise;  // only the elementwise ones, in order

  Workload() {
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<uint64_t> size_pick(4096, 64 << 20);
    uint64_t base = kFirstBase;
    for (size_t i = 0; i < kBuffers; ++i) {
      const uint64_t size = size_pick(rng);
      records.push_back(BufferRecord{.base = base, .size = size, .id = i + 1});
      base += (size + kGranule - 1) / kGranule * kGranule + kGranule;
    }
    for (const auto& r : records) registry.insert(r);
    auto pointer = [&] {
      const BufferRecord& r = records[rng() % records.size()];
      return r.base + (rng() % r.size & ~uint64_t{255});
    };
    for (size_t k = 0; k < kKernels; ++k) {
      Kernel kernel;
      kernel.handle = 0x5500000000 + k * 0x1000;
      const uint64_t shape = rng() % 10;
      kernel.elementwise = shape < 6;
      if (shape < 6) {  // elementwise: out, a, b, numel, alpha
        for (int p = 0; p < 3; ++p) add(kernel, pointer());
        add(kernel, rng() % 1000000);
        add(kernel, uint32_t{0x3f800000});
      } else if (shape < 9) {  // TensorIterator: data[3], then sizes and strides
        std::vector<uint64_t> s = {pointer(), pointer(), pointer()};
        while (s.size() < 33) s.push_back(rng() % 4096 | (rng() % 4096) << 32);
        add_struct(kernel, s);
      } else {  // multi-tensor apply: 2 lists of 24 pointers, sizes, block map
        std::vector<uint64_t> s;
        for (int p = 0; p < 48; ++p) s.push_back(pointer());
        for (int p = 0; p < 24; ++p) s.push_back(rng() % (1 << 24));
        while (s.size() < 216) s.push_back(rng() % 24 * 0x0101010101010101ULL);
        add_struct(kernel, s);
      }
      kernels.push_back(std::move(kernel));
    }
    for (const Kernel& k : kernels) {
      mixed.push_back(&k);
      if (k.elementwise) elementwise.push_back(&k);
    }
  }

  // The launches a benchmark argument names: 0 mixed, 1 elementwise only.
  const std::vector<const Kernel*>& sequence(int64_t which) const {
    return which == 0 ? mixed : elementwise;
  }
  double hits_per_launch(int64_t which) const {
    std::vector<umswap::tracer::PointerHit> hits;
    double total = 0;
    for (const Kernel* k : sequence(which)) {
      umswap::tracer::scan_kernel_params(k->layout, k->params.data(), *registry.snapshot(), hits);
      total += static_cast<double>(hits.size());
    }
    return total / static_cast<double>(sequence(which).size());
  }

  template <class T>
  static void add(Kernel& kernel, T value) {
    const uint32_t offset =
        kernel.layout.empty() ? 0 : kernel.layout.back().offset + kernel.layout.back().size;
    kernel.layout.push_back({offset, static_cast<uint32_t>(sizeof value)});
    auto& v = kernel.values.emplace_back(sizeof value);
    std::memcpy(v.data(), &value, sizeof value);
    kernel.params.clear();
    for (const auto& b : kernel.values) kernel.params.push_back(b.data());
  }
  static void add_struct(Kernel& kernel, const std::vector<uint64_t>& words) {
    kernel.layout.push_back({0, static_cast<uint32_t>(words.size() * 8)});
    auto& v = kernel.values.emplace_back(words.size() * 8);
    std::memcpy(v.data(), words.data(), v.size());
    kernel.params = {v.data()};
  }
};

Workload& workload() {
  static Workload w;
  return w;
}

// The tracer's state for one benchmark run, shared by its threads.
struct Run {
  StepRecorder recorder{StepRecorder::Options{}};
  ParamLayoutCache functions{16384};
  uint32_t copy_key = 0;

  Run() {
    for (const Kernel& k : workload().kernels) {
      functions.insert(k.handle, k.layout, recorder.intern("kernel" + std::to_string(k.handle)));
    }
    copy_key = recorder.intern("memcpy HtoD");
  }
};
std::unique_ptr<Run> g_run;

// Thread 0 sets up before the loop and tears down after it; the loop's start and end are barriers.
void set_up(const benchmark::State& state) {
  if (state.thread_index() == 0) g_run = std::make_unique<Run>();
}
void tear_down(benchmark::State& state, double hits_per_launch) {
  state.counters["hits"] = hits_per_launch;
  if (state.thread_index() == 0) g_run.reset();
}

// One launch as tracer_callback.cpp's on_launch does it, minus CUPTI (not inlined: one unit to
// profile).
[[gnu::noinline]] void launch(Run& run, const Kernel& k, uint32_t correlation) {
  const FunctionLayout* f = run.functions.find(k.handle);
  const auto snapshot = workload().registry.snapshot();
  run.recorder.record_kernel(*f, k.params.data(), {}, nullptr, correlation, *snapshot);
}

void BM_LaunchKernel(benchmark::State& state) {
  const Workload& w = workload();
  const auto& launches = w.sequence(state.range(0));
  set_up(state);
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  uint32_t correlation = 0;
  for (auto _ : state) launch(*g_run, *launches[i++ % launches.size()], ++correlation);
  tear_down(state, w.hits_per_launch(state.range(0)));
}

void BM_LaunchKernelWhileReading(benchmark::State& state) {
  const Workload& w = workload();
  const auto& launches = w.sequence(state.range(0));
  set_up(state);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> copies{0};
  std::thread reader([&] {
    StepLog log;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t n = g_run->recorder.log().size();
      if (n < 4096) continue;
      benchmark::DoNotOptimize(g_run->recorder.log().copy_keys(n - 4096));
      g_run->recorder.log().copy_steps(n - 512, 512, &log);
      copies.fetch_add(1, std::memory_order_relaxed);
    }
  });
  size_t i = 0;
  uint32_t correlation = 0;
  for (auto _ : state) launch(*g_run, *launches[i++ % launches.size()], ++correlation);
  stop = true;
  reader.join();
  state.counters["reads"] = static_cast<double>(copies.load());
  tear_down(state, w.hits_per_launch(state.range(0)));
}

// One memcpy as tracer_callback.cpp's on_memory_call does it once the copy's key is known.
[[gnu::noinline]] void copy(Run& run, const BufferRecord& r, uint32_t correlation) {
  const auto snapshot = workload().registry.snapshot();
  run.recorder.record_copy(umswap::trace::StepKind::memcpy, run.copy_key, nullptr, correlation,
                           std::array<uint64_t, 2>{r.base + 64, 0}, *snapshot);
}

void BM_LaunchCopy(benchmark::State& state) {
  const Workload& w = workload();
  set_up(state);
  size_t i = 0;
  uint32_t correlation = 0;
  for (auto _ : state) copy(*g_run, w.records[i++ % kBuffers], ++correlation);
  tear_down(state, 1.0);
}

}  // namespace

BENCHMARK(BM_LaunchKernel)
    ->ArgName("elementwise")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_LaunchKernelWhileReading)->ArgName("elementwise")->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_LaunchCopy);

BENCHMARK_MAIN();
