// A training-like loop for the advisor's GPU test: N buffers, each iteration walks them forward
// (each kernel reads the next buffer into this one), runs a "loss" kernel, then walks them
// backward, so the working set of a step is two buffers while the footprint is all of them. Run
// with a budget of a third of the footprint, the advisor must evict behind the walk and prefetch
// ahead of it.
//
//   advisor_loop [--buffers N] [--mib M] [--iterations I] [--alt-sites] [--stray S] [--graph G]
//                [--table host|device] [--period-checksum]
// --alt-sites allocates the second half of the buffers from another call site: a trace recorded
// without it finds only the first half in a run with it (the replay relearning test).
// --stray S: in iteration S the loss kernel takes the middle buffer instead of the last, after
// the forward walk has finished on the GPU. The launches keep their kernels, so a plan learned
// before still matches them, but that one reaches a buffer the plan keeps off the GPU between its
// forward and backward uses (UMSWAP_EVICT_COPY's guard test).
// --graph G: in iteration G the loss kernel runs as a CUDA graph (captured before the loop, the
// same kernel on the same buffer): the results are the same as without it, but the tracer cannot
// see what a graph touches (UMSWAP_EVICT_COPY must stop copying before it runs).
// --table host|device: every iteration, between the walks, one kernel reads the middle buffer and
// another writes the one before it only through a pointer table in device memory (filled once by
// a copy from the host, or by a kernel), as batched GEMMs, grouped kernels and custom extensions
// reach memory: no parameter of theirs points at those buffers, which the plan keeps off the GPU
// between the walks. The invariant under test: an access the plan did not foresee costs time,
// never correctness.
// prints `iter <i> ms <float>` per iteration and `checksum <hex>` (FNV-1a of every buffer) at the
// end; the checksum is the same natively and under umswap, whatever it prefetched or evicted.
// --period-checksum: every kernel's result at word i depends on i only through i % 1024 (the
// buffers start at zero), so each buffer is its first 4 KiB over and over. Printed instead:
// `period_checksum <hex>` (FNV-1a of each buffer's first 4 KiB) and `period_mismatches <n>` (words
// unlike their first period's, counted on the GPU): the same for any --mib, so that a loop larger
// than the GPU is checked against a native run of a small one.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"

// "Forward": reads the next buffer into this one. "Backward": the other way round, in reverse
// order, as a network's backward pass visits its layers.
__global__ void forward(float* x, const float* y, size_t n, float a) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = x[i] * a + 0.25f * y[i] + 1.0f / (1.0f + static_cast<float>(i & 1023));
  }
}

__global__ void loss(float* x, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = 0.5f * x[i];
  }
}

__global__ void backward(float* x, const float* y, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = 0.5f * x[i] + 0.125f * y[i];
  }
}

// Through the table only: out[i] += 0.25 * table[0][i] (a read of table[0]'s buffer), and
// table[1][i] = f(i, round) (a write of table[1]'s buffer that does not read it).
__global__ void table_read(const float* const* table, float* out, size_t n) {
  const float* r = table[0];
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] += 0.25f * r[i];
  }
}

__global__ void table_write(float* const* table, size_t n, int round) {
  float* w = table[1];
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    w[i] = static_cast<float>(round) + 1.0f / (1.0f + static_cast<float>(i & 511));
  }
}

// Counts into *bad the words of x unlike the word at the same place in x's first 1024.
__global__ void period_mismatches(const uint32_t* x, size_t n, unsigned long long* bad) {
  unsigned long long k = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    k += x[i] != x[i & 1023] ? 1 : 0;
  }
  if (k) atomicAdd(bad, k);
}

__global__ void make_table(float** table, float* a, float* b) {
  table[0] = a;
  table[1] = b;
}

// Two call sites for the same allocation (not inlined: each keeps its own return address).
__attribute__((noinline)) cudaError_t allocate_here(float** p, size_t bytes) {
  return cudaMalloc(p, bytes);
}
__attribute__((noinline)) cudaError_t allocate_there(float** p, size_t bytes) {
  const cudaError_t e = cudaMalloc(p, bytes);
  asm volatile("" ::: "memory");  // not merged with allocate_here
  return e;
}

