// mlp_train: a small, deterministic training loop that allocates the way a framework does.
//
// A 2-layer MLP (input -> hidden, ReLU -> classes, softmax cross-entropy) learns to classify
// synthetic data: each class is a fixed random centre in input space, and every step draws a
// fresh batch of noisy points around the centres (so the input buffer is rewritten each step, as
// a data loader would). Forward and backward run on cuBLAS (cublasSgemm) plus a few small
// kernels. Memory comes only from the CUDA runtime API: cudaMalloc for weights, gradients and
// activations, and cudaMallocAsync/cudaFreeAsync on the stream for one per-step temporary.
// Nothing uses cudaMallocManaged, so under umswap every managed byte is one the preload library
// made managed.
//
// Every run with the same arguments prints the same bits (fixed seeds, counter-based random
// numbers, reductions in a fixed order, cuBLAS in pedantic math mode, one stream), so scripts
// can diff a native run against a run under umswap.
//
// Matrices are column-major (cuBLAS's layout): a batch is input x batch, one sample a column.
// Exit status: 0 result OK, 1 the loss did not fall enough, 2 bad arguments, 3 CUDA/cuBLAS error.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../common/sample_args.h"
#include "../common/train_kernels.cuh"

namespace {

using namespace samples;

void fail_call(const char* call, const char* what, const char* file, int line) {
  std::fprintf(stderr, "mlp_train: %s:%d: %s failed: %s\n", file, line, call, what);
  std::exit(3);
}

#define CUDA_CHECK(call)                                                                     \
  do {                                                                                       \
    cudaError_t err_ = (call);                                                               \
    if (err_ != cudaSuccess) fail_call(#call, cudaGetErrorString(err_), __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                              \
  do {                                                                  \
    cublasStatus_t st_ = (call);                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                   \
      fail_call(#call, cublasGetStatusString(st_), __FILE__, __LINE__); \
  } while (0)

// A launch reports configuration errors only through cudaGetLastError.
#define LAUNCH_CHECK(kernel)                                                        \
  do {                                                                              \
    cudaError_t err_ = cudaGetLastError();                                          \
    if (err_ != cudaSuccess)                                                        \
      fail_call(#kernel "<<<...>>>", cudaGetErrorString(err_), __FILE__, __LINE__); \
  } while (0)

// The run passes if the last step's loss is below this fraction of the first step's. With the
// defaults the loss falls from about 2.3 to about 0.05 in 20 steps (checked on a CPU port of this
// program), so 0.5 leaves a wide margin and still catches a run that did not learn.
constexpr double kPassRatio = 0.5;

// One batch of the synthetic task: sample c gets a random label y and the point
// x[:, c] = centre[y] + noise, both uniform in [-1, 1) per coordinate. The centres are a hash of
// (centre_key, y, row), so they need no memory and never change.
__global__ void make_batch(float* x, int* labels, int input, int classes, size_t n,
                           uint64_t label_key, uint64_t centre_key, uint64_t noise_key) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    size_t c = i / input, r = i % input;
    uint64_t y = mix64(label_key ^ mix64(c)) % classes;
    float centre = static_cast<float>(mix64(centre_key ^ mix64(y * input + r)) >> 40) * 0x1p-24f;
    float noise = static_cast<float>(mix64(noise_key ^ mix64(i)) >> 40) * 0x1p-24f;
    x[i] = (2.0f * centre - 1.0f) + (2.0f * noise - 1.0f);
    if (r == 0) labels[c] = static_cast<int>(y);
  }
}

float* device_floats(size_t n) {
  float* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  return p;
}

// One dense layer's parameters and gradients, all from cudaMalloc.
struct Layer {
  int out = 0, in = 0;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  Layer(int out_, int in_, uint64_t key, float scale, cudaStream_t s) : out(out_), in(in_) {
    size_t n = size_t(out) * in;
    w = device_floats(n);
    b = device_floats(out);
    dw = device_floats(n);
    db = device_floats(out);
    fill_uniform<<<grid_for(n), kThreads, 0, s>>>(w, n, key, scale);
    LAUNCH_CHECK(fill_uniform);
    CUDA_CHECK(cudaMemsetAsync(b, 0, out * sizeof(float), s));
  }
  void release() {
    for (float* p : {w, b, dw, db}) CUDA_CHECK(cudaFree(p));
  }

  // y (out x batch) = act(w x + b)
  void forward(cublasHandle_t h, cudaStream_t s, const float* x, int batch, float* y,
               bool relu) const {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, out, batch, in, &one, w, out, x, in,
                             &zero, y, out));
    size_t n = size_t(out) * batch;
    bias_act<<<grid_for(n), kThreads, 0, s>>>(y, b, out, n, relu);
    LAUNCH_CHECK(bias_act);
  }

  // From dy (out x batch): dw = dy x^T, db = row sums of dy, and dx = w^T dy if dx is given.
  void backward(cublasHandle_t h, cudaStream_t s, const float* x, const float* dy, int batch,
                float* dx) const {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, out, in, batch, &one, dy, out, x, in,
                             &zero, dw, out));
    row_sum<<<out, kThreads, 0, s>>>(dy, batch, out, 1.0f, db);
    LAUNCH_CHECK(row_sum);
    if (dx)
      CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, in, batch, out, &one, w, out, dy, out,
                               &zero, dx, in));
  }

  void sgd(cudaStream_t s, float lr) const {
    size_t n = size_t(out) * in;
    sgd_update<<<grid_for(n), kThreads, 0, s>>>(w, dw, n, lr);
    LAUNCH_CHECK(sgd_update);
    sgd_update<<<grid_for(out), kThreads, 0, s>>>(b, db, out, lr);
    LAUNCH_CHECK(sgd_update);
  }
};

