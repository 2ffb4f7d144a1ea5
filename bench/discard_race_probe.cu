// A probe (not a test) for a correctness question of the default path: can a discard of dead
// 2 MiB pages of managed memory (cudaMemDiscardBatchAsync on the program's stream, as the slab
// allocator issues at a free under UMSWAP_LIFETIMES=1) that runs while other streams migrate the
// same or neighbouring pages (as the advisor's prefetches and evictions do, unordered with the
// program's stream) lose data that is live, or written after the discard? The driver documents a
// discard racing a prefetch of the same range as undefined; this measures what happens.
//
//   discard_race_probe [--mib M] [--rounds R] [--movers K]
//                      [--mode discard|populate|discard-host|none]
// Two copies of the same computation: one on cudaMalloc memory (the reference), one on
// cudaMallocManaged memory (M MiB, default 256; the probe's only managed memory) while K host
// threads (default 4) keep prefetching random 2 MiB-aligned pieces of it to the host and back on
// streams of their own. Each round r a quarter of the pages (a hash of page and round) are dead:
// on the managed copy they are discarded (mode discard), discarded and prefetched to the GPU
// (populate: what an allocation over discarded pages does), discarded and prefetched to the host
// (discard-host: a candidate replacement for the plain discard), or left alone (none: the control),
// then a kernel writes them afresh and updates every live word from its old value (both copies);
// then the two copies are compared on the GPU and the managed copy's differing words repaired, so
// that each round counts what it lost, by page: dead that round (written after its discard),
// dead in an earlier round, never dead (no discard ever covered it). Prints those counts and the
// rounds that lost any (numbered from 0). Exit status: 0 all matched, 3 a word differed, 2 bad
// arguments, 1 a CUDA error (cuda_check.h; also where the GPU cannot access managed memory
// concurrently). The pages are 2 MiB-aligned in absolute addresses (as umswap's discards are).
//
// --quiet discard pauses the movers (their streams drained) while each round's discard runs;
// --quiet writes pauses them while the writes after it run: which of the two races loses data.
//
// Measured alone (H200, driver 580.159.04, 2026-12-01 02:55-03:00 UTC, runs 132-133; rounds bad
// of rounds, words differing): discard with 0 movers 0 of 200 (256 MiB); discard 86 of 200 (4
// movers, 73,332,960 words: 68,753,376 written after that round's discard, 4,579,584 dead
// before, never-dead pages none), 102 of 200 (a second run), 43 of 200 with 1 mover, 23 of 100
// at 1 GiB with 8; discard --quiet writes 0 of 200 and 0 of 100 (1 GiB, 8); discard --quiet
// discard 1 of 200 (197,632 words, dead before) and 0 of 100 (1 GiB, 8); populate and
// discard-host 0 in every run (200 rounds at 256 MiB with 4 movers, 100 and 200 at 1 GiB with
// 8, 100 with none). So a plain discard loses what is written after it when a migration of its
// pages runs beside the discard (mostly) or beside the first writes after it (rarely); the
// combined discard-and-prefetch did not, either way. Plain discard, 1 GiB, no movers, 100 rounds
// did not finish in 45 s (every write then faults its page in); discard-host took 5.6 s,
// populate 0.5 s (docs/lab/2026-12-01-discards-racing-migrations.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "prefetch_movers.h"

namespace {

constexpr size_t kPage = PrefetchMovers::kPage;

__host__ __device__ bool dead(size_t page, int round) {
  uint64_t h = (page + 1) * 0x9e3779b97f4a7c15ull ^
               (static_cast<uint64_t>(round) + 7) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return (h & 3) == 0;
}

// Dead pages get fresh values; live words are updated from what they hold.
__global__ void step(unsigned* x, size_t n, int round) {
  const size_t per_page = kPage / sizeof(unsigned);
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned fresh = static_cast<unsigned>(i * 2654435761u) ^ static_cast<unsigned>(round);
    x[i] = dead(i / per_page, round) ? fresh : x[i] * 1664525u + 1013904223u + fresh;
  }
}

// The last round at or before `round` in which `page` was dead (written afresh, and discarded
// first in modes discard and discard-host), or -1.
__device__ int last_dead(size_t page, int round) {
  for (int r = round; r >= 0; --r) {
    if (dead(page, r)) return r;
  }
  return -1;
}

// Counts the words of `b` that differ from `a` by their page's history: dead this round (written
// afresh after its discard), dead in an earlier round and updated since, never dead (only
// updated: no discard ever covered it); marks the round bad, and repairs them, so that each round
// counts only what it lost itself. A loss found one round late in a page dead the round before
// counts as "earlier", not as a loss of data no discard covered.
__global__ void compare(const unsigned* a, unsigned* b, size_t n, int round,
                        unsigned long long* words, int* bad_rounds) {
  const size_t per_page = kPage / sizeof(unsigned);
  unsigned long long by[3] = {0, 0, 0};
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (a[i] == b[i]) continue;
    const int last = last_dead(i / per_page, round);
    ++by[last == round ? 0 : last >= 0 ? 1 : 2];
    b[i] = a[i];
  }
  for (int k = 0; k < 3; ++k) {
    if (by[k]) atomicAdd(&words[k], by[k]);
  }
  if (by[0] || by[1] || by[2]) bad_rounds[round] = 1;
}

