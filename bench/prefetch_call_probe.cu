// How long does cudaMemPrefetchAsync block the calling thread? Measures the host time of the
// call itself against the time until the migration is done, on an idle stream and on a stream
// that first waits (through an event) for a ~300 ms kernel on another stream.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"

static __global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
static __global__ void touch(char* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = 1;
}

using Clock = std::chrono::steady_clock;
static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int main() {
  const size_t bytes = size_t(1) << 30;
  int dev = 0;
  CHECK(cudaSetDevice(dev));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  char* p = nullptr;
  CHECK(cudaMallocManaged(&p, bytes));
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaMemLocation gpu{cudaMemLocationTypeDevice, dev}, host{cudaMemLocationTypeHost, 0};
  touch<<<1024, 256, 0, a>>>(p, bytes);
  CHECK(cudaStreamSynchronize(a));
  const long long cycles = (long long)clock_khz * 300;  // ~300 ms
  for (int round = 0; round < 2; ++round) {
    for (int to_gpu = 0; to_gpu < 2; ++to_gpu) {
      // Put the data on the other side first.
      CHECK(cudaMemPrefetchAsync(p, bytes, to_gpu ? host : gpu, 0, b));
      CHECK(cudaStreamSynchronize(b));
      auto t = Clock::now();
      CHECK(cudaMemPrefetchAsync(p, bytes, to_gpu ? gpu : host, 0, b));
      const double call = ms_since(t);
      CHECK(cudaStreamSynchronize(b));
      std::printf("idle stream, 1 GiB to %s: call %.1f ms, done %.1f ms\n",
                  to_gpu ? "GPU " : "host", call, ms_since(t));
      CHECK(cudaMemPrefetchAsync(p, bytes, to_gpu ? host : gpu, 0, b));
      CHECK(cudaStreamSynchronize(b));
      t = Clock::now();
      spin<<<1, 1, 0, a>>>(cycles);
      CHECK(cudaEventRecord(ev, a));
      CHECK(cudaStreamWaitEvent(b, ev, 0));
      auto c = Clock::now();
      CHECK(cudaMemPrefetchAsync(p, bytes, to_gpu ? gpu : host, 0, b));
      const double call2 = ms_since(c);
      CHECK(cudaStreamSynchronize(b));
      std::printf("stream waiting on a 300 ms kernel, 1 GiB to %s: call %.1f ms, done %.1f ms\n",
                  to_gpu ? "GPU " : "host", call2, ms_since(t));
      // A small prefetch behind a large one on the same stream.
      CHECK(cudaMemPrefetchAsync(p, bytes, to_gpu ? host : gpu, 0, b));
      CHECK(cudaStreamSynchronize(b));
      t = Clock::now();
      CHECK(cudaMemPrefetchAsync(p, bytes / 2, to_gpu ? gpu : host, 0, b));
      const double big = ms_since(t);
      c = Clock::now();
      CHECK(cudaMemPrefetchAsync(p + bytes / 2, 2 << 20, to_gpu ? gpu : host, 0, b));
      const double small = ms_since(c);
      CHECK(cudaStreamSynchronize(b));
      std::printf(
          "512 MiB then 2 MiB to %s on one stream: calls %.1f ms and %.1f ms, done %.1f ms\n",
          to_gpu ? "GPU " : "host", big, small, ms_since(t));
    }
  }
  CHECK(cudaFree(p));
  return 0;
}
