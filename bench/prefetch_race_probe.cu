// A probe (not a test) for issue 36's open question: does managed memory stay exact when
// cuMemPrefetchAsync moves a range to the host and back on other streams while the program's
// kernels read, write and add atomically into it? That is all umswap's default eviction path does
// (the driver's coherence is its whole correctness argument), yet BERT-large's loss changed at a
// plan switch on that path (docs/RELIABILITY.md, "Correctness").
//
//   prefetch_race_probe [--mib M] [--rounds R] [--movers K]
// Two copies of the same computation: one on cudaMalloc memory (the reference), one on
// cudaMallocManaged memory (M MiB, default 256; the probe's only managed memory) while K host
// threads (default 2) keep prefetching random 2 MiB-aligned pieces of it to the host and back on
// streams of their own, unordered with the computation's stream. Each round: an update kernel
// (x = x * 0.999 + f(i, round)), an atomicAdd of every element into 4096 counters, and a reduction
// of 64 elements into one through a gather. Prints `rounds R words W differ D counters C differ E`
// and exits 1 when anything differs (bit for bit), 0 when all matched.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"
#include "prefetch_movers.h"

__global__ void update(float* x, size_t n, int round) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = x[i] * 0.999f + 1.0f / (1.0f + static_cast<float>((i + round) & 4095));
  }
}

// Integer atomics, so the order of additions cannot change the sums.
__global__ void count(const float* x, size_t n, unsigned long long* counters) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    unsigned int bits;
    memcpy(&bits, &x[i], sizeof bits);
    atomicAdd(&counters[i & 4095], static_cast<unsigned long long>(bits & 0xffff));
  }
}

// y[i] = sum of x over a strided gather (reads far from i).
__global__ void gather(const float* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 64; i += gridDim.x * blockDim.x) {
    float s = 0;
    for (size_t k = 0; k < 64; ++k) s += x[(i + k * (n / 64)) % n];
    y[i] = s;
  }
}

int main(int argc, char** argv) {
  size_t mib = 256;
  int rounds = 200, movers = 2;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && !std::strcmp(argv[i], "--mib")) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--rounds")) {
      rounds = std::atoi(argv[++i]);
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--movers")) {
      movers = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: prefetch_race_probe [--mib M] [--rounds R] [--movers K]\n");
      return 2;
    }
  }
  if (mib < 4 || mib > 4096 || rounds < 1 || movers < 0 || movers > 8) {
    std::fprintf(stderr, "prefetch_race_probe: bad arguments\n");
    return 2;
  }
  const size_t n = mib * (1 << 20) / sizeof(float);
  float *ref = nullptr, *man = nullptr, *ref_y = nullptr, *man_y = nullptr;
  unsigned long long *ref_c = nullptr, *man_c = nullptr;
  CHECK(cudaMalloc(&ref, n * sizeof(float)));
  CHECK(cudaMalloc(&ref_y, n / 64 * sizeof(float)));
  CHECK(cudaMalloc(&ref_c, 4096 * sizeof(unsigned long long)));
  CHECK(cudaMallocManaged(&man, n * sizeof(float)));
  CHECK(cudaMalloc(&man_y, n / 64 * sizeof(float)));
  CHECK(cudaMalloc(&man_c, 4096 * sizeof(unsigned long long)));
  CHECK(cudaMemset(ref, 0, n * sizeof(float)));
  CHECK(cudaMemset(man, 0, n * sizeof(float)));
  CHECK(cudaMemset(ref_c, 0, 4096 * sizeof(unsigned long long)));
  CHECK(cudaMemset(man_c, 0, 4096 * sizeof(unsigned long long)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());

  PrefetchMovers movers_running(man, n * sizeof(float), movers, 16, 1234);
  for (int r = 0; r < rounds; ++r) {
    for (auto [x, y, c] : {std::tuple{ref, ref_y, ref_c}, std::tuple{man, man_y, man_c}}) {
      update<<<1024, 256, 0, s>>>(x, n, r);
      count<<<1024, 256, 0, s>>>(x, n, c);
      gather<<<256, 256, 0, s>>>(x, y, n);
    }
    CHECK(cudaGetLastError());
    if (r % 16 == 15) CHECK(cudaStreamSynchronize(s));
  }
  CHECK(cudaStreamSynchronize(s));
  movers_running.stop();
  std::vector<uint32_t> a(n), b(n);
  CHECK(cudaMemcpy(a.data(), ref, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), man, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += a[i] != b[i];
  std::vector<uint32_t> ya(n / 64), yb(n / 64);
  CHECK(cudaMemcpy(ya.data(), ref_y, n / 64 * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(yb.data(), man_y, n / 64 * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n / 64; ++i) differ += ya[i] != yb[i];
  std::vector<unsigned long long> ca(4096), cb(4096);
  CHECK(cudaMemcpy(ca.data(), ref_c, sizeof(unsigned long long) * 4096, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(cb.data(), man_c, sizeof(unsigned long long) * 4096, cudaMemcpyDeviceToHost));
  size_t counters_differ = 0;
  for (size_t i = 0; i < 4096; ++i) counters_differ += ca[i] != cb[i];
  std::printf("rounds %d moves %llu words %zu differ %zu counters 4096 differ %zu\n", rounds,
              static_cast<unsigned long long>(movers_running.moves()), n + n / 64, differ,
              counters_differ);
  return differ == 0 && counters_differ == 0 ? 0 : 1;
}
