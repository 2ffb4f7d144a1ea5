// Kernels and helpers the sample trainers share (mlp_train, cudnn_vgg16; each is one translation
// unit, so the kernels are static: nvcc ignores `inline` on them). Samples stand for
// ordinary CUDA programs: nothing here knows about umswap.
//
// Random numbers are a hash of (key, index), the same on host and device and independent of
// launch configuration, so data and weights never depend on scheduling. Every reduction runs in
// a fixed order (no atomics), so a run gives the same bits every time.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace samples {

constexpr int kThreads = 256;  // every launch; row_sum relies on it being a power of two

__host__ __device__ inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from 24 random bits (exact in a float).
__host__ __device__ inline float uniform_pm1(uint64_t key, uint64_t i) {
  return 2.0f * (static_cast<float>(mix64(key ^ mix64(i)) >> 40) * 0x1p-24f) - 1.0f;
}

inline uint64_t stream_key(uint64_t seed, uint64_t tag, uint64_t index) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ULL * (tag + 1)) + index);
}

// p[i] = uniform in [-scale, scale).
static __global__ void fill_uniform(float* p, size_t n, uint64_t key, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = uniform_pm1(key, i) * scale;
}

// Fully connected output z (rows x batch, column-major): z[r, c] += b[r], then ReLU if asked.
static __global__ void bias_act(float* z, const float* b, int rows, size_t n, bool relu) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    float v = z[i] + b[i % rows];
    z[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// dy = 0 where the ReLU was off (y == 0); y is the ReLU's output.
static __global__ void relu_backward(float* dy, const float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    if (y[i] <= 0.0f) dy[i] = 0.0f;
}

// Softmax cross-entropy per sample (logits column-major, classes x batch): loss[c] =
// log(sum exp z) - z[label], and the gradient of the batch mean, dz = (softmax(z) - onehot) /
// batch. One thread per sample, classes in order.
static __global__ void softmax_xent(const float* logits, const int* labels, int classes, int batch,
                                    float* dlogits, float* loss) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= batch) return;
  const float* z = logits + size_t(c) * classes;
  float* dz = dlogits + size_t(c) * classes;
  float zmax = z[0];
  for (int k = 1; k < classes; ++k) zmax = fmaxf(zmax, z[k]);
  float sum = 0.0f;
  for (int k = 0; k < classes; ++k) sum += expf(z[k] - zmax);
  int y = labels[c];
  loss[c] = logf(sum) - (z[y] - zmax);
  for (int k = 0; k < classes; ++k)
    dz[k] = (expf(z[k] - zmax) / sum - (k == y ? 1.0f : 0.0f)) / batch;
}

// out[r] = scale * sum over c of m[r + c * ld]: one block of kThreads per row. Each thread adds a
// fixed strided subset in order, then a fixed tree combines them.
static __global__ void row_sum(const float* m, int cols, int ld, float scale, float* out) {
  __shared__ float part[kThreads];
  int r = blockIdx.x;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += m[r + size_t(c) * ld];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = part[0] * scale;
}

static __global__ void sgd_update(float* w, const float* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    w[i] -= lr * g[i];
}

inline unsigned grid_for(size_t n) {  // grid-stride kernels: enough blocks, capped
  size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace samples