int main(int argc, char** argv) {
  int buffers = 24, iterations = 8;
  size_t mib = 256;
  bool alt_sites = false;
  int stray = -1, graph_at = -1;
  const char* table_mode = nullptr;
  bool by_period = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--alt-sites")) {
      alt_sites = true;
    } else if (!std::strcmp(argv[i], "--period-checksum")) {
      by_period = true;
    } else if (has_value && !std::strcmp(argv[i], "--buffers")) {
      buffers = std::atoi(argv[++i]);
    } else if (has_value && !std::strcmp(argv[i], "--mib")) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (has_value && !std::strcmp(argv[i], "--iterations")) {
      iterations = std::atoi(argv[++i]);
    } else if (has_value && !std::strcmp(argv[i], "--stray")) {
      stray = std::atoi(argv[++i]);
    } else if (has_value && !std::strcmp(argv[i], "--graph")) {
      graph_at = std::atoi(argv[++i]);
    } else if (has_value && !std::strcmp(argv[i], "--table") &&
               (!std::strcmp(argv[i + 1], "host") || !std::strcmp(argv[i + 1], "device"))) {
      table_mode = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: advisor_loop [--buffers N] [--mib M] [--iterations I] [--alt-sites] "
                   "[--stray S] [--graph G] [--table host|device] [--period-checksum]\n");
      return 2;
    }
  }
  if (buffers < 4 || mib == 0 || iterations < 1) {
    std::fprintf(stderr, "advisor_loop: bad arguments\n");
    return 2;
  }
  const size_t n = mib * (1 << 20) / sizeof(float);
  std::vector<float*> buf(buffers);
  for (size_t i = 0; i < buf.size(); ++i) {
    float*& b = buf[i];
    CHECK(alt_sites && 2 * i >= buf.size() ? allocate_there(&b, n * sizeof(float))
                                           : allocate_here(&b, n * sizeof(float)));
    CHECK(cudaMemset(b, 0, n * sizeof(float)));
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float** table = nullptr;
  if (table_mode) {
    CHECK(cudaMalloc(&table, 2 * sizeof(float*)));
    float* const targets[2] = {buf[buffers / 2], buf[buffers / 2 - 1]};
    if (!std::strcmp(table_mode, "host")) {
      CHECK(cudaMemcpy(table, targets, sizeof targets, cudaMemcpyHostToDevice));
    } else {
      make_table<<<1, 1, 0, stream>>>(table, targets[0], targets[1]);
      CHECK(cudaGetLastError());
    }
  }
  cudaGraphExec_t loss_graph = nullptr;
  if (graph_at >= 0) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    loss<<<1024, 256, 0, stream>>>(buf[buffers - 1], n);
    CHECK(cudaStreamEndCapture(stream, &g));
    CHECK(cudaGraphInstantiate(&loss_graph, g, 0));
    CHECK(cudaGraphDestroy(g));
  }
  for (int it = 0; it < iterations; ++it) {
    CHECK(cudaStreamSynchronize(stream));
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < buffers; ++b) {
      forward<<<1024, 256, 0, stream>>>(buf[b], buf[(b + 1) % buffers], n, 0.999f);
    }
    // The stray launch comes once the GPU is done with the forward walk, so that the advisor
    // has long copied the middle buffer out by then (submitted earlier, it would see the launch
    // and leave that buffer to the driver).
    if (it == stray) CHECK(cudaStreamSynchronize(stream));
    if (it == graph_at) {
      CHECK(cudaGraphLaunch(loss_graph, stream));
    } else {
      loss<<<1024, 256, 0, stream>>>(buf[it == stray ? buffers / 2 : buffers - 1], n);
    }
    if (table) {
      // Once the GPU is done with the forward walk, as the stray launch.
      CHECK(cudaStreamSynchronize(stream));
      table_read<<<1024, 256, 0, stream>>>(table, buf[buffers - 1], n);
      table_write<<<1024, 256, 0, stream>>>(table, n, it);
    }
    for (int b = buffers - 1; b >= 0; --b) {
      backward<<<1024, 256, 0, stream>>>(buf[b], buf[(b + buffers - 1) % buffers], n);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(stream));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("iter %d ms %.3f\n", it, ms);
    std::fflush(stdout);
  }
  uint64_t h = 1469598103934665603ull;
  if (by_period) {
    unsigned long long* bad = nullptr;
    CHECK(cudaMalloc(&bad, sizeof *bad));
    CHECK(cudaMemset(bad, 0, sizeof *bad));
    std::vector<unsigned char> first(1024 * sizeof(float));
    for (auto& b : buf) {
      period_mismatches<<<1024, 256>>>(reinterpret_cast<const uint32_t*>(b), n, bad);
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(first.data(), b, first.size(), cudaMemcpyDeviceToHost));
      for (unsigned char c : first) h = (h ^ c) * 1099511628211ull;
      CHECK(cudaFree(b));
    }
    unsigned long long mismatches = 0;
    CHECK(cudaMemcpy(&mismatches, bad, sizeof mismatches, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(bad));
    if (loss_graph) CHECK(cudaGraphExecDestroy(loss_graph));
    if (table) CHECK(cudaFree(table));
    std::printf("period_checksum %016llx\nperiod_mismatches %llu\n",
                static_cast<unsigned long long>(h), mismatches);
    return 0;
  }
  std::vector<unsigned char> host(n * sizeof(float));
  for (auto& b : buf) {
    CHECK(cudaMemcpy(host.data(), b, host.size(), cudaMemcpyDeviceToHost));
    for (unsigned char c : host) h = (h ^ c) * 1099511628211ull;
    CHECK(cudaFree(b));
  }
  if (loss_graph) CHECK(cudaGraphExecDestroy(loss_graph));
  if (table) CHECK(cudaFree(table));
  std::printf("checksum %016llx\n", static_cast<unsigned long long>(h));
  return 0;
}
