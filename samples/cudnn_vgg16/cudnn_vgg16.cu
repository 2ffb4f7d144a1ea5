// cudnn_vgg16: VGG-16 trained directly on cuDNN 9 and cuBLAS, allocating the way a framework does.
//
// The network is configuration D of Simonyan & Zisserman (13 3x3 convolutions with ReLU, five
// 2x2 max-pools, fully connected 4096-4096-1000, softmax cross-entropy), fp32, NCHW: the workload
// vDNN and ooc_cuDNN measured. It runs plain SGD on one fixed synthetic batch (pixels and labels
// from a seeded hash, made on the host and copied once), so the loss falls as the net memorises it.
//
// Memory comes only from cudaMalloc, one buffer per purpose, all allocated before the first step
// and freed at the end: per layer its weights, bias, their gradients and its output (every forward
// activation is kept for backward); two ping-pong buffers for activation gradients; one cuDNN
// workspace. The program knows nothing of umswap. --print-footprint adds up the same buffer list
// the trainer allocates (for_each_buffer), so the two can never disagree. A batch too large for
// cuDNN's 2^31-element tensors is run through cuDNN in slices over the same buffers, so the
// footprint can grow past any GPU's memory.
//
// Runs are bit-reproducible: fixed convolution algorithms that use no atomics, no TF32 in cuDNN
// (CUDNN_FMA_MATH) or cuBLAS (pedantic math), deterministic max-pooling, reductions of our own in
// a fixed order, one stream. So a native run and a run under umswap print the same checksum.
//
// Exit status: 0 done, 1 a CUDA/cuDNN/cuBLAS call failed or memory ran out, 2 bad arguments.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../common/sample_args.h"
#include "../common/train_kernels.cuh"

