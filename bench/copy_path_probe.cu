// Which way of copying GPU-resident managed memory to and from pinned host memory lets the two
// directions overlap? DESIGN.md measured cudaMemcpyAsync managed <-> pinned at 52 GB/s one way and
// 52 GB/s for both at once together, where device (cudaMalloc) <-> pinned reaches 102 GB/s both
// at once. This probe times, one way and both at once:
//   ce      cudaMemcpyAsync on two streams;
//   hint    cudaMemcpyBatchAsync with the managed side's location hinted as the GPU;
//   kernel  a copy kernel (the SMs read or write the pinned memory over the link), at several
//           block counts, alone and beside a copy-engine copy the other way;
//   device  the same copy-engine copies on cudaMalloc memory (the control).
// Managed memory allocated stays under UMSWAP_MANAGED_LIMIT (required: the probe refuses without
// it), so a shared GPU is never oversubscribed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.h"

static __global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                   size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

static size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024.0 * 1024;
      break;
    case 'K':
    case 'k':
      v *= 1024.0;
      break;
    default:
      break;
  }
  return size_t(v);
}

// One copy: what, from where to where, on which stream.
struct Copy {
  enum Kind { kCe, kHint, kKernel } kind;
  void* dst;
  const void* src;
  size_t bytes;
  bool to_host;  // device side is the source
  int blocks;    // kKernel only
};

static int g_dev = 0;

static void issue(const Copy& c, cudaStream_t s) {
  switch (c.kind) {
    case Copy::kCe:
      CHECK(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, s));
      break;
    case Copy::kHint: {
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      const cudaMemLocation gpu{cudaMemLocationTypeDevice, g_dev};
      const cudaMemLocation host{cudaMemLocationTypeHost, 0};
      attr.srcLocHint = c.to_host ? gpu : host;
      attr.dstLocHint = c.to_host ? host : gpu;
      void* dsts[1] = {c.dst};
      const void* srcs[1] = {c.src};
      size_t sizes[1] = {c.bytes};
      size_t idx[1] = {0};
      CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 1, s));
      break;
    }
    case Copy::kKernel:
      copy_kernel<<<c.blocks, 512, 0, s>>>(static_cast<const uint4*>(c.src),
                                           static_cast<uint4*>(c.dst), c.bytes / sizeof(uint4));
      CHECK(cudaGetLastError());
      break;
  }
}

// Times copies issued together, each on its own stream, from one start to the last end; best of
// `reps`. Returns GB/s of all bytes together.
static double time_together(const std::vector<Copy>& copies, const std::vector<cudaStream_t>& st,
                            int reps) {
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  std::vector<cudaEvent_t> done(copies.size());
  for (auto& e : done) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  size_t total = 0;
  for (const Copy& c : copies) total += c.bytes;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventRecord(start, st[0]));
    for (size_t i = 1; i < copies.size(); ++i) CHECK(cudaStreamWaitEvent(st[i], start, 0));
    for (size_t i = 0; i < copies.size(); ++i) {
      issue(copies[i], st[i]);
      CHECK(cudaEventRecord(done[i], st[i]));
    }
    for (size_t i = 1; i < copies.size(); ++i) CHECK(cudaStreamWaitEvent(st[0], done[i], 0));
    CHECK(cudaEventRecord(end, st[0]));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    best = std::min(best, double(ms));
  }
  for (auto& e : done) CHECK(cudaEventDestroy(e));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
  return double(total) / (best * 1e-3) / 1e9;
}