struct Args {
  long batch = 256, hidden = 1024, input = 512, classes = 10, steps = 20;
  uint64_t seed = 1;
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: mlp_train [--batch N] [--hidden N] [--input N] [--classes N] [--steps N]\n"
               "                 [--seed N] [--help]\n"
               "Trains a 2-layer MLP on synthetic data for a few steps, deterministically.\n"
               "defaults: --batch 256 --hidden 1024 --input 512 --classes 10 --steps 20 "
               "--seed 1\n"
               "exit: 0 loss fell, 1 it did not, 2 bad arguments, 3 CUDA/cuBLAS error\n");
}

Args parse_args(int argc, char** argv) {
  samples::g_program = "mlp_train";
  Args a;
  // Dimensions go to cuBLAS as int; 1 << 20 keeps every leading dimension well inside that.
  constexpr unsigned long long kMaxDim = 1 << 20;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (f == "--help" || f == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (f == "--batch") {
      a.batch = long(parse_number("--batch", v, 1, kMaxDim));
    } else if (f == "--hidden") {
      a.hidden = long(parse_number("--hidden", v, 1, kMaxDim));
    } else if (f == "--input") {
      a.input = long(parse_number("--input", v, 1, kMaxDim));
    } else if (f == "--classes") {
      a.classes = long(parse_number("--classes", v, 2, kMaxDim));
    } else if (f == "--steps") {
      a.steps = long(parse_number("--steps", v, 1, 1000000));
    } else if (f == "--seed") {
      a.seed = parse_number("--seed", v, 0, UINT64_MAX);
    } else {
      bad_arg("unknown argument '" + f + "'");
    }
    ++i;  // every flag but --help takes a value
  }
  return a;
}

