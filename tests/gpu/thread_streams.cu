// Kernel launches from 4 host threads, each on its own stream with its own buffer, all at once,
// for the tracer: every launch of every thread must be in the trace `umswap record` writes
// (thread_streams_check.cpp). Thread i allocates (i + 1) MiB and launches its own kernel,
// umswap_thread<i>_kernel, LAUNCHES times (default 50).
// usage: thread_streams [LAUNCHES]          prints one checksum line per thread
#include <cuda_runtime.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cuda_check.h"

#define UMSWAP_THREAD_KERNEL(i)                                                               \
  extern "C" __global__ void umswap_thread##i##_kernel(float* a, int n) {                     \
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) { \
      a[k] = a[k] * 0.5f + static_cast<float>(i + 1);                                         \
    }                                                                                         \
  }
UMSWAP_THREAD_KERNEL(0)
UMSWAP_THREAD_KERNEL(1)
UMSWAP_THREAD_KERNEL(2)
UMSWAP_THREAD_KERNEL(3)

using Kernel = void (*)(float*, int);
constexpr Kernel kKernels[4] = {umswap_thread0_kernel, umswap_thread1_kernel, umswap_thread2_kernel,
                                umswap_thread3_kernel};

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 50;
  CHECK(cudaFree(nullptr));  // one context for all threads, created before they start
  std::barrier start(4);
  std::vector<double> sums(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int n = (t + 1) * (1 << 18);  // (t + 1) MiB of floats
      cudaStream_t stream;
      CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      float* a = nullptr;
      CHECK(cudaMalloc(&a, n * sizeof(float)));
      CHECK(cudaMemsetAsync(a, 0, n * sizeof(float), stream));
      start.arrive_and_wait();  // launch from all threads at the same time
      for (int i = 0; i < launches; ++i) kKernels[t]<<<64, 256, 0, stream>>>(a, n);
      CHECK(cudaGetLastError());
      std::vector<float> host(n);
      CHECK(cudaMemcpyAsync(host.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
      CHECK(cudaStreamSynchronize(stream));
      double sum = 0;
      for (float v : host) sum += v;
      sums[t] = sum;
      CHECK(cudaStreamDestroy(stream));
      // The buffer stays allocated until exit: the trace keeps it as live.
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) std::printf("thread %d sum %.6e\n", t, sums[t]);
  return 0;
}