namespace {

using namespace samples;

[[noreturn]] void fail_call(const char* call, const char* what) {
  std::fprintf(stderr, "cudnn_vgg16: error: %s failed: %s\n", call, what);
  std::exit(1);
}

#define CUDA_CHECK(call)                                                 \
  do {                                                                   \
    cudaError_t err_ = (call);                                           \
    if (err_ != cudaSuccess) fail_call(#call, cudaGetErrorString(err_)); \
  } while (0)

#define CUDNN_CHECK(call)                                                        \
  do {                                                                           \
    cudnnStatus_t st_ = (call);                                                  \
    if (st_ != CUDNN_STATUS_SUCCESS) fail_call(#call, cudnnGetErrorString(st_)); \
  } while (0)

#define CUBLAS_CHECK(call)                                                          \
  do {                                                                              \
    cublasStatus_t st_ = (call);                                                    \
    if (st_ != CUBLAS_STATUS_SUCCESS) fail_call(#call, cublasGetStatusString(st_)); \
  } while (0)

// A launch reports configuration errors only through cudaGetLastError.
#define LAUNCH_CHECK(kernel)                                                           \
  do {                                                                                 \
    cudaError_t err_ = cudaGetLastError();                                             \
    if (err_ != cudaSuccess) fail_call(#kernel "<<<...>>>", cudaGetErrorString(err_)); \
  } while (0)

constexpr int kClasses = 1000;
constexpr int kImageChannels = 3;

// The kernels (fill, bias + ReLU, softmax cross-entropy, row sums, SGD) are the samples' shared
// ones: samples/common/train_kernels.cuh.

// ---------------------------------------------------------------------------------------------
// The layer table: VGG-16, configuration D. Pure data; shapes follow from the image size alone.

enum class Kind { kConv, kPool, kFc };

struct LayerSpec {
  const char* name;
  Kind kind;
  int channels;  // output channels (conv) or features (fc); pools keep their input's
};

constexpr LayerSpec kVgg16[] = {
    {"conv1_1", Kind::kConv, 64},  {"conv1_2", Kind::kConv, 64},  {"pool1", Kind::kPool, 0},
    {"conv2_1", Kind::kConv, 128}, {"conv2_2", Kind::kConv, 128}, {"pool2", Kind::kPool, 0},
    {"conv3_1", Kind::kConv, 256}, {"conv3_2", Kind::kConv, 256}, {"conv3_3", Kind::kConv, 256},
    {"pool3", Kind::kPool, 0},     {"conv4_1", Kind::kConv, 512}, {"conv4_2", Kind::kConv, 512},
    {"conv4_3", Kind::kConv, 512}, {"pool4", Kind::kPool, 0},     {"conv5_1", Kind::kConv, 512},
    {"conv5_2", Kind::kConv, 512}, {"conv5_3", Kind::kConv, 512}, {"pool5", Kind::kPool, 0},
    {"fc6", Kind::kFc, 4096},      {"fc7", Kind::kFc, 4096},      {"fc8", Kind::kFc, kClasses},
};

struct Shape {  // one sample's tensor, C x H x W (a fully connected layer's is C x 1 x 1)
  int c = 0, h = 0, w = 0;
  size_t count() const { return size_t(c) * h * w; }
};

struct LayerShape {
  std::string name;
  Kind kind = Kind::kConv;
  Shape in, out;
  bool relu = false;   // every conv and fc but the last (its output is the logits)
  size_t weights = 0;  // conv: K x C x 3 x 3; fc: out x in (column-major, cuBLAS's layout)
  size_t biases = 0;   // one per output channel or feature
  size_t fan_in = 0;   // inputs to one output, for the He init scale
};

std::vector<LayerShape> vgg16_shapes(int image) {
  std::vector<LayerShape> table;
  Shape s{kImageChannels, image, image};
  for (size_t i = 0; i < std::size(kVgg16); ++i) {
    const LayerSpec& spec = kVgg16[i];
    LayerShape l;
    l.name = spec.name;
    l.kind = spec.kind;
    l.in = s;
    switch (spec.kind) {
      case Kind::kConv:  // 3x3, pad 1, stride 1: same height and width
        l.out = {spec.channels, s.h, s.w};
        l.fan_in = size_t(s.c) * 9;
        l.weights = size_t(spec.channels) * l.fan_in;
        l.biases = size_t(spec.channels);
        break;
      case Kind::kPool:  // 2x2, stride 2
        l.out = {s.c, s.h / 2, s.w / 2};
        break;
      case Kind::kFc:
        l.out = {spec.channels, 1, 1};
        l.fan_in = s.count();
        l.weights = size_t(spec.channels) * l.fan_in;
        l.biases = size_t(spec.channels);
        break;
    }
    l.relu = spec.kind != Kind::kPool && i + 1 < std::size(kVgg16);
    table.push_back(l);
    s = l.out;
  }
  return table;
}

// ---------------------------------------------------------------------------------------------
// Arguments, parsed before any CUDA call so --help and bad arguments work without a GPU.

struct Args {
  int batch = 64;
  int image = 224;
  long steps = 10;
  float lr = 0.01f;
  uint64_t seed = 1;
  bool print_footprint = false;
};

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: cudnn_vgg16 [--batch N] [--image S] [--steps N] [--lr F] [--seed N]\n"
      "                   [--print-footprint] [--help]\n"
      "Trains VGG-16 (fp32, cuDNN + cuBLAS) with SGD on one fixed synthetic batch,\n"
      "deterministically, allocating every buffer with cudaMalloc.\n"
      "  --batch N          images per batch (default 64)\n"
      "  --image S          image height and width, a multiple of 32, >= 32 (default 224)\n"
      "  --steps N          training iterations (default 10)\n"
      "  --lr F             SGD learning rate (default 0.01)\n"
      "  --seed N           seed for the data and the initial weights (default 1)\n"
      "  --print-footprint  print 'footprint_bytes <N>', the bytes the run would\n"
      "                     cudaMalloc, and exit without allocating device memory\n"
      "output: 'iter <i> ms <ms> loss <loss>' per step, then 'checksum <16 hex>' and\n"
      "'summary {json}'\n"
      "exit: 0 done, 1 CUDA/cuDNN/cuBLAS error or out of memory, 2 bad arguments\n");
}

float parse_rate(const char* flag, const char* text) {
  if (!text) bad_arg(std::string(flag) + " needs a value");
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !std::isfinite(v) || !(v > 0.0) || v > 1e3)
    bad_arg(std::string(flag) + ": '" + text + "' is not a number in (0, 1000]");
  return static_cast<float>(v);
}

Args parse_args(int argc, char** argv) {
  samples::g_program = "cudnn_vgg16";
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (f == "--help" || f == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (f == "--print-footprint") {
      a.print_footprint = true;
      continue;  // takes no value
    } else if (f == "--batch") {
      a.batch = int(parse_number("--batch", v, 1, 1 << 20));
    } else if (f == "--image") {
      a.image = int(parse_number("--image", v, 32, 1 << 16));
      if (a.image % 32 != 0) bad_arg(std::string("--image: '") + v + "' is not a multiple of 32");
    } else if (f == "--steps") {
      a.steps = long(parse_number("--steps", v, 1, 1000000));
    } else if (f == "--lr") {
      a.lr = parse_rate("--lr", v);
    } else if (f == "--seed") {
      a.seed = parse_number("--seed", v, 0, UINT64_MAX);
    } else {
      bad_arg("unknown argument '" + f + "'");
    }
    ++i;  // the value just read
  }
  return a;
}

// cuDNN's legacy API takes tensors of at most 2^31 - 1 elements and cuBLAS takes int sizes. A batch
// too large for that is cut into slices (see Layer), but one image, and each weight matrix, must
// fit; refuse an image size that breaks that instead of failing deep inside a step.
constexpr size_t kMaxTensorElements = INT_MAX;

void check_limits(const Args& a, const std::vector<LayerShape>& table) {
  auto check = [&](const std::string& what, size_t elements) {
    if (elements > kMaxTensorElements)
      bad_arg("--image " + std::to_string(a.image) + " makes " + what + " " +
              std::to_string(elements) + " elements, more than cuDNN/cuBLAS take (2^31 - 1)");
  };
  for (const LayerShape& l : table) {
    check(l.name + "'s output for one image", l.out.count());
    check(l.name + "'s weights", l.weights);
  }
}

// ---------------------------------------------------------------------------------------------
// RAII for cuDNN descriptors: created on construction, destroyed once, movable so layers can live
// in a vector.

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() {
    cudnnStatus_t st = Create(&d_);
    if (st != CUDNN_STATUS_SUCCESS) fail_call("cudnnCreate...Descriptor", cudnnGetErrorString(st));
  }
  ~Descriptor() {
    if (d_) Destroy(d_);  // nothing useful to do if it fails at teardown
  }
  Descriptor(Descriptor&& other) noexcept : d_(std::exchange(other.d_, nullptr)) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;
  operator T() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                            cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                            cudnnDestroyPoolingDescriptor>;
using ActDesc = Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                           cudnnDestroyActivationDescriptor>;

// ---------------------------------------------------------------------------------------------
// The network: shapes, cuDNN descriptors and chosen algorithms, and the device buffers.

// The descriptors and algorithms for one cuDNN call over `samples` images of the batch.
struct Slice {
  int samples = 0;
  TensorDesc x_desc, y_desc;
  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

  explicit Slice(int n) : samples(n) {}
};

struct Layer {
  LayerShape shape;
  // A batch whose input or output tensor passes kMaxTensorElements runs in slices of
  // slice_samples images (as PyTorch splits such batches for cuDNN), over the same whole-batch
  // buffers: slices[0] describes a full slice, slices[1], if present, the smaller last one. Most
  // runs have one slice, the whole batch.
  int slice_samples = 0;
  std::vector<Slice> slices;
  TensorDesc bias_desc;  // 1 x K x 1 x 1, broadcast over y
  FilterDesc filter_desc;
  ConvDesc conv_desc;
  size_t workspace = 0;  // the most any of this layer's chosen algorithms needs
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;
  float* y = nullptr;  // this layer's output, kept from forward for backward

  explicit Layer(LayerShape s) : shape(std::move(s)) {}
};

// f(slice, index of its first image) for each slice of the batch, in order.
template <typename F>
void for_each_slice(const Layer& l, int batch, F&& f) {
  for (int first = 0; first < batch; first += l.slice_samples)
    f(batch - first >= l.slice_samples ? l.slices.front() : l.slices.back(), first);
}

struct Net {
  int batch = 0;
  Shape image;
  std::vector<Layer> layers;
  PoolDesc pool_desc;
  ActDesc relu_desc;
  size_t grad_elements = 0;  // each ping-pong gradient buffer: the largest activation
  size_t workspace_bytes = 0;

  float* images = nullptr;  // the fixed input batch, N x 3 x S x S
  int* labels = nullptr;
  float* grad[2] = {nullptr, nullptr};
  float* sample_loss = nullptr;  // per sample, then their mean
  float* mean_loss = nullptr;
  void* workspace = nullptr;
};

void set_tensor(cudnnTensorDescriptor_t d, int n, Shape s) {
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, s.c, s.h, s.w));
}