int main(int argc, char** argv) {
  const char* limit_env = std::getenv("UMSWAP_MANAGED_LIMIT");
  if (!limit_env || !*limit_env) {
    std::fprintf(stderr,
                 "copy_path_probe: set UMSWAP_MANAGED_LIMIT (managed bytes it may allocate)\n");
    return 2;
  }
  const size_t limit = parse_size(limit_env);
  size_t bytes = argc > 1 ? parse_size(argv[1]) : (size_t(2) << 30);
  bytes &= ~size_t(0xFFFF);
  if (2 * bytes > limit) {
    std::fprintf(stderr, "copy_path_probe: 2 x %zu managed bytes exceed UMSWAP_MANAGED_LIMIT %zu\n",
                 bytes, limit);
    return 2;
  }
  CHECK(cudaSetDevice(g_dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, g_dev));
  std::printf("device %s, %d SMs; %zu MiB per buffer\n", prop.name, prop.multiProcessorCount,
              bytes >> 20);

  char *m_out = nullptr, *m_in = nullptr, *d_out = nullptr, *d_in = nullptr;
  char *h_out = nullptr, *h_in = nullptr;
  CHECK(cudaMallocManaged(&m_out, bytes));
  CHECK(cudaMallocManaged(&m_in, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
  CHECK(cudaHostAlloc(&h_in, bytes, cudaHostAllocDefault));
  std::memset(h_in, 7, bytes);
  std::memset(h_out, 0, bytes);
  const cudaMemLocation gpu{cudaMemLocationTypeDevice, g_dev};
  CHECK(cudaMemset(m_out, 3, bytes));
  CHECK(cudaMemset(m_in, 0, bytes));
  CHECK(cudaMemPrefetchAsync(m_out, bytes, gpu, 0, 0));
  CHECK(cudaMemPrefetchAsync(m_in, bytes, gpu, 0, 0));
  CHECK(cudaMemset(d_out, 3, bytes));
  CHECK(cudaDeviceSynchronize());

  std::vector<cudaStream_t> st(2);
  for (auto& s : st) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int reps = 3;
  auto out = [&](Copy::Kind k, char* dev, int blocks = 0) {
    return Copy{k, h_out, dev == m_in ? m_out : dev, bytes, true, blocks};
  };
  auto in = [&](Copy::Kind k, char* dev, int blocks = 0) {
    return Copy{k, dev, h_in, bytes, false, blocks};
  };
  auto row = [&](const char* what, std::vector<Copy> c) {
    const double gbs = time_together(c, st, reps);
    std::printf("%-44s %7.1f GB/s\n", what, gbs);
    std::fflush(stdout);
  };
  std::printf("%-44s %12s\n", "copy (best of 3)", "all bytes");
  row("device ce out", {out(Copy::kCe, d_out)});
  row("device ce in", {in(Copy::kCe, d_in)});
  row("device ce both", {out(Copy::kCe, d_out), in(Copy::kCe, d_in)});
  row("managed ce out", {out(Copy::kCe, m_out)});
  row("managed ce in", {in(Copy::kCe, m_in)});
  row("managed ce both", {out(Copy::kCe, m_out), in(Copy::kCe, m_in)});
  row("managed hint out", {out(Copy::kHint, m_out)});
  row("managed hint in", {in(Copy::kHint, m_in)});
  row("managed hint both", {out(Copy::kHint, m_out), in(Copy::kHint, m_in)});
  const int sms = prop.multiProcessorCount;
  for (int blocks : {8, 16, 32, sms, 2 * sms}) {
    char name[64];
    std::snprintf(name, sizeof name, "managed kernel(%d) out", blocks);
    row(name, {out(Copy::kKernel, m_out, blocks)});
    std::snprintf(name, sizeof name, "managed kernel(%d) in", blocks);
    row(name, {in(Copy::kKernel, m_in, blocks)});
    std::snprintf(name, sizeof name, "managed kernel(%d) out + ce in", blocks);
    row(name, {out(Copy::kKernel, m_out, blocks), in(Copy::kCe, m_in)});
    std::snprintf(name, sizeof name, "managed ce out + kernel(%d) in", blocks);
    row(name, {out(Copy::kCe, m_out), in(Copy::kKernel, m_in, blocks)});
    std::snprintf(name, sizeof name, "managed kernel(%d) both", blocks);
    row(name, {out(Copy::kKernel, m_out, blocks), in(Copy::kKernel, m_in, blocks)});
  }
  // The kernel copies must have copied: the host buffer holds the managed source's bytes, and the
  // managed destination the host source's.
  bool ok = true;
  for (size_t i = 0; i < bytes; i += 4093) ok = ok && h_out[i] == 3;
  CHECK(cudaDeviceSynchronize());
  std::vector<char> back(1 << 20);
  CHECK(cudaMemcpy(back.data(), m_in + bytes - back.size(), back.size(), cudaMemcpyDefault));
  for (char c : back) ok = ok && c == 7;
  std::printf("contents %s\n", ok ? "right" : "WRONG");

  // What a copy back costs besides its copy: the discard after a copy out, and the populate (a
  // prefetch of discarded pages) before a copy in; and whether populating the next buffer on a
  // stream of its own overlaps the copy in of this one.
  const size_t page = size_t(2) << 20;
  auto discard = [&](char* p, size_t piece, cudaStream_t s) {
    std::vector<void*> ptrs;
    std::vector<size_t> sizes;
    for (size_t off = 0; off < bytes; off += piece) {
      ptrs.push_back(p + off);
      sizes.push_back(std::min(piece, bytes - off));
    }
    CHECK(cudaMemDiscardBatchAsync(ptrs.data(), sizes.data(), ptrs.size(), 0, s));
  };
  cudaEvent_t t0, t1, mid;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaEventCreateWithFlags(&mid, cudaEventDisableTiming));
  auto timed = [&](const char* what, auto&& body) {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventRecord(t0, st[0]));
    CHECK(cudaStreamWaitEvent(st[1], t0, 0));
    body();
    CHECK(cudaEventRecord(mid, st[1]));
    CHECK(cudaStreamWaitEvent(st[0], mid, 0));
    CHECK(cudaEventRecord(t1, st[0]));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    std::printf("%-44s %7.2f ms (%.1f GB/s of one buffer)\n", what, ms, bytes / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  };
  const int k16 = 16;
  auto kin = [&](char* dst, cudaStream_t s) {
    copy_kernel<<<k16, 512, 0, s>>>(reinterpret_cast<const uint4*>(h_in),
                                    reinterpret_cast<uint4*>(dst), bytes / sizeof(uint4));
    CHECK(cudaGetLastError());
  };
  for (size_t piece : {page, bytes}) {
    char name[64];
    std::snprintf(name, sizeof name, "discard, %zu MiB ranges", piece >> 20);
    timed(name, [&] { discard(m_out, piece, st[0]); });
    timed("populate (prefetch of discarded pages)",
          [&] { CHECK(cudaMemPrefetchAsync(m_out, bytes, gpu, 0, st[0])); });
  }
  discard(m_out, bytes, st[0]);
  discard(m_in, bytes, st[0]);
  timed("serial: populate+copy in, twice (one stream)", [&] {
    for (char* p : {m_out, m_in}) {
      CHECK(cudaMemPrefetchAsync(p, bytes, gpu, 0, st[0]));
      kin(p, st[0]);
    }
  });
  discard(m_out, bytes, st[0]);
  discard(m_in, bytes, st[0]);
  cudaEvent_t pe[2];
  for (auto& e : pe) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  timed("ahead: populates on their own stream", [&] {
    int i = 0;
    for (char* p : {m_out, m_in}) {
      CHECK(cudaMemPrefetchAsync(p, bytes, gpu, 0, st[1]));
      CHECK(cudaEventRecord(pe[i], st[1]));
      CHECK(cudaStreamWaitEvent(st[0], pe[i], 0));
      kin(p, st[0]);
      ++i;
    }
  });
  CHECK(cudaFree(m_out));
  CHECK(cudaFree(m_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_in));
  CHECK(cudaFreeHost(h_out));
  CHECK(cudaFreeHost(h_in));
  return ok ? 0 : 1;
}
