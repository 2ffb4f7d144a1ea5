// A small, known training-like loop for the tracer's GPU tests: three buffers of distinct sizes,
// three kernels per iteration: one takes a pointer directly, one inside a struct parameter, one
// takes two pointers. trace_check.cpp verifies the recorded trace against this shape.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"

struct Packed {
  int count;
  float scale;
  float* data;  // a pointer inside a struct parameter, as PyTorch passes tensors
};

__global__ void direct(float* a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    a[i] = a[i] * 0.5f + 1.0f;
  }
}

__global__ void in_struct(Packed p) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += gridDim.x * blockDim.x) {
    p.data[i] += p.scale;
  }
}

__global__ void two(const float* a, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    c[i] = a[i] * 2.0f;
  }
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 12;
  const int n = 1 << 18;  // floats: A = 1 MiB
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, n * sizeof(float)));      // 1 MiB
  CHECK(cudaMalloc(&b, 2 * n * sizeof(float)));  // 2 MiB
  CHECK(cudaMalloc(&c, 3 * n * sizeof(float)));  // 3 MiB
  CHECK(cudaMemset(a, 0, n * sizeof(float)));
  for (int it = 0; it < iterations; ++it) {
    direct<<<64, 256>>>(a, n);
    in_struct<<<64, 256>>>(Packed{2 * n, 0.25f, b});
    two<<<64, 256>>>(a, c, n);
  }
  CHECK(cudaDeviceSynchronize());
  float host = 0;
  CHECK(cudaMemcpy(&host, c, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("trace_probe: %d iterations, c[0] = %g\n", iterations, host);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  return 0;
}