// Take the preferred algorithm if cuDNN gives it a workspace size (it refuses unsupported ones
// there), else the fallback; warn when the fallback is one that uses atomics.
template <typename Algo, typename SizeOf>
Algo choose_algo(const std::string& layer, const char* pass, Algo preferred, Algo fallback,
                 bool fallback_deterministic, SizeOf size_of, size_t& bytes) {
  if (size_of(preferred, &bytes) == CUDNN_STATUS_SUCCESS) return preferred;
  std::fprintf(stderr, "cudnn_vgg16: warning: %s %s: algorithm %d unsupported, using %d%s\n",
               layer.c_str(), pass, int(preferred), int(fallback),
               fallback_deterministic ? "" : " (not bit-reproducible)");
  cudnnStatus_t st = size_of(fallback, &bytes);
  if (st != CUDNN_STATUS_SUCCESS)
    fail_call((std::string("cudnnGet") + pass + "WorkspaceSize").c_str(), cudnnGetErrorString(st));
  return fallback;
}

void configure_conv(cudnnHandle_t dnn, Layer& l, bool needs_data_grad) {
  const LayerShape& s = l.shape;
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(l.filter_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                         s.out.c, s.in.c, 3, 3));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(l.conv_desc, 1, 1, 1, 1, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // FMA only: no TF32 tensor-core conversion, which CUDNN_DEFAULT_MATH allows for fp32.
  CUDNN_CHECK(cudnnSetConvolutionMathType(l.conv_desc, CUDNN_FMA_MATH));
  set_tensor(l.bias_desc, 1, {s.out.c, 1, 1});

  for (Slice& sl : l.slices) {
    int n = 0, c = 0, h = 0, w = 0;  // the table and cuDNN must agree on the output shape
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(l.conv_desc, sl.x_desc, l.filter_desc, &n, &c,
                                                      &h, &w));
    if (n != sl.samples || c != s.out.c || h != s.out.h || w != s.out.w) {
      std::fprintf(stderr, "cudnn_vgg16: error: %s: cuDNN output %dx%dx%dx%d, table %dx%dx%dx%d\n",
                   s.name.c_str(), n, c, h, w, sl.samples, s.out.c, s.out.h, s.out.w);
      std::exit(1);
    }

    // Fixed algorithms, never benchmarked (cudnnFind* picks by timing, so runs could differ).
    // IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1 and BWD_FILTER_ALGO_1 are deterministic; the
    // *_ALGO_0 fallbacks for the backward passes accumulate with atomics.
    size_t fwd = 0, bwd_data = 0, bwd_filter = 0;
    sl.fwd_algo = choose_algo(
        s.name, "ConvolutionForward", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true,
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(dnn, sl.x_desc, l.filter_desc, l.conv_desc,
                                                         sl.y_desc, algo, bytes);
        },
        fwd);
    if (needs_data_grad)
      sl.bwd_data_algo = choose_algo(
          s.name, "ConvolutionBackwardData", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false,
          [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(
                dnn, l.filter_desc, sl.y_desc, l.conv_desc, sl.x_desc, algo, bytes);
          },
          bwd_data);
    sl.bwd_filter_algo = choose_algo(
        s.name, "ConvolutionBackwardFilter", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false,
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(
              dnn, sl.x_desc, sl.y_desc, l.conv_desc, l.filter_desc, algo, bytes);
        },
        bwd_filter);
    l.workspace = std::max({l.workspace, fwd, bwd_data, bwd_filter});
  }
}