// Gives the movers time to migrate pages between a round's discard and its writes.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256;
  int rounds = 400, movers = 4;
  std::string mode = "discard", quiet = "none";
  const auto number = [](const char* text, unsigned long long most, unsigned long long* out) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v > most) return false;
    *out = v;
    return true;
  };
  bool ok = true;
  for (int i = 1; i < argc && ok; ++i) {
    unsigned long long v = 0;
    if (i + 1 < argc && !std::strcmp(argv[i], "--mib")) {
      ok = number(argv[++i], 4096, &v) && v >= 4 && v % 2 == 0;
      mib = v;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--rounds")) {
      ok = number(argv[++i], 100000, &v) && v >= 1;
      rounds = static_cast<int>(v);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--movers")) {
      ok = number(argv[++i], 16, &v);
      movers = static_cast<int>(v);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--mode")) {
      mode = argv[++i];
      ok = mode == "discard" || mode == "populate" || mode == "discard-host" || mode == "none";
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--quiet")) {
      quiet = argv[++i];
      ok = quiet == "none" || quiet == "discard" || quiet == "writes";
    } else {
      ok = false;
    }
  }
  if (!ok) {
    std::fprintf(stderr,
                 "usage: discard_race_probe [--mib M] [--rounds R] [--movers K] "
                 "[--mode discard|populate|discard-host|none] [--quiet none|discard|writes]\n"
                 "  M: MiB of managed memory, even, 4-4096 (default 256); R: 1-100000 (400); "
                 "K: 0-16 (4)\n");
    return 2;
  }
  const size_t bytes = mib << 20, n = bytes / sizeof(unsigned), pages = bytes / kPage;
  int device = 0;
  CHECK(cudaGetDevice(&device));
  unsigned *ref = nullptr, *man = nullptr, *allocation = nullptr;
  unsigned long long* words = nullptr;  // by page: dead this round, dead before, never
  int* bad_rounds = nullptr;
  CHECK(cudaMalloc(&ref, bytes));
  CHECK(cudaMallocManaged(&allocation, bytes + kPage));
  const auto at = reinterpret_cast<uintptr_t>(allocation);
  man = reinterpret_cast<unsigned*>((at + kPage - 1) / kPage * kPage);
  CHECK(cudaMalloc(&words, 3 * sizeof *words));
  CHECK(cudaMalloc(&bad_rounds, rounds * sizeof *bad_rounds));
  CHECK(cudaMemset(ref, 0, bytes));
  CHECK(cudaMemset(allocation, 0, bytes + kPage));
  CHECK(cudaMemset(words, 0, 3 * sizeof *words));
  CHECK(cudaMemset(bad_rounds, 0, rounds * sizeof *bad_rounds));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());

  const auto began = std::chrono::steady_clock::now();
  PrefetchMovers movers_running(man, bytes, movers, 8, 4321);
  std::vector<void*> starts;
  std::vector<size_t> sizes;
  uint64_t discarded = 0;
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = device;
  for (int r = 0; r < rounds; ++r) {
    starts.clear();
    sizes.clear();
    for (size_t p = 0; p < pages; ++p) {
      if (!dead(p, r)) continue;
      starts.push_back(reinterpret_cast<char*>(man) + p * kPage);
      sizes.push_back(kPage);
    }
    if (quiet == "discard") movers_running.pause();
    if (mode == "discard" && !starts.empty()) {
      CHECK(cudaMemDiscardBatchAsync(starts.data(), sizes.data(), starts.size(), 0, s));
    } else if ((mode == "populate" || mode == "discard-host") && !starts.empty()) {
      size_t index = 0;
      cudaMemLocation to = gpu;
      if (mode == "discard-host") to = {cudaMemLocationTypeHost, 0};
      CHECK(cudaMemDiscardAndPrefetchBatchAsync(starts.data(), sizes.data(), starts.size(), &to,
                                                &index, 1, 0, s));
    }
    discarded += mode == "none" ? 0 : starts.size();
    if (quiet != "none") CHECK(cudaStreamSynchronize(s));
    if (quiet == "discard") movers_running.resume();
    if (quiet == "writes") movers_running.pause();
    spin<<<1, 1, 0, s>>>(100000);
    step<<<1024, 256, 0, s>>>(ref, n, r);
    step<<<1024, 256, 0, s>>>(man, n, r);
    compare<<<1024, 256, 0, s>>>(ref, man, n, r, words, bad_rounds);
    CHECK(cudaGetLastError());
    if (quiet == "writes") {
      CHECK(cudaStreamSynchronize(s));
      movers_running.resume();
    }
    if (r % 8 == 7) CHECK(cudaStreamSynchronize(s));
  }
  CHECK(cudaStreamSynchronize(s));
  movers_running.stop();
  unsigned long long lost[3] = {0, 0, 0};
  std::vector<int> bad(rounds);
  CHECK(cudaMemcpy(lost, words, sizeof lost, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(bad.data(), bad_rounds, rounds * sizeof(int), cudaMemcpyDeviceToHost));
  int bad_count = 0, first_bad = -1;
  for (int r = 0; r < rounds; ++r) {
    if (!bad[r]) continue;
    ++bad_count;
    if (first_bad < 0) first_bad = r;
  }
  const unsigned long long total = lost[0] + lost[1] + lost[2];
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::printf("allocation at %#llx (%llu bytes past a 2 MiB boundary)\n",
              static_cast<unsigned long long>(at), static_cast<unsigned long long>(at % kPage));
  std::printf(
      "mode %s quiet %s rounds %d moves %llu pages discarded %llu words %zu differ %llu (pages "
      "dead that "
      "round %llu, dead before %llu, never dead %llu) rounds bad %d first (from 0) %d in %.1f s\n",
      mode.c_str(), quiet.c_str(), rounds, static_cast<unsigned long long>(movers_running.moves()),
      static_cast<unsigned long long>(discarded), n, total, lost[0], lost[1], lost[2], bad_count,
      first_bad, seconds);
  return total == 0 ? 0 : 3;
}