uint64_t hash_device(uint64_t h, const float* p, size_t n) {
  std::vector<float> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return fnv1a(h, host.data(), n * sizeof(float));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const int batch = int(a.batch), hidden = int(a.hidden), input = int(a.input),
            classes = int(a.classes);

  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cublasHandle_t blas;
  CUBLAS_CHECK(cublasCreate(&blas));
  CUBLAS_CHECK(cublasSetStream(blas, s));
  // Pedantic math: plain FP32 (no TF32, even if NVIDIA_TF32_OVERRIDE is set) so the same
  // algorithm, hence the same bits, runs every time.
  CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));

  // Tags give each random stream its own key.
  enum : uint64_t { kTagLabels, kTagCentres, kTagNoise, kTagLayer1, kTagLayer2 };
  // He-uniform first layer; second layer scaled so the first loss is near log(classes).
  Layer l1(hidden, input, stream_key(a.seed, kTagLayer1, 0), std::sqrt(6.0f / input), s);
  Layer l2(classes, hidden, stream_key(a.seed, kTagLayer2, 0), std::sqrt(1.0f / hidden), s);
  // With plain SGD a step moves the logits by about lr * (hidden + input) (each layer's update
  // is summed over its inputs), so the rate shrinks as the layers grow and the run stays stable
  // at any size; capped for tiny layers.
  const float lr = std::fmin(0.1f, 75.0f / float(hidden + input));

  // Activations, rewritten each step.
  float* x = device_floats(size_t(input) * batch);
  float* h = device_floats(size_t(hidden) * batch);
  float* dh = device_floats(size_t(hidden) * batch);
  float* z = device_floats(size_t(classes) * batch);
  float* loss_dev = device_floats(1);
  int* labels = nullptr;
  CUDA_CHECK(cudaMalloc(&labels, size_t(batch) * sizeof(int)));

  std::vector<float> losses;
  for (long step = 0; step < a.steps; ++step) {
    size_t nx = size_t(input) * batch;
    make_batch<<<grid_for(nx), kThreads, 0, s>>>(
        x, labels, input, classes, nx, stream_key(a.seed, kTagLabels, step),
        stream_key(a.seed, kTagCentres, 0), stream_key(a.seed, kTagNoise, step));
    LAUNCH_CHECK(make_batch);

    l1.forward(blas, s, x, batch, h, true);
    l2.forward(blas, s, h, batch, z, false);

    // The per-step temporary, stream-ordered as a framework's caching allocator would use it:
    // the logits' gradient followed by the per-sample losses.
    float* tmp = nullptr;
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&tmp),
                               (size_t(classes) * batch + batch) * sizeof(float), s));
    float* dz = tmp;
    float* sample_loss = tmp + size_t(classes) * batch;
    softmax_xent<<<(batch + kThreads - 1) / kThreads, kThreads, 0, s>>>(z, labels, classes, batch,
                                                                        dz, sample_loss);
    LAUNCH_CHECK(softmax_xent);
    row_sum<<<1, kThreads, 0, s>>>(sample_loss, batch, 1, 1.0f / batch, loss_dev);  // mean
    LAUNCH_CHECK(row_sum);

    l2.backward(blas, s, h, dz, batch, dh);
    CUDA_CHECK(cudaFreeAsync(tmp, s));
    size_t nh = size_t(hidden) * batch;
    relu_backward<<<grid_for(nh), kThreads, 0, s>>>(dh, h, nh);
    LAUNCH_CHECK(relu_backward);
    l1.backward(blas, s, x, dh, batch, nullptr);
    l1.sgd(s, lr);
    l2.sgd(s, lr);

    float loss = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&loss, loss_dev, sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    uint32_t bits;
    std::memcpy(&bits, &loss, sizeof bits);
    std::printf("step %ld loss %.6f bits %08" PRIx32 "\n", step, double(loss), bits);
    std::fflush(stdout);
    losses.push_back(loss);
  }

  uint64_t sum = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  for (const Layer* l : {&l1, &l2}) {
    sum = hash_device(sum, l->w, size_t(l->out) * l->in);
    sum = hash_device(sum, l->b, size_t(l->out));
  }
  std::printf("checksum %016" PRIx64 "\n", sum);

  for (Layer* l : {&l1, &l2}) l->release();
  for (float* p : {x, h, dh, z, loss_dev}) CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFree(labels));
  CUBLAS_CHECK(cublasDestroy(blas));
  CUDA_CHECK(cudaStreamDestroy(s));

  const double first = losses.front(), last = losses.back();
  if (!std::isfinite(last)) {
    std::printf("result FAIL: final loss is not finite\n");
    return 1;
  }
  if (a.steps < 2 || !(last < kPassRatio * first)) {
    std::printf("result FAIL: final loss %.6f is not below %.2f x first loss %.6f\n", last,
                kPassRatio, first);
    return 1;
  }
  std::printf("result OK\n");
  return 0;
}