// Descriptors and algorithms for every layer, and the sizes of the shared buffers. Needs the cuDNN
// handle (workspace sizes depend on the GPU) but allocates no device memory.
void configure(cudnnHandle_t dnn, Net& net) {
  CUDNN_CHECK(cudnnSetPooling2dDescriptor(net.pool_desc, CUDNN_POOLING_MAX_DETERMINISTIC,
                                          CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
  CUDNN_CHECK(cudnnSetActivationDescriptor(net.relu_desc, CUDNN_ACTIVATION_RELU,
                                           CUDNN_NOT_PROPAGATE_NAN, 0));
  for (size_t i = 0; i < net.layers.size(); ++i) {
    Layer& l = net.layers[i];
    if (l.shape.kind != Kind::kFc) {  // cuBLAS takes the whole batch; cuDNN maybe in slices
      const size_t per_image = std::max(l.shape.in.count(), l.shape.out.count());
      l.slice_samples = int(std::min<size_t>(net.batch, kMaxTensorElements / per_image));
      l.slices.emplace_back(l.slice_samples);
      if (net.batch % l.slice_samples) l.slices.emplace_back(net.batch % l.slice_samples);
      for (Slice& sl : l.slices) {
        set_tensor(sl.x_desc, sl.samples, l.shape.in);
        set_tensor(sl.y_desc, sl.samples, l.shape.out);
      }
    }
    if (l.shape.kind == Kind::kConv) configure_conv(dnn, l, i > 0);
    net.grad_elements = std::max(net.grad_elements, size_t(net.batch) * l.shape.out.count());
    net.workspace_bytes = std::max(net.workspace_bytes, l.workspace);
  }
}

// Every device buffer the trainer uses, in one list: f(what, bytes, slot) for each. The footprint
// is their sum and the trainer allocates and frees exactly these, so the two cannot drift apart.
template <typename F>
void for_each_buffer(Net& net, F&& f) {
  const size_t n = size_t(net.batch);
  f(std::string("input images"), n * net.image.count() * sizeof(float), net.images);
  f(std::string("labels"), n * sizeof(int), net.labels);
  for (Layer& l : net.layers) {
    if (l.shape.weights) {
      f(l.shape.name + " weights", l.shape.weights * sizeof(float), l.w);
      f(l.shape.name + " bias", l.shape.biases * sizeof(float), l.b);
      f(l.shape.name + " weight gradient", l.shape.weights * sizeof(float), l.dw);
      f(l.shape.name + " bias gradient", l.shape.biases * sizeof(float), l.db);
    }
    f(l.shape.name + " output", n * l.shape.out.count() * sizeof(float), l.y);
  }
  f(std::string("activation gradient 0"), net.grad_elements * sizeof(float), net.grad[0]);
  f(std::string("activation gradient 1"), net.grad_elements * sizeof(float), net.grad[1]);
  f(std::string("per-sample loss"), n * sizeof(float), net.sample_loss);
  f(std::string("mean loss"), sizeof(float), net.mean_loss);
  if (net.workspace_bytes) f(std::string("cuDNN workspace"), net.workspace_bytes, net.workspace);
}

size_t footprint(Net& net) {
  size_t total = 0;
  for_each_buffer(net, [&](const std::string&, size_t bytes, auto*&) { total += bytes; });
  return total;
}

// cudaMalloc with the sample's own count of live bytes (peak_allocated_bytes in the summary).
class DeviceMemory {
 public:
  template <typename T>
  void allocate(const std::string& what, size_t bytes, T*& slot) {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      std::fprintf(stderr, "cudnn_vgg16: out of memory allocating %s (%zu)\n", what.c_str(), bytes);
      std::exit(1);
    }
    if (err != cudaSuccess) fail_call("cudaMalloc", cudaGetErrorString(err));
    slot = static_cast<T*>(p);
    sizes_[p] = bytes;
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  template <typename T>
  void release(T*& slot) {
    if (!slot) return;
    void* p = slot;
    CUDA_CHECK(cudaFree(p));
    live_ -= sizes_.at(p);
    sizes_.erase(p);
    slot = nullptr;
  }
  size_t peak() const { return peak_; }

 private:
  std::unordered_map<void*, size_t> sizes_;
  size_t live_ = 0, peak_ = 0;
};

// ---------------------------------------------------------------------------------------------
// One training step: forward, loss, backward, SGD, all queued on one stream.

struct Handles {
  cudnnHandle_t dnn = nullptr;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
};

const float kOne = 1.0f, kZero = 0.0f;  // cuDNN's and cuBLAS's alpha and beta, host pointers

const float* input_of(const Net& net, size_t i) {
  return i ? net.layers[i - 1].y : net.images;
}

void forward(const Net& net, const Handles& h) {
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    const float* x = input_of(net, i);
    switch (l.shape.kind) {
      case Kind::kConv:
        for_each_slice(l, net.batch, [&](const Slice& sl, int first) {
          const float* xs = x + size_t(first) * l.shape.in.count();
          float* ys = l.y + size_t(first) * l.shape.out.count();
          CUDNN_CHECK(cudnnConvolutionForward(h.dnn, &kOne, sl.x_desc, xs, l.filter_desc, l.w,
                                              l.conv_desc, sl.fwd_algo, net.workspace,
                                              net.workspace_bytes, &kZero, sl.y_desc, ys));
          CUDNN_CHECK(cudnnAddTensor(h.dnn, &kOne, l.bias_desc, l.b, &kOne, sl.y_desc, ys));
          // In place, as Caffe does: ReLU's backward needs only its output, so one buffer a
          // layer.
          if (l.shape.relu)
            CUDNN_CHECK(cudnnActivationForward(h.dnn, net.relu_desc, &kOne, sl.y_desc, ys, &kZero,
                                               sl.y_desc, ys));
        });
        break;
      case Kind::kPool:
        for_each_slice(l, net.batch, [&](const Slice& sl, int first) {
          CUDNN_CHECK(cudnnPoolingForward(h.dnn, net.pool_desc, &kOne, sl.x_desc,
                                          x + size_t(first) * l.shape.in.count(), &kZero, sl.y_desc,
                                          l.y + size_t(first) * l.shape.out.count()));
        });
        break;
      case Kind::kFc: {
        // Column-major, cuBLAS's layout: an NCHW batch is (C*H*W) x batch, one sample a column,
        // so y (out x batch) = w (out x in) x.
        const int out = l.shape.out.c, in = int(l.shape.fan_in);
        CUBLAS_CHECK(cublasSgemm(h.blas, CUBLAS_OP_N, CUBLAS_OP_N, out, net.batch, in, &kOne, l.w,
                                 out, x, in, &kZero, l.y, out));
        const size_t n = size_t(out) * net.batch;
        bias_act<<<grid_for(n), kThreads, 0, h.stream>>>(l.y, l.b, out, n, l.shape.relu);
        LAUNCH_CHECK(bias_act);
        break;
      }
    }
  }
}

// The mean loss into net.mean_loss and the logits' gradient into net.grad[0].
void loss(const Net& net, const Handles& h) {
  const Layer& last = net.layers.back();
  softmax_xent<<<(net.batch + kThreads - 1) / kThreads, kThreads, 0, h.stream>>>(
      last.y, net.labels, last.shape.out.c, net.batch, net.grad[0], net.sample_loss);
  LAUNCH_CHECK(softmax_xent);
  row_sum<<<1, kThreads, 0, h.stream>>>(net.sample_loss, net.batch, 1, 1.0f / net.batch,
                                        net.mean_loss);
  LAUNCH_CHECK(row_sum);
}

// Layers in reverse. The gradient of a layer's output sits in net.grad[g]; the gradient of its
// input goes to the other buffer, which the next layer down then reads (ping-pong, as frameworks
// reuse gradient memory). ReLU's backward runs in place.
void backward(const Net& net, const Handles& h) {
  int g = 0;
  for (size_t i = net.layers.size(); i-- > 0;) {
    const Layer& l = net.layers[i];
    const float* x = input_of(net, i);
    float* dy = net.grad[g];
    float* dx = i > 0 ? net.grad[1 - g] : nullptr;  // the images need no gradient
    switch (l.shape.kind) {
      case Kind::kConv:
        for_each_slice(l, net.batch, [&](const Slice& sl, int first) {
          const size_t in_offset = size_t(first) * l.shape.in.count();
          const size_t out_offset = size_t(first) * l.shape.out.count();
          const float* ys = l.y + out_offset;
          float* dys = dy + out_offset;
          // The first slice sets the weight gradients, later ones add to them, in order.
          const float beta = first == 0 ? 0.0f : 1.0f;
          if (l.shape.relu)
            CUDNN_CHECK(cudnnActivationBackward(h.dnn, net.relu_desc, &kOne, sl.y_desc, ys,
                                                sl.y_desc, dys, sl.y_desc, ys, &kZero, sl.y_desc,
                                                dys));
          CUDNN_CHECK(
              cudnnConvolutionBackwardBias(h.dnn, &kOne, sl.y_desc, dys, &beta, l.bias_desc, l.db));
          CUDNN_CHECK(cudnnConvolutionBackwardFilter(
              h.dnn, &kOne, sl.x_desc, x + in_offset, sl.y_desc, dys, l.conv_desc,
              sl.bwd_filter_algo, net.workspace, net.workspace_bytes, &beta, l.filter_desc, l.dw));
          if (dx)
            CUDNN_CHECK(cudnnConvolutionBackwardData(
                h.dnn, &kOne, l.filter_desc, l.w, sl.y_desc, dys, l.conv_desc, sl.bwd_data_algo,
                net.workspace, net.workspace_bytes, &kZero, sl.x_desc, dx + in_offset));
        });
        break;
      case Kind::kPool:
        if (dx)
          for_each_slice(l, net.batch, [&](const Slice& sl, int first) {
            const size_t in_offset = size_t(first) * l.shape.in.count();
            const size_t out_offset = size_t(first) * l.shape.out.count();
            CUDNN_CHECK(cudnnPoolingBackward(
                h.dnn, net.pool_desc, &kOne, sl.y_desc, l.y + out_offset, sl.y_desc,
                dy + out_offset, sl.x_desc, x + in_offset, &kZero, sl.x_desc, dx + in_offset));
          });
        break;
      case Kind::kFc: {
        const int out = l.shape.out.c, in = int(l.shape.fan_in);
        if (l.shape.relu) {
          const size_t n = size_t(out) * net.batch;
          relu_backward<<<grid_for(n), kThreads, 0, h.stream>>>(dy, l.y, n);
          LAUNCH_CHECK(relu_backward);
        }
        // dw = dy x^T, db = row sums of dy, dx = w^T dy.
        CUBLAS_CHECK(cublasSgemm(h.blas, CUBLAS_OP_N, CUBLAS_OP_T, out, in, net.batch, &kOne, dy,
                                 out, x, in, &kZero, l.dw, out));
        row_sum<<<out, kThreads, 0, h.stream>>>(dy, net.batch, out, 1.0f, l.db);
        LAUNCH_CHECK(row_sum);
        if (dx)
          CUBLAS_CHECK(cublasSgemm(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, in, net.batch, out, &kOne, l.w,
                                   out, dy, out, &kZero, dx, in));
        break;
      }
    }
    if (dx) g = 1 - g;
  }
}

void sgd(const Net& net, const Handles& h, float lr) {
  for (const Layer& l : net.layers) {
    if (!l.shape.weights) continue;
    sgd_update<<<grid_for(l.shape.weights), kThreads, 0, h.stream>>>(l.w, l.dw, l.shape.weights,
                                                                     lr);
    LAUNCH_CHECK(sgd_update);
    sgd_update<<<grid_for(l.shape.biases), kThreads, 0, h.stream>>>(l.b, l.db, l.shape.biases, lr);
    LAUNCH_CHECK(sgd_update);
  }
}

// ---------------------------------------------------------------------------------------------
// Set-up and results.

enum : uint64_t { kTagPixels, kTagLabels, kTagWeights };  // one random stream each

// He (Kaiming) uniform weights, bound sqrt(6 / fan_in), so the activations keep their scale
// through the ReLU layers; zero biases. The fixed batch is made on the host, as a data loader
// would, and copied once: pixels uniform in [-1, 1), labels uniform over the classes.
void initialise(const Net& net, const Handles& h, uint64_t seed) {
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    if (!l.shape.weights) continue;
    const float bound = std::sqrt(6.0f / float(l.shape.fan_in));
    fill_uniform<<<grid_for(l.shape.weights), kThreads, 0, h.stream>>>(
        l.w, l.shape.weights, stream_key(seed, kTagWeights, i), bound);
    LAUNCH_CHECK(fill_uniform);
    CUDA_CHECK(cudaMemsetAsync(l.b, 0, l.shape.biases * sizeof(float), h.stream));
  }

  const size_t n = size_t(net.batch) * net.image.count();
  std::vector<float> pixels(n);
  const uint64_t pixel_key = stream_key(seed, kTagPixels, 0);
  for (size_t i = 0; i < n; ++i) pixels[i] = uniform_pm1(pixel_key, i);
  std::vector<int> labels(size_t(net.batch));
  const uint64_t label_key = stream_key(seed, kTagLabels, 0);
  const int classes = net.layers.back().shape.out.c;
  for (size_t c = 0; c < labels.size(); ++c)
    labels[c] = static_cast<int>(mix64(label_key ^ mix64(c)) % uint64_t(classes));
  CUDA_CHECK(cudaMemcpyAsync(net.images, pixels.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                             h.stream));
  CUDA_CHECK(cudaMemcpyAsync(net.labels, labels.data(), labels.size() * sizeof(int),
                             cudaMemcpyHostToDevice, h.stream));
  CUDA_CHECK(cudaStreamSynchronize(h.stream));  // the host vectors go out of scope
}

