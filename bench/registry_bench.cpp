// Registry lookup cost: what the kernel-launch path pays for every 8-byte parameter word.
//
//   registry_bench                         all cases
//   registry_bench --benchmark_filter=Scan the 4 KiB parameter-buffer scan only
//
// Time per iteration is one lookup for the Find cases; the Scan case reports per_word (CPU time
// per looked-up word; `3.1n` = 3.1 ns).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "umswap/allocator/registry.h"

namespace {

using umswap::BufferRecord;
using umswap::Registry;

constexpr uint64_t kFirstBase = 0x7f0000000000;
constexpr uint64_t kGranule = uint64_t{2} << 20;
constexpr size_t kAddresses = 4096;  // per kind; a power of two, cycled through

// A registry of `n` buffers laid out like a driver would (2 MiB-aligned bases, sizes from 4 KiB to
// 16 MiB, gaps between some), plus addresses that hit and that miss inside its span.
struct Setup {
  Registry registry;
  std::vector<uint64_t> hits;
  std::vector<uint64_t> misses;  // in the gaps: they pass the fast range check, then search
  std::vector<uint64_t> params;  // one launch's 4 KiB of parameters, ~10% pointers

  explicit Setup(size_t n) {
    std::mt19937_64 rng(n);
    std::uniform_int_distribution<uint64_t> size_pick(4096, 16 << 20);
    std::vector<BufferRecord> records;
    uint64_t base = kFirstBase;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t size = size_pick(rng);
      records.push_back(BufferRecord{.base = base, .size = size, .id = i + 1});
      // Next base: past this buffer, rounded up, plus one spare granule for a gap.
      base += (size + kGranule - 1) / kGranule * kGranule + kGranule;
    }
    for (const auto& r : records) registry.insert(r);

    std::uniform_int_distribution<size_t> which(0, n - 1);
    for (size_t i = 0; i < kAddresses; ++i) {
      const BufferRecord& r = records[which(rng)];
      hits.push_back(r.base + rng() % r.size);
      misses.push_back(r.end() + rng() % kGranule);  // the gap after it
    }
    std::uniform_int_distribution<int> percent(0, 99);
    for (size_t i = 0; i < 512; ++i) {
      const int p = percent(rng);
      if (p < 10) {
        params.push_back(hits[i]);
      } else if (p < 55) {
        params.push_back(rng() % 100000);  // small integers: sizes, counts, indices
      } else {
        params.push_back(rng());  // floats, packed values: anything
      }
    }
  }
};

// Built once per size, shared by all threads of a run (outside the timed loop).
Setup& setup_for(size_t n) {
  static std::mutex mutex;
  static std::map<size_t, std::unique_ptr<Setup>> setups;
  std::lock_guard lock(mutex);
  auto& s = setups[n];
  if (!s) s = std::make_unique<Setup>(n);
  return *s;
}

void BM_RegistryFindHit(benchmark::State& state) {
  Setup& s = setup_for(static_cast<size_t>(state.range(0)));
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.registry.find(s.hits[i++ & (kAddresses - 1)]));
  }
}

void BM_RegistryFindMiss(benchmark::State& state) {
  Setup& s = setup_for(static_cast<size_t>(state.range(0)));
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.registry.find(s.misses[i++ & (kAddresses - 1)]));
  }
}

void BM_SnapshotFindHit(benchmark::State& state) {
  Setup& s = setup_for(static_cast<size_t>(state.range(0)));
  const auto snapshot = s.registry.snapshot();
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  for (auto _ : state) {
    benchmark::DoNotOptimize(snapshot->find(s.hits[i++ & (kAddresses - 1)]));
  }
}

void BM_SnapshotFindMiss(benchmark::State& state) {
  Setup& s = setup_for(static_cast<size_t>(state.range(0)));
  const auto snapshot = s.registry.snapshot();
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  for (auto _ : state) {
    benchmark::DoNotOptimize(snapshot->find(s.misses[i++ & (kAddresses - 1)]));
  }
}

// The launch path: take one snapshot, look up every word of a 4 KiB parameter buffer.
void BM_ScanParameterBuffer(benchmark::State& state) {
  Setup& s = setup_for(static_cast<size_t>(state.range(0)));
  size_t found = 0;
  for (auto _ : state) {
    const auto snapshot = s.registry.snapshot();
    for (uint64_t word : s.params) found += snapshot->find(word) != nullptr;
    benchmark::DoNotOptimize(found);
  }
  const double words = static_cast<double>(s.params.size());
  state.SetItemsProcessed(static_cast<int64_t>(s.params.size()) * state.iterations());
  // Words per second of CPU time (summed over threads), inverted: CPU seconds per word.
  state.counters["per_word"] =
      benchmark::Counter(words * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["pointers_found"] =
      static_cast<double>(found) / static_cast<double>(state.iterations());
}

// Engine vmm's allocations: every tensor's allocation and free are registry writes, several
// between two launches, and each launch takes a snapshot. Per launch (one iteration): `writes`
// writes among `n` records (half inserts, then the removal of what they inserted), then one
// snapshot and one lookup.
void BM_WritesBetweenLaunches(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const auto writes = static_cast<size_t>(state.range(1));
  Registry registry;
  std::vector<uint64_t> spare;  // bases in the gaps between the records, free to insert at
  uint64_t base = kFirstBase;
  for (size_t i = 0; i < n; ++i) {
    registry.insert(BufferRecord{.base = base, .size = kGranule, .id = i + 1});
    spare.push_back(base + kGranule);
    base += 2 * kGranule;
  }
  size_t next = 0;
  for (auto _ : state) {
    const size_t first = next;
    for (size_t w = 0; w < writes / 2; ++w) {
      registry.insert(BufferRecord{.base = spare[next++ % n], .size = kGranule, .id = 1});
    }
    for (size_t w = first; w < next; ++w) registry.remove(spare[w % n]);
    const auto snapshot = registry.snapshot();
    benchmark::DoNotOptimize(snapshot->find(kFirstBase));
  }
}

}  // namespace

BENCHMARK(BM_WritesBetweenLaunches)->Args({1024, 2})->Args({1024, 6});
BENCHMARK(BM_RegistryFindHit)->Arg(16)->Arg(1024)->Arg(65536)->Threads(1)->Threads(8);
BENCHMARK(BM_RegistryFindMiss)->Arg(16)->Arg(1024)->Arg(65536)->Threads(1)->Threads(8);
BENCHMARK(BM_SnapshotFindHit)->Arg(16)->Arg(1024)->Arg(65536)->Threads(1)->Threads(8);
BENCHMARK(BM_SnapshotFindMiss)->Arg(16)->Arg(1024)->Arg(65536)->Threads(1)->Threads(8);
BENCHMARK(BM_ScanParameterBuffer)->Arg(16)->Arg(1024)->Arg(65536)->Threads(1)->Threads(8);

BENCHMARK_MAIN();