// FNV-1a 64 over every layer's weights then bias, in table order.
uint64_t weights_checksum(const Net& net) {
  uint64_t sum = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  std::vector<float> host;
  for (const Layer& l : net.layers) {
    const std::pair<const float*, size_t> params[] = {{l.w, l.shape.weights},
                                                      {l.b, l.shape.biases}};
    for (const auto& [p, count] : params) {
      if (!count) continue;
      host.resize(count);
      CUDA_CHECK(cudaMemcpy(host.data(), p, count * sizeof(float), cudaMemcpyDeviceToHost));
      sum = fnv1a(sum, host.data(), count * sizeof(float));
    }
  }
  return sum;
}

std::string json_string(const char* s) {
  std::string out = "\"";
  for (; *s; ++s) {
    const unsigned char ch = static_cast<unsigned char>(*s);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += char(ch);
    }
  }
  return out + "\"";
}

void train(const Args& a, cudnnHandle_t dnn, Net& net, size_t planned) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

  Handles h;
  h.dnn = dnn;
  CUDA_CHECK(cudaStreamCreate(&h.stream));
  CUDNN_CHECK(cudnnSetStream(h.dnn, h.stream));
  CUBLAS_CHECK(cublasCreate(&h.blas));
  CUBLAS_CHECK(cublasSetStream(h.blas, h.stream));
  // Pedantic math: plain FP32 (no TF32, even if NVIDIA_TF32_OVERRIDE is set), so the same
  // algorithm, hence the same bits, runs every time.
  CUBLAS_CHECK(cublasSetMathMode(h.blas, CUBLAS_PEDANTIC_MATH));

  DeviceMemory memory;
  for_each_buffer(net, [&](const std::string& what, size_t bytes, auto*& slot) {
    memory.allocate(what, bytes, slot);
  });
  initialise(net, h, a.seed);

  std::vector<double> times;
  bool warned = false;
  for (long step = 0; step < a.steps; ++step) {
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto start = std::chrono::steady_clock::now();
    forward(net, h);
    loss(net, h);
    backward(net, h);
    sgd(net, h, a.lr);
    float mean_loss = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&mean_loss, net.mean_loss, sizeof mean_loss, cudaMemcpyDeviceToHost,
                               h.stream));
    CUDA_CHECK(cudaDeviceSynchronize());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    times.push_back(ms);
    std::printf("iter %ld ms %.3f loss %.6f\n", step, ms, double(mean_loss));
    std::fflush(stdout);
    if (!std::isfinite(mean_loss) && !warned) {
      std::fprintf(stderr,
                   "cudnn_vgg16: warning: loss is not finite at iter %ld (try a lower "
                   "--lr)\n",
                   step);
      warned = true;
    }
  }

  const uint64_t checksum = weights_checksum(net);
  std::printf("checksum %016" PRIx64 "\n", checksum);

  // The first two iterations carry one-time costs (cuDNN kernel loading, first touch).
  std::vector<double> steady(times.begin() + std::min<ptrdiff_t>(2, ptrdiff_t(times.size())),
                             times.end());
  std::string median = "null";
  if (!steady.empty()) {
    std::sort(steady.begin(), steady.end());
    const size_t m = steady.size() / 2;
    const double v = steady.size() % 2 ? steady[m] : (steady[m - 1] + steady[m]) / 2;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    median = buf;
  }
  std::printf(
      "summary {\"first_ms\": %.3f, \"steady_median_ms\": %s, \"iters\": %ld, "
      "\"batch\": %d, \"image_size\": %d, \"footprint_bytes\": %zu, "
      "\"peak_allocated_bytes\": %zu, \"checksum\": \"%016" PRIx64 "\", \"device\": %s}\n",
      times.front(), median.c_str(), a.steps, a.batch, a.image, planned, memory.peak(), checksum,
      json_string(prop.name).c_str());
  std::fflush(stdout);

  for_each_buffer(net, [&](const std::string&, size_t, auto*& slot) { memory.release(slot); });
  CUBLAS_CHECK(cublasDestroy(h.blas));
  CUDA_CHECK(cudaStreamDestroy(h.stream));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const std::vector<LayerShape> table = vgg16_shapes(a.image);
  check_limits(a, table);

  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices == 0) fail_call("cudaGetDeviceCount", "no CUDA device");
  cudnnHandle_t dnn = nullptr;
  CUDNN_CHECK(cudnnCreate(&dnn));
  {
    Net net;
    net.batch = a.batch;
    net.image = {kImageChannels, a.image, a.image};
    net.layers.reserve(table.size());
    for (const LayerShape& s : table) net.layers.emplace_back(s);
    configure(dnn, net);
    const size_t planned = footprint(net);
    if (a.print_footprint) {
      std::printf("footprint_bytes %zu\n", planned);
      std::fflush(stdout);
    } else {
      train(a, dnn, net, planned);
    }
  }  // the descriptors go before the handle
  CUDNN_CHECK(cudnnDestroy(dnn));
  return 0;
}
